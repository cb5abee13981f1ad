package io.isrwatch.agent;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import kafka.server.HostedPartition;
import kafka.server.ReplicaManager;
import kafka.server.metadata.ZkMetadataCache;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.message.LeaderAndIsrRequestData.LeaderAndIsrPartitionState;
import org.apache.kafka.common.requests.LeaderAndIsrRequest;
import org.apache.kafka.common.utils.Time;

/**
 * Hooks of Kafka 3.9's ZooKeeper mode only: the controller's LeaderAndIsr requests, the ZooKeeper ISR write's clock
 * and the isr-change-propagation task. Typed against 3.9 classes that 4.x removed; loaded and called only on a 3.9
 * broker (the plan installs its advice only in the ZooKeeper modes, and {@link Hooks#brokerStarting} calls
 * {@link #modeProblem} only on 3.9).
 */
public final class ZkHooks {

    private ZkHooks() {
    }

    /**
     * The live broker's mode against the one the gate decided from its properties: null when they agree, else why
     * not. ZooKeeper mode has a ZkMetadataCache; IBP 2.7-IV2 and later send AlterPartition.
     */
    static String modeProblem(ReplicaManager rm, Plan.Mode mode) {
        boolean zk = rm.metadataCache() instanceof ZkMetadataCache;
        if (mode == Plan.Mode.KRAFT) {
            return zk ? "the broker runs in ZooKeeper mode, not KRaft as its properties said" : null;
        }
        if (!zk) {
            return "the broker does not run in ZooKeeper mode";
        }
        boolean alterPartition = rm.config().interBrokerProtocolVersion().isAlterPartitionSupported();
        if (alterPartition != (mode == Plan.Mode.ZK_ALTER_PARTITION)) {
            return "inter.broker.protocol.version " + rm.config().interBrokerProtocolVersion()
                + (alterPartition ? " sends AlterPartition" : " writes the ISR to ZooKeeper")
                + ", not what the broker's properties said";
        }
        return null;
    }

    /**
     * ReplicaManager#becomeLeaderOrFollower entry. Remembers the controller id, and reports the request's offline
     * partition states (leader -1) that the broker accepts: 3.9 never passes them to Partition#makeFollower (their
     * leader is not alive), so this is where they take effect. The acceptance is Kafka's own test in ZooKeeper mode:
     * a current controller epoch, the broker among the replicas, a leader epoch above the partition's.
     */
    public static void leaderAndIsrRequestBegin(ReplicaManager rm, LeaderAndIsrRequest request) {
        Recorder r = Hooks.recorder;
        if (r == null) {
            return;
        }
        try {
            r.beginSpan(Recorder.Span.LEADER_AND_ISR);
            Hooks.CONTROLLER.get()[0] = request.controllerId();
            if (request.controllerEpoch() < rm.controllerEpoch()) {
                return;
            }
            long now = System.currentTimeMillis();
            for (LeaderAndIsrPartitionState s : request.partitionStates()) {
                if (s.leader() != -1 || !s.replicas().contains(rm.localBrokerId()) || Hooks.excluded(s.topicName())) {
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
            Hooks.error(t);
        }
    }

    /** ReplicaManager#becomeLeaderOrFollower exit (Hooks#exited). */
    static void leaderAndIsrRequestEnd() {
        Recorder r = Hooks.recorder;
        if (r == null) {
            return;
        }
        try {
            r.endSpan(Recorder.Span.LEADER_AND_ISR);
            Hooks.CONTROLLER.get()[0] = -1;
        } catch (Throwable t) {
            Hooks.error(t);
        }
    }

    /** Whether a 3.9 IBP sends AlterPartition (2.7-IV2 and later); null when Kafka does not know the version. */
    static Boolean ibpSendsAlterPartition(String ibp) {
        try {
            return org.apache.kafka.server.common.MetadataVersion.fromVersionString(ibp).isAlterPartitionSupported();
        } catch (RuntimeException e) {
            return null;
        }
    }

    // ---- isr_updated's clock: ZkAlterPartitionManager#submit ----------------------------------------------------

    /**
     * Replaces {@code time.milliseconds()} inside ZkAlterPartitionManager#submit, the read Kafka stores as
     * lastIsrChangeMs after a successful ZooKeeper write; the value becomes the isr_updated event's ts.
     */
    public static long isrChangeClock(Time time) {
        long now = time.milliseconds();
        try {
            Hooks.ISR_CHANGE_MS.get()[0] = now;
        } catch (Throwable t) {
            Hooks.error(t);
        }
        return now;
    }

    // ---- isr-change-propagation: ZkAlterPartitionManager#maybePropagateIsrChanges > KafkaZkClient#propagate... --

    private static final ThreadLocal<long[]> PROPAGATION_NOW =
        ThreadLocal.withInitial(() -> new long[] {Event.UNKNOWN});
    private static final ThreadLocal<List<Event.TopicPartitionRef>> PROPAGATED = new ThreadLocal<>();

    /** Replaces {@code time.milliseconds()} inside maybePropagateIsrChanges: the run's {@code now}. */
    public static long propagationClock(Time time) {
        Recorder r = Hooks.recorder;
        boolean first = PROPAGATION_NOW.get()[0] == Event.UNKNOWN;
        if (r != null && first) {
            r.beginSpan(Recorder.Span.PROPAGATION); // before Kafka's read: the span starts at or before its now
        }
        long now = time.milliseconds();
        try {
            PROPAGATION_NOW.get()[0] = now;
        } catch (Throwable t) {
            Hooks.error(t);
        }
        return now;
    }

    /** KafkaZkClient#propagateIsrChanges returned: the znode was written with these partitions. */
    public static void propagated(scala.collection.Set<TopicPartition> partitions) {
        if (Hooks.recorder == null) {
            return;
        }
        try {
            List<Event.TopicPartitionRef> list = new ArrayList<>(partitions.size());
            scala.collection.Iterator<TopicPartition> it = partitions.iterator();
            while (it.hasNext()) {
                TopicPartition tp = it.next();
                if (!Hooks.excluded(tp.topic())) {
                    list.add(new Event.TopicPartitionRef(tp.topic(), tp.partition()));
                }
            }
            Collections.sort(list);
            PROPAGATED.set(list);
        } catch (Throwable t) {
            Hooks.error(t);
        }
    }

    /**
     * maybePropagateIsrChanges exit (also on exceptions): the tick at Kafka's {@code now}, then the batch. Runs before
     * the broker's start (its id unknown) are not reported: nothing is pending then.
     */
    public static void propagationEnd(long lastIsrChangeMs, long lastIsrPropagationMs) {
        Recorder r = Hooks.recorder;
        try {
            long[] now = PROPAGATION_NOW.get();
            long ts = now[0] != Event.UNKNOWN ? now[0] : System.currentTimeMillis();
            List<Event.TopicPartitionRef> list = PROPAGATED.get();
            boolean open = now[0] != Event.UNKNOWN;
            now[0] = Event.UNKNOWN;
            PROPAGATED.remove();
            if (r == null) {
                return;
            }
            if (Hooks.brokerId() >= 0) {
                r.other(new Event.Tick(ts, Event.Tick.ISR_CHANGE_PROPAGATION, Hooks.kafkaVersion, lastIsrChangeMs,
                    lastIsrPropagationMs));
                if (list != null && !list.isEmpty()) {
                    r.other(new Event.IsrChangePropagated(ts, list));
                }
            }
            if (open) {
                r.endSpan(Recorder.Span.PROPAGATION);
            }
        } catch (Throwable t) {
            Hooks.error(t);
        }
    }

    // ---- helpers --------------------------------------------------------------------------------------------------

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
