package io.isrwatch.agent;

import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;

/**
 * The one place captured events enter: under a single lock it assigns each its place in the broker's streams (seq),
 * writes it to the raw stream (when configured), and passes it through the {@link Coalescer} to the main stream.
 * Kafka's threads call it while holding Kafka's own partition locks, so a partition's events are numbered in the
 * order Kafka applied them. The lock is held only for map updates and non-blocking queue offers. Under the same lock
 * it emits the broker's watermarks ({@link StreamTime}), so their seq orders them among the events.
 */
public final class Recorder {

    private final Object lock = new Object();
    private final Sink main;
    private final Sink raw;
    private final Coalescer coalescer;
    private long mainSeq;
    private long rawSeq;
    private final AtomicLong captured = new AtomicLong();
    private final LongSupplier clock;
    private final StreamTime time;
    private final long watermarkIntervalMs;
    /** When the timer's next watermark is due (read and written on the timer thread only). */
    private long nextWatermarkAt;
    private long watermarks;
    /** Per {@link Span}: how many are open, and when the earliest still open began (Long.MAX_VALUE: none). */
    private final int[] spanDepth = new int[Span.values().length];
    private final long[] spanStart = new long[Span.values().length];

    /**
     * Kafka operations that read their clock once and report what they did later, each event carrying that read: a
     * propagation run (its tick and batch carry the run's {@code now}, reported after the ZooKeeper write), a
     * LeaderAndIsr request (ZooKeeper mode) and a metadata delta (KRaft), whose leader_and_isr events carry the time
     * the request or delta began. While one is open the watermark stays at or below its start, as for an open
     * isr-expiration run, and the events it covers do not count as capture delay (they would swell the slack).
     */
    public enum Span {
        PROPAGATION, LEADER_AND_ISR, METADATA
    }

    /** A recorder that emits no watermarks (tests and benchmarks of the capture path). */
    public Recorder(Sink main, Sink raw, boolean coalesce, long seqBase) {
        this(main, raw, coalesce, seqBase, 0, 0, System::currentTimeMillis);
    }

    /**
     * {@code raw} may be null. Both streams number their events from {@code seqBase} + 1: the agent passes its start
     * time in ms × 1000, so a broker's seq keeps increasing across restarts (a life would need over 1,000 events per
     * ms to catch up with the next one's base). A watermark is due every {@code watermarkIntervalMs} (0: never), at
     * least {@code watermarkSlackMs} behind {@code clock}, the broker's clock.
     */
    public Recorder(Sink main, Sink raw, boolean coalesce, long seqBase, long watermarkIntervalMs,
                    long watermarkSlackMs, LongSupplier clock) {
        this.main = main;
        this.raw = raw;
        this.mainSeq = seqBase;
        this.rawSeq = seqBase;
        this.seqBase = seqBase;
        this.clock = clock;
        long now = clock.getAsLong();
        this.time = new StreamTime(watermarkSlackMs, now);
        this.watermarkIntervalMs = watermarkIntervalMs;
        this.nextWatermarkAt = now + watermarkIntervalMs;
        this.coalescer = new Coalescer(coalesce, this::emit);
        java.util.Arrays.fill(spanStart, Long.MAX_VALUE);
    }

    /** A {@link Span} begins now: until it ends, no watermark passes its start. */
    public void beginSpan(Span span) {
        synchronized (lock) {
            if (spanDepth[span.ordinal()]++ == 0) {
                spanStart[span.ordinal()] = clock.getAsLong();
            }
        }
    }

    /** The {@link Span} ends (after what it reports was recorded). */
    public void endSpan(Span span) {
        synchronized (lock) {
            if (spanDepth[span.ordinal()] > 0 && --spanDepth[span.ordinal()] == 0) {
                spanStart[span.ordinal()] = Long.MAX_VALUE;
            }
        }
    }

    /** The earliest start of what is open (an isr-expiration run, a span, a pause), Long.MAX_VALUE when nothing is. */
    private long openSince(long now) {
        long since = Math.min(coalescer.expirationOpen() ? coalescer.expirationTs() : Long.MAX_VALUE,
            time.pausedSince(now));
        for (long start : spanStart) {
            since = Math.min(since, start);
        }
        return since;
    }

    /**
     * Into the main stream; an event below the last watermark is a violation (counted, logged, still emitted) unless
     * it is a held repeat, the watermark's exception.
     */
    private void emit(Event e, boolean heldRepeat) {
        if (!heldRepeat && e.ts() < time.last()) {
            time.violation(e, clock.getAsLong());
        }
        main.offer(++mainSeq, e);
    }

    private final long seqBase;

    private void captured(Event e) {
        captured.incrementAndGet();
        long now = clock.getAsLong(); // one read per capture: this is Kafka's thread
        if (e.ts() < openSince(now)) { // an event an open span covers waits for no slack: the span holds W back
            time.captured(now, e.sortTs());
        }
        if (raw != null) {
            raw.offer(++rawSeq, e);
        }
    }

    public void fetch(Event.Fetch f) {
        synchronized (lock) {
            captured(f);
            coalescer.fetch(f);
        }
    }

    /** leader_and_isr, isr_updated and alter_partition_response: a pending check of the partition goes first. */
    public void partitionEvent(Event.PartitionEvent e) {
        synchronized (lock) {
            if (pendingCheck != null && pendingCheck.of(e.topic(), e.partition())) {
                reportCheck(false);
            }
            captured(e);
            coalescer.partitionEvent(e);
        }
    }

    /**
     * A partition's isr-expiration check read the leader's LEO {@code leo} at {@code checkMs} (once per follower it
     * checks). The check that decides is the partition's last in the run: Partition.maybeShrinkIsr checks under the
     * read lock ({@code needsShrinkIsr}) and, when that finds a follower out of sync, checks again under the write lock,
     * at a later clock, after the fetches applied meanwhile (Partition.scala 3.9.0-rc3 L1243-1253, L1309-1317; the
     * same in 4.x). So the check waits ({@link #pendingCheck}) until the run moves to another partition, shrinks this
     * one, or ends: then its append (at the open tick's ts) is emitted when the LEO moved since the partition's last
     * event, after those fetches. Outside a run it does nothing.
     */
    public void expirationCheck(String topic, int partition, long leo, long checkMs) {
        synchronized (lock) {
            if (coalescer.expirationOpen()) {
                checkNext(new Check(topic, partition, leo, checkMs));
            }
        }
    }

    /**
     * The open run's check of a partition found replicas out of sync and shrinks it: emits its append (the LEO and
     * clock the deciding check read) if the run has not yet, so the model checks the partition at that clock, not at
     * the run's end.
     */
    public void expirationShrink(String topic, int partition, long leo, long checkMs) {
        synchronized (lock) {
            if (coalescer.expirationOpen()) {
                checkNext(new Check(topic, partition, leo, checkMs));
                reportCheck(true);
            }
        }
    }

    /** A partition's check, as its last call read it, not reported yet. */
    private record Check(String topic, int partition, long leo, long checkMs) {
        boolean of(String t, int p) {
            return partition == p && topic.equals(t);
        }
    }

    /** The open run's latest check, reported when the run moves on ({@link #expirationCheck}); null: none. */
    private Check pendingCheck;

    /** {@code next} is the run's latest check: a check of another partition reports the one before it. */
    private void checkNext(Check next) {
        if (pendingCheck != null && !pendingCheck.of(next.topic(), next.partition())) {
            reportCheck(false);
        }
        pendingCheck = next;
    }

    /** Reports the pending check as an append when its LEO moved, or when it shrinks and the run has not yet. */
    private void reportCheck(boolean shrinks) {
        Check c = pendingCheck;
        pendingCheck = null;
        if (c != null && (coalescer.leoChanged(c.topic(), c.partition(), c.leo())
            || shrinks && !coalescer.checkedThisRun(c.topic(), c.partition()))) {
            Event.Append a = new Event.Append(coalescer.expirationTs(), c.topic(), c.partition(), c.leo(), c.checkMs());
            captured(a);
            coalescer.partitionEvent(a);
        }
    }

    /** An isr-expiration run starts at {@code ts}: its appends and tick will carry it, so the watermark waits. */
    public void beginExpiration(long ts) {
        synchronized (lock) {
            time.captured(clock.getAsLong(), ts);
            coalescer.beginExpiration(ts);
        }
    }

    /** Ends the open isr-expiration run, at {@code endMs}, with its tick; no-op when none is open. */
    public void endExpiration(long endMs, String kafkaVersion) {
        endExpiration(endMs, kafkaVersion, null);
    }

    /** The same, the tick reporting the broker's ISR protocol ({@code zookeeper} or {@code alter_partition}). */
    public void endExpiration(long endMs, String kafkaVersion, String isrProtocol) {
        synchronized (lock) {
            if (coalescer.expirationOpen()) {
                reportCheck(false);
                Event.Tick t = Event.Tick.expiration(coalescer.expirationTs(), endMs, kafkaVersion, isrProtocol);
                captured(t);
                coalescer.endExpiration(t);
            }
        }
    }

    /** Propagation ticks, ISR-change notifications, alter_partition_sent and broker_registration. */
    public void other(Event e) {
        synchronized (lock) {
            captured(e);
            coalescer.other(e);
        }
    }

    public void forget(String topic, int partition) {
        synchronized (lock) {
            if (pendingCheck != null && pendingCheck.of(topic, partition)) {
                pendingCheck = null; // the partition is gone: its check tells the model nothing
            }
            coalescer.forget(topic, partition);
        }
    }

    /** Emits held fetches older than {@code cutoffTs} (called by the agent's timer). */
    public void flushHeldBefore(long cutoffTs) {
        synchronized (lock) {
            coalescer.flushHeldBefore(cutoffTs);
        }
    }

    /**
     * The agent's timer, on each turn: when a watermark is due, emits W = min(now - slack, the start of an open
     * isr-expiration run, span or pause: {@link #openSince}) to the main stream (held repeats may follow it below W: the watermark's exception, see
     * {@link StreamTime}), and the same to the raw one (valid there without exception: raw holds nothing back, and a
     * replay of both streams then takes the same path) — unless W would not advance.
     */
    public void watermarkIfDue() {
        if (watermarkIntervalMs == 0) {
            return;
        }
        long due = clock.getAsLong();
        if (due < nextWatermarkAt) {
            return;
        }
        nextWatermarkAt = due + watermarkIntervalMs;
        synchronized (lock) {
            long now = clock.getAsLong();
            long w = time.next(now, openSince(now));
            if (w == StreamTime.NONE) {
                return;
            }
            Event.Watermark wm = new Event.Watermark(w);
            main.offer(++mainSeq, wm); // numbered, hence emitted, even if a full queue drops it (the gap shows)
            time.emitted(w);
            watermarks++;
            if (raw != null) {
                raw.offer(++rawSeq, wm);
            }
        }
    }

    /** The agent's timer turns (every 100 ms): a longer gap between two is a pause of the JVM ({@link StreamTime}). */
    public void timerTurn() {
        synchronized (lock) {
            time.turn(clock.getAsLong());
        }
    }

    public void flushAll() {
        synchronized (lock) {
            coalescer.flushAll();
        }
    }

    /** One line of counters for the log. */
    public String stats() {
        long coalesced;
        long emitted;
        int held;
        long wms;
        long violations;
        synchronized (lock) {
            coalesced = coalescer.coalesced();
            emitted = mainSeq - seqBase;
            held = coalescer.heldCount();
            wms = watermarks;
            violations = time.violations();
        }
        StringBuilder sb = new StringBuilder();
        sb.append("captured=").append(captured.get()).append(" emitted=").append(emitted)
            .append(" coalesced=").append(coalesced).append(" held=").append(held)
            .append(" watermarks=").append(wms).append(" watermark_violations=").append(violations)
            .append(" ").append(main.name()).append("{written=").append(main.written())
            .append(" dropped=").append(main.dropped()).append(" failed=").append(main.failures())
            .append(" queued=").append(main.queued()).append('}');
        if (raw != null) {
            sb.append(" raw{written=").append(raw.written()).append(" dropped=").append(raw.dropped())
                .append(" failed=").append(raw.failures()).append('}');
        }
        return sb.toString();
    }

    public long dropped() {
        return main.dropped() + (raw == null ? 0 : raw.dropped());
    }

    public Sink main() {
        return main;
    }

    public Sink raw() {
        return raw;
    }
}
