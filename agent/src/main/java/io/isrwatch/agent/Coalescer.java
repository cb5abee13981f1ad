package io.isrwatch.agent;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Holds back a follower's repeated "still caught up" fetches and emits only the latest one, so a broker's steady-state
 * event rate follows its isr-expiration interval instead of the fetch rate. Pure logic, not thread-safe (the
 * {@link Recorder} calls it under its lock, in the order Kafka applied the captured events).
 *
 * <p>The rule (see agent/README.md, "Coalescing", for the argument that replaying the coalesced stream gives the same
 * decisions, HW and propagation batches as the uncoalesced one). A fetch F of follower r on partition p is a
 * <em>repeat</em> when coalescing is on, r is in Kafka's ISR, F is caught up ({@code fetch_offset == leader_leo}),
 * the previous fetch of (p, r) since p's last other event was caught up at the same offset with the same
 * {@code log_start_offset} and {@code current_leader_epoch}, and no event of p since its last leader_and_isr carried
 * a higher leader LEO. Applying a repeat changes only r's lastCaughtUpTimeMs / lastFetchTimeMs, which nothing reads
 * before the next fetch of r: r is in the ISR and at the leader's LEO, so neither the HW rule nor a shrink check
 * looks at them. A repeat is held, replacing the previously held repeat of (p, r) when both sort on the same side of
 * every isr-expiration tick. Everything held for p is emitted, in capture order, before any other event of p
 * (a non-repeat fetch of any replica, append, leader_and_isr, isr_updated); everything held is emitted before each
 * isr-expiration tick; a held fetch older than {@code maxHoldMs} is emitted on {@link #flushHeldBefore} (give or
 * take capture delay), so a stream consumer with allowed lateness above that bound never sees it as late.
 */
public final class Coalescer {

    /**
     * Where emitted events go, in emission order. {@code heldRepeat}: the event is a caught-up repeat emitted from the
     * held set, later than it was captured (the watermark's exception: it may be below a watermark already emitted).
     */
    public interface Output {
        void emit(Event e, boolean heldRepeat);
    }

    private record PartitionKey(String topic, int partition) {
    }

    private record ReplicaKey(String topic, int partition, int replica) {
    }

    /** The previous fetch of one follower since the partition's last other event. */
    private record Last(long fetchOffset, long leaderLeo, long logStartOffset, int currentLeaderEpoch,
                        long brokerEpoch) {
        boolean caughtUp() {
            return fetchOffset == leaderLeo;
        }
    }

    private static final class Slot {
        final Map<Integer, Last> last = new HashMap<>(4);
        final List<ReplicaKey> held = new ArrayList<>(2);
        long maxLeo = Event.UNKNOWN;
        /** The highest sort ts among the partition's emitted events other than held repeats. */
        long barrierTs = Long.MIN_VALUE;
        /** The isr-expiration run (its count) that reported this partition's check with an append. */
        long checkedRun = -1;
    }

    private record Held(Event.Fetch fetch, long segment, long order, Slot slot) {
    }

    private final boolean enabled;
    private final Output out;
    private final Map<PartitionKey, Slot> slots = new HashMap<>();
    /** Held repeats, oldest (re)insertion first. */
    private final LinkedHashMap<ReplicaKey, Held> held = new LinkedHashMap<>();
    private long order;
    private long coalesced;
    /** Number of isr-expiration ticks begun; the open or last one ran at {@link #tickTs}. */
    private long tickCount;
    private long tickTs = Long.MIN_VALUE;
    /** Where the last emitted isr-expiration tick sorts: the end of its run. */
    private long tickEnd = Long.MIN_VALUE;
    private boolean tickOpen;

    public Coalescer(boolean enabled, Output out) {
        this.enabled = enabled;
        this.out = out;
    }

    private Slot slot(String topic, int partition) {
        return slots.computeIfAbsent(new PartitionKey(topic, partition), k -> new Slot());
    }

    /**
     * The isr-expiration tick an event at {@code ts} sorts before in the model's (sort ts, seq) order, or -1 when that
     * tick was already emitted (the event is late for it and is emitted at once rather than held).
     * A tick sorts at the end of its run and is emitted then, so while it is open everything captured sorts before it.
     */
    private long segment(long ts) {
        if (tickOpen) {
            return tickCount;
        }
        return ts < tickEnd ? -1 : tickCount + 1;
    }

    /** A follower fetch the leader applied. */
    public void fetch(Event.Fetch f) {
        Slot s = slot(f.topic(), f.partition());
        s.maxLeo = Math.max(s.maxLeo, f.leaderLeo());
        if (f.ts() < s.barrierTs) {
            // Its clock was read before an event of the partition it was applied after: the model puts it before
            // that event, so it is neither held nor the predecessor of the next fetch.
            s.last.remove(f.replica());
            emit(s, f);
            return;
        }
        Last prev = s.last.get(f.replica());
        boolean repeat = enabled && f.inIsr() && f.fetchOffset() == f.leaderLeo() && prev != null && prev.caughtUp()
            && prev.fetchOffset() == f.fetchOffset() && prev.logStartOffset() == f.logStartOffset()
            && prev.currentLeaderEpoch() == f.currentLeaderEpoch() && prev.brokerEpoch() == f.brokerEpoch()
            && s.maxLeo == f.leaderLeo();
        s.last.put(f.replica(), new Last(f.fetchOffset(), f.leaderLeo(), f.logStartOffset(), f.currentLeaderEpoch(),
            f.brokerEpoch()));
        long segment = repeat ? segment(f.ts()) : -1;
        if (segment < 0) {
            emit(s, f);
            return;
        }
        ReplicaKey key = new ReplicaKey(f.topic(), f.partition(), f.replica());
        Held old = held.remove(key);
        if (old == null) {
            s.held.add(key);
        } else if (old.segment() == segment) {
            coalesced++;
        } else {
            out.emit(old.fetch(), true);
        }
        held.put(key, new Held(f, segment, order++, s));
    }

    /**
     * An append, leader_and_isr, isr_updated or alter_partition_response: p's held fetches go first, and p's repeat
     * history restarts.
     */
    public void partitionEvent(Event.PartitionEvent e) {
        Slot s = slot(e.topic(), e.partition());
        s.last.clear();
        if (e instanceof Event.LeaderAndIsr lai) {
            s.maxLeo = lai.leaderLeo();
        } else if (e instanceof Event.Append a) {
            s.maxLeo = Math.max(s.maxLeo, a.leaderLeo());
            if (tickOpen) {
                s.checkedRun = tickCount;
            }
        }
        emit(s, e);
    }

    /** Emits a partition's event that is not a held repeat: what it holds goes first. */
    private void emit(Slot s, Event.PartitionEvent e) {
        flushPartition(s);
        s.barrierTs = Math.max(s.barrierTs, e.sortTs());
        out.emit(e, false);
    }

    /** True when the open isr-expiration run already reported this partition's check with an append. */
    public boolean checkedThisRun(String topic, int partition) {
        Slot s = slots.get(new PartitionKey(topic, partition));
        return tickOpen && s != null && s.checkedRun == tickCount;
    }

    /** True when {@code leo} differs from the highest leader LEO emitted for the partition since its leader_and_isr. */
    public boolean leoChanged(String topic, int partition, long leo) {
        Slot s = slots.get(new PartitionKey(topic, partition));
        return s == null || s.maxLeo != leo;
    }

    /** An isr-expiration run starts; its tick (at {@code ts}) is emitted by {@link #endExpiration}. */
    public void beginExpiration(long ts) {
        tickCount++;
        tickTs = ts;
        tickOpen = true;
    }

    /** Whether an isr-expiration run is open (appends are emitted only inside one). */
    public boolean expirationOpen() {
        return tickOpen;
    }

    /** The open run's tick time. */
    public long expirationTs() {
        return tickTs;
    }

    /** The run ended: everything held, then the tick. */
    public void endExpiration(Event.Tick tick) {
        flushAll();
        out.emit(tick, false);
        tickEnd = tick.sortTs();
        tickOpen = false;
    }

    /** An event about no partition's replica state (propagation ticks and notifications). */
    public void other(Event e) {
        out.emit(e, false);
    }

    /**
     * Emits the held fetches whose ts is before {@code cutoffTs}, oldest capture first, up to the first younger one.
     * (Re)insertion order is capture order, which follows ts only up to capture delay: a fetch whose thread read its
     * clock earlier but reached the hook later sits behind younger ones and goes on a later call.
     */
    public void flushHeldBefore(long cutoffTs) {
        Iterator<Held> it = held.values().iterator();
        while (it.hasNext()) {
            Held h = it.next();
            if (h.fetch().ts() >= cutoffTs) {
                return;
            }
            it.remove();
            h.slot().held.remove(new ReplicaKey(h.fetch().topic(), h.fetch().partition(), h.fetch().replica()));
            out.emit(h.fetch(), true);
        }
    }

    /** Emits everything held, in capture order. */
    public void flushAll() {
        for (Held h : held.values()) {
            h.slot().held.clear();
            out.emit(h.fetch(), true);
        }
        held.clear();
    }

    /** The broker stopped leading the partition (or deleted it): emit what it holds and drop its history. */
    public void forget(String topic, int partition) {
        Slot s = slots.remove(new PartitionKey(topic, partition));
        if (s != null) {
            flushPartition(s);
        }
    }

    private void flushPartition(Slot s) {
        if (s.held.isEmpty()) {
            return;
        }
        List<Held> hs = new ArrayList<>(s.held.size());
        for (ReplicaKey k : s.held) {
            hs.add(held.remove(k));
        }
        s.held.clear();
        hs.sort((a, b) -> Long.compare(a.order(), b.order()));
        for (Held h : hs) {
            out.emit(h.fetch(), true);
        }
    }

    /** Fetches dropped because a later repeat replaced them. */
    public long coalesced() {
        return coalesced;
    }

    /** Fetches currently held. */
    public int heldCount() {
        return held.size();
    }

    /** Partitions with history. */
    public int partitionCount() {
        return slots.size();
    }
}
