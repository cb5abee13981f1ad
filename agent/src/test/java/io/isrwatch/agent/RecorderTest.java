package io.isrwatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import org.junit.jupiter.api.Test;

class RecorderTest {

    /** A coalescing recorder and its main queue, new for each test (JUnit makes an instance per test). */
    private final QueueOnly queue = new QueueOnly("main", 100);
    private final Recorder coalescing = new Recorder(queue, null, true, 0);

    private static Event.Fetch f(long ts, long o, long l) {
        return new Event.Fetch(ts, "t", 0, 2, o, l, 0, 1, true);
    }

    @Test
    void rawGetsEveryCaptureAndMainTheCoalescedStreamEachWithItsOwnSeq() {
        QueueOnly main = new QueueOnly("main", 100);
        QueueOnly raw = new QueueOnly("raw", 100);
        Recorder r = new Recorder(main, raw, true, 0);
        r.expirationCheck("t", 0, 7, 1); // outside a run: nothing
        r.fetch(f(1, 5, 5));
        r.fetch(f(2, 5, 5)); // held
        r.fetch(f(3, 5, 5)); // replaces 2
        r.beginExpiration(10);
        r.expirationCheck("t", 0, 5, 11); // unchanged LEO: no append
        r.expirationCheck("t", 0, 8, 12); // moved: the held fetch, then an append at the tick's ts
        r.expirationCheck("t", 0, 8, 12); // the same check's next call: nothing new
        r.endExpiration(13, "3.9.2");
        r.endExpiration(14, "3.9.2"); // no run open: no tick
        r.other(new Event.Tick(20, Event.Tick.ISR_CHANGE_PROPAGATION, "3.9.2"));
        assertEquals(List.of("1:fetch@1", "2:fetch@3", "3:append@10", "4:tick@10", "5:tick@20"), main.lines());
        assertEquals(List.of("1:fetch@1", "2:fetch@2", "3:fetch@3", "4:append@10", "5:tick@10", "6:tick@20"),
            raw.lines());
        assertEquals("captured=6 emitted=5 coalesced=1 held=0 watermarks=0 watermark_violations=0 "
            + "main{written=0 dropped=0 failed=0 queued=5} raw{written=0 dropped=0 failed=0}", r.stats());
    }

    @Test
    void aShrinkingCheckIsReportedOncePerRunEvenWithAnUnchangedLeo() {
        coalescing.fetch(f(1, 5, 5));
        coalescing.beginExpiration(10);
        coalescing.expirationCheck("t", 0, 5, 11); // the LEO the model knows: no append for it
        coalescing.expirationShrink("t", 0, 5, 11); // but the check shrinks: the model must check at 11
        coalescing.expirationShrink("t", 0, 5, 11); // once per run
        coalescing.endExpiration(12, "3.9.2");
        coalescing.beginExpiration(20);
        coalescing.expirationCheck("t", 0, 7, 21); // a moved LEO: its append is the check
        coalescing.expirationShrink("t", 0, 7, 21);
        coalescing.endExpiration(22, "3.9.2");
        coalescing.expirationShrink("t", 0, 7, 30); // outside a run: nothing
        assertEquals(List.of("1:fetch@1", "2:append@10", "3:tick@10", "4:append@20", "5:tick@20"), queue.lines());
    }

    /** What main holds, as {@code type@ts} with an append's check clock: {@code append@ts/check}. */
    private static List<String> checks(QueueOnly main) {
        return main.queuedEvents().stream().map(s -> s.event() instanceof Event.Append a
            ? "append@" + a.ts() + "/" + a.checkMs() : s.event().type() + "@" + s.event().ts()).toList();
    }

    @Test
    void theCheckUnderTheWriteLockDecidesAfterTheFetchesAppliedSinceTheFirst() {
        // Partition.maybeShrinkIsr: needsShrinkIsr found follower 2 out of sync at 11; before the check under the
        // write lock (at 14) the follower's queued fetch caught it up (12), so Kafka kept it. The model must check at
        // 14, after that fetch (CI on 58ecf9f: an append at the first check's clock made the model shrink alone).
        coalescing.beginExpiration(10);
        coalescing.expirationCheck("t", 0, 8, 11);
        coalescing.fetch(f(12, 8, 8));
        coalescing.expirationCheck("t", 0, 9, 14); // the same partition again: the later check replaces the first
        coalescing.fetch(f(15, 8, 10)); // captured before the report, but with a later clock: the model sorts it after
        coalescing.expirationCheck("u", 0, 3, 16); // the run moves on: t-0's check is reported
        coalescing.expirationCheck("u", 0, 3, 16);
        coalescing.endExpiration(17, "3.9.2"); // u-0's check is reported before the tick
        assertEquals(List.of("fetch@12", "fetch@15", "append@10/14", "append@10/16", "tick@10"), checks(queue));
    }

    @Test
    void aPendingCheckGoesBeforeItsPartitionsNextEventAndAShrinkReportsItAtOnce() {
        coalescing.beginExpiration(10);
        coalescing.expirationCheck("t", 0, 8, 11);
        coalescing.partitionEvent(
            new Event.LeaderAndIsr(12, "t", 0, 1, 0, 1, 2, new int[] {1, 2}, new int[] {1, 2}, 9, 8, 8, 1, null));
        coalescing.expirationCheck("u", 0, 3, 13);
        coalescing.expirationShrink("u", 0, 3, 14); // the write-locked check shrinks: its clock, reported now
        coalescing.expirationCheck("v", 0, 4, 15);
        coalescing.forget("v", 0); // a deleted partition's check tells nothing
        coalescing.endExpiration(16, "3.9.2");
        assertEquals(List.of("append@10/11", "leader_and_isr@12", "append@10/14", "tick@10"), checks(queue));
    }

    @Test
    void seqStartsAfterTheBase() {
        QueueOnly main = new QueueOnly("main", 10);
        Recorder r = new Recorder(main, null, false, 1_795_000_000_000_000L);
        r.fetch(f(1, 5, 5));
        assertEquals(List.of("1795000000000001:fetch@1"), main.lines());
        assertEquals("captured=1 emitted=1 coalesced=0 held=0 watermarks=0 watermark_violations=0 "
            + "main{written=0 dropped=0 failed=0 queued=1}", r.stats());
    }

    @Test
    void aFullQueueLeavesAGapInSeq() {
        QueueOnly main = new QueueOnly("main", 2);
        Recorder r = new Recorder(main, null, false, 0);
        for (long ts = 1; ts <= 4; ts++) {
            r.fetch(f(ts, 5, 5));
        }
        r.partitionEvent(new Event.Append(5, "t", 0, 6, 5));
        assertEquals(List.of("1:fetch@1", "2:fetch@2"), main.lines());
        assertEquals(3, r.dropped());
    }

    @Test
    void flushAllEmitsWhatIsHeld() {
        QueueOnly main = new QueueOnly("main", 10);
        Recorder r = new Recorder(main, null, true, 0);
        r.fetch(f(1, 5, 5));
        r.fetch(f(2, 5, 5));
        r.flushHeldBefore(2);
        assertEquals(List.of("1:fetch@1"), main.lines());
        r.flushAll();
        assertEquals(List.of("1:fetch@1", "2:fetch@2"), main.lines());
    }
}
