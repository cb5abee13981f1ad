package io.isrwatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class SinkTest {

    private static Event tick(long ts) {
        return new Event.Tick(ts, Event.Tick.ISR_EXPIRATION, "3.9.2");
    }

    /** A sink whose writer blocks until released, recording what it wrote. */
    private static final class BlockedSink extends NullSink {
        final CountDownLatch release = new CountDownLatch(1);
        final CountDownLatch writing = new CountDownLatch(1);
        final List<Long> seqs = new ArrayList<>();

        BlockedSink(int capacity) {
            super("blocked", capacity);
        }

        @Override
        protected void write(Stamped s) throws InterruptedException {
            writing.countDown();
            release.await();
            synchronized (seqs) {
                seqs.add(s.seq());
            }
        }
    }

    @Test
    void aFullQueueDropsAndCountsWithoutBlocking() {
        BlockedSink sink = new BlockedSink(3);
        for (long i = 1; i <= 10; i++) {
            boolean queued = sink.offer(i, tick(i));
            assertEquals(i <= 3, queued);
        }
        assertEquals(7, sink.dropped());
        assertEquals(3, sink.queued());
    }

    @Test
    void aStalledWriterNeverBlocksTheCaller() throws Exception {
        BlockedSink sink = new BlockedSink(2);
        sink.start();
        sink.offer(1, tick(1));
        sink.writing.await(); // the writer holds event 1, the queue is empty again
        for (long i = 2; i <= 6; i++) {
            sink.offer(i, tick(i));
        }
        assertEquals(3, sink.dropped());
        sink.release.countDown();
        sink.close(5000);
        assertEquals(List.of(1L, 2L, 3L), sink.seqs);
        assertEquals(3, sink.written());
    }

    @Test
    void fileSinkWritesOneLinePerEventInOrder(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("sub/events.jsonl");
        FileSink sink = new FileSink("file", file, 100, "c", () -> 4);
        sink.start();
        for (long i = 1; i <= 5; i++) {
            assertTrue(sink.offer(i, tick(100 + i)));
        }
        sink.close(5000);
        List<String> lines = Files.readAllLines(file);
        assertEquals(5, lines.size());
        assertEquals("{\"type\":\"tick\",\"ts\":101,\"cluster\":\"c\",\"broker\":4,\"seq\":1,\"task\":\"isr-expiration\","
            + "\"kafka_version\":\"3.9.2\"}", lines.get(0));
        assertTrue(lines.get(4).contains("\"seq\":5"));
        assertEquals(0, sink.dropped());
        assertEquals(5, sink.written());
        assertFalse(sink.failures() > 0);
    }

    @Test
    void fileSinkAppends(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("e.jsonl");
        Files.writeString(file, "previous\n");
        FileSink sink = new FileSink("file", file, 10, "c", () -> 1);
        sink.start();
        sink.offer(1, tick(1));
        sink.close(5000);
        assertEquals(2, Files.readAllLines(file).size());
    }
}
