package io.isrwatch.agent;

import java.util.List;

/**
 * Every method the agent instruments in Kafka 3.9 (line numbers: the 3.9.2 sources), with its exact JVM descriptor
 * and a class that must call it. The version gate checks each exists and is still called there (Kafka's Scala build
 * inlines some private methods into their callers, which leaves a dead copy behind) before anything is installed;
 * the installer matches on the same descriptors.
 */
final class Plan {

    private Plan() {
    }

    /** Advice on {@code type#method}, or (when {@code clock} is set) its {@code Time#milliseconds()} call replaced. */
    record Hook(String type, String method, String descriptor, Class<?> advice, String clock, String caller,
                String why) {
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
    static final String REPLICA = "kafka.cluster.Replica";
    static final String REPLICA_MANAGER = "kafka.server.ReplicaManager";
    static final String KAFKA_SERVER = "kafka.server.KafkaServer";
    static final String KAFKA_APIS = "kafka.server.KafkaApis";
    static final String ZK_ALTER_PARTITION_MANAGER = "kafka.server.ZkAlterPartitionManager";
    static final String KAFKA_ZK_CLIENT = "kafka.zk.KafkaZkClient";
    static final String TIME = "org.apache.kafka.common.utils.Time";

    private static final String LAI_STATE =
        "Lorg/apache/kafka/common/message/LeaderAndIsrRequestData$LeaderAndIsrPartitionState;";
    private static final String MAKE_LEADER_OR_FOLLOWER =
        "(" + LAI_STATE + "Lkafka/server/checkpoints/OffsetCheckpoints;Lscala/Option;Lscala/Option;)Z";

    private static Hook advice(String type, String method, String descriptor, Class<?> advice, String caller,
                               String why) {
        return new Hook(type, method, descriptor, advice, null, caller, why);
    }

    static final List<Hook> HOOKS = List.of(
        advice(REPLICA_MANAGER, "startup", "()V", Advices.Startup.class, KAFKA_SERVER,
            "ReplicaManager.scala L384-397: broker id, ZooKeeper mode and IBP check"),
        advice(REPLICA_MANAGER, "shutdown", "(Z)V", Advices.Shutdown.class, KAFKA_SERVER,
            "ReplicaManager.scala L2535: the broker stopped; flush and close the sinks"),
        advice(PARTITION, "fetchRecords",
            "(Lorg/apache/kafka/storage/internals/log/FetchParams;"
                + "Lorg/apache/kafka/common/requests/FetchRequest$PartitionData;JIZZ)"
                + "Lorg/apache/kafka/storage/internals/log/LogReadInfo;",
            Advices.FetchRecords.class, REPLICA_MANAGER,
            "Partition.scala L1426-1482: current_leader_epoch of the fetch"),
        advice(REPLICA, "updateFetchStateOrThrow", "(Lorg/apache/kafka/storage/internals/log/LogOffsetMetadata;JJJJ)V",
            Advices.UpdateFetchState.class, PARTITION, "Replica.scala L108-144: the follower fetch state update"),
        advice(REPLICA_MANAGER, "becomeLeaderOrFollower",
            "(ILorg/apache/kafka/common/requests/LeaderAndIsrRequest;Lscala/Function2;)"
                + "Lorg/apache/kafka/common/requests/LeaderAndIsrResponse;",
            Advices.BecomeLeaderOrFollower.class, KAFKA_APIS,
            "ReplicaManager.scala L1893-1990, L2285-2303: controller id; offline (leader -1) states"),
        advice(PARTITION, "makeLeader", MAKE_LEADER_OR_FOLLOWER, Advices.MakeLeader.class, REPLICA_MANAGER,
            "Partition.scala L714-822: become-leader"),
        advice(PARTITION, "maybeIncrementLeaderHW", "(Lkafka/log/UnifiedLog;J)Z", Advices.MaybeIncrementLeaderHw.class,
            PARTITION, "Partition.scala L814 (L1166): end of makeLeader's locked section, before the HW moves"),
        advice(PARTITION, "makeFollower", MAKE_LEADER_OR_FOLLOWER, Advices.NotLeading.class, REPLICA_MANAGER,
            "Partition.scala L831-888: no longer the leader"),
        advice(PARTITION, "delete", "()V", Advices.NotLeading.class, REPLICA_MANAGER,
            "Partition.scala L668: the replica is deleted"),
        advice(REPLICA_MANAGER, "maybeShrinkIsr", "()V", Advices.ShrinkRun.class, REPLICA_MANAGER,
            "ReplicaManager.scala L387, L2415-2421: one isr-expiration run"),
        advice(PARTITION, "isFollowerOutOfSync", "(IJJJ)Z", Advices.OutOfSyncCheck.class, PARTITION,
            "Partition.scala L1287-1319: the LEO and clock of a partition's check"),
        advice(PARTITION, "prepareIsrShrink",
            "(Lkafka/cluster/CommittedPartitionState;Lscala/collection/immutable/Set;)Lkafka/cluster/PendingShrinkIsr;",
            Advices.PrepareIsrShrink.class, PARTITION, "Partition.scala L1251-1271, L1800-1823: out-of-sync replicas"),
        advice(PARTITION, "handleAlterPartitionUpdate",
            "(Lkafka/cluster/PendingPartitionChange;Lkafka/api/LeaderAndIsr;)Z",
            Advices.HandleAlterPartitionUpdate.class, PARTITION, "Partition.scala L1961-1990: the committed ISR write"),
        new Hook(ZK_ALTER_PARTITION_MANAGER, "submit",
            "(Lorg/apache/kafka/common/TopicIdPartition;Lkafka/api/LeaderAndIsr;I)"
                + "Ljava/util/concurrent/CompletableFuture;",
            null, "isrChangeClock", PARTITION, "ZkAlterPartitionManager.scala L62-90 (L78): lastIsrChangeMs"),
        advice(ZK_ALTER_PARTITION_MANAGER, "maybePropagateIsrChanges", "()V", Advices.PropagationRun.class,
            ZK_ALTER_PARTITION_MANAGER, "ZkAlterPartitionManager.scala L99-110: one isr-change-propagation run"),
        new Hook(ZK_ALTER_PARTITION_MANAGER, "maybePropagateIsrChanges", "()V", null, "propagationClock",
            ZK_ALTER_PARTITION_MANAGER, "ZkAlterPartitionManager.scala L100: the run's now"),
        advice(KAFKA_ZK_CLIENT, "propagateIsrChanges", "(Lscala/collection/Set;)V", Advices.PropagateIsrChanges.class,
            ZK_ALTER_PARTITION_MANAGER, "KafkaZkClient.scala L1429-1433: the /isr_change_notification write"));

    static final List<Field> FIELDS = List.of(
        new Field(ZK_ALTER_PARTITION_MANAGER, "lastIsrChangeMs", "Ljava/util/concurrent/atomic/AtomicLong;"),
        new Field(ZK_ALTER_PARTITION_MANAGER, "lastIsrPropagationMs", "Ljava/util/concurrent/atomic/AtomicLong;"));
}
