package io.isrwatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Map;
import java.util.Properties;
import org.junit.jupiter.api.Test;

class KafkaSinkTest {

    @Test
    void producerDefaultsYieldToTheUsersOptionsButNotTheSerializers() {
        Properties p = KafkaSink.producerProperties("h:9092", "SSL", 7,
            Map.of("linger.ms", "5", "acks", "all", "key.serializer", "x"));
        assertEquals("h:9092", p.get("bootstrap.servers"));
        assertEquals("SSL", p.get("security.protocol"));
        assertEquals("isrwatch-agent-7", p.get("client.id"));
        assertEquals("5", p.get("linger.ms"));
        assertEquals("all", p.get("acks"));
        assertEquals("gzip", p.get("compression.type"));
        assertEquals("org.apache.kafka.common.serialization.StringSerializer", p.get("key.serializer"));
    }

    @Test
    void aRejectedProducerConfigurationFailsEveryEventWithoutRetrying() {
        Properties bad = KafkaSink.producerProperties("127.0.0.1:1", null, 1, Map.of("acks", "banana"));
        KafkaSink sink = new KafkaSink(10, "isrwatch.events", "c", () -> 1, () -> bad);
        sink.start();
        for (long i = 1; i <= 3; i++) {
            sink.offer(i, new Event.Tick(i, Event.Tick.ISR_EXPIRATION, "3.9.2"));
        }
        sink.close(5000);
        assertEquals(3, sink.failures());
        assertEquals(0, sink.written());
        assertEquals(0, sink.dropped());
    }
}
