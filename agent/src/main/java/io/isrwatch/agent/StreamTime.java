package io.isrwatch.agent;

/**
 * How far a broker's main stream has passed: the watermark W the {@link Recorder} emits, on the broker's clock
 * (System.currentTimeMillis, what Kafka's SystemTime reads). The promise: every event emitted after a watermark has
 * {@code ts >= W}, except a caught-up repeat the {@link Coalescer} held (the stream applies it exactly behind its
 * frontier: it changes only its follower's lastCaughtUpTimeMs / lastFetchTimeMs and is emitted before any later event
 * of its partition and before the next isr-expiration tick). So W = min(now - slack, the open isr-expiration run's
 * ts) — the run's appends and tick carry its start — and a W that does not advance is not emitted. Logic only, on the
 * times the Recorder passes in under its lock; no clock of its own.
 *
 * <p>The slack covers <em>capture delay</em>: a Kafka thread reads its clock (an isr-expiration check's now, a
 * makeLeader's currentTimeMs), may be descheduled, and reaches the hook later; the watermark must not pass it
 * meanwhile. (A fetch is stamped at its hook, where it took effect; its fetchTimeMs rides along as {@code fetch_ms}.)
 * So the slack is {@code watermark.slack.ms}, or twice the largest capture delay seen in the last two
 * {@link #WINDOW_MS} windows when that is more, up to {@link #MAX_ADAPTIVE_SLACK_MS}. A delay over {@link #PAUSE_MS} is
 * a <em>pause</em> (the JVM stopped: SIGSTOP, a long GC; or a thread starved that long), not a pace to keep: every
 * clock read before it may still be on its way, so W stays at the pause's start until {@link #RECOVERY_MS} after it
 * ended, and then goes on at the usual slack (a slack swollen to the pause's length would hold the broker's stream back
 * for two windows after every stall). The timer sees a pause as a gap between its turns; a capture, as its own delay.
 * An event other than a held repeat that still enters the stream below the last watermark is a violation: counted and
 * logged (rate-limited), and emitted all the same (the consumer decides).
 */
final class StreamTime {

    /**
     * Capture delays are remembered for two windows of this length (1-2 s): long enough to span the bursts a loaded
     * broker has, short enough that one burst (a resumed broker catching up) does not hold its stream back for long.
     */
    static final long WINDOW_MS = 1_000;
    /** A capture delay or a gap between the timer's turns longer than this is a pause. */
    static final long PAUSE_MS = 500;
    /** After a pause, W stays at its start this long: the threads it stopped capture what they had read. */
    static final long RECOVERY_MS = 500;
    /** The adaptive slack stops growing here: twice the longest delay that is not a pause. */
    static final long MAX_ADAPTIVE_SLACK_MS = 2 * PAUSE_MS;
    /** After the first violation, at most one log line per this period. */
    static final long VIOLATION_LOG_MS = 60_000;
    /** What {@link #next} returns when W would not advance. */
    static final long NONE = Long.MIN_VALUE;

    private final long slackFloorMs;
    private long windowStart;
    private long windowMaxDelay;
    private long previousMaxDelay;
    private long last = Long.MIN_VALUE;
    /** The open pause: W stays at {@code pauseSince} until {@code pauseUntil} (Long.MAX_VALUE: none). */
    private long pauseSince = Long.MAX_VALUE;
    private long pauseUntil = Long.MIN_VALUE;
    private long lastTurn = Long.MIN_VALUE;
    private long violations;
    private long violationLoggedAt;

    StreamTime(long slackFloorMs, long now) {
        this.slackFloorMs = slackFloorMs;
        this.windowStart = now;
    }

    /** Something read the clock at {@code sortTs} and reached the Recorder at {@code now}: its capture delay counts. */
    void captured(long now, long sortTs) {
        roll(now);
        long delay = now - sortTs;
        if (delay > PAUSE_MS) {
            pause(sortTs, now);
        } else if (delay > windowMaxDelay) {
            windowMaxDelay = delay;
        }
    }

    /** The timer's turn at {@code now}: a gap since its last turn longer than {@link #PAUSE_MS} is a pause. */
    void turn(long now) {
        if (lastTurn != Long.MIN_VALUE && now - lastTurn > PAUSE_MS) {
            pause(lastTurn, now);
        }
        lastTurn = now;
    }

    /** Clock reads from {@code since} on may still be on their way; the pause ends {@link #RECOVERY_MS} after now. */
    private void pause(long since, long now) {
        pauseSince = pauseUntil > now ? Math.min(pauseSince, since) : since;
        pauseUntil = now + RECOVERY_MS;
    }

    /** The open pause's start at {@code now}, Long.MAX_VALUE when none is open. */
    long pausedSince(long now) {
        return now < pauseUntil ? pauseSince : Long.MAX_VALUE;
    }

    /** The effective slack at {@code now}: the floor, or twice the recent largest capture delay (capped) if more. */
    long slackMs(long now) {
        roll(now);
        long adaptive = 2 * Math.max(windowMaxDelay, previousMaxDelay); // at most MAX_ADAPTIVE_SLACK_MS
        return Math.max(slackFloorMs, adaptive);
    }

    /** Moves to the window {@code now} is in; the window before it stays remembered. */
    private void roll(long now) {
        if (now - windowStart < WINDOW_MS) {
            return; // the capture path's case: no division
        }
        long windows = (now - windowStart) / WINDOW_MS;
        previousMaxDelay = windows == 1 ? windowMaxDelay : 0;
        windowMaxDelay = 0;
        windowStart += windows * WINDOW_MS;
    }

    /**
     * The watermark at {@code now}, or {@link #NONE} when it would not advance past the last emitted one.
     * {@code openRunTs} is {@code Long.MAX_VALUE} when no run is open.
     */
    long next(long now, long openRunTs) {
        long w = Math.min(now - slackMs(now), openRunTs);
        return w > last ? w : NONE;
    }

    /** The watermark {@code w} was emitted: later events are judged against it. */
    void emitted(long w) {
        last = w;
    }

    /** The last emitted watermark ({@code Long.MIN_VALUE} before the first). */
    long last() {
        return last;
    }

    /**
     * Event {@code e}, not a held repeat, entered the main stream below the last watermark: counted; the first is
     * logged, then at most one line per {@link #VIOLATION_LOG_MS} with the count.
     */
    void violation(Event e, long now) {
        violations++;
        if (violations == 1 || now - violationLoggedAt >= VIOLATION_LOG_MS) {
            violationLoggedAt = now;
            Log.warn("watermark violation (" + violations + " so far, logged at most once a minute): " + e.type()
                + " ts=" + e.ts() + " entered the stream " + (last - e.ts()) + " ms below the watermark " + last);
        }
    }

    /** Events other than held repeats that entered the main stream below the last watermark. */
    long violations() {
        return violations;
    }
}
