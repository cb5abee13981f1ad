package io.isrwatch.agent;

import java.util.ArrayList;
import java.util.List;

/**
 * Every method the agent instruments, per Kafka release line and ISR mode, with its exact JVM descriptor and a class
 * that must call it. The version gate checks each exists and is still called there (Kafka's Scala build inlines some
 * private methods into their callers, which leaves a dead copy behind) before anything is installed; the installer
 * matches on the same descriptors. The descriptors were read from the released jars (javap) of 3.9.2, 4.0.2, 4.1.2,
 * 4.2.2, 4.3.1 and 4.4.0, and KafkaJarsTest checks them against those jars on every build. Source lines: 3.9 from
 * apache/kafka 3.9.0-rc3 (identical in these methods to 3.9.2); 4.4 from the 4.4 branch (confluentinc/kafka
 * 8d3916cf, the Apache 4.4 line; release tags of 4.x are not in the mirror, so 4.x lines are approximate, the
 * descriptors exact).
 */
final class Plan {

    private Plan() {
    }

    /** How the broker's ISR changes reach the controller. */
    enum Mode {
        /** Kafka 3.9, ZooKeeper mode, IBP below 2.7-IV2: the leader writes the ISR to ZooKeeper itself. */
        ZOOKEEPER(Event.Tick.ZOOKEEPER),
        /** Kafka 3.9, ZooKeeper mode, IBP 2.7-IV2 or later: AlterPartition to the ZooKeeper controller. */
        ZK_ALTER_PARTITION(Event.Tick.ALTER_PARTITION),
        /** KRaft (process.roles set): AlterPartition to the quorum controller, state from the metadata log. */
        KRAFT(Event.Tick.ALTER_PARTITION);

        final String isrProtocol;

        Mode(String isrProtocol) {
            this.isrProtocol = isrProtocol;
        }
    }

    /** The release lines the agent knows, each with the descriptors of its latest patch release checked. */
    enum Line {
        V3_9("3.9."), V4_0("4.0."), V4_1("4.1."), V4_2("4.2."), V4_3("4.3."), V4_4("4.4.");

        final String prefix;

        Line(String prefix) {
            this.prefix = prefix;
        }

        boolean atLeast(Line other) {
            return compareTo(other) >= 0;
        }

        /** The line of a Kafka version string, or null when the agent does not know it. */
        static Line of(String kafkaVersion) {
            if (kafkaVersion == null) {
                return null;
            }
            for (Line l : values()) {
                if (kafkaVersion.startsWith(l.prefix)) {
                    return l;
                }
            }
            return null;
        }
    }

    static final String KNOWN_VERSIONS = "3.9.x, 4.0.x-4.4.x";

    /**
     * Advice on {@code type#method} ({@code advice} at entry or exit, and {@link Advices.Exit} at its exit when
     * {@code exit} is set), or (when {@code clock} is set) its {@code Time#milliseconds()} call replaced.
     */
    record Hook(String type, String method, String descriptor, Class<?> advice, Hooks.Exit exit, String clock,
                String caller, String why) {
        String describe() {
            return type + "#" + method + descriptor;
        }
    }

    /** A private field some advice reads. */
    record Field(String type, String name, String descriptor) {
        String describe() {
            return type + "#" + name + ":" + descriptor;
        }
    }

    static final String PARTITION = "kafka.cluster.Partition";
    static final String REPLICA_MANAGER = "kafka.server.ReplicaManager";
    static final String KAFKA_SERVER = "kafka.server.KafkaServer";
    static final String BROKER_SERVER = "kafka.server.BrokerServer";
    static final String BROKER_METADATA_PUBLISHER = "kafka.server.metadata.BrokerMetadataPublisher";
    static final String METADATA_LOADER = "org.apache.kafka.image.loader.MetadataLoader";
    static final String KAFKA_APIS = "kafka.server.KafkaApis";
    static final String ZK_ALTER_PARTITION_MANAGER = "kafka.server.ZkAlterPartitionManager";
    static final String KAFKA_ZK_CLIENT = "kafka.zk.KafkaZkClient";
    static final String TIME = "org.apache.kafka.common.utils.Time";

    /** The Replica class: Scala kafka.cluster.Replica up to 4.0, Java in kafka-server from 4.1. */
    static String replica(Line l) {
        return l.atLeast(Line.V4_1) ? "org.apache.kafka.server.replica.Replica" : "kafka.cluster.Replica";
    }

    /** DefaultAlterPartitionManager: Scala in kafka.server up to 4.3, Java in kafka-server from 4.4. */
    static String alterPartitionManager(Line l) {
        return l.atLeast(Line.V4_4) ? "org.apache.kafka.server.partition.DefaultAlterPartitionManager"
            : "kafka.server.DefaultAlterPartitionManager";
    }

    /** The anonymous completion handler that calls handleAlterPartitionResponse. */
    static String alterPartitionHandler(Line l) {
        return alterPartitionManager(l) + (l.atLeast(Line.V4_4) ? "$1" : "$$anon$1");
    }

    private static String fetchParams(Line l) {
        return l.atLeast(Line.V4_0) ? "Lorg/apache/kafka/server/storage/log/FetchParams;"
            : "Lorg/apache/kafka/storage/internals/log/FetchParams;";
    }

    private static String unifiedLog(Line l) {
        return l.atLeast(Line.V4_1) ? "Lorg/apache/kafka/storage/internals/log/UnifiedLog;" : "Lkafka/log/UnifiedLog;";
    }

    /** The package of the ISR state classes (PendingShrinkIsr...): Scala kafka.cluster up to 4.1, Java from 4.2. */
    private static String isrStates(Line l) {
        return l.atLeast(Line.V4_2) ? "org/apache/kafka/server/partition/" : "kafka/cluster/";
    }

    private static String leaderAndIsr(Line l) {
        return l.atLeast(Line.V4_0) ? "Lorg/apache/kafka/metadata/LeaderAndIsr;" : "Lkafka/api/LeaderAndIsr;";
    }

    /** Partition#makeLeader and #makeFollower: same arguments, per line. */
    static String makeLeaderOrFollower(Line l) {
        if (l.atLeast(Line.V4_2)) {
            return "(Lorg/apache/kafka/metadata/PartitionRegistration;Z"
                + "Lorg/apache/kafka/storage/internals/checkpoint/OffsetCheckpoints;Lscala/Option;Lscala/Option;)Z";
        }
        if (l.atLeast(Line.V4_0)) {
            return "(Lorg/apache/kafka/common/requests/LeaderAndIsrRequest$PartitionState;"
                + "Lorg/apache/kafka/storage/internals/checkpoint/OffsetCheckpoints;Lscala/Option;Lscala/Option;)Z";
        }
        return "(Lorg/apache/kafka/common/message/LeaderAndIsrRequestData$LeaderAndIsrPartitionState;"
            + "Lkafka/server/checkpoints/OffsetCheckpoints;Lscala/Option;Lscala/Option;)Z";
    }

    private static Hook advice(String type, String method, String descriptor, Class<?> advice, String caller,
                               String why) {
        return new Hook(type, method, descriptor, advice, null, null, caller, why);
    }

    /** Advice on the entry of {@code type#method} that opens a context on the thread, closed at its {@code exit}. */
    private static Hook bracket(String type, String method, String descriptor, Class<?> enter, Hooks.Exit exit,
                                String caller, String why) {
        return new Hook(type, method, descriptor, enter, exit, null, caller, why);
    }

    /** The hooks for a Kafka line in a mode; ZooKeeper modes exist on 3.9 only (the gate refuses them on 4.x). */
    static List<Hook> hooks(Line l, Mode mode) {
        boolean kraft = mode == Mode.KRAFT;
        String states = isrStates(l);
        List<Hook> h = new ArrayList<>();
        h.add(advice(REPLICA_MANAGER, "startup", "()V", Advices.Startup.class,
            kraft ? BROKER_METADATA_PUBLISHER : KAFKA_SERVER,
            "ReplicaManager.scala startup (3.9 L384-397, 4.4 L282): broker id; called by KafkaServer (ZooKeeper) or "
                + "BrokerMetadataPublisher.initializeManagers (KRaft; 3.9 L297, 4.4 L353)"));
        h.add(new Hook(REPLICA_MANAGER, "shutdown", "(Z)V", null, Hooks.Exit.SHUTDOWN, null,
            kraft ? BROKER_SERVER : KAFKA_SERVER,
            "ReplicaManager.scala shutdown (3.9 L2535, 4.4 L2213): the broker stopped; flush and close the sinks"));
        h.add(bracket(PARTITION, "fetchRecords",
            "(" + fetchParams(l) + "Lorg/apache/kafka/common/requests/FetchRequest$PartitionData;JIZZ)"
                + "Lorg/apache/kafka/storage/internals/log/LogReadInfo;",
            Advices.FetchRecords.class, Hooks.Exit.FETCH_RECORDS, REPLICA_MANAGER,
            "Partition.scala fetchRecords (3.9 L1426-1482, 4.4 L1278): current_leader_epoch of the fetch"));
        h.add(advice(replica(l), "updateFetchStateOrThrow", "(Lorg/apache/kafka/storage/internals/log/LogOffsetMetadata;JJJJ)V",
            Advices.UpdateFetchState.class, PARTITION,
            "Replica.scala L108-144 (3.9) / Replica.java L69 (4.4): the follower fetch state update; 5th argument "
                + "the follower's broker epoch"));
        h.add(bracket(PARTITION, "makeLeader", makeLeaderOrFollower(l), Advices.MakeLeader.class,
            Hooks.Exit.MAKE_LEADER, REPLICA_MANAGER,
            "Partition.scala makeLeader (3.9 L714-822, 4.4 L588-686): become-leader, from LeaderAndIsr (ZooKeeper) "
                + "or ReplicaManager.applyLocalLeadersDelta (KRaft)"));
        h.add(advice(PARTITION, "maybeIncrementLeaderHW", "(" + unifiedLog(l) + "J)Z",
            Advices.MaybeIncrementLeaderHw.class, PARTITION,
            "Partition.scala (3.9 L814, 4.4 L678; def 4.4 L1010): end of makeLeader's locked section, before the HW moves"));
        h.add(advice(PARTITION, "makeFollower", makeLeaderOrFollower(l), Advices.NotLeading.class, REPLICA_MANAGER,
            "Partition.scala makeFollower (3.9 L831-888, 4.4 L694): no longer the leader"));
        h.add(advice(PARTITION, "delete", "()V", Advices.NotLeading.class, REPLICA_MANAGER,
            "Partition.scala delete (3.9 L668, 4.4 L533): the replica is deleted"));
        h.add(bracket(REPLICA_MANAGER, "maybeShrinkIsr", "()V", Advices.ShrinkRun.class, Hooks.Exit.MAYBE_SHRINK_ISR,
            REPLICA_MANAGER,
            "ReplicaManager.scala (3.9 L387, L2415-2421; 4.4 L2100): one isr-expiration run"));
        h.add(advice(PARTITION, "isFollowerOutOfSync", "(IJJJ)Z", Advices.OutOfSyncCheck.class, PARTITION,
            "Partition.scala (3.9 L1287-1319, 4.4 L1133): the LEO and clock of a partition's check"));
        h.add(advice(PARTITION, "prepareIsrShrink",
            "(L" + states + "CommittedPartitionState;Lscala/collection/immutable/Set;)L" + states + "PendingShrinkIsr;",
            Advices.PrepareIsrShrink.class, PARTITION,
            "Partition.scala prepareIsrShrink (3.9 L1800-1823, 4.4 L1636): out-of-sync replicas"));
        h.add(advice(PARTITION, "handleAlterPartitionUpdate",
            "(L" + states + "PendingPartitionChange;" + leaderAndIsr(l) + ")Z",
            Advices.HandleAlterPartitionUpdate.class, PARTITION,
            "Partition.scala handleAlterPartitionUpdate (3.9 L1961-1990, 4.4 L1794): the committed ISR (response path)"));
        if (mode != Mode.KRAFT) {  // ZooKeeper mode, either IBP: the controller's LeaderAndIsr requests
            h.add(bracket(REPLICA_MANAGER, "becomeLeaderOrFollower",
                "(ILorg/apache/kafka/common/requests/LeaderAndIsrRequest;Lscala/Function2;)"
                    + "Lorg/apache/kafka/common/requests/LeaderAndIsrResponse;",
                ZkAdvices.BecomeLeaderOrFollower.class, Hooks.Exit.BECOME_LEADER_OR_FOLLOWER, KAFKA_APIS,
                "ReplicaManager.scala L1893-1990, L2285-2303: controller id; offline (leader -1) states"));
        }
        if (mode == Mode.ZOOKEEPER) {
            h.add(new Hook(ZK_ALTER_PARTITION_MANAGER, "submit",
                "(Lorg/apache/kafka/common/TopicIdPartition;Lkafka/api/LeaderAndIsr;I)"
                    + "Ljava/util/concurrent/CompletableFuture;",
                null, null, "isrChangeClock", PARTITION,
                "ZkAlterPartitionManager.scala L62-90 (L78): lastIsrChangeMs"));
            h.add(advice(ZK_ALTER_PARTITION_MANAGER, "maybePropagateIsrChanges", "()V", ZkAdvices.PropagationRun.class,
                ZK_ALTER_PARTITION_MANAGER, "ZkAlterPartitionManager.scala L99-110: one isr-change-propagation run"));
            h.add(new Hook(ZK_ALTER_PARTITION_MANAGER, "maybePropagateIsrChanges", "()V", null, null,
                "propagationClock", ZK_ALTER_PARTITION_MANAGER, "ZkAlterPartitionManager.scala L100: the run's now"));
            h.add(advice(KAFKA_ZK_CLIENT, "propagateIsrChanges", "(Lscala/collection/Set;)V",
                ZkAdvices.PropagateIsrChanges.class, ZK_ALTER_PARTITION_MANAGER,
                "KafkaZkClient.scala L1429-1433: the /isr_change_notification write"));
            return h;
        }
        // AlterPartition (3.9 with IBP >= 2.7-IV2, and KRaft on every line).
        String manager = alterPartitionManager(l);
        String items = l.atLeast(Line.V4_4) ? "Ljava/util/List;" : "Lscala/collection/immutable/Seq;";
        h.add(advice(manager, "buildRequest",
            "(" + items + "J)" + (l.atLeast(Line.V4_0) ? "Lorg/apache/kafka/common/requests/AlterPartitionRequest$Builder;"
                : "Lscala/Tuple2;"),
            Advices.AlterPartitionBuilt.class, manager,
            "AlterPartitionManager.scala sendRequest L188-190 > buildRequest L253 (3.9); DefaultAlterPartitionManager.java "
                + "sendRequest L133-135 > buildRequest L194 (4.4): the request handed to the controller channel"));
        if (l.atLeast(Line.V4_4)) {
            h.add(advice(manager, "handleAlterPartitionResponse",
                "(Lorg/apache/kafka/common/requests/AlterPartitionResponse;JLjava/util/List;)"
                    + "Lorg/apache/kafka/common/protocol/Errors;",
                Advices.AlterPartitionResponse.class, alterPartitionHandler(l),
                "DefaultAlterPartitionManager.java handleAlterPartitionResponse L225 (4.4, private; called L157)"));
        } else if (l.atLeast(Line.V4_0)) {
            h.add(advice(manager, "kafka$server$DefaultAlterPartitionManager$$handleAlterPartitionResponse",
                "(Lorg/apache/kafka/common/requests/AlterPartitionResponse;JLscala/collection/immutable/Seq;)"
                    + "Lorg/apache/kafka/common/protocol/Errors;",
                Advices.AlterPartitionResponse.class, alterPartitionHandler(l),
                "AlterPartitionManager.scala handleAlterPartitionResponse (4.0-4.3, name-mangled private)"));
        } else {
            h.add(advice(manager, "kafka$server$DefaultAlterPartitionManager$$handleAlterPartitionResponse",
                "(Lorg/apache/kafka/common/requests/RequestHeader;Lorg/apache/kafka/common/requests/AlterPartitionResponse;"
                    + "JLscala/collection/immutable/Seq;Lscala/collection/mutable/Map;)"
                    + "Lorg/apache/kafka/common/protocol/Errors;",
                Advices.AlterPartitionResponse.class, alterPartitionHandler(l),
                "AlterPartitionManager.scala handleAlterPartitionResponse L302 (3.9, name-mangled private)"));
        }
        if (kraft) {
            h.add(bracket(REPLICA_MANAGER, "applyDelta",
                "(Lorg/apache/kafka/image/TopicsDelta;Lorg/apache/kafka/image/MetadataImage;)V",
                Advices.ApplyDelta.class, Hooks.Exit.APPLY_DELTA, BROKER_METADATA_PUBLISHER,
                "ReplicaManager.scala applyDelta (3.9 L2720, 4.4 L2360): the image the leaders' makeLeader applies"));
            h.add(advice(BROKER_METADATA_PUBLISHER, "onMetadataUpdate",
                "(Lorg/apache/kafka/image/MetadataDelta;Lorg/apache/kafka/image/MetadataImage;"
                    + "Lorg/apache/kafka/image/loader/LoaderManifest;)V",
                Advices.MetadataUpdate.class, METADATA_LOADER,
                "BrokerMetadataPublisher.scala onMetadataUpdate (3.9 L98, 4.4 L112) entry: broker registrations of each delta, "
                    + "as its first statement publishes them to the metadata cache (3.9 L116, 4.4 L130)"));
        }
        return h;
    }

    /** Fields the ZooKeeper-mode advice reads. */
    static List<Field> fields(Mode mode) {
        if (mode != Mode.ZOOKEEPER) {
            return List.of();
        }
        return List.of(
            new Field(ZK_ALTER_PARTITION_MANAGER, "lastIsrChangeMs", "Ljava/util/concurrent/atomic/AtomicLong;"),
            new Field(ZK_ALTER_PARTITION_MANAGER, "lastIsrPropagationMs", "Ljava/util/concurrent/atomic/AtomicLong;"));
    }
}
