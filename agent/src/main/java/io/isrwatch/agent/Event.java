package io.isrwatch.agent;

import java.util.List;
import java.util.Locale;

/**
 * One observation of the broker, as captured on a Kafka thread. Plain values only (no Kafka objects), so events can
 * be queued, coalesced and encoded off the broker's threads, and built in unit tests without a broker.
 * The per-stream {@code seq}, the {@code cluster} and the emitting {@code broker} are added when encoding.
 */
public sealed interface Event {

    /** Absent optional int (epochs, ids). */
    int NONE = -1;
    /** Absent optional long (offsets, times). */
    long UNKNOWN = Long.MIN_VALUE;

    /** SPEC §3's type of each event: its record's name in snake case (LeaderAndIsr: leader_and_isr). */
    ClassValue<String> TYPES = new ClassValue<>() {
        @Override
        protected String computeValue(Class<?> record) {
            return record.getSimpleName().replaceAll("([a-z])([A-Z])", "$1_$2").toLowerCase(Locale.ROOT);
        }
    };

    /** The event's type, computed once per record class (no allocation per event). */
    default String type() {
        return TYPES.get(getClass());
    }

    /** Epoch ms on the broker's clock, taken where Kafka takes it. */
    long ts();

    /**
     * Where the model sorts this event among the others (with seq): its ts, but an isr-expiration tick at the end of
     * its run, after every fetch captured during it (SPEC §4.7).
     */
    default long sortTs() {
        return ts();
    }

    /** Writes the type-specific fields (after the common ones, a partition event's topic and partition among them). */
    void writeFields(Json.Writer w);

    /** An event about one partition: its topic and partition follow the common fields. */
    sealed interface PartitionEvent extends Event {
        String topic();

        int partition();
    }

    /**
     * The leader recorded a follower fetch: Replica.updateFetchStateOrThrow returned, at {@code ts}. {@code fetchMs}
     * is Kafka's fetchTimeMs, the clock it read before the log read and gives the follower's lastFetchTimeMs and
     * lastCaughtUpTimeMs; the fetch took effect at {@code ts}, which orders it among the leader's other events (a
     * makeLeader or an isr-expiration check that took the partition's lock between the two came before it).
     * {@code brokerEpoch} is the follower's broker epoch the fetch carried (-1: none, as in ZooKeeper mode and FETCH
     * before v15).
     */
    record Fetch(long ts, String topic, int partition, int replica, long fetchOffset, long leaderLeo,
                 long logStartOffset, int currentLeaderEpoch, boolean inIsr, long brokerEpoch, long fetchMs)
        implements PartitionEvent {
        public Fetch(long ts, String topic, int partition, int replica, long fetchOffset, long leaderLeo,
                     long logStartOffset, int currentLeaderEpoch, boolean inIsr, long brokerEpoch) {
            this(ts, topic, partition, replica, fetchOffset, leaderLeo, logStartOffset, currentLeaderEpoch, inIsr,
                brokerEpoch, ts);
        }

        public Fetch(long ts, String topic, int partition, int replica, long fetchOffset, long leaderLeo,
                     long logStartOffset, int currentLeaderEpoch, boolean inIsr) {
            this(ts, topic, partition, replica, fetchOffset, leaderLeo, logStartOffset, currentLeaderEpoch, inIsr, -1);
        }

        @Override
        public void writeFields(Json.Writer w) {
            w.field("replica", replica).field("fetch_offset", fetchOffset).field("leader_leo", leaderLeo)
                .field("log_start_offset", logStartOffset)
                .fieldIf(currentLeaderEpoch >= 0, "current_leader_epoch", currentLeaderEpoch)
                .fieldIf(brokerEpoch >= 0, "broker_epoch", brokerEpoch)
                .fieldIf(fetchMs != ts, "fetch_ms", fetchMs);
        }
    }

    /**
     * A partition state took effect on its leader (Partition.makeLeader: a ZooKeeper controller's LeaderAndIsr
     * request, or in KRaft the metadata delta the broker applies), or an offline state reached makeFollowers.
     * The KRaft-only {@code elr}, {@code lastKnownElr} (null: not known) and {@code leaderRecoveryState} (null: not
     * known) are omitted when absent.
     */
    record LeaderAndIsr(long ts, String topic, int partition, int controllerEpoch, int controllerId, int leader,
                        int leaderEpoch, int[] isr, int[] replicas, int partitionEpoch, long leaderLeo, long hw,
                        int minInsyncReplicas, Boolean newLeader, int[] elr, int[] lastKnownElr,
                        String leaderRecoveryState) implements PartitionEvent {
        public LeaderAndIsr(long ts, String topic, int partition, int controllerEpoch, int controllerId, int leader,
                            int leaderEpoch, int[] isr, int[] replicas, int partitionEpoch, long leaderLeo, long hw,
                            int minInsyncReplicas, Boolean newLeader) {
            this(ts, topic, partition, controllerEpoch, controllerId, leader, leaderEpoch, isr, replicas, partitionEpoch,
                leaderLeo, hw, minInsyncReplicas, newLeader, null, null, null);
        }

        @Override
        public void writeFields(Json.Writer w) {
            w.field("controller_epoch", controllerEpoch).fieldIf(controllerId >= 0, "controller_id", controllerId)
                .field("leader", leader).field("leader_epoch", leaderEpoch).field("isr", isr)
                .field("replicas", replicas).field("partition_epoch", partitionEpoch)
                .fieldIf(leaderLeo != UNKNOWN, "leader_leo", leaderLeo).fieldIf(hw != UNKNOWN, "hw", hw)
                .fieldIf(minInsyncReplicas > 0, "min_insync_replicas", minInsyncReplicas);
            if (newLeader != null) {
                w.field("new_leader", newLeader);
            }
            if (elr != null) {
                w.field("elr", elr);
            }
            if (lastKnownElr != null) {
                w.field("last_known_elr", lastKnownElr);
            }
            if (leaderRecoveryState != null) {
                w.field("leader_recovery_state", leaderRecoveryState);
            }
        }
    }

    /**
     * The leader's LEO as an isr-expiration check read it, when it moved since the partition's last event.
     * {@code ts} is the tick's time (so the model applies it before that tick); {@code checkMs} is the clock
     * the partition's check read.
     */
    record Append(long ts, String topic, int partition, long leaderLeo, long checkMs) implements PartitionEvent {
        /** The model checks the partition here, at the clock its check read (SPEC §4.7). */
        @Override
        public long sortTs() {
            return checkMs == UNKNOWN ? ts : checkMs;
        }

        @Override
        public void writeFields(Json.Writer w) {
            w.field("leader_leo", leaderLeo).field("check_ms", checkMs);
        }
    }

    /**
     * One run of the broker's {@code isr-expiration} or {@code isr-change-propagation} task. A propagation tick also
     * carries Kafka's lastIsrChangeMs and lastIsrPropagationMs after the run (both start at the broker's start, which
     * no event reports otherwise); an isr-expiration tick the time its run ended: Kafka checks each partition at its
     * own clock during the run, and fetches are applied meanwhile.
     */
    record Tick(long ts, String task, String kafkaVersion, long lastIsrChangeMs, long lastPropagationMs, long endMs,
                String isrProtocol) implements Event {
        public static final String ISR_EXPIRATION = "isr-expiration";
        public static final String ISR_CHANGE_PROPAGATION = "isr-change-propagation";

        /** How the broker changes an ISR: ZooKeeper writes (IBP below 2.7-IV2) or AlterPartition requests. */
        public static final String ZOOKEEPER = "zookeeper";
        public static final String ALTER_PARTITION = "alter_partition";

        public Tick(long ts, String task, String kafkaVersion) {
            this(ts, task, kafkaVersion, UNKNOWN, UNKNOWN, UNKNOWN, null);
        }

        /** A propagation run with the throttle after it. */
        public Tick(long ts, String task, String kafkaVersion, long lastIsrChangeMs, long lastPropagationMs) {
            this(ts, task, kafkaVersion, lastIsrChangeMs, lastPropagationMs, UNKNOWN, ZOOKEEPER);
        }

        /** An isr-expiration run that started at {@code ts} and ended at {@code endMs}. */
        public static Tick expiration(long ts, long endMs, String kafkaVersion) {
            return expiration(ts, endMs, kafkaVersion, null);
        }

        /** The same, with the broker's ISR protocol ({@link #ZOOKEEPER} or {@link #ALTER_PARTITION}; null: omitted). */
        public static Tick expiration(long ts, long endMs, String kafkaVersion, String isrProtocol) {
            return new Tick(ts, ISR_EXPIRATION, kafkaVersion, UNKNOWN, UNKNOWN, Math.max(ts, endMs), isrProtocol);
        }

        @Override
        public long sortTs() {
            return endMs == UNKNOWN ? ts : endMs;
        }

        @Override
        public void writeFields(Json.Writer w) {
            w.field("task", task).field("kafka_version", kafkaVersion)
                .fieldIf(lastIsrChangeMs != UNKNOWN, "last_isr_change_ms", lastIsrChangeMs)
                .fieldIf(lastPropagationMs != UNKNOWN, "last_propagation_ms", lastPropagationMs)
                .fieldIf(endMs != UNKNOWN, "end_ms", endMs);
            if (isrProtocol != null) {
                w.field("isr_protocol", isrProtocol);
            }
        }
    }

    /**
     * The broker's own stream time: every event emitted after this one (higher seq) has {@code ts >= this ts}. Only
     * the common fields; the {@link Recorder} emits it (see {@link StreamTime} for how W is chosen).
     */
    record Watermark(long ts) implements Event {
        @Override
        public void writeFields(Json.Writer w) {
        }
    }

    /** A replica Kafka judged out of sync when it shrank the ISR. */
    record OutOfSync(int replica, long leo, long lastCaughtUpMs, long lastFetchMs) {
    }

    /**
     * The leader's successful ISR write (ZooKeeper, IBP &lt; 2.7). {@code ts} is the time Kafka stamped as
     * {@code lastIsrChangeMs}; for a shrink, {@code checkMs}/{@code checkLeaderLeo} are the clock and LEO the
     * deciding check read.
     */
    record IsrUpdated(long ts, String topic, int partition, int leader, int[] isr, int[] isrBefore,
                      int partitionEpoch, String kind, List<OutOfSync> outOfSync, long checkMs,
                      long checkLeaderLeo) implements PartitionEvent {
        @Override
        public void writeFields(Json.Writer w) {
            w.field("leader", leader).field("isr", isr).field("isr_before", isrBefore)
                .field("partition_epoch", partitionEpoch).field("kind", kind);
            w.key("out_of_sync").beginArray();
            for (OutOfSync o : outOfSync) {
                w.beginObject().field("replica", o.replica()).field("leo", o.leo())
                    .field("last_caught_up_ms", o.lastCaughtUpMs()).field("last_fetch_ms", o.lastFetchMs())
                    .endObject();
            }
            w.endArray().fieldIf(checkMs != UNKNOWN, "check_ms", checkMs)
                .fieldIf(checkLeaderLeo != UNKNOWN, "check_leader_leo", checkLeaderLeo);
        }
    }

    /** A topic partition named in an ISR-change notification. */
    record TopicPartitionRef(String topic, int partition) implements Comparable<TopicPartitionRef> {
        @Override
        public int compareTo(TopicPartitionRef o) {
            int c = topic.compareTo(o.topic);
            return c != 0 ? c : Integer.compare(partition, o.partition);
        }
    }

    /** The broker wrote one {@code /isr_change_notification} znode with these (sorted) partitions. */
    record IsrChangePropagated(long ts, List<TopicPartitionRef> partitions) implements Event {
        @Override
        public void writeFields(Json.Writer w) {
            w.key("partitions").beginArray();
            for (TopicPartitionRef p : partitions) {
                w.beginObject().field("topic", p.topic()).field("partition", p.partition()).endObject();
            }
            w.endArray();
        }
    }

    /**
     * The leader handled the controller's answer for one partition of its AlterPartition request
     * (DefaultAlterPartitionManager.handleAlterPartitionResponse), before Partition applies or ignores it.
     * {@code error} is Kafka's {@code Errors} name, or null when the controller committed the change: then {@code isr},
     * {@code leaderEpoch} and {@code partitionEpoch} are the committed state. A whole-request error (the response's
     * top-level error code, e.g. STALE_BROKER_EPOCH) is reported for every partition the request carried, with
     * {@code topLevel} true: the manager keeps every item and resends them 50 ms later (AlterPartitionManager.scala
     * 3.9 L224-231, L375-379), whatever the error. {@code topicId} is null when unknown.
     */
    record AlterPartitionResponse(long ts, String topic, int partition, String topicId, String error, int[] isr,
                                  int leaderEpoch, int partitionEpoch, boolean topLevel) implements PartitionEvent {
        @Override
        public void writeFields(Json.Writer w) {
            if (topicId != null) {
                w.field("topic_id", topicId);
            }
            w.fieldOrNull("error", error);
            if (error == null) {
                w.field("isr", isr).field("leader_epoch", leaderEpoch).field("partition_epoch", partitionEpoch);
            } else {
                w.field("top_level", topLevel);
            }
        }
    }

    /** One partition's proposal in an AlterPartition request; {@code topic} is null when the broker did not know it. */
    record ProposedPartition(String topic, String topicId, int partition, int[] isr, long[] isrBrokerEpochs,
                             int leaderEpoch, int partitionEpoch, String leaderRecoveryState) {
    }

    /**
     * The broker built one AlterPartition request and handed it to its controller channel
     * (DefaultAlterPartitionManager.sendRequest: at most one in flight). {@code brokerEpoch} is the sender's.
     */
    record AlterPartitionSent(long ts, long brokerEpoch, List<ProposedPartition> partitions) implements Event {
        @Override
        public void writeFields(Json.Writer w) {
            w.field("broker_epoch", brokerEpoch);
            w.key("partitions").beginArray();
            for (ProposedPartition p : partitions) {
                w.beginObject();
                if (p.topic() != null) {
                    w.field("topic", p.topic());
                }
                if (p.topicId() != null) {
                    w.field("topic_id", p.topicId());
                }
                w.field("partition", p.partition()).field("isr", p.isr());
                if (p.isrBrokerEpochs() != null) {
                    w.field("isr_broker_epochs", p.isrBrokerEpochs());
                }
                w.field("leader_epoch", p.leaderEpoch()).field("partition_epoch", p.partitionEpoch());
                if (p.leaderRecoveryState() != null) {
                    w.field("leader_recovery_state", p.leaderRecoveryState());
                }
                w.endObject();
            }
            w.endArray();
        }
    }

    /**
     * What the broker's metadata image says about broker {@code id} after a metadata delta changed its registration
     * (KRaft: BrokerMetadataPublisher.onMetadataUpdate). {@code epoch} is the broker epoch of that registration.
     */
    record BrokerRegistration(long ts, int id, long epoch, boolean fenced, boolean inControlledShutdown)
        implements Event {
        @Override
        public void writeFields(Json.Writer w) {
            w.field("id", id).field("epoch", epoch).field("fenced", fenced)
                .field("in_controlled_shutdown", inControlledShutdown);
        }
    }
}
