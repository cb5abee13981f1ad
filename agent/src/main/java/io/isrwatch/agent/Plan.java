package io.isrwatch.agent;

import java.util.List;

/**
 * Every method the agent instruments in Kafka 3.9 (line numbers: the 3.9.2 sources), with its exact JVM descriptor.
 * The version gate checks each exists before anything is installed; the installer matches on the same descriptors.
 */
final class Plan {

    private Plan() {
    }

    /** A private field some advice reads. */
    record Field(String type, String name, String descriptor) {
        String describe() {
            return type + "#" + name + ":" + descriptor;
        }
    }

    /** Advice on {@code type#method}, or (when {@code clock} is set) its {@code Time#milliseconds()} call replaced. */
    record Hook(String type, String method, String descriptor, Class<?> advice, String clock, String why) {
        String describe() {
            return type + "#" + method + descriptor;
        }
    }

    static final String PARTITION = "kafka.cluster.Partition";
    static final String REPLICA = "kafka.cluster.Replica";
    static final String REPLICA_MANAGER = "kafka.server.ReplicaManager";
    static final String ZK_ALTER_PARTITION_MANAGER = "kafka.server.ZkAlterPartitionManager";
    static final String KAFKA_ZK_CLIENT = "kafka.zk.KafkaZkClient";
    static final String TIME = "org.apache.kafka.common.utils.Time";

    private static final String LAI_STATE = "Lorg/apache/kafka/common/message/LeaderAndIsrRequestData$LeaderAndIsrPartitionState;";
    private static final String MAKE_LEADER_OR_FOLLOWER =
        "(" + LAI_STATE + "Lkafka/server/checkpoints/OffsetCheckpoints;Lscala/Option;Lscala/Option;)Z";

    static final List<Hook> HOOKS = List.of(
        new Hook(REPLICA_MANAGER, "startup", "()V", Advices.Startup.class, null,
            "ReplicaManager.scala L384-397: broker id, ZooKeeper mode and IBP check"),
        new Hook(REPLICA_MANAGER, "shutdown", "(Z)V", Advices.Shutdown.class, null,
            "ReplicaManager.scala L2535: the broker stopped; flush and close the sinks"),
        new Hook(PARTITION, "fetchRecords",
            "(Lorg/apache/kafka/storage/internals/log/FetchParams;Lorg/apache/kafka/common/requests/FetchRequest$PartitionData;"
                + "JIZZ)Lorg/apache/kafka/storage/internals/log/LogReadInfo;",
            Advices.FetchRecords.class, null, "Partition.scala L1426-1482: current_leader_epoch of the fetch"),
        new Hook(REPLICA, "updateFetchStateOrThrow", "(Lorg/apache/kafka/storage/internals/log/LogOffsetMetadata;JJJJ)V",
            Advices.UpdateFetchState.class, null, "Replica.scala L108-144: the follower fetch state update"),
        new Hook(REPLICA_MANAGER, "becomeLeaderOrFollower",
            "(ILorg/apache/kafka/common/requests/LeaderAndIsrRequest;Lscala/Function2;)"
                + "Lorg/apache/kafka/common/requests/LeaderAndIsrResponse;",
            Advices.BecomeLeaderOrFollower.class, null, "ReplicaManager.scala L1893-1898: controller id"),
        new Hook(PARTITION, "makeLeader", MAKE_LEADER_OR_FOLLOWER, Advices.MakeLeader.class, null,
            "Partition.scala L714-822: become-leader"),
        new Hook(PARTITION, "maybeIncrementLeaderHW", "(Lkafka/log/UnifiedLog;J)Z", Advices.MaybeIncrementLeaderHw.class,
            null, "Partition.scala L814 (L1166): end of makeLeader's locked section, before the HW moves"),
        new Hook(REPLICA_MANAGER, "makeFollowers",
            "(IILscala/collection/Map;ILscala/collection/mutable/Map;Lkafka/server/checkpoints/OffsetCheckpoints;"
                + "Lscala/Function1;)Lscala/collection/Set;",
            Advices.MakeFollowers.class, null, "ReplicaManager.scala L2264-2305: offline (leader -1) states"),
        new Hook(PARTITION, "makeFollower", MAKE_LEADER_OR_FOLLOWER, Advices.NotLeading.class, null,
            "Partition.scala L831-888: no longer the leader"),
        new Hook(PARTITION, "delete", "()V", Advices.NotLeading.class, null, "Partition.scala L668: the replica is deleted"),
        new Hook(REPLICA_MANAGER, "maybeShrinkIsr", "()V", Advices.ShrinkRun.class, null,
            "ReplicaManager.scala L387, L2415-2421: one isr-expiration run"),
        new Hook(PARTITION, "isFollowerOutOfSync", "(IJJJ)Z", Advices.OutOfSyncCheck.class, null,
            "Partition.scala L1287-1319: the LEO and clock of a partition's check"),
        new Hook(PARTITION, "prepareIsrShrink",
            "(Lkafka/cluster/CommittedPartitionState;Lscala/collection/immutable/Set;)Lkafka/cluster/PendingShrinkIsr;",
            Advices.PrepareIsrShrink.class, null, "Partition.scala L1251-1271, L1800-1823: out-of-sync replicas"),
        new Hook(PARTITION, "handleAlterPartitionUpdate", "(Lkafka/cluster/PendingPartitionChange;Lkafka/api/LeaderAndIsr;)Z",
            Advices.HandleAlterPartitionUpdate.class, null, "Partition.scala L1961-1990: the committed ISR write"),
        new Hook(ZK_ALTER_PARTITION_MANAGER, "submit",
            "(Lorg/apache/kafka/common/TopicIdPartition;Lkafka/api/LeaderAndIsr;I)Ljava/util/concurrent/CompletableFuture;",
            null, "isrChangeClock", "ZkAlterPartitionManager.scala L62-90 (L78): lastIsrChangeMs"),
        new Hook(ZK_ALTER_PARTITION_MANAGER, "maybePropagateIsrChanges", "()V", Advices.PropagationRun.class, null,
            "ZkAlterPartitionManager.scala L99-110: one isr-change-propagation run"),
        new Hook(ZK_ALTER_PARTITION_MANAGER, "maybePropagateIsrChanges", "()V", null, "propagationClock",
            "ZkAlterPartitionManager.scala L100: the run's now"),
        new Hook(KAFKA_ZK_CLIENT, "propagateIsrChanges", "(Lscala/collection/Set;)V", Advices.PropagateIsrChanges.class,
            null, "KafkaZkClient.scala L1429-1433: the /isr_change_notification write"));

    static final List<Field> FIELDS = List.of(
        new Field(ZK_ALTER_PARTITION_MANAGER, "lastIsrChangeMs", "Ljava/util/concurrent/atomic/AtomicLong;"),
        new Field(ZK_ALTER_PARTITION_MANAGER, "lastIsrPropagationMs", "Ljava/util/concurrent/atomic/AtomicLong;"));
}
