package io.isrwatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * The coalescing property on simulated brokers: replaying the coalesced stream gives the same decisions, HW moves and
 * follower state at every isr-expiration tick as replaying the raw one. Followers are caught up, lagging, stuck or
 * slow; producers append in bursts; fetch clocks are read a few ms before capture, so fetches straddle ticks; the
 * ISR flag is random (the argument must not depend on it); runs include leader elections and age flushes.
 */
class CoalescingEquivalenceTest {

    private static final long LAG = 100;

    private static final class Sim {
        final Random rnd;
        final List<MiniModel.Stamped> raw = new ArrayList<>();
        final List<MiniModel.Stamped> coalesced = new ArrayList<>();
        final Coalescer coalescer = new Coalescer(true, (e, held) -> coalesced.add(new MiniModel.Stamped(coalesced.size() + 1, e)));
        final int partitions = 3;
        final long[] leo = new long[partitions];
        final long[][] followerLeo = new long[partitions][4];
        final long[][] lastTs = new long[partitions][4];
        final int[] mode = new int[4]; // per follower: 0 caught up, 1 lagging, 2 stuck, 3 slow
        final int[] epoch = new int[partitions];
        final int jitter;
        long now = 1000;

        Sim(long seed) {
            rnd = new Random(seed);
            jitter = seed % 3 == 0 ? 15 : 4; // how long before its capture a fetch may have read the clock
        }

        void capture(Event e) {
            raw.add(new MiniModel.Stamped(raw.size() + 1, e));
        }

        void lai(int p) {
            epoch[p]++;
            Event.LeaderAndIsr e = new Event.LeaderAndIsr(now, "t", p, 1, 0, 1, epoch[p], new int[] {1, 2, 3},
                new int[] {1, 2, 3}, epoch[p], leo[p], Math.max(0, leo[p] - rnd.nextInt(3)), 2, true);
            capture(e);
            coalescer.partitionEvent(e);
        }

        void fetch(int p, int r) {
            long ts = Math.max(lastTs[p][r], now - rnd.nextInt(jitter));
            lastTs[p][r] = ts;
            long o = followerLeo[p][r];
            boolean inIsr = rnd.nextInt(10) > 0;
            Event.Fetch f = new Event.Fetch(ts, "t", p, r, o, leo[p], 0, epoch[p], inIsr);
            capture(f);
            coalescer.fetch(f);
            long gap = leo[p] - o;
            followerLeo[p][r] = mode[r] == 3 ? o + Math.min(gap, 1) : leo[p]; // slow: one record per fetch
        }

        void expiration() {
            long t = now;
            coalescer.beginExpiration(t);
            for (int p = 0; p < partitions; p++) {
                now += rnd.nextInt(3); // a run takes time: Kafka checks each partition at its own clock
                if (rnd.nextInt(3) == 0) { // a fetch lands during the run
                    fetch(p, 2 + rnd.nextInt(2));
                }
                long checkMs = now;
                if (coalescer.leoChanged("t", p, leo[p])) {
                    Event.Append a = new Event.Append(t, "t", p, leo[p], checkMs);
                    capture(a);
                    coalescer.partitionEvent(a);
                }
            }
            Event.Tick tick = Event.Tick.expiration(t, now, "3.9.2");
            capture(tick);
            coalescer.endExpiration(tick);
        }

        void run(int steps) {
            for (int p = 0; p < partitions; p++) {
                lai(p);
            }
            long nextTick = now + 50;
            for (int i = 0; i < steps; i++) {
                now += rnd.nextInt(4); // coarse clock: many events share a ms, so seq decides their order
                if (rnd.nextInt(200) == 0) {
                    mode[2 + rnd.nextInt(2)] = rnd.nextInt(4);
                }
                int action = rnd.nextInt(100);
                int p = rnd.nextInt(partitions);
                if (action < 8) {
                    leo[p] += 1 + rnd.nextInt(3); // produce
                } else if (action < 9) {
                    lai(p);
                } else if (action < 10) {
                    coalescer.flushHeldBefore(now - 20);
                } else {
                    int r = 2 + rnd.nextInt(2);
                    if (mode[r] != 2) {
                        fetch(p, r);
                    }
                }
                if (now >= nextTick) {
                    expiration();
                    nextTick += 50;
                }
            }
            coalescer.flushAll();
        }
    }

    @Test
    void coalescedAndRawStreamsReplayToTheSameOutputs() {
        long events = 0;
        long kept = 0;
        for (long seed = 1; seed <= 40; seed++) {
            Sim sim = new Sim(seed);
            sim.run(3000);
            assertSame(MiniModel.replay(sim.raw, LAG, 2), MiniModel.replay(sim.coalesced, LAG, 2), "seed " + seed);
            for (int p = 0; p < sim.partitions; p++) {
                assertSubsequence(ordered(sim.raw, p), ordered(sim.coalesced, p), "seed " + seed + " partition " + p);
            }
            events += sim.raw.size();
            kept += sim.coalesced.size();
        }
        assertTrue(kept < events * 0.8, "coalescing removed too little to test anything: " + kept + "/" + events);
    }

    /** Partition p's events and the ticks, in the model's (sort ts, seq) order. */
    private static List<Event> ordered(List<MiniModel.Stamped> stream, int p) {
        return stream.stream()
            .filter(s -> s.event() instanceof Event.Tick || ((Event.PartitionEvent) s.event()).partition() == p)
            .sorted(Comparator.comparingLong((MiniModel.Stamped s) -> s.event().sortTs())
                .thenComparingLong(MiniModel.Stamped::seq))
            .map(MiniModel.Stamped::event).toList();
    }

    /** The coalesced stream only leaves events out: what it keeps comes in the raw stream's order. */
    private static void assertSubsequence(List<Event> raw, List<Event> kept, String what) {
        int i = 0;
        for (int k = 0; k < kept.size(); k++) {
            while (i < raw.size() && raw.get(i) != kept.get(k)) {
                if (!(raw.get(i) instanceof Event.Fetch)) {
                    throw new AssertionError(what + ": kept " + kept.get(k) + " comes after " + raw.get(i)
                        + " in the raw order, before it in the coalesced one (or that event is missing)");
                }
                i++;
            }
            if (i == raw.size()) {
                throw new AssertionError(what + ": kept event " + k + " " + kept.get(k) + " out of raw order");
            }
            i++;
        }
    }

    private static void assertSame(List<String> raw, List<String> coalesced, String what) {
        for (int i = 0; i < Math.min(raw.size(), coalesced.size()); i++) {
            assertEquals(raw.get(i), coalesced.get(i), what + ": output " + i + " differs");
        }
        assertEquals(raw.size(), coalesced.size(), what + ": output count");
    }
}
