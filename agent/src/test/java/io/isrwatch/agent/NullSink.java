package io.isrwatch.agent;

/** A sink that writes nothing: for tests and benchmarks of what happens before the writer (queue, seq, coalescing). */
class NullSink extends Sink {

    NullSink(String name, int capacity) {
        super(name, capacity);
    }

    @Override
    protected void write(Stamped s) throws Exception {
    }

    @Override
    protected void idle() {
    }

    @Override
    protected void release(long timeoutMs) {
    }
}
