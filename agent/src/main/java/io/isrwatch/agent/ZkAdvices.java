package io.isrwatch.agent;

import java.util.concurrent.atomic.AtomicLong;
import kafka.server.ReplicaManager;
import net.bytebuddy.asm.Advice;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.requests.LeaderAndIsrRequest;

/** Advice for Kafka 3.9's ZooKeeper mode only (typed against 3.9 classes that 4.x removed); see {@link ZkHooks}. */
final class ZkAdvices {

    private ZkAdvices() {
    }

    /**
     * ReplicaManager#becomeLeaderOrFollower entry (its exit: {@link Advices.Exit}): the controller id of the request,
     * and its offline states.
     */
    static final class BecomeLeaderOrFollower {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.This ReplicaManager rm, @Advice.Argument(1) LeaderAndIsrRequest request) {
            ZkHooks.leaderAndIsrRequestBegin(rm, request);
        }
    }

    /** ZkAlterPartitionManager#maybePropagateIsrChanges. */
    static final class PropagationRun {
        @Advice.OnMethodExit(suppress = Throwable.class, onThrowable = Throwable.class)
        static void exit(@Advice.FieldValue("lastIsrChangeMs") AtomicLong lastIsrChangeMs,
                         @Advice.FieldValue("lastIsrPropagationMs") AtomicLong lastIsrPropagationMs) {
            ZkHooks.propagationEnd(lastIsrChangeMs.get(), lastIsrPropagationMs.get());
        }
    }

    /** KafkaZkClient#propagateIsrChanges. */
    static final class PropagateIsrChanges {
        @Advice.OnMethodExit(suppress = Throwable.class)
        static void exit(@Advice.Argument(0) scala.collection.Set<TopicPartition> partitions) {
            ZkHooks.propagated(partitions);
        }
    }
}
