package io.isrwatch.agent;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A bounded queue between Kafka's threads and one daemon writer thread. {@link #offer} never blocks: when the queue is
 * full the event is dropped and counted (its seq is then missing from the stream, which shows the gap).
 */
public abstract class Sink {

    /** An event with its place in this sink's stream. */
    public record Stamped(long seq, Event event) {
    }

    private final String name;
    private final ArrayBlockingQueue<Stamped> queue;
    private final AtomicLong dropped = new AtomicLong();
    private final AtomicLong written = new AtomicLong();
    private final AtomicLong failed = new AtomicLong();
    private volatile boolean closing;
    private Thread thread;

    protected Sink(String name, int capacity) {
        this.name = name;
        this.queue = new ArrayBlockingQueue<>(capacity);
    }

    /** Starts the writer thread. */
    public final void start() {
        thread = new Thread(this::run, "isrwatch-agent-" + name);
        thread.setDaemon(true);
        thread.start();
    }

    /** Queues the event, or drops and counts it when the queue is full. */
    public final boolean offer(long seq, Event e) {
        if (queue.offer(new Stamped(seq, e))) {
            return true;
        }
        dropped.incrementAndGet();
        return false;
    }

    private void run() {
        List<Stamped> batch = new ArrayList<>(1024);
        while (true) {
            try {
                Stamped first = queue.poll(100, TimeUnit.MILLISECONDS);
                if (first == null) {
                    if (closing) {
                        return;
                    }
                    idle();
                    continue;
                }
                batch.add(first);
                queue.drainTo(batch, 1023);
                for (Stamped s : batch) {
                    try {
                        write(s);
                        written.incrementAndGet();
                    } catch (Exception ex) {
                        failed(ex);
                    }
                }
                batch.clear();
                if (queue.isEmpty()) {
                    idle();
                }
            } catch (InterruptedException ex) {
                return;
            } catch (Throwable t) {
                batch.clear();
                failed(t);
            }
        }
    }

    /** Counts a failed write (the event is lost); logs the first one. */
    protected final void failed(Throwable t) {
        if (failed.incrementAndGet() == 1) {
            Log.warn(name + ": write failed (further failures are only counted): " + t);
        }
    }

    /** Writes one event (on the writer thread). */
    protected abstract void write(Stamped s) throws Exception;

    /** Called when the queue is empty: flush buffers. */
    protected abstract void idle() throws Exception;

    /** Releases the resource (on the closing thread, after the writer stopped). */
    protected abstract void release(long timeoutMs);

    /** Lets the writer drain the queue for up to {@code timeoutMs}, then releases the resource. */
    public final void close(long timeoutMs) {
        closing = true;
        if (thread != null) {
            try {
                thread.join(timeoutMs);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            if (thread.isAlive()) {
                thread.interrupt();
            }
        }
        release(timeoutMs);
    }

    public final String name() {
        return name;
    }

    public final long dropped() {
        return dropped.get();
    }

    public final long written() {
        return written.get();
    }

    public final long failures() {
        return failed.get();
    }

    public final int queued() {
        return queue.size();
    }

    /** What is queued, oldest first (for tests and diagnostics). */
    final List<Stamped> queuedEvents() {
        return new ArrayList<>(queue);
    }
}
