package io.isrwatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.LongSupplier;
import org.junit.jupiter.api.Test;

/**
 * The watermark's promise on simulated brokers: in the main stream every event after a watermark has {@code ts} at or
 * above it, except a caught-up repeat the coalescer held, which comes before any later event of its partition and
 * before the next isr-expiration tick; watermarks only advance. Which events were held the test learns from the raw
 * stream (the same event objects, in capture order), not from the coalescer. Kafka's threads read their clock a
 * random time before the Recorder receives the event (below the slack floor), so fetches reach it out of ts order;
 * caught-up followers' repeats are held and replaced, lagging ones emitted; partitions go idle (no appends, fetches
 * long-polling) for a while; isr-expiration runs (their start read late too) interleave with fetches and emit appends
 * and the tick at the run's start; leader elections, ISR updates and propagation ticks come in between; the timer runs
 * age flushes and watermarks at random intervals.
 */
class WatermarkPropertyTest {

    private static final int PARTITIONS = 3;

    private static final class Sim implements LongSupplier {
        final Random rnd;
        final QueueOnly main = new QueueOnly("main", 1 << 18);
        final QueueOnly raw = new QueueOnly("raw", 1 << 18);
        final long slackMs;
        final long maxHoldMs;
        final long timerMs;
        final Recorder recorder;
        final long[] leo = new long[PARTITIONS];
        final long[][] followerLeo = new long[PARTITIONS][4];
        final long[][] lastTs = new long[PARTITIONS][4];
        final boolean[] lagging = new boolean[4];
        /**
         * Partitions without appends for a while, their followers' fetches long-polling (about every 500 ms, as with
         * replica.fetch.wait.max.ms): a held repeat there is older than the slack when it is emitted.
         */
        final boolean[] idle = new boolean[PARTITIONS];
        final int[] epoch = new int[PARTITIONS];
        long now = 1_000_000;

        Sim(long seed) {
            rnd = new Random(seed);
            slackMs = 20 + rnd.nextInt(150);
            maxHoldMs = 20 + rnd.nextInt(1000);
            long intervalMs = 20 + rnd.nextInt(400);
            timerMs = Math.min(100, intervalMs);
            recorder = new Recorder(main, raw, true, 0, intervalMs, slackMs, this);
        }

        @Override
        public long getAsLong() {
            return now;
        }

        /** When the event's thread read its clock: up to just below the slack before the Recorder receives it. */
        long read() {
            return now - rnd.nextInt((int) slackMs);
        }

        void fetch(int p, int r) {
            long ts = Math.max(lastTs[p][r], read()); // one follower's fetches of a partition are sequential
            lastTs[p][r] = ts;
            long o = followerLeo[p][r];
            recorder.fetch(new Event.Fetch(ts, "t", p, r, o, leo[p], 0, epoch[p], true));
            followerLeo[p][r] = lagging[r] ? o + Math.min(leo[p] - o, 1) : leo[p];
        }

        void partitionEvent(int p) {
            if (rnd.nextBoolean()) {
                epoch[p]++;
                recorder.partitionEvent(new Event.LeaderAndIsr(read(), "t", p, 1, 0, 1, epoch[p], new int[] {1, 2, 3},
                    new int[] {1, 2, 3}, epoch[p], leo[p], leo[p], 2, true));
            } else {
                recorder.partitionEvent(new Event.IsrUpdated(read(), "t", p, 1, new int[] {1, 2}, new int[] {1, 2, 3},
                    epoch[p], "shrink", List.of(new Event.OutOfSync(3, 0, 0, 0)), Event.UNKNOWN, Event.UNKNOWN));
            }
        }

        /** One isr-expiration run; fetches and timer turns land during it. */
        void expiration() {
            recorder.beginExpiration(read());
            for (int p = 0; p < PARTITIONS; p++) {
                advance(rnd.nextInt(40));
                if (rnd.nextInt(3) == 0) {
                    fetch(p, 2 + rnd.nextInt(2));
                }
                long checkMs = read();
                recorder.expirationCheck("t", p, leo[p], checkMs);
                if (rnd.nextInt(10) == 0) {
                    recorder.expirationShrink("t", p, leo[p], checkMs);
                }
            }
            recorder.endExpiration(read(), "4.4.0", Event.Tick.ALTER_PARTITION);
        }

        /** Moves the clock; the agent's timer takes its turns on the way. */
        void advance(long ms) {
            for (long end = now + ms; now < end; ) {
                long turn = now - now % timerMs + timerMs;
                if (turn > end) {
                    now = end;
                    return;
                }
                now = turn;
                recorder.flushHeldBefore(now - maxHoldMs);
                recorder.watermarkIfDue();
            }
        }

        Sim run(int steps) {
            long nextRun = now + 500;
            for (int i = 0; i < steps; i++) {
                advance(rnd.nextInt(4));
                if (rnd.nextInt(300) == 0) {
                    lagging[2 + rnd.nextInt(2)] = rnd.nextBoolean();
                }
                if (rnd.nextInt(300) == 0) {
                    idle[rnd.nextInt(PARTITIONS)] = rnd.nextInt(3) > 0; // idle two thirds of the time
                }
                int action = rnd.nextInt(100);
                int p = rnd.nextInt(PARTITIONS);
                if (action < 6) {
                    leo[p] += idle[p] ? 0 : 1 + rnd.nextInt(3);
                } else if (action < 7) {
                    if (!idle[p] || rnd.nextInt(10) == 0) { // leader and ISR changes are rare on an idle partition
                        partitionEvent(p);
                    }
                } else if (action < 8) {
                    recorder.other(new Event.Tick(read(), Event.Tick.ISR_CHANGE_PROPAGATION, "3.9.2", read(), read()));
                } else if (!idle[p] || rnd.nextInt(50) == 0) { // long-polling: most turns bring no fetch
                    fetch(p, 2 + rnd.nextInt(2));
                }
                if (now >= nextRun) {
                    expiration();
                    nextRun = now + 500;
                }
            }
            recorder.flushAll();
            return this;
        }
    }

    @Test
    void everyEventAfterAWatermarkHasATsAtOrAboveItExceptHeldRepeats() {
        long[] seen = new long[3]; // watermarks, other events, held repeats below the watermark before them
        for (long seed = 1; seed <= 40; seed++) {
            assertPromiseKept(new Sim(seed).run(4000), "seed " + seed, seen);
        }
        assertTrue(seen[0] > 1000 && seen[1] > 10_000 && seen[2] > 100, "too little to test anything: " + seen[0]
            + " watermarks, " + seen[1] + " events, " + seen[2] + " held repeats below a watermark");
    }

    /**
     * Walks the main stream, placing each entry in capture order by its index in the raw stream. An entry captured
     * before something already emitted was held (only the coalescer delays an event). Each watermark is above the last;
     * each other event is at or above it unless it was held and is a caught-up fetch of an ISR member (a repeat);
     * every event (held or not) comes after its partition's events captured before it and before any isr-expiration
     * tick captured after it; no violation is counted.
     */
    private static void assertPromiseKept(Sim sim, String what, long[] seen) {
        Map<Event, Integer> captureIndex = new IdentityHashMap<>();
        List<Sink.Stamped> raw = sim.raw.queuedEvents();
        for (int i = 0; i < raw.size(); i++) {
            captureIndex.put(raw.get(i).event(), i);
        }
        Map<Integer, Integer> partitionLast = new HashMap<>();
        long w = Long.MIN_VALUE;
        int capturedUpTo = -1;
        int lastTick = -1;
        for (Sink.Stamped s : sim.main.queuedEvents()) {
            Event e = s.event();
            int at = captureIndex.get(e);
            String where = what + ": " + e + " at seq " + s.seq();
            boolean held = at < capturedUpTo;
            capturedUpTo = Math.max(capturedUpTo, at);
            if (e instanceof Event.Watermark) {
                assertTrue(e.ts() > w, where + " does not advance past " + w);
                w = e.ts();
                seen[0]++;
                continue;
            }
            seen[1]++;
            if (e.ts() < w) {
                assertTrue(held && e instanceof Event.Fetch f && f.inIsr() && f.fetchOffset() == f.leaderLeo(),
                    where + " is below the watermark " + w + " emitted before it and not a held repeat");
                seen[2]++;
            }
            assertTrue(at > lastTick, where + " was captured before an isr-expiration tick emitted before it");
            if (e instanceof Event.Tick t && Event.Tick.ISR_EXPIRATION.equals(t.task())) {
                lastTick = at;
            }
            if (e instanceof Event.PartitionEvent pe) {
                Integer before = partitionLast.put(pe.partition(), at);
                assertTrue(before == null || before < at, where + " was captured before an event of its partition "
                    + "emitted before it");
            }
        }
        assertTrue(sim.recorder.stats().contains(" watermark_violations=0 "), sim.recorder.stats());
        assertEquals(0, sim.main.dropped(), what);
        assertEquals(0, sim.raw.dropped(), what);
    }
}
