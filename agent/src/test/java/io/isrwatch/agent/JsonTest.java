package io.isrwatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import org.junit.jupiter.api.Test;

class JsonTest {

    private static String enc(Event e) {
        return Json.encode(e, 7, "prod-eu", 1);
    }

    @Test
    void fetch() {
        assertEquals("{\"type\":\"fetch\",\"ts\":1000,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,\"topic\":\"orders\","
                + "\"partition\":3,\"replica\":2,\"fetch_offset\":10,\"leader_leo\":12,\"log_start_offset\":0,"
                + "\"current_leader_epoch\":5}",
            enc(new Event.Fetch(1000, "orders", 3, 2, 10, 12, 0, 5, true)));
    }

    @Test
    void fetchAppliedAfterItsClockReadCarriesThatClock() {
        assertEquals("{\"type\":\"fetch\",\"ts\":1004,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,\"topic\":\"orders\","
                + "\"partition\":3,\"replica\":2,\"fetch_offset\":10,\"leader_leo\":12,\"log_start_offset\":0,"
                + "\"current_leader_epoch\":5,\"broker_epoch\":8,\"fetch_ms\":1000}",
            enc(new Event.Fetch(1004, "orders", 3, 2, 10, 12, 0, 5, true, 8, 1000)));
    }

    @Test
    void fetchWithoutLeaderEpochOmitsIt() {
        assertEquals("{\"type\":\"fetch\",\"ts\":1,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,\"topic\":\"t\","
                + "\"partition\":0,\"replica\":2,\"fetch_offset\":0,\"leader_leo\":0,\"log_start_offset\":-1}",
            enc(new Event.Fetch(1, "t", 0, 2, 0, 0, -1, -1, false)));
    }

    @Test
    void leaderAndIsr() {
        assertEquals("{\"type\":\"leader_and_isr\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,\"topic\":\"t\","
                + "\"partition\":0,\"controller_epoch\":2,\"controller_id\":3,\"leader\":1,\"leader_epoch\":4,"
                + "\"isr\":[1,2],\"replicas\":[2,1,3],\"partition_epoch\":9,\"leader_leo\":100,\"hw\":90,"
                + "\"min_insync_replicas\":2,\"new_leader\":true}",
            enc(new Event.LeaderAndIsr(5, "t", 0, 2, 3, 1, 4, new int[] {1, 2}, new int[] {2, 1, 3}, 9, 100, 90, 2,
                true)));
    }

    @Test
    void offlineLeaderAndIsrOmitsWhatNoLeaderKnows() {
        assertEquals("{\"type\":\"leader_and_isr\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,\"topic\":\"t\","
                + "\"partition\":0,\"controller_epoch\":2,\"leader\":-1,\"leader_epoch\":4,\"isr\":[3],"
                + "\"replicas\":[2,1,3],\"partition_epoch\":9}",
            enc(new Event.LeaderAndIsr(5, "t", 0, 2, -1, -1, 4, new int[] {3}, new int[] {2, 1, 3}, 9,
                Event.UNKNOWN, Event.UNKNOWN, 0, null)));
    }

    @Test
    void appendAndTicks() {
        assertEquals("{\"type\":\"append\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,\"topic\":\"t\","
            + "\"partition\":0,\"leader_leo\":42,\"check_ms\":8}", enc(new Event.Append(5, "t", 0, 42, 8)));
        assertEquals("{\"type\":\"tick\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,"
                + "\"task\":\"isr-expiration\",\"kafka_version\":\"3.9.2\"}",
            enc(new Event.Tick(5, Event.Tick.ISR_EXPIRATION, "3.9.2")));
        assertEquals("{\"type\":\"tick\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,"
                + "\"task\":\"isr-change-propagation\",\"kafka_version\":\"3.9.2\",\"last_isr_change_ms\":3,"
                + "\"last_propagation_ms\":5,\"isr_protocol\":\"zookeeper\"}",
            enc(new Event.Tick(5, Event.Tick.ISR_CHANGE_PROPAGATION, "3.9.2", 3, 5)));
    }

    @Test
    void watermarkHasOnlyTheCommonFields() {
        assertEquals("{\"type\":\"watermark\",\"ts\":1795473389721,\"cluster\":\"prod-eu\",\"broker\":1,"
            + "\"seq\":7}", enc(new Event.Watermark(1795473389721L)));
    }

    @Test
    void isrUpdated() {
        assertEquals("{\"type\":\"isr_updated\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,\"topic\":\"t\","
                + "\"partition\":0,\"leader\":1,\"isr\":[1],\"isr_before\":[1,2,3],\"partition_epoch\":4,"
                + "\"kind\":\"shrink\",\"out_of_sync\":[{\"replica\":2,\"leo\":10,\"last_caught_up_ms\":1,"
                + "\"last_fetch_ms\":2},{\"replica\":3,\"leo\":11,\"last_caught_up_ms\":3,\"last_fetch_ms\":4}],"
                + "\"check_ms\":4,\"check_leader_leo\":12}",
            enc(new Event.IsrUpdated(5, "t", 0, 1, new int[] {1}, new int[] {1, 2, 3}, 4, "shrink",
                List.of(new Event.OutOfSync(2, 10, 1, 2), new Event.OutOfSync(3, 11, 3, 4)), 4, 12)));
        assertEquals("{\"type\":\"isr_updated\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,\"topic\":\"t\","
                + "\"partition\":0,\"leader\":1,\"isr\":[1,2],\"isr_before\":[1],\"partition_epoch\":5,"
                + "\"kind\":\"expand\",\"out_of_sync\":[]}",
            enc(new Event.IsrUpdated(5, "t", 0, 1, new int[] {1, 2}, new int[] {1}, 5, "expand", List.of(),
                Event.UNKNOWN, Event.UNKNOWN)));
    }

    @Test
    void isrChangePropagated() {
        assertEquals("{\"type\":\"isr_change_propagated\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,"
                + "\"partitions\":[{\"topic\":\"a\",\"partition\":1},{\"topic\":\"b\",\"partition\":0}]}",
            enc(new Event.IsrChangePropagated(5, List.of(new Event.TopicPartitionRef("a", 1),
                new Event.TopicPartitionRef("b", 0)))));
        assertEquals("{\"type\":\"isr_change_propagated\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,"
            + "\"partitions\":[]}", enc(new Event.IsrChangePropagated(5, List.of())));
    }

    @Test
    void stringsAreEscaped() {
        String cluster = "q\"b\\s/\n\r\t\b\f\u0001\u001f\u007f\u2028é€😀";
        String json = Json.encode(new Event.Tick(1, "isr-expiration", "3.9.2"), 1, cluster, 0);
        assertEquals("{\"type\":\"tick\",\"ts\":1,\"cluster\":\"q\\\"b\\\\s/\\n\\r\\t\\b\\f\\u0001\\u001f\\u007f"
            + "\\u2028é€😀\",\"broker\":0,\"seq\":1,\"task\":\"isr-expiration\",\"kafka_version\":\"3.9.2\"}", json);
    }

    @Test
    void fetchWithBrokerEpoch() {
        assertEquals("{\"type\":\"fetch\",\"ts\":1000,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,\"topic\":\"orders\","
                + "\"partition\":3,\"replica\":2,\"fetch_offset\":10,\"leader_leo\":12,\"log_start_offset\":0,"
                + "\"current_leader_epoch\":5,\"broker_epoch\":11}",
            enc(new Event.Fetch(1000, "orders", 3, 2, 10, 12, 0, 5, true, 11)));
    }

    @Test
    void kraftLeaderAndIsrCarriesElrAndRecoveryState() {
        assertEquals("{\"type\":\"leader_and_isr\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,\"topic\":\"t\","
                + "\"partition\":0,\"controller_epoch\":-1,\"leader\":1,\"leader_epoch\":4,"
                + "\"isr\":[1],\"replicas\":[2,1,3],\"partition_epoch\":9,\"leader_leo\":100,\"hw\":90,"
                + "\"min_insync_replicas\":2,\"new_leader\":false,\"elr\":[2,3],\"last_known_elr\":[],"
                + "\"leader_recovery_state\":\"RECOVERED\"}",
            enc(new Event.LeaderAndIsr(5, "t", 0, -1, -1, 1, 4, new int[] {1}, new int[] {2, 1, 3}, 9, 100, 90, 2,
                false, new int[] {2, 3}, new int[] {}, "RECOVERED")));
    }

    @Test
    void alterPartitionResponse() {
        assertEquals("{\"type\":\"alter_partition_response\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,"
                + "\"topic\":\"orders\",\"partition\":1,\"topic_id\":\"ClAYvCKeSb2Vq2bCUlVMKw\",\"error\":null,"
                + "\"isr\":[1,2],\"leader_epoch\":0,\"partition_epoch\":1}",
            enc(new Event.AlterPartitionResponse(5, "orders", 1, "ClAYvCKeSb2Vq2bCUlVMKw", null, new int[] {1, 2}, 0,
                1, false)));
        assertEquals("{\"type\":\"alter_partition_response\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,"
                + "\"topic\":\"orders\",\"partition\":1,\"error\":\"OPERATION_NOT_ATTEMPTED\",\"top_level\":false}",
            enc(new Event.AlterPartitionResponse(5, "orders", 1, null, "OPERATION_NOT_ATTEMPTED", null, -1, -1, false)));
        // the whole request's error, reported for each partition it carried: the manager resends every item
        assertEquals("{\"type\":\"alter_partition_response\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,"
                + "\"topic\":\"orders\",\"partition\":1,\"error\":\"STALE_BROKER_EPOCH\",\"top_level\":true}",
            enc(new Event.AlterPartitionResponse(5, "orders", 1, null, "STALE_BROKER_EPOCH", null, -1, -1, true)));
    }

    @Test
    void alterPartitionSent() {
        assertEquals("{\"type\":\"alter_partition_sent\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,"
                + "\"broker_epoch\":20,\"partitions\":[{\"topic\":\"orders\",\"topic_id\":\"ClAYvCKeSb2Vq2bCUlVMKw\","
                + "\"partition\":1,\"isr\":[2,1],\"isr_broker_epochs\":[11,20],\"leader_epoch\":0,"
                + "\"partition_epoch\":0,\"leader_recovery_state\":\"RECOVERED\"},{\"partition\":2,\"isr\":[3],"
                + "\"leader_epoch\":4,\"partition_epoch\":7}]}",
            enc(new Event.AlterPartitionSent(5, 20, List.of(
                new Event.ProposedPartition("orders", "ClAYvCKeSb2Vq2bCUlVMKw", 1, new int[] {2, 1},
                    new long[] {11, 20}, 0, 0, "RECOVERED"),
                new Event.ProposedPartition(null, null, 2, new int[] {3}, null, 4, 7, null)))));
    }

    @Test
    void brokerRegistration() {
        assertEquals("{\"type\":\"broker_registration\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,"
                + "\"id\":3,\"epoch\":10,\"fenced\":true,\"in_controlled_shutdown\":false}",
            enc(new Event.BrokerRegistration(5, 3, 10, true, false)));
    }

    @Test
    void expirationTickReportsTheIsrProtocol() {
        assertEquals("{\"type\":\"tick\",\"ts\":5,\"cluster\":\"prod-eu\",\"broker\":1,\"seq\":7,"
                + "\"task\":\"isr-expiration\",\"kafka_version\":\"4.4.0\",\"end_ms\":9,"
                + "\"isr_protocol\":\"alter_partition\"}",
            enc(Event.Tick.expiration(5, 9, "4.4.0", Event.Tick.ALTER_PARTITION)));
    }
}
