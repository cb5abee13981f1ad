package io.isrwatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class CoalescerTest {

    private final List<Event> out = new ArrayList<>();
    /** The emitted events the Output was told are held repeats. */
    private final List<Event> heldOut = new ArrayList<>();
    private final Coalescer c = new Coalescer(true, this::emitted);

    private void emitted(Event e, boolean heldRepeat) {
        out.add(e);
        if (heldRepeat) {
            heldOut.add(e);
        }
    }

    /** A fetch of topic t partition p by replica r at offset o with leader LEO l. */
    private static Event.Fetch f(long ts, int p, int r, long o, long l) {
        return new Event.Fetch(ts, "t", p, r, o, l, 0, 5, true);
    }

    /** Replica 2 fetching partition p at the leader's LEO 10 (caught up), at each of the times {@code ts}. */
    private void caughtUp(int p, long... ts) {
        for (long t : ts) {
            c.fetch(f(t, p, 2, 10, 10));
        }
    }

    /** An isr-expiration run from {@code ts} to {@code endMs}. */
    private static Event.Tick tick(long ts, long endMs) {
        return Event.Tick.expiration(ts, endMs, "3.9.2");
    }

    private List<Long> times() {
        return out.stream().map(Event::ts).toList();
    }

    private void expiration(long ts) {
        c.beginExpiration(ts);
        c.endExpiration(tick(ts, ts));
    }

    @Test
    void nonRepeatsPassThroughInOrder() {
        c.fetch(f(1, 0, 2, 0, 10));
        c.fetch(f(2, 0, 2, 5, 10));
        c.fetch(f(3, 0, 2, 10, 12));
        c.fetch(f(4, 0, 3, 10, 12));
        assertEquals(List.of(1L, 2L, 3L, 4L), times());
        assertEquals(0, c.heldCount());
    }

    @Test
    void repeatsOfACaughtUpFollowerCollapseToTheLatestBeforeTheTick() {
        caughtUp(0, 1); // first caught-up fetch: emitted
        for (long ts = 2; ts <= 9; ts++) {
            caughtUp(0, ts);
        }
        assertEquals(List.of(1L), times());
        assertEquals(1, c.heldCount());
        expiration(20);
        assertEquals(List.of(1L, 9L, 20L), times());
        assertTrue(out.get(2) instanceof Event.Tick);
        assertEquals(7, c.coalesced());
        // history survives the tick: the next repeat is held again
        caughtUp(0, 21);
        assertEquals(1, c.heldCount());
    }

    @Test
    void disabledPassesEverything() {
        Coalescer off = new Coalescer(false, this::emitted);
        for (long ts = 1; ts <= 5; ts++) {
            off.fetch(f(ts, 0, 2, 10, 10));
        }
        assertEquals(List.of(1L, 2L, 3L, 4L, 5L), times());
        assertEquals(0, off.coalesced());
        assertEquals(List.of(), heldOut);
    }

    @Test
    void onlyExactRepeatsAreHeld() {
        caughtUp(0, 1);
        c.fetch(new Event.Fetch(2, "t", 0, 2, 10, 10, 0, 5, false)); // outside Kafka's ISR
        c.fetch(new Event.Fetch(3, "t", 0, 2, 10, 10, 3, 5, true)); // log start offset moved
        c.fetch(new Event.Fetch(4, "t", 0, 2, 10, 10, 3, 6, true)); // other leader epoch
        c.fetch(new Event.Fetch(5, "t", 0, 2, 10, 10, 3, -1, true)); // no leader epoch
        c.fetch(f(6, 0, 2, 10, 11)); // behind
        c.fetch(f(7, 0, 2, 11, 11)); // caught up at a new offset
        assertEquals(List.of(1L, 2L, 3L, 4L, 5L, 6L, 7L), times());
        c.fetch(f(8, 0, 2, 11, 11)); // a repeat
        assertEquals(1, c.heldCount());
    }

    @Test
    void aHigherLeaderLeoSeenByAnotherReplicaEndsTheRepeats() {
        caughtUp(0, 1);
        c.fetch(f(2, 0, 3, 10, 12)); // replica 3 saw LEO 12 (a non-repeat: flushes nothing yet)
        caughtUp(0, 3); // would look like a repeat, but the model's leader LEO is 12
        assertEquals(List.of(1L, 2L, 3L), times());
        assertEquals(0, c.heldCount());
    }

    @Test
    void aFollowerBehindAtItsPreviousFetchStartsNoRepeat() {
        c.fetch(f(1, 0, 2, 10, 12)); // behind (its leader LEO was read later than another fetch's)
        caughtUp(0, 2);
        assertEquals(List.of(1L, 2L), times());
        assertEquals(0, c.heldCount());
    }

    @Test
    void aFetchWhoseClockPrecedesThePartitionsLastEventIsEmittedAndStartsNoRepeat() {
        caughtUp(0, 1);
        c.partitionEvent(new Event.LeaderAndIsr(50, "t", 0, 1, 0, 1, 6, new int[] {1, 2}, new int[] {1, 2}, 4, 10,
            10, 1, false));
        c.fetch(new Event.Fetch(49, "t", 0, 2, 10, 10, 0, 6, true)); // read its clock before the LAI: sorts before
        c.fetch(new Event.Fetch(51, "t", 0, 2, 10, 10, 0, 6, true)); // the first fetch after the LAI
        c.fetch(new Event.Fetch(52, "t", 0, 2, 10, 10, 0, 6, true)); // a repeat of 51: held
        assertEquals(List.of(1L, 50L, 49L, 51L), times());
        assertEquals(1, c.heldCount());
        c.fetch(f(60, 0, 3, 5, 10)); // another replica's non-repeat: flushes 52, moves the barrier to 60
        c.fetch(new Event.Fetch(59, "t", 0, 2, 10, 10, 0, 6, true));
        assertEquals(List.of(1L, 50L, 49L, 51L, 52L, 60L, 59L), times());
        assertEquals(0, c.heldCount());
    }

    @Test
    void heldFetchesOfAPartitionGoFirstBeforeItsOtherEvents() {
        caughtUp(0, 1);
        c.fetch(f(2, 0, 3, 10, 10));
        caughtUp(0, 3); // held
        c.fetch(f(4, 0, 3, 10, 10)); // held
        c.fetch(f(5, 1, 2, 7, 7));
        c.fetch(f(6, 1, 2, 7, 7)); // held, partition 1
        c.partitionEvent(new Event.Append(7, "t", 0, 11, 7));
        // partition 0's held fetches in capture order, then the append; partition 1 keeps its own
        assertEquals(List.of(1L, 2L, 5L, 3L, 4L, 7L), times());
        assertEquals(1, c.heldCount());
        c.fetch(f(8, 1, 3, 0, 7)); // a non-repeat of another replica of partition 1 flushes it too
        assertEquals(List.of(1L, 2L, 5L, 3L, 4L, 7L, 6L, 8L), times());
    }

    @Test
    void anotherEventOfThePartitionRestartsItsRepeatHistory() {
        caughtUp(0, 1);
        c.partitionEvent(new Event.IsrUpdated(2, "t", 0, 1, new int[] {1, 2}, new int[] {1}, 3, "expand", List.of(),
            Event.UNKNOWN, Event.UNKNOWN));
        caughtUp(0, 3); // first after the ISR change: emitted
        caughtUp(0, 4); // held
        assertEquals(List.of(1L, 2L, 3L), times());
        c.partitionEvent(new Event.LeaderAndIsr(5, "t", 0, 1, 0, 1, 6, new int[] {1, 2}, new int[] {1, 2}, 4, 10, 10,
            1, false));
        assertEquals(List.of(1L, 2L, 3L, 4L, 5L), times());
        c.fetch(new Event.Fetch(6, "t", 0, 2, 10, 10, 0, 6, true)); // first after the LAI: emitted
        c.fetch(new Event.Fetch(7, "t", 0, 2, 10, 10, 0, 6, true));
        assertEquals(List.of(1L, 2L, 3L, 4L, 5L, 6L), times());
        assertEquals(1, c.heldCount());
    }

    @Test
    void theLeaderEpochStartOffsetOfALeaderAndIsrIsTheLeaderLeo() {
        c.partitionEvent(new Event.LeaderAndIsr(1, "t", 0, 1, 0, 1, 6, new int[] {1, 2}, new int[] {1, 2}, 4, 10, 10,
            1, true));
        assertFalse(c.leoChanged("t", 0, 10));
        assertTrue(c.leoChanged("t", 0, 11));
        assertTrue(c.leoChanged("t", 1, 10));
        caughtUp(0, 2, 3);
        assertEquals(1, c.heldCount());
    }

    @Test
    void everythingCapturedDuringARunSortsBeforeItsTick() {
        caughtUp(0, 1);
        caughtUp(0, 99); // held, before the run that starts at 100
        c.beginExpiration(100);
        caughtUp(0, 100); // captured during the run: sorts before its tick, which sorts at its end
        caughtUp(0, 103); // so does this one, though its clock is past the run's start: replaces 100
        assertEquals(List.of(1L), times());
        c.endExpiration(tick(100, 104));
        assertEquals(List.of(1L, 103L, 100L), times());
        assertEquals(104L, out.get(2).sortTs());
        assertEquals(2, c.coalesced());
        caughtUp(0, 103); // read its clock during the run, captured after the tick: emitted at once
        caughtUp(0, 104); // at the tick's end, after it by seq: held for the next run
        assertEquals(List.of(1L, 103L, 100L, 103L), times());
        assertEquals(1, c.heldCount());
    }

    @Test
    void aFetchOlderThanAnEmittedTickIsEmittedAtOnce() {
        caughtUp(0, 1);
        expiration(100);
        caughtUp(0, 99); // its clock was read before the tick; sorts before it: never held
        assertEquals(List.of(1L, 100L, 99L), times());
        caughtUp(0, 100); // at the tick's ts, after it: held
        assertEquals(1, c.heldCount());
    }

    @Test
    void oldHeldFetchesAreFlushedByAge() {
        caughtUp(0, 1, 2);
        caughtUp(1, 3, 4);
        c.flushHeldBefore(3);
        assertEquals(List.of(1L, 3L, 2L), times());
        assertEquals(1, c.heldCount());
        c.flushHeldBefore(5);
        assertEquals(List.of(1L, 3L, 2L, 4L), times());
        caughtUp(0, 5); // history kept: held again
        assertEquals(1, c.heldCount());
    }

    @Test
    void forgetFlushesAndDropsHistory() {
        caughtUp(0, 1, 2);
        c.forget("t", 0);
        assertEquals(List.of(1L, 2L), times());
        assertEquals(0, c.partitionCount());
        caughtUp(0, 3); // no history: emitted
        assertEquals(List.of(1L, 2L, 3L), times());
    }

    @Test
    void flushAllKeepsCaptureOrderAcrossPartitions() {
        caughtUp(0, 1);
        caughtUp(1, 2, 3);
        caughtUp(0, 4);
        caughtUp(1, 5); // replaces 3 and moves to the end
        c.flushAll();
        assertEquals(List.of(1L, 2L, 4L, 5L), times());
    }

    @Test
    void otherEventsPassWithoutFlushing() {
        caughtUp(0, 1, 2);
        c.other(new Event.Tick(3, Event.Tick.ISR_CHANGE_PROPAGATION, "3.9.2"));
        assertEquals(List.of(1L, 3L), times());
        assertEquals(1, c.heldCount());
    }

    @Test
    void aNewBrokerEpochIsNotARepeat() {
        // A follower that restarted (new broker epoch) at the same caught-up offset: KRaft's expand checks the epoch.
        c.fetch(new Event.Fetch(1, "t", 0, 2, 10, 10, 0, 5, true, 20));
        c.fetch(new Event.Fetch(2, "t", 0, 2, 10, 10, 0, 5, true, 20));
        c.fetch(new Event.Fetch(3, "t", 0, 2, 10, 10, 0, 5, true, 31));
        // the repeat at 2 was held; the new epoch's fetch is not a repeat, so it is emitted after what was held
        assertEquals(List.of(1L, 2L, 3L), times());
        assertEquals(0, c.heldCount());
    }

    @Test
    void anAlterPartitionResponseEmitsWhatThePartitionHoldsFirst() {
        caughtUp(0, 1, 2, 3);
        caughtUp(1, 1, 2);
        Event.AlterPartitionResponse resp =
            new Event.AlterPartitionResponse(4, "t", 0, null, null, new int[] {1, 2}, 0, 1, false);
        c.partitionEvent(resp);
        // partition 0's held repeat (ts 3) goes before the response; partition 1's stays held
        assertEquals(List.of(1L, 1L, 3L, 4L), times());
        assertEquals(1, c.heldCount());
    }

    @Test
    void brokerRegistrationsAndSentRequestsPassThrough() {
        caughtUp(0, 1, 2);
        c.other(new Event.BrokerRegistration(3, 2, 10, true, false));
        c.other(new Event.AlterPartitionSent(4, 20, List.of()));
        assertEquals(List.of(1L, 3L, 4L), times());
        assertEquals(1, c.heldCount());
    }

    @Test
    void theOutputIsToldWhichEventsAreHeldRepeats() {
        caughtUp(0, 1, 2); // 1 emitted at once, 2 held
        c.fetch(f(3, 0, 3, 0, 10)); // a lagging replica's fetch of partition 0: 2 goes first (its partition's flush)
        caughtUp(1, 1, 4, 5); // 5 replaces 4 (the same side of every tick: 4 is dropped)
        caughtUp(2, 1, 6);
        c.flushHeldBefore(6); // 5 is older than the cutoff: the age flush
        c.beginExpiration(7);
        caughtUp(2, 8); // replaces 6 within the same segment
        c.beginExpiration(9); // a run that never ended: the next repeat sorts after a tick 8 does not
        caughtUp(2, 10); // replaces 8 across a tick: 8 is emitted
        caughtUp(0, 12); // held (replica 2's history on partition 0 survived replica 3's fetch)
        c.endExpiration(tick(9, 13)); // everything held (10, 12), then the tick
        assertEquals(List.of(1L, 2L, 3L, 1L, 1L, 5L, 8L, 10L, 12L, 9L), times());
        assertEquals(List.of(2L, 5L, 8L, 10L, 12L), heldOut.stream().map(Event::ts).toList());
        assertEquals(2, c.coalesced());
    }
}
