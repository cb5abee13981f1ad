package io.isrwatch.agent;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import kafka.cluster.Partition;
import kafka.server.ReplicaManager;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.message.AlterPartitionRequestData;
import org.apache.kafka.common.message.AlterPartitionResponseData;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.requests.FetchRequest;
import org.apache.kafka.image.MetadataDelta;
import org.apache.kafka.image.MetadataImage;
import org.apache.kafka.metadata.BrokerRegistration;
import org.apache.kafka.metadata.PartitionRegistration;
import org.apache.kafka.storage.internals.log.LogConfig;
import scala.Option;

/**
 * The static entry points the inlined advice calls from inside Kafka's methods, for every supported line (3.9 and
 * 4.0-4.4) and mode; {@link ZkHooks} adds 3.9's ZooKeeper-only ones. Each turns Kafka objects into an {@link Event}
 * and hands it to the {@link Recorder}. Every method catches everything: no exception from the agent reaches Kafka
 * code (the advice is also {@code suppress = Throwable.class}). With no recorder (the agent refused or was disabled)
 * each returns at once. Members whose class or descriptor differs between releases are read through {@link Reflect};
 * the typed references here are the same in every supported release (KafkaJarsTest checks them against the jars).
 */
public final class Hooks {

    private Hooks() {
    }

    static volatile Recorder recorder;
    private static volatile int brokerId = -1;
    static volatile String kafkaVersion = "unknown";
    static volatile Plan.Mode mode = Plan.Mode.ZOOKEEPER;
    /** The agent's own events topic when sending to this cluster: its replication is not reported (no feedback). */
    private static volatile String excludedTopic;
    private static volatile Consumer<Object> onBrokerStart = c -> { };
    private static final AtomicLong errors = new AtomicLong();
    /** Topic names by id, learnt from the partitions this broker leads and (KRaft) from the metadata image. */
    private static final Map<Uuid, String> topicNames = new ConcurrentHashMap<>();
    private static volatile MetadataImage image;

    /**
     * Makes the hooks record into {@code r}; {@code version} is the Kafka version the gate read from
     * kafka/kafka-version.properties (AppInfoParser moved to an internals package in 4.4); {@code brokerStart}
     * receives the broker's KafkaConfig.
     */
    static void activate(Recorder r, String version, String excluded, Plan.Mode m, Consumer<Object> brokerStart) {
        kafkaVersion = version;
        excludedTopic = excluded;
        onBrokerStart = brokerStart;
        mode = m;
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

    static void error(Throwable t) {
        long n = errors.incrementAndGet();
        if (n == 1 || n % 100_000 == 0) {
            Log.warn("hook error #" + n + " (event lost; Kafka unaffected): " + t + " at "
                + (t.getStackTrace().length > 0 ? t.getStackTrace()[0] : "?"));
        }
    }

    static boolean excluded(String topic) {
        String x = excludedTopic;
        return x != null && x.equals(topic);
    }

    // ---- broker start: ReplicaManager#startup -------------------------------------------------------------------

    /** Learns the broker id, re-checks the mode on 3.9 at run time, and lets the Kafka sink start. */
    public static void brokerStarting(ReplicaManager rm) {
        if (recorder == null) {
            return;
        }
        try {
            brokerId = rm.localBrokerId();
            Object config = rm.config();
            if (Plan.Line.of(kafkaVersion) == Plan.Line.V3_9) {
                String problem = ZkHooks.modeProblem(rm, mode);
                if (problem != null) {
                    disable(problem);
                    return;
                }
            }
            onBrokerStart.accept(config);
            Log.info("recording broker " + brokerId + " (Kafka " + kafkaVersion + ", " + mode + ", isr_protocol "
                + mode.isrProtocol + ")");
        } catch (Throwable t) {
            error(t);
        }
    }

    /**
     * The Kafka methods whose exit the one {@link Advices.Exit} advice reports, named as Kafka names them: each but
     * SHUTDOWN closes what its entry advice opened on the thread.
     */
    public enum Exit {
        /** ReplicaManager#shutdown. */
        SHUTDOWN,
        /** Partition#fetchRecords. */
        FETCH_RECORDS,
        /** Partition#makeLeader. */
        MAKE_LEADER,
        /** ReplicaManager#maybeShrinkIsr. */
        MAYBE_SHRINK_ISR,
        /** ReplicaManager#applyDelta (KRaft). */
        APPLY_DELTA,
        /** ReplicaManager#becomeLeaderOrFollower (3.9 ZooKeeper mode; see {@link ZkHooks}). */
        BECOME_LEADER_OR_FOLLOWER
    }

    /** {@code method} returned or threw. */
    public static void exited(Exit method) {
        switch (method) {
            case SHUTDOWN -> brokerStopped();
            case FETCH_RECORDS -> fetchEnd();
            case MAKE_LEADER -> makeLeaderEnd();
            case MAYBE_SHRINK_ISR -> expirationEnd();
            case APPLY_DELTA -> applyDeltaEnd();
            case BECOME_LEADER_OR_FOLLOWER -> ZkHooks.leaderAndIsrRequestEnd();
        }
    }

    private static final CountDownLatch stopped = new CountDownLatch(1);

    /** ReplicaManager#shutdown returned: no more replica state changes to report. */
    private static void brokerStopped() {
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
    private static void fetchEnd() {
        if (recorder == null) {
            return;
        }
        try {
            FETCH.get().partition = null;
        } catch (Throwable t) {
            error(t);
        }
    }

    /**
     * Replica#updateFetchStateOrThrow returned: the leader applied the follower's fetch (under the read lock). The
     * partition is the one whose fetchRecords is running on this thread (the 4.1+ Java Replica has no topicPartition
     * accessor); {@code brokerEpoch} is the follower's epoch the fetch carried (-1: none).
     */
    public static void fetched(int replicaId, long fetchOffset, long logStartOffset, long fetchTimeMs,
                               long leaderEndOffset, long brokerEpoch) {
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            FetchContext c = FETCH.get();
            Partition p = c.partition;
            if (p == null) {
                return; // not under fetchRecords: no partition to report it for
            }
            TopicPartition tp = p.topicPartition();
            if (excluded(tp.topic())) {
                return;
            }
            boolean inIsr = p.inSyncReplicaIds().contains(replicaId);
            // Stamped now, where the fetch took effect; Kafka's clock for it (fetchTimeMs) goes apart.
            long applied = Math.max(System.currentTimeMillis(), fetchTimeMs);
            r.fetch(new Event.Fetch(applied, tp.topic(), tp.partition(), replicaId, fetchOffset,
                leaderEndOffset, logStartOffset, c.currentLeaderEpoch, inIsr, brokerEpoch, fetchTimeMs));
        } catch (Throwable t) {
            error(t);
        }
    }

    // ---- leader_and_isr: Partition#makeLeader > maybeIncrementLeaderHW ---------------------------------------------

    /** The controller id of the ZooKeeper LeaderAndIsr request being applied on this thread (-1: none, KRaft). */
    static final ThreadLocal<int[]> CONTROLLER = ThreadLocal.withInitial(() -> new int[] {-1});

    /** A partition state as makeLeader received it, whichever class carried it. */
    record State(int controllerEpoch, int leader, int leaderEpoch, int[] isr, int[] replicas, int partitionEpoch,
                 int[] elr, int[] lastKnownElr, String leaderRecoveryState) {
    }

    private static final class MakeLeaderContext {
        Partition partition;
        Object state;
        boolean wasLeader;
    }

    private static final ThreadLocal<MakeLeaderContext> MAKE_LEADER = ThreadLocal.withInitial(MakeLeaderContext::new);
    /** Calls of makeLeader in progress: maybeIncrementLeaderHW is hot, so it looks at the thread-local only then. */
    private static final AtomicInteger makingLeaders = new AtomicInteger();
    /** The image ReplicaManager#applyDelta is applying on this thread (KRaft). */
    private static final ThreadLocal<MetadataImage> APPLYING = new ThreadLocal<>();

    /** ReplicaManager#applyDelta entry (KRaft). */
    public static void applyDeltaBegin(Object newImage) {
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            APPLYING.set((MetadataImage) newImage);
            r.beginSpan(Recorder.Span.METADATA); // ended by applyDeltaEnd, which sees APPLYING set
        } catch (Throwable t) {
            error(t);
        }
    }

    /** ReplicaManager#applyDelta exit. */
    private static void applyDeltaEnd() {
        Recorder r = recorder;
        if (APPLYING.get() != null && r != null) {
            r.endSpan(Recorder.Span.METADATA);
        }
        APPLYING.remove();
    }

    /** Partition#makeLeader entry. */
    public static void makeLeaderBegin(Partition partition, Object state) {
        if (recorder == null) {
            return;
        }
        try {
            MakeLeaderContext c = MAKE_LEADER.get();
            c.partition = partition;
            c.state = state;
            c.wasLeader = partition.isLeader();
            makingLeaders.incrementAndGet();
            learnTopic(partition);
        } catch (Throwable t) {
            error(t);
        }
    }

    private static void learnTopic(Partition partition) {
        Option<Uuid> id = partition.topicId();
        if (id.isDefined()) {
            topicNames.put(id.get(), partition.topic());
        }
    }

    /** Partition#makeLeader exit (also on exceptions). */
    private static void makeLeaderEnd() {
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
    public static void highWatermarkCheck(Partition partition, Object leaderLog, long currentTimeMs) {
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
            Object raw = c.state;
            c.partition = null; // once per makeLeader
            if (excluded(partition.topic())) {
                return;
            }
            State s = state(partition, raw);
            Option<Object> start = partition.leaderEpochStartOffsetOpt();
            long leaderLeo = start.isDefined() ? (Long) start.get() : Event.UNKNOWN;
            long hw = Reflect.longValue(leaderLog, "highWatermark");
            int minIsr = ((LogConfig) Reflect.call(leaderLog, "config")).minInSyncReplicas;
            r.partitionEvent(new Event.LeaderAndIsr(currentTimeMs, partition.topic(), partition.partitionId(),
                s.controllerEpoch(), CONTROLLER.get()[0], s.leader(), s.leaderEpoch(), s.isr(), s.replicas(),
                s.partitionEpoch(), leaderLeo, hw, minIsr, !c.wasLeader, s.elr(), s.lastKnownElr(),
                s.leaderRecoveryState()));
        } catch (Throwable t) {
            error(t);
        }
    }

    /**
     * The state makeLeader applies: a PartitionRegistration (KRaft, 4.2+), or a LeaderAndIsr partition state (3.9
     * LeaderAndIsrPartitionState, 4.0-4.1 LeaderAndIsrRequest.PartitionState; KRaft builds one from the registration,
     * whose ELR then comes from the image applyDelta is applying).
     */
    static State state(Partition partition, Object raw) throws ReflectiveOperationException {
        PartitionRegistration reg = raw instanceof PartitionRegistration pr ? pr : registration(partition);
        if (raw instanceof PartitionRegistration) {
            return new State(-1, reg.leader, reg.leaderEpoch, sortedCopy(reg.isr), reg.replicas.clone(),
                reg.partitionEpoch, sortedCopy(reg.elr), sortedCopy(reg.lastKnownElr), reg.leaderRecoveryState.name());
        }
        String recovery = null;
        Object lrs = Reflect.callIfPresent(raw, "leaderRecoveryState");
        if (lrs instanceof Byte b) {
            recovery = org.apache.kafka.metadata.LeaderRecoveryState.of(b).name();
        }
        return new State(Reflect.intValue(raw, "controllerEpoch"), Reflect.intValue(raw, "leader"),
            Reflect.intValue(raw, "leaderEpoch"), Reflect.sortedIds(Reflect.call(raw, "isr")),
            Reflect.ids(Reflect.call(raw, "replicas")), Reflect.intValue(raw, "partitionEpoch"),
            reg == null ? null : sortedCopy(reg.elr), reg == null ? null : sortedCopy(reg.lastKnownElr), recovery);
    }

    private static PartitionRegistration registration(Partition partition) {
        MetadataImage img = APPLYING.get();
        Option<Uuid> id = partition.topicId();
        if (img == null || !id.isDefined()) {
            return null;
        }
        return img.topics().getPartition(id.get(), partition.partitionId());
    }

    private static int[] sortedCopy(int[] a) {
        if (a == null) {
            return null;
        }
        int[] c = a.clone();
        java.util.Arrays.sort(c);
        return c;
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
    private static void expirationEnd() {
        expirationThread = null;
        lastCheckPartition = null;
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            r.endExpiration(System.currentTimeMillis(), kafkaVersion, mode.isrProtocol);
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

    private record ShrinkContext(Object pending, List<Event.OutOfSync> outOfSync, long checkMs, long checkLeo) {
    }

    private static final ThreadLocal<ShrinkContext> SHRINK = new ThreadLocal<>();

    /** Partition#prepareIsrShrink exit (under the write lock): the out-of-sync replicas as Kafka judged them. */
    public static void shrinkPrepared(Partition partition, Object pending) {
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

    private static List<Event.OutOfSync> outOfSync(Partition partition, Object pending)
        throws ReflectiveOperationException {
        List<Event.OutOfSync> list = new ArrayList<>();
        for (int id : Reflect.sortedIds(Reflect.call(pending, "outOfSyncReplicaIds"))) {
            Option<?> replica = partition.getReplica(id);
            if (replica.isDefined()) {
                Object s = Reflect.call(replica.get(), "stateSnapshot");
                list.add(new Event.OutOfSync(id, Reflect.longValue(s, "logEndOffset"),
                    Reflect.longValue(s, "lastCaughtUpTimeMs"), Reflect.longValue(s, "lastFetchTimeMs")));
            } else {
                list.add(new Event.OutOfSync(id, -1, -1, -1));
            }
        }
        return list;
    }

    // ---- isr_updated: Partition#handleAlterPartitionUpdate ---------------------------------------------------------

    /** The ZooKeeper write's lastIsrChangeMs (ZkHooks#isrChangeClock), the isr_updated ts in ZooKeeper mode. */
    static final ThreadLocal<long[]> ISR_CHANGE_MS = ThreadLocal.withInitial(() -> new long[] {Event.UNKNOWN});

    /**
     * Partition#handleAlterPartitionUpdate exit (under the write lock): report the ISR change Kafka committed through
     * the response path. {@code ts}: ZooKeeper mode the lastIsrChangeMs Kafka stamped; AlterPartition the time the
     * leader applied the response.
     */
    public static void isrUpdated(Partition partition, Object proposed, Object result) {
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            long[] stamp = ISR_CHANGE_MS.get();
            long ts = stamp[0] != Event.UNKNOWN ? stamp[0] : System.currentTimeMillis();
            stamp[0] = Event.UNKNOWN;
            Object after = Reflect.call(partition, "partitionState");
            if (!after.getClass().getSimpleName().equals("CommittedPartitionState") || excluded(partition.topic())) {
                return; // Kafka ignored the response (stale epoch or version): nothing took effect
            }
            boolean shrink = proposed.getClass().getSimpleName().equals("PendingShrinkIsr");
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
                    oos = outOfSync(partition, proposed);
                }
            }
            Object before = Reflect.call(Reflect.call(proposed, "lastCommittedState"), "isr");
            r.partitionEvent(new Event.IsrUpdated(ts, partition.topic(), partition.partitionId(),
                Reflect.intValue(result, "leader"), Reflect.sortedIds(Reflect.call(result, "isr")),
                Reflect.sortedIds(before), Reflect.intValue(result, "partitionEpoch"), shrink ? "shrink" : "expand", oos,
                checkMs, checkLeo));
        } catch (Throwable t) {
            error(t);
        }
    }

    // ---- AlterPartition: DefaultAlterPartitionManager#buildRequest / #handleAlterPartitionResponse ----------------

    private static String topicName(Uuid id, String fromRequest) {
        if (fromRequest != null && !fromRequest.isEmpty()) {
            return fromRequest;
        }
        if (id == null) {
            return null;
        }
        String name = topicNames.get(id);
        if (name == null) {
            MetadataImage img = image;
            if (img != null && img.topics().getTopic(id) != null) {
                name = img.topics().getTopic(id).name();
            }
        }
        return name;
    }

    private static String idString(Uuid id) {
        return id == null || Uuid.ZERO_UUID.equals(id) ? null : id.toString();
    }

    /**
     * DefaultAlterPartitionManager#buildRequest returned (3.9: a Tuple2 of the builder and the topic names by id; 4.x:
     * the builder): the request sendRequest hands to the controller channel next. One event per request.
     */
    public static void alterPartitionBuilt(Object built, long brokerEpoch) {
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            long ts = System.currentTimeMillis();
            Object builder = built instanceof scala.Tuple2<?, ?> t ? t._1() : built;
            AlterPartitionRequestData data = (AlterPartitionRequestData) Reflect.field(builder, "data");
            List<Event.ProposedPartition> list = new ArrayList<>();
            for (AlterPartitionRequestData.TopicData td : data.topics()) {
                Uuid id = td.topicId();
                String topic = topicName(id, (String) Reflect.callIfPresent(td, "topicName"));
                if (topic != null && excluded(topic)) {
                    continue;
                }
                for (AlterPartitionRequestData.PartitionData pd : td.partitions()) {
                    int[] isr;
                    long[] epochs = null;
                    if (!pd.newIsrWithEpochs().isEmpty()) {
                        List<AlterPartitionRequestData.BrokerState> states = pd.newIsrWithEpochs();
                        isr = new int[states.size()];
                        epochs = new long[states.size()];
                        for (int i = 0; i < isr.length; i++) {
                            isr[i] = states.get(i).brokerId();
                            epochs[i] = states.get(i).brokerEpoch();
                        }
                    } else {
                        isr = Reflect.ids(Reflect.call(pd, "newIsr"));
                    }
                    list.add(new Event.ProposedPartition(topic, idString(id), pd.partitionIndex(), isr, epochs,
                        pd.leaderEpoch(), pd.partitionEpoch(),
                        org.apache.kafka.metadata.LeaderRecoveryState.of(pd.leaderRecoveryState()).name()));
                }
            }
            if (!list.isEmpty()) {
                r.other(new Event.AlterPartitionSent(ts, brokerEpoch, list));
            }
        } catch (Throwable t) {
            error(t);
        }
    }

    /** A partition an AlterPartition request carried, named as the request's item names it. */
    private record Carried(String topic, int partition, Uuid id) {
    }

    /**
     * handleAlterPartitionResponse entry: the controller's answer as the leader handles it, before the partitions'
     * futures complete (so before Partition applies or ignores it). A request-level error is reported for every
     * partition the request carried ({@code items}), marked {@code top_level}. {@code args}: the method's arguments, on
     * every line the response, the request's broker epoch, then the items (3.9 has the request header before them).
     */
    public static void alterPartitionResponse(Object[] args) {
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            long ts = System.currentTimeMillis();
            int at = args[0] instanceof org.apache.kafka.common.requests.AlterPartitionResponse ? 0 : 1;
            AlterPartitionResponseData data =
                ((org.apache.kafka.common.requests.AlterPartitionResponse) args[at]).data();
            Object items = args[at + 2];
            Errors top = Errors.forCode(data.errorCode());
            // The request's items name their topics: a response by topic id (AlterPartition v2+) is resolved with
            // them, as Kafka does with the names it kept when it built the request (3.9 handleAlterPartitionResponse
            // L302-320: topicNamesByIds). ZooKeeper mode has no metadata image to ask.
            Map<Uuid, String> names = new HashMap<>();
            List<Carried> carried = new ArrayList<>();
            for (Object item : Reflect.list(items)) {
                Object tip = Reflect.call(item, "topicIdPartition");
                Uuid id = (Uuid) Reflect.call(tip, "topicId");
                String name = topicName(id, (String) Reflect.callIfPresent(tip, "topic"));
                Object p = Reflect.callIfPresent(tip, "partitionId");
                int partition = p != null ? ((Number) p).intValue() : Reflect.intValue(tip, "partition");
                if (name != null) {
                    names.put(id, name);
                    carried.add(new Carried(name, partition, id));
                }
            }
            if (top != Errors.NONE) {
                for (Carried c : carried) {
                    if (!excluded(c.topic())) {
                        r.partitionEvent(new Event.AlterPartitionResponse(ts, c.topic(), c.partition(),
                            idString(c.id()), top.name(), null, -1, -1, true));
                    }
                }
                return;
            }
            for (AlterPartitionResponseData.TopicData td : data.topics()) {
                Uuid id = td.topicId();
                String name = topicName(id, (String) Reflect.callIfPresent(td, "topicName"));
                if (name == null) {
                    name = names.get(id);
                }
                if (name == null || excluded(name)) {
                    continue;
                }
                for (AlterPartitionResponseData.PartitionData pd : td.partitions()) {
                    Errors e = Errors.forCode(pd.errorCode());
                    r.partitionEvent(e == Errors.NONE
                        ? new Event.AlterPartitionResponse(ts, name, pd.partitionIndex(), idString(id), null,
                            Reflect.sortedIds(pd.isr()), pd.leaderEpoch(), pd.partitionEpoch(), false)
                        : new Event.AlterPartitionResponse(ts, name, pd.partitionIndex(), idString(id), e.name(), null,
                            -1, -1, false));
                }
            }
        } catch (Throwable t) {
            error(t);
        }
    }

    // ---- broker_registration: BrokerMetadataPublisher#onMetadataUpdate (KRaft) ------------------------------------

    /**
     * onMetadataUpdate begins: the registrations the delta changes, as the broker's new image has them. The method
     * publishes that image to the metadata cache first (BrokerMetadataPublisher.scala 3.9 L116, 4.4 L130, before
     * applyDelta), and a leader judges a follower's ISR eligibility on the cache (Partition isReplicaIsrEligible), so
     * a fetch handled while the delta's partitions are applied is judged on the new registration. Reported at the
     * method's exit, after every partition's makeLeader, the registration came after such a fetch (the KRaft 4.4.0
     * lab: a restarted follower was taken back into the ISR by the fetch reported just before its unfencing).
     */
    public static void metadataUpdating(Object delta, Object newImage) {
        Recorder r = recorder;
        if (r == null) {
            return;
        }
        try {
            image = (MetadataImage) newImage;
            MetadataDelta d = (MetadataDelta) delta;
            if (d.clusterDelta() == null || brokerId < 0) {
                return;
            }
            long ts = System.currentTimeMillis();
            List<Integer> ids = new ArrayList<>(d.clusterDelta().changedBrokers().keySet());
            Collections.sort(ids);
            for (Integer id : ids) {
                Optional<BrokerRegistration> reg = d.clusterDelta().changedBrokers().get(id);
                if (reg != null && reg.isPresent()) {
                    BrokerRegistration b = reg.get();
                    r.other(new Event.BrokerRegistration(ts, b.id(), b.epoch(), b.fenced(), b.inControlledShutdown()));
                }
            }
        } catch (Throwable t) {
            error(t);
        }
    }
}
