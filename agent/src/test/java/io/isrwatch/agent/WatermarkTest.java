package io.isrwatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.function.LongSupplier;
import org.junit.jupiter.api.Test;

/**
 * The Recorder's watermarks on a clock the test sets: W's bounds, monotony, pace, adaptive slack, violations and the
 * held repeats' exception.
 */
class WatermarkTest {

    private static final long T0 = 1_000_000;

    /** The broker's clock, moved by the test. */
    private static final class Clock implements LongSupplier {
        long now = T0;

        @Override
        public long getAsLong() {
            return now;
        }
    }

    private final Clock clock = new Clock();
    private final QueueOnly main = new QueueOnly("main", 1000);

    /** A recorder with watermarks every 200 ms and the given slack floor, started at T0. */
    private Recorder recorder(long slackMs) {
        return new Recorder(main, null, true, 0, 200, slackMs, clock);
    }

    /** Moves the clock to {@code t} and runs the timer's watermark turn. */
    private static void timer(Recorder r, Clock clock, long t) {
        clock.now = t;
        r.watermarkIfDue();
    }

    /** The watermarks emitted so far, by ts. */
    private List<Long> watermarks() {
        return main.queuedEvents().stream().filter(s -> s.event() instanceof Event.Watermark)
            .map(s -> s.event().ts()).toList();
    }

    /** Replica r's fetch of partition 0, caught up at offset 5, with the clock Kafka read at ts. */
    private static Event.Fetch caughtUp(long ts, int r) {
        return new Event.Fetch(ts, "t", 0, r, 5, 5, 0, 1, true);
    }

    @Test
    void nowMinusTheSlackWhenNothingHoldsItBack() {
        Recorder r = recorder(100);
        timer(r, clock, T0 + 200);
        timer(r, clock, T0 + 400);
        assertEquals(List.of(T0 + 100, T0 + 300), watermarks());
        assertEquals(List.of("1:watermark@" + (T0 + 100), "2:watermark@" + (T0 + 300)), main.lines());
    }

    @Test
    void dueEveryIntervalOnTheTimersTurns() {
        Recorder r = recorder(100);
        for (long t = T0 + 100; t <= T0 + 1000; t += 100) { // the timer's 100 ms turns
            timer(r, clock, t);
        }
        assertEquals(List.of(T0 + 100, T0 + 300, T0 + 500, T0 + 700, T0 + 900), watermarks());
    }

    @Test
    void intervalZeroEmitsNone() {
        Recorder r = new Recorder(main, null, true, 0, 0, 100, clock);
        for (long t = T0 + 100; t <= T0 + 10_000; t += 100) {
            timer(r, clock, t);
        }
        assertEquals(List.of(), main.lines());
    }

    @Test
    void aHeldRepeatDoesNotHoldWBackAndFollowsItUncountedUnlikeAnyOtherEvent() {
        Recorder r = recorder(100);
        clock.now = T0 + 10;
        r.fetch(caughtUp(T0 + 10, 2)); // emitted (the first caught-up fetch)
        clock.now = T0 + 50;
        r.fetch(caughtUp(T0 + 50, 2)); // a repeat: held
        timer(r, clock, T0 + 200); // now - slack: the held repeat does not hold W back
        clock.now = T0 + 210;
        r.fetch(new Event.Fetch(T0 + 205, "t", 0, 3, 0, 5, 0, 1, true)); // partition 0's event: its held repeat first
        clock.now = T0 + 220;
        r.fetch(caughtUp(T0 + 220, 2)); // a repeat again: held
        timer(r, clock, T0 + 400);
        r.flushHeldBefore(T0 + 400 - 100); // the timer's age flush, after the watermark
        assertEquals(List.of("1:fetch@" + (T0 + 10), "2:watermark@" + (T0 + 100), "3:fetch@" + (T0 + 50),
            "4:fetch@" + (T0 + 205), "5:watermark@" + (T0 + 300), "6:fetch@" + (T0 + 220)), main.lines());
        assertEquals(0, violations(r)); // held repeats below W: the exception
        clock.now = T0 + 410;
        r.fetch(caughtUp(T0 + 299, 3)); // caught up below W, but not a held repeat (emitted at capture)
        assertEquals("7:fetch@" + (T0 + 299), main.lines().get(6));
        assertEquals(1, violations(r));
    }

    @Test
    void neverAboveAnOpenIsrExpirationRun() {
        Recorder r = recorder(100);
        clock.now = T0 + 150;
        r.fetch(caughtUp(T0 + 150, 2));
        r.beginExpiration(T0 + 150);
        timer(r, clock, T0 + 400);
        assertEquals(List.of(T0 + 150), watermarks());
        timer(r, clock, T0 + 600); // the run still bounds W: nothing that would not advance
        assertEquals(List.of(T0 + 150), watermarks());
        clock.now = T0 + 620;
        r.expirationCheck("t", 0, 9, T0 + 610); // the LEO moved: an append at the run's ts
        r.endExpiration(T0 + 630, "4.4.0");
        timer(r, clock, T0 + 800);
        assertEquals(List.of(T0 + 150, T0 + 700), watermarks());
        assertEquals(List.of("1:fetch@" + (T0 + 150), "2:watermark@" + (T0 + 150), "3:append@" + (T0 + 150),
            "4:tick@" + (T0 + 150), "5:watermark@" + (T0 + 700)), main.lines());
        assertEquals(0, violations(r));
    }

    /** A recorder (slack 100 ms) with {@code span} begun at {@code t}. */
    private Recorder spanFrom(long t, Recorder.Span span) {
        Recorder r = recorder(100);
        clock.now = t;
        r.beginSpan(span);
        return r;
    }

    @Test
    void anOpenSpanBoundsWAndWhatItCoversDoesNotSwellTheSlack() {
        // A propagation run reads its clock at T0 + 300, writes to ZooKeeper for 900 ms, then reports its tick and
        // batch at that clock: W waits at the span's start meanwhile, and the 900 ms are no capture delay.
        Recorder r = spanFrom(T0 + 300, Recorder.Span.PROPAGATION);
        timer(r, clock, T0 + 600);
        timer(r, clock, T0 + 1000);
        clock.now = T0 + 1200;
        r.other(new Event.Tick(T0 + 300, Event.Tick.ISR_CHANGE_PROPAGATION, "3.9.2", T0, T0));
        r.endSpan(Recorder.Span.PROPAGATION);
        timer(r, clock, T0 + 1400);
        assertEquals(List.of(T0 + 300, T0 + 1300), watermarks());
        assertEquals(0, violations(r));
    }

    @Test
    void spansNestAndTheEarliestOpenOneBoundsW() {
        Recorder r = spanFrom(T0 + 300, Recorder.Span.LEADER_AND_ISR);
        clock.now = T0 + 500;
        r.beginSpan(Recorder.Span.METADATA);
        r.beginSpan(Recorder.Span.LEADER_AND_ISR); // a second request while the first runs
        r.endSpan(Recorder.Span.LEADER_AND_ISR);
        timer(r, clock, T0 + 800);
        r.endSpan(Recorder.Span.LEADER_AND_ISR);
        timer(r, clock, T0 + 1000);
        r.endSpan(Recorder.Span.METADATA);
        r.endSpan(Recorder.Span.METADATA); // an end without a begin changes nothing
        timer(r, clock, T0 + 1200);
        assertEquals(List.of(T0 + 300, T0 + 500, T0 + 1100), watermarks());
    }

    @Test
    void theSlackGrowsAfterADelayedCaptureAndFallsBackTwoWindowsLater() {
        Recorder r = recorder(100);
        clock.now = T0 + 1000;
        r.partitionEvent(new Event.Append(T0 + 700, "t", 0, 5, T0 + 700)); // captured 300 ms after its clock
        timer(r, clock, T0 + 1200);
        clock.now = T0 + 1500;
        r.fetch(new Event.Fetch(T0 + 1100, "t", 0, 2, 0, 5, 0, 1, true)); // 400 ms: the window's largest
        timer(r, clock, T0 + 1700);
        timer(r, clock, T0 + 2_800); // the next window still remembers the one before
        timer(r, clock, T0 + 3_200); // two windows on: back to the floor
        assertEquals(List.of(T0 + 1200 - 600, T0 + 1700 - 800, T0 + 2_800 - 800, T0 + 3_200 - 100), watermarks());
    }

    @Test
    void aLateIsrExpirationStartCountsAsACaptureDelay() {
        Recorder r = recorder(100);
        clock.now = T0 + 1000;
        r.beginExpiration(T0 + 700); // the run's clock, read 300 ms before the Recorder got it: its appends carry it
        r.endExpiration(T0 + 1000, "4.4.0");
        timer(r, clock, T0 + 1200);
        assertEquals(List.of(T0 + 1200 - 600), watermarks());
    }

    @Test
    void aCaptureDelayedPastAPauseHoldsWAtItsClockForTheRecoveryAndDoesNotSwellTheSlack() {
        // A fetch read its clock, then the JVM stopped 10 s (SIGSTOP): captured on resuming, it is a pause, not a
        // pace. W stays at its clock until RECOVERY_MS after, then goes on at the floor slack, not 2 x 10 s.
        Recorder r = recorder(300);
        clock.now = T0 + 10_600;
        r.fetch(new Event.Fetch(T0 + 600, "t", 0, 2, 0, 5, 0, 1, true));
        timer(r, clock, T0 + 10_800);
        timer(r, clock, T0 + 11_000);
        timer(r, clock, T0 + 11_200);
        assertEquals(List.of(T0 + 600, T0 + 11_200 - 300), watermarks());
    }

    @Test
    void aGapBetweenTheTimersTurnsIsAPauseToo() {
        Recorder r = recorder(100);
        clock.now = T0 + 100;
        r.timerTurn();
        clock.now = T0 + 5_100; // the timer's next turn, 5 s on: the JVM stopped; reads from T0 + 100 may come
        r.timerTurn();
        timer(r, clock, T0 + 5_200);
        clock.now = T0 + 5_400;
        r.timerTurn();
        timer(r, clock, T0 + 5_700);
        assertEquals(List.of(T0 + 100, T0 + 5_600), watermarks());
    }

    @Test
    void theSlackStopsGrowingAtTwiceThePauseAndNeverGoesBelowTheFloor() {
        Recorder r = recorder(300);
        clock.now = T0 + 4000;
        r.partitionEvent(new Event.Append(T0 + 3550, "t", 0, 5, T0 + 3550)); // 450 ms late: no pause, 900 ms
        timer(r, clock, T0 + 4200);
        assertEquals(List.of(T0 + 4200 - 900), watermarks());
        assertTrue(2 * 450 <= StreamTime.MAX_ADAPTIVE_SLACK_MS);
        Recorder floor = new Recorder(new QueueOnly("other", 10), null, true, 0, 200, 300, clock);
        clock.now = T0 + 6300;
        floor.fetch(new Event.Fetch(T0 + 6250, "t", 0, 2, 0, 5, 0, 1, true)); // 50 ms: twice is below the floor
        timer(floor, clock, T0 + 6400);
        assertTrue(floor.stats().contains("watermarks=1 "), floor.stats());
        assertEquals(List.of("1:fetch@" + (T0 + 6250), "2:watermark@" + (T0 + 6100)), ((QueueOnly) floor.main())
            .lines());
    }

    @Test
    void anEventBelowTheLastWatermarkIsCountedAndStillEmitted() {
        Recorder r = recorder(100);
        timer(r, clock, T0 + 200);
        clock.now = T0 + 210;
        r.fetch(new Event.Fetch(T0 + 99, "t", 0, 2, 0, 5, 0, 1, true)); // read its clock 111 ms ago
        r.fetch(new Event.Fetch(T0 + 100, "t", 0, 2, 1, 5, 0, 1, true)); // at W: not a violation
        r.fetch(new Event.Fetch(T0 + 98, "t", 0, 3, 0, 5, 0, 1, true));
        assertEquals(List.of("1:watermark@" + (T0 + 100), "2:fetch@" + (T0 + 99), "3:fetch@" + (T0 + 100),
            "4:fetch@" + (T0 + 98)), main.lines());
        assertEquals(2, violations(r));
    }

    @Test
    void violationsAreLoggedFirstThenAtMostOnceAMinuteWithTheCount() {
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        PrintStream stderr = System.err;
        System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
        try {
            Recorder r = recorder(100);
            timer(r, clock, T0 + 200);
            for (long t = T0 + 210; t < T0 + 70_000; t += 1000) { // one late fetch a second for 70 s
                clock.now = t;
                r.fetch(new Event.Fetch(T0 + 99, "t", 0, 2, t, t + 1, 0, 1, true));
            }
        } finally {
            System.setErr(stderr);
        }
        List<String> lines = err.toString(StandardCharsets.UTF_8).lines().toList();
        assertEquals(2, lines.size(), String.join("\n", lines));
        assertTrue(lines.get(0).contains("isrwatch-agent: watermark violation (1 so far, logged at most once a "
            + "minute): fetch ts=" + (T0 + 99) + " entered the stream 1 ms below the watermark " + (T0 + 100)), lines.get(0));
        assertTrue(lines.get(1).contains("watermark violation (61 so far"), lines.get(1));
    }

    @Test
    void theRawStreamGetsTheSameWatermarkWithItsOwnSeq() {
        QueueOnly raw = new QueueOnly("raw", 100);
        Recorder r = new Recorder(main, raw, true, 0, 200, 100, clock);
        clock.now = T0 + 10;
        r.fetch(caughtUp(T0 + 10, 2));
        r.fetch(caughtUp(T0 + 20, 2)); // held in main, already in raw
        r.fetch(caughtUp(T0 + 30, 2));
        timer(r, clock, T0 + 200);
        assertEquals(List.of("1:fetch@" + (T0 + 10), "2:watermark@" + (T0 + 100)), main.lines());
        assertEquals(List.of("1:fetch@" + (T0 + 10), "2:fetch@" + (T0 + 20), "3:fetch@" + (T0 + 30),
            "4:watermark@" + (T0 + 100)), raw.lines());
    }

    private static long violations(Recorder r) {
        String stats = r.stats();
        int at = stats.indexOf("watermark_violations=") + "watermark_violations=".length();
        return Long.parseLong(stats.substring(at, stats.indexOf(' ', at)));
    }
}
