package io.isrwatch.agent;

import java.util.concurrent.atomic.AtomicLong;
import kafka.api.LeaderAndIsr;
import kafka.cluster.Partition;
import kafka.cluster.PendingPartitionChange;
import kafka.cluster.PendingShrinkIsr;
import kafka.cluster.Replica;
import kafka.log.UnifiedLog;
import kafka.server.ReplicaManager;
import net.bytebuddy.asm.Advice;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.requests.FetchRequest;
import org.apache.kafka.common.requests.LeaderAndIsrRequest;
import org.apache.kafka.common.message.LeaderAndIsrRequestData.LeaderAndIsrPartitionState;
import org.apache.kafka.storage.internals.log.LogOffsetMetadata;

/**
 * ByteBuddy advice, inlined into Kafka's methods. Each only forwards values to {@link Hooks};
 * {@code suppress = Throwable.class} keeps any exception of the agent out of Kafka's code.
 */
final class Advices {

    private Advices() {
    }

    /** ReplicaManager#startup. */
    static final class Startup {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.This ReplicaManager rm) {
            Hooks.brokerStarting(rm);
        }
    }

    /** Partition#fetchRecords: remembers the request's current leader epoch for the state update below. */
    static final class FetchRecords {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.This Partition partition, @Advice.Argument(1) FetchRequest.PartitionData data,
                          @Advice.Argument(5) boolean updateFetchState) {
            if (updateFetchState) {
                Hooks.fetchBegin(partition, data);
            }
        }

        @Advice.OnMethodExit(suppress = Throwable.class, onThrowable = Throwable.class)
        static void exit() {
            Hooks.fetchEnd();
        }
    }

    /** Replica#updateFetchStateOrThrow: reported only when it returns (a fenced update throws). */
    static final class UpdateFetchState {
        @Advice.OnMethodExit(suppress = Throwable.class)
        static void exit(@Advice.This Replica replica, @Advice.Argument(0) LogOffsetMetadata followerFetchOffset,
                         @Advice.Argument(1) long followerStartOffset, @Advice.Argument(2) long followerFetchTimeMs,
                         @Advice.Argument(3) long leaderEndOffset) {
            Hooks.fetched(replica, followerFetchOffset.messageOffset, followerStartOffset, followerFetchTimeMs,
                leaderEndOffset);
        }
    }

    /** ReplicaManager#becomeLeaderOrFollower: the controller id of the request, and its offline states. */
    static final class BecomeLeaderOrFollower {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.This ReplicaManager rm, @Advice.Argument(1) LeaderAndIsrRequest request) {
            Hooks.leaderAndIsrRequestBegin(rm, request);
        }

        @Advice.OnMethodExit(suppress = Throwable.class, onThrowable = Throwable.class)
        static void exit() {
            Hooks.leaderAndIsrRequestEnd();
        }
    }

    /** Partition#makeLeader. */
    static final class MakeLeader {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.This Partition partition, @Advice.Argument(0) LeaderAndIsrPartitionState state) {
            Hooks.makeLeaderBegin(partition, state);
        }

        @Advice.OnMethodExit(suppress = Throwable.class, onThrowable = Throwable.class)
        static void exit() {
            Hooks.makeLeaderEnd();
        }
    }

    /** Partition#maybeIncrementLeaderHW: inside makeLeader, where the new state took effect. */
    static final class MaybeIncrementLeaderHw {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.This Partition partition, @Advice.Argument(0) UnifiedLog leaderLog,
                          @Advice.Argument(1) long currentTimeMs) {
            Hooks.highWatermarkCheck(partition, leaderLog, currentTimeMs);
        }
    }

    /** Partition#makeFollower and Partition#delete: the broker stops leading the partition. */
    static final class NotLeading {
        @Advice.OnMethodExit(suppress = Throwable.class)
        static void exit(@Advice.This Partition partition) {
            Hooks.notLeading(partition);
        }
    }

    /** ReplicaManager#maybeShrinkIsr: one isr-expiration run. */
    static final class ShrinkRun {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter() {
            Hooks.expirationBegin();
        }

        @Advice.OnMethodExit(suppress = Throwable.class, onThrowable = Throwable.class)
        static void exit() {
            Hooks.expirationEnd();
        }
    }

    /** Partition#isFollowerOutOfSync: the leader LEO and clock of a partition's check. */
    static final class OutOfSyncCheck {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.This Partition partition, @Advice.Argument(1) long leaderEndOffset,
                          @Advice.Argument(2) long currentTimeMs) {
            Hooks.outOfSyncCheck(partition, leaderEndOffset, currentTimeMs);
        }
    }

    /** Partition#prepareIsrShrink. */
    static final class PrepareIsrShrink {
        @Advice.OnMethodExit(suppress = Throwable.class)
        static void exit(@Advice.This Partition partition, @Advice.Return PendingShrinkIsr pending) {
            Hooks.shrinkPrepared(partition, pending);
        }
    }

    /** Partition#handleAlterPartitionUpdate. */
    static final class HandleAlterPartitionUpdate {
        @Advice.OnMethodExit(suppress = Throwable.class)
        static void exit(@Advice.This Partition partition, @Advice.Argument(0) PendingPartitionChange proposed,
                         @Advice.Argument(1) LeaderAndIsr result) {
            Hooks.isrUpdated(partition, proposed, result);
        }
    }

    /** ZkAlterPartitionManager#maybePropagateIsrChanges. */
    static final class PropagationRun {
        @Advice.OnMethodExit(suppress = Throwable.class, onThrowable = Throwable.class)
        static void exit(@Advice.FieldValue("lastIsrChangeMs") AtomicLong lastIsrChangeMs,
                         @Advice.FieldValue("lastIsrPropagationMs") AtomicLong lastIsrPropagationMs) {
            Hooks.propagationEnd(lastIsrChangeMs.get(), lastIsrPropagationMs.get());
        }
    }

    /** ReplicaManager#shutdown: the broker has stopped changing replica state. */
    static final class Shutdown {
        @Advice.OnMethodExit(suppress = Throwable.class, onThrowable = Throwable.class)
        static void exit() {
            Hooks.brokerStopped();
        }
    }

    /** KafkaZkClient#propagateIsrChanges. */
    static final class PropagateIsrChanges {
        @Advice.OnMethodExit(suppress = Throwable.class)
        static void exit(@Advice.Argument(0) scala.collection.Set<TopicPartition> partitions) {
            Hooks.propagated(partitions);
        }
    }
}
