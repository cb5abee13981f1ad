package io.isrwatch.agent;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import kafka.api.LeaderAndIsr;
import kafka.cluster.CommittedPartitionState;
import kafka.cluster.Partition;
import kafka.cluster.PartitionState;
import kafka.cluster.PendingPartitionChange;
import kafka.cluster.PendingShrinkIsr;
import kafka.cluster.Replica;
import kafka.cluster.ReplicaState;
import kafka.log.UnifiedLog;
import kafka.server.KafkaConfig;
import kafka.server.HostedPartition;
import kafka.server.ReplicaManager;
import kafka.server.metadata.ZkMetadataCache;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.message.LeaderAndIsrRequestData.LeaderAndIsrPartitionState;
import org.apache.kafka.common.requests.FetchRequest;
import org.apache.kafka.common.requests.LeaderAndIsrRequest;
import org.apache.kafka.common.utils.AppInfoParser;
import org.apache.kafka.common.utils.Time;
import scala.Option;

/**
 * The static entry points the inlined advice calls from inside Kafka's methods. Each turns Kafka objects into an
 * {@link Event} and hands it to the {@link Recorder}. Every method catches everything: no exception from the agent
 * reaches Kafka code (the advice is also {@code suppress = Throwable.class}). With no recorder (the agent refused or
 * was disabled) each returns at once.
 */
public final class Hooks {

    private Hooks() {
    }

    private static volatile Recorder recorder;
    private static volatile int brokerId = -1;
    private static volatile String kafkaVersion = "unknown";
    /** The agent's own events topic when sending to this cluster: its replication is not reported (no feedback). */
    private static volatile String excludedTopic;
    private static volatile Consumer<KafkaConfig> onBrokerStart = c -> { };
    private static final AtomicLong errors = new AtomicLong();

    /** Makes the hooks record into {@code r}. */
    static void activate(Recorder r, String excluded, Consumer<KafkaConfig> brokerStart) {
        excludedTopic = excluded;
        onBrokerStart = brokerStart;
        recorder = r;
    }

    /** Stops recording (hooks become no-ops); logs the reason once. */
    static void disable(String reason) {
        if (recorder != null) {
            recorder = null;
            Log.warn("disabled, no further events: " + reason);
        }
    }

    static Recorder recorder() {
        return recorder;
    }

    public static int brokerId() {
        return brokerId;
    }

    static long errors() {
        return errors.get();
    }

    private static void error(Throwable t) {
        long n = errors.incrementAndGet();
        if (n == 1 || n % 100_000 == 0) {
            Log.warn("hook error #" + n + " (event lost; Kafka unaffected): " + t + " at "
                + (t.getStackTrace().length > 0 ? t.getStackTrace()[0] : "?"));
        }
    }

    private static boolean excluded(String topic) {
        String x = excludedTopic;
        return x != null && x.equals(topic);
    }

    // ---- broker start: ReplicaManager#startup -------------------------------------------------------------------

    /** Learns the broker id, re-checks ZooKeeper mode and IBP at run time, and lets the Kafka sink start. */
    public static void brokerStarting(ReplicaManager rm) {
        if (recorder == null) {
            return;
        }
        try {
            brokerId = rm.localBrokerId();
            KafkaConfig config = rm.config();
            if (!(rm.metadataCache() instanceof ZkMetadataCache)) {
                disable("the broker does not run in ZooKeeper mode");
                return;
            }
            if (config.interBrokerProtocolVersion().isAlterPartitionSupported()) {
                disable("inter.broker.protocol.version " + config.interBrokerProtocolVersion()
                    + " sends AlterPartition, not the ZooKeeper ISR writes this agent reports");
                return;
            }
            kafkaVersion = AppInfoParser.getVersion();
            onBrokerStart.accept(config);
            Log.info("recording broker " + brokerId + " (Kafka " + kafkaVersion + ", IBP "
                + config.interBrokerProtocolVersion() + ")");
        } catch (Throwable t) {
            error(t);
        }
    }

    private static final CountDownLatch stopped = new CountDownLatch(1);

    /** ReplicaManager#shutdown returned: no more replica state changes to report. */
    public static void brokerStopped() {
        stopped.countDown();
    }

    /** At JVM shutdown: waits (bounded) for the broker's own shutdown, so its last events are still written. */
    static void awaitBrokerStopped(long timeoutMs) throws InterruptedException {
        if (brokerId >= 0) {
            stopped.await(timeoutMs, TimeUnit.MILLISECONDS);
        }
    }

    // ---- fetch: Partition#fetchRecords brackets Replica#updateFetchStateOrThrow -----------------------------------

    private static final class FetchContext {
        Partition partition;
        int currentLeaderEpoch = -1;
    }

    private static final ThreadLocal<FetchContext> FETCH = ThreadLocal.withInitial(FetchContext::new);

    /** Partition#fetchRecords entry, for fetches that update follower state (not purgatory completions). */
    public static void fetchBegin(Partition partition, FetchRequest.PartitionData data) {
        if (recorder == null) {
            return;
        }
        try {
            FetchContext c = FETCH.get();
            c.partition = partition;
            c.currentLeaderEpoch = data.currentLeaderEpoch.orElse(-1);
        } catch (Throwable t) {
            error(t);
        }
    }

    /** Partition#fetchRecords exit. */
    public static void fetchEnd() {
        if (recorder == null) {
            return;
        }
        try {
            FETCH.get().partition = null;
        } catch (Throwable t) {
            error(t);
        }
    }

    /** Replica#updateFetchStateOrThrow returned: the leader applied the follower's fetch (under the read lock). */
    public static void fetched(Replica replica, long fetchOffset, long logStartOffset, long fetchTimeMs,
                               long leaderEndOffset) {
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            TopicPartition tp = replica.topicPartition();
            if (excluded(tp.topic())) {
                return;
            }
            FetchContext c = FETCH.get();
            Partition p = c.partition;
            boolean known = p != null && p.topicPartition().equals(tp);
            boolean inIsr = known && p.partitionState().isr().contains(replica.brokerId());
            r.fetch(new Event.Fetch(fetchTimeMs, tp.topic(), tp.partition(), replica.brokerId(), fetchOffset,
                leaderEndOffset, logStartOffset, known ? c.currentLeaderEpoch : -1, inIsr));
        } catch (Throwable t) {
            error(t);
        }
    }

    // ---- leader_and_isr: ReplicaManager#becomeLeaderOrFollower > Partition#makeLeader > maybeIncrementLeaderHW ----

    private static final ThreadLocal<int[]> CONTROLLER = ThreadLocal.withInitial(() -> new int[] {-1});

    private static final class MakeLeaderContext {
        Partition partition;
        LeaderAndIsrPartitionState state;
        boolean wasLeader;
    }

    private static final ThreadLocal<MakeLeaderContext> MAKE_LEADER = ThreadLocal.withInitial(MakeLeaderContext::new);
    /** Calls of makeLeader in progress: maybeIncrementLeaderHW is hot, so it looks at the thread-local only then. */
    private static final AtomicInteger makingLeaders = new AtomicInteger();

    /**
     * ReplicaManager#becomeLeaderOrFollower entry. Remembers the controller id, and reports the request's offline
     * partition states (leader -1) that the broker accepts: 3.9 never passes them to Partition#makeFollower (their
     * leader is not alive), so this is where they take effect. The acceptance is Kafka's own test in ZooKeeper mode:
     * a current controller epoch, the broker among the replicas, a leader epoch above the partition's.
     */
    public static void leaderAndIsrRequestBegin(ReplicaManager rm, LeaderAndIsrRequest request) {
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            CONTROLLER.get()[0] = request.controllerId();
            if (request.controllerEpoch() < rm.controllerEpoch()) {
                return;
            }
            long now = System.currentTimeMillis();
            for (LeaderAndIsrPartitionState s : request.partitionStates()) {
                if (s.leader() != -1 || !s.replicas().contains(rm.localBrokerId()) || excluded(s.topicName())) {
                    continue;
                }
                HostedPartition hosted = rm.getPartition(new TopicPartition(s.topicName(), s.partitionIndex()));
                boolean newer = hosted instanceof HostedPartition.Online online
                    ? s.leaderEpoch() > online.partition().getLeaderEpoch()
                    : !(hosted instanceof HostedPartition.Offline);
                if (newer) {
                    r.partitionEvent(new Event.LeaderAndIsr(now, s.topicName(), s.partitionIndex(),
                        s.controllerEpoch(), request.controllerId(), -1, s.leaderEpoch(), sorted(s.isr()),
                        ints(s.replicas()), s.partitionEpoch(), Event.UNKNOWN, Event.UNKNOWN, 0, null));
                }
            }
        } catch (Throwable t) {
            error(t);
        }
    }

    public static void leaderAndIsrRequestEnd() {
        if (recorder == null) {
            return;
        }
        try {
            CONTROLLER.get()[0] = -1;
        } catch (Throwable t) {
            error(t);
        }
    }

    /** Partition#makeLeader entry. */
    public static void makeLeaderBegin(Partition partition, LeaderAndIsrPartitionState state) {
        if (recorder == null) {
            return;
        }
        try {
            MakeLeaderContext c = MAKE_LEADER.get();
            c.partition = partition;
            c.state = state;
            c.wasLeader = partition.isLeader();
            makingLeaders.incrementAndGet();
        } catch (Throwable t) {
            error(t);
        }
    }

    /** Partition#makeLeader exit (also on exceptions). */
    public static void makeLeaderEnd() {
        try {
            MakeLeaderContext c = MAKE_LEADER.get();
            if (c.state != null) {
                c.partition = null;
                c.state = null;
                makingLeaders.decrementAndGet();
            }
        } catch (Throwable t) {
            error(t);
        }
    }

    /**
     * Partition#maybeIncrementLeaderHW entry. Inside makeLeader this is the call at the end of its write-locked
     * section: the state took effect, {@code currentTimeMs} is the time Kafka stamped on the ISR followers'
     * lastCaughtUpTimeMs, and the log's HW has not been incremented yet.
     */
    public static void highWatermarkCheck(Partition partition, UnifiedLog leaderLog, long currentTimeMs) {
        if (makingLeaders.get() == 0) {
            return;
        }
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            MakeLeaderContext c = MAKE_LEADER.get();
            if (c.partition != partition || c.state == null) {
                return;
            }
            LeaderAndIsrPartitionState s = c.state;
            c.partition = null; // once per makeLeader
            if (excluded(s.topicName())) {
                return;
            }
            Option<Object> start = partition.leaderEpochStartOffsetOpt();
            long leaderLeo = start.isDefined() ? (Long) start.get() : Event.UNKNOWN;
            r.partitionEvent(new Event.LeaderAndIsr(currentTimeMs, s.topicName(), s.partitionIndex(),
                s.controllerEpoch(), CONTROLLER.get()[0], s.leader(), s.leaderEpoch(), sorted(s.isr()),
                ints(s.replicas()), s.partitionEpoch(), leaderLeo, leaderLog.highWatermark(),
                leaderLog.config().minInSyncReplicas, !c.wasLeader));
        } catch (Throwable t) {
            error(t);
        }
    }

    /** Partition#makeFollower / Partition#delete returned: the broker no longer leads it. */
    public static void notLeading(Partition partition) {
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            r.forget(partition.topic(), partition.partitionId());
        } catch (Throwable t) {
            error(t);
        }
    }

    // ---- isr-expiration: ReplicaManager#maybeShrinkIsr > Partition#isFollowerOutOfSync / prepareIsrShrink -------

    private static volatile Thread expirationThread;
    /** The last check's clock and LEO, written and read on the expiration thread only. */
    private static Partition lastCheckPartition;
    private static long lastCheckMs = Event.UNKNOWN;
    private static long lastCheckLeo = Event.UNKNOWN;

    /** ReplicaManager#maybeShrinkIsr entry. */
    public static void expirationBegin() {
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            expirationThread = Thread.currentThread();
            r.beginExpiration(System.currentTimeMillis());
        } catch (Throwable t) {
            error(t);
        }
    }

    /** ReplicaManager#maybeShrinkIsr exit (also on exceptions): the held fetches, then the tick. */
    public static void expirationEnd() {
        expirationThread = null;
        lastCheckPartition = null;
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            r.endExpiration(System.currentTimeMillis(), kafkaVersion);
        } catch (Throwable t) {
            error(t);
        }
    }

    /** Partition#isFollowerOutOfSync entry: the clock and leader LEO this partition's check uses. */
    public static void outOfSyncCheck(Partition partition, long leaderEndOffset, long currentTimeMs) {
        if (Thread.currentThread() != expirationThread) {
            return;
        }
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            lastCheckPartition = partition;
            lastCheckMs = currentTimeMs;
            lastCheckLeo = leaderEndOffset;
            if (!excluded(partition.topic())) {
                r.expirationCheck(partition.topic(), partition.partitionId(), leaderEndOffset, currentTimeMs);
            }
        } catch (Throwable t) {
            error(t);
        }
    }

    private record ShrinkContext(PendingShrinkIsr pending, List<Event.OutOfSync> outOfSync, long checkMs,
                                 long checkLeo) {
    }

    private static final ThreadLocal<ShrinkContext> SHRINK = new ThreadLocal<>();

    /** Partition#prepareIsrShrink exit (under the write lock): the out-of-sync replicas as Kafka judged them. */
    public static void shrinkPrepared(Partition partition, PendingShrinkIsr pending) {
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            boolean checked = Thread.currentThread() == expirationThread && lastCheckPartition == partition;
            SHRINK.set(new ShrinkContext(pending, outOfSync(partition, pending),
                checked ? lastCheckMs : Event.UNKNOWN, checked ? lastCheckLeo : Event.UNKNOWN));
            if (checked && !excluded(partition.topic())) {
                r.expirationShrink(partition.topic(), partition.partitionId(), lastCheckLeo, lastCheckMs);
            }
        } catch (Throwable t) {
            error(t);
        }
    }

    private static List<Event.OutOfSync> outOfSync(Partition partition, PendingShrinkIsr pending) {
        List<Event.OutOfSync> list = new ArrayList<>();
        for (int id : sorted(pending.outOfSyncReplicaIds())) {
            Option<Replica> replica = partition.getReplica(id);
            if (replica.isDefined()) {
                ReplicaState s = replica.get().stateSnapshot();
                list.add(new Event.OutOfSync(id, s.logEndOffset(), s.lastCaughtUpTimeMs(), s.lastFetchTimeMs()));
            } else {
                list.add(new Event.OutOfSync(id, -1, -1, -1));
            }
        }
        return list;
    }

    // ---- isr_updated: ZkAlterPartitionManager#submit (clock) > Partition#handleAlterPartitionUpdate ---------------

    private static final ThreadLocal<long[]> ISR_CHANGE_MS = ThreadLocal.withInitial(() -> new long[] {Event.UNKNOWN});

    /**
     * Replaces {@code time.milliseconds()} inside ZkAlterPartitionManager#submit, the read Kafka stores as
     * lastIsrChangeMs after a successful ZooKeeper write; the value becomes the isr_updated event's ts.
     */
    public static long isrChangeClock(Time time) {
        long now = time.milliseconds();
        try {
            ISR_CHANGE_MS.get()[0] = now;
        } catch (Throwable t) {
            error(t);
        }
        return now;
    }

    /** Partition#handleAlterPartitionUpdate exit (under the write lock): report the write Kafka committed. */
    public static void isrUpdated(Partition partition, PendingPartitionChange proposed, LeaderAndIsr result) {
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            long[] stamp = ISR_CHANGE_MS.get();
            long ts = stamp[0] != Event.UNKNOWN ? stamp[0] : System.currentTimeMillis();
            stamp[0] = Event.UNKNOWN;
            PartitionState after = partition.partitionState();
            if (!(after instanceof CommittedPartitionState) || excluded(partition.topic())) {
                return; // Kafka ignored the response (stale epoch or version): nothing took effect
            }
            boolean shrink = proposed instanceof PendingShrinkIsr;
            List<Event.OutOfSync> oos = Collections.emptyList();
            long checkMs = Event.UNKNOWN;
            long checkLeo = Event.UNKNOWN;
            if (shrink) {
                ShrinkContext c = SHRINK.get();
                SHRINK.remove();
                if (c != null && c.pending() == proposed) {
                    oos = c.outOfSync();
                    checkMs = c.checkMs();
                    checkLeo = c.checkLeo();
                } else {
                    oos = outOfSync(partition, (PendingShrinkIsr) proposed);
                }
            }
            r.partitionEvent(new Event.IsrUpdated(ts, partition.topic(), partition.partitionId(), result.leader(),
                sorted(result.isr()), sorted(proposed.lastCommittedState().isr()), result.partitionEpoch(),
                shrink ? "shrink" : "expand", oos, checkMs, checkLeo));
        } catch (Throwable t) {
            error(t);
        }
    }

    // ---- isr-change-propagation: ZkAlterPartitionManager#maybePropagateIsrChanges > KafkaZkClient#propagate... --

    private static final ThreadLocal<long[]> PROPAGATION_NOW =
        ThreadLocal.withInitial(() -> new long[] {Event.UNKNOWN});
    private static final ThreadLocal<List<Event.TopicPartitionRef>> PROPAGATED = new ThreadLocal<>();

    /** Replaces {@code time.milliseconds()} inside maybePropagateIsrChanges: the run's {@code now}. */
    public static long propagationClock(Time time) {
        long now = time.milliseconds();
        try {
            PROPAGATION_NOW.get()[0] = now;
        } catch (Throwable t) {
            error(t);
        }
        return now;
    }

    /** KafkaZkClient#propagateIsrChanges returned: the znode was written with these partitions. */
    public static void propagated(scala.collection.Set<TopicPartition> partitions) {
        if (recorder == null) {
            return;
        }
        try {
            List<Event.TopicPartitionRef> list = new ArrayList<>(partitions.size());
            scala.collection.Iterator<TopicPartition> it = partitions.iterator();
            while (it.hasNext()) {
                TopicPartition tp = it.next();
                if (!excluded(tp.topic())) {
                    list.add(new Event.TopicPartitionRef(tp.topic(), tp.partition()));
                }
            }
            Collections.sort(list);
            PROPAGATED.set(list);
        } catch (Throwable t) {
            error(t);
        }
    }

    /**
     * maybePropagateIsrChanges exit (also on exceptions): the tick at Kafka's {@code now}, then the batch. Runs before
     * the broker's start (its id unknown) are not reported: nothing is pending then.
     */
    public static void propagationEnd(long lastIsrChangeMs, long lastIsrPropagationMs) {
        Recorder r = recorder;
        try {
            long[] now = PROPAGATION_NOW.get();
            long ts = now[0] != Event.UNKNOWN ? now[0] : System.currentTimeMillis();
            List<Event.TopicPartitionRef> list = PROPAGATED.get();
            now[0] = Event.UNKNOWN;
            PROPAGATED.remove();
            if (r == null || brokerId < 0) {
                return;
            }
            r.other(new Event.Tick(ts, Event.Tick.ISR_CHANGE_PROPAGATION, kafkaVersion, lastIsrChangeMs,
                lastIsrPropagationMs));
            if (list != null && !list.isEmpty()) {
                r.other(new Event.IsrChangePropagated(ts, list));
            }
        } catch (Throwable t) {
            error(t);
        }
    }

    // ---- helpers --------------------------------------------------------------------------------------------------

    private static int[] sorted(scala.collection.Iterable<Object> ids) {
        int[] a = new int[ids.size()];
        int i = 0;
        scala.collection.Iterator<Object> it = ids.iterator();
        while (it.hasNext()) {
            a[i++] = (Integer) it.next();
        }
        Arrays.sort(a);
        return a;
    }

    private static int[] sorted(List<Integer> ids) {
        int[] a = ints(ids);
        Arrays.sort(a);
        return a;
    }

    private static int[] ints(List<Integer> ids) {
        int[] a = new int[ids.size()];
        for (int i = 0; i < a.length; i++) {
            a[i] = ids.get(i);
        }
        return a;
    }
}
