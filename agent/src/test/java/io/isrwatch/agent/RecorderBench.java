package io.isrwatch.agent;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;

/**
 * The cost of the agent's capture path on a Kafka thread (Recorder: lock, coalescer, seq, queue offer), in ns per
 * captured fetch, for idle followers (repeats: held) and moving ones (emitted), on 1 and 4 threads. Not a test:
 * `isrwatch bench agent hookcost` runs it. Prints numbers; asserts nothing.
 */
public final class RecorderBench {

    private RecorderBench() {
    }

    private static double run(int threads, int partitions, boolean moving, long perThread) throws Exception {
        Sink sink = new NullSink("discard", 1 << 20); // drains itself on its writer thread without encoding
        sink.start();
        Recorder r = new Recorder(sink, null, true, 0);
        CountDownLatch go = new CountDownLatch(1);
        List<Thread> ts = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            int id = t;
            Thread th = new Thread(() -> {
                try {
                    go.await();
                } catch (InterruptedException e) {
                    return;
                }
                for (long i = 0; i < perThread; i++) {
                    int p = (int) ((i * threads + id) % partitions);
                    int replica = 2 + (int) (i % 2);
                    long o = moving ? i : p; // moving: a new offset every fetch (never a repeat)
                    r.fetch(new Event.Fetch(i, "perf", p, replica, o, o, 0, 1, true));
                    if (id == 0 && i % 200_000 == 0) {
                        r.beginExpiration(i);
                        r.endExpiration(i, "3.9.2");
                    }
                }
            });
            th.start();
            ts.add(th);
        }
        long t0 = System.nanoTime();
        go.countDown();
        for (Thread th : ts) {
            th.join();
        }
        long ns = System.nanoTime() - t0;
        sink.close(1000);
        return perThread * threads / (ns / 1e9); // captured fetches per second, all threads together
    }

    public static void main(String[] args) throws Exception {
        long n = args.length > 0 ? Long.parseLong(args[0]) : 2_000_000;
        for (int warm = 0; warm < 2; warm++) {
            run(1, 1000, false, n / 4);
        }
        for (int threads : new int[] {1, 4}) {
            for (boolean moving : new boolean[] {false, true}) {
                double rate = run(threads, 1000, moving, n);
                System.out.printf("%d thread(s), %s: %,.0f captured fetches/s (%.0f ns each)%n", threads,
                    moving ? "new offsets (emitted)" : "caught-up repeats (held)", rate, 1e9 / rate);
            }
        }
    }
}
