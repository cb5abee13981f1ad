package io.isrwatch.agent;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import kafka.cluster.Partition;
import kafka.server.ReplicaManager;
import net.bytebuddy.asm.Advice;
import org.apache.kafka.common.requests.FetchRequest;
import org.apache.kafka.storage.internals.log.LogOffsetMetadata;

/**
 * ByteBuddy advice, inlined into Kafka's methods, for every supported line (3.9, 4.0-4.4). Each only forwards values
 * to {@link Hooks}; {@code suppress = Throwable.class} keeps any exception of the agent out of Kafka's code. Types that
 * moved between releases (Replica, UnifiedLog, LeaderAndIsr, the ISR states, the makeLeader state) are taken as
 * {@code Object}; only classes whose name and used members are the same in every line are typed (KafkaJarsTest checks
 * every such reference against each release's jars). A method whose entry opens a context on the thread (a fetch, a
 * makeLeader, an isr-expiration run...) closes it in the one {@link Exit} advice, which the installer binds to the
 * method's {@link Hooks.Exit} (Plan.Hook#exit).
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

    /** Partition#fetchRecords entry: remembers the request's current leader epoch for the state update below. */
    static final class FetchRecords {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.This Partition partition, @Advice.Argument(1) FetchRequest.PartitionData data,
                          @Advice.Argument(5) boolean updateFetchState) {
            if (updateFetchState) {
                Hooks.fetchBegin(partition, data);
            }
        }
    }

    /** Replica#updateFetchStateOrThrow (Scala up to 4.0, Java from 4.1): reported only when it returns. */
    static final class UpdateFetchState {
        @Advice.OnMethodExit(suppress = Throwable.class)
        static void exit(@Advice.FieldValue("brokerId") int replicaId,
                         @Advice.Argument(0) LogOffsetMetadata followerFetchOffset,
                         @Advice.Argument(1) long followerStartOffset, @Advice.Argument(2) long followerFetchTimeMs,
                         @Advice.Argument(3) long leaderEndOffset, @Advice.Argument(4) long brokerEpoch) {
            Hooks.fetched(replicaId, followerFetchOffset.messageOffset, followerStartOffset, followerFetchTimeMs,
                leaderEndOffset, brokerEpoch);
        }
    }

    /** Partition#makeLeader entry: its first argument is the new state (LeaderAndIsr state or PartitionRegistration). */
    static final class MakeLeader {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.This Partition partition, @Advice.Argument(0) Object state) {
            Hooks.makeLeaderBegin(partition, state);
        }
    }

    /** Partition#maybeIncrementLeaderHW: inside makeLeader, where the new state took effect. */
    static final class MaybeIncrementLeaderHw {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.This Partition partition, @Advice.Argument(0) Object leaderLog,
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

    /** ReplicaManager#maybeShrinkIsr entry: one isr-expiration run begins. */
    static final class ShrinkRun {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter() {
            Hooks.expirationBegin();
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
        static void exit(@Advice.This Partition partition, @Advice.Return Object pending) {
            Hooks.shrinkPrepared(partition, pending);
        }
    }

    /** Partition#handleAlterPartitionUpdate. */
    static final class HandleAlterPartitionUpdate {
        @Advice.OnMethodExit(suppress = Throwable.class)
        static void exit(@Advice.This Partition partition, @Advice.Argument(0) Object proposed,
                         @Advice.Argument(1) Object result) {
            Hooks.isrUpdated(partition, proposed, result);
        }
    }

    /** DefaultAlterPartitionManager#buildRequest: the request sendRequest hands to the controller channel. */
    static final class AlterPartitionBuilt {
        @Advice.OnMethodExit(suppress = Throwable.class)
        static void exit(@Advice.Argument(1) long brokerEpoch, @Advice.Return Object built) {
            Hooks.alterPartitionBuilt(built, brokerEpoch);
        }
    }

    /**
     * handleAlterPartitionResponse, at entry: 3.9 (RequestHeader, AlterPartitionResponse, long, Seq, Map), 4.x
     * (AlterPartitionResponse, long, Seq or List).
     */
    static final class AlterPartitionResponse {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.AllArguments Object[] args) {
            Hooks.alterPartitionResponse(args);
        }
    }

    /** ReplicaManager#applyDelta entry (KRaft): the new image, for the partition registration makeLeader applies. */
    static final class ApplyDelta {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.Argument(1) Object newImage) {
            Hooks.applyDeltaBegin(newImage);
        }
    }

    /** BrokerMetadataPublisher#onMetadataUpdate (KRaft): broker registrations the delta changes. */
    static final class MetadataUpdate {
        @Advice.OnMethodEnter(suppress = Throwable.class)
        static void enter(@Advice.Argument(0) Object delta, @Advice.Argument(1) Object newImage) {
            Hooks.metadataUpdating(delta, newImage);
        }
    }

    /** The {@link Hooks.Exit} a hook's method binds to {@link Exit} (the installer's custom mapping). */
    @Retention(RetentionPolicy.RUNTIME)
    @Target(ElementType.PARAMETER)
    @interface Exited {
    }

    /**
     * The exit (also on exceptions) of every method that has a {@link Hooks.Exit}: ReplicaManager#shutdown, and the
     * methods above whose entry opened a context on the thread.
     */
    static final class Exit {
        @Advice.OnMethodExit(suppress = Throwable.class, onThrowable = Throwable.class)
        static void exit(@Exited Hooks.Exit method) {
            Hooks.exited(method);
        }
    }
}
