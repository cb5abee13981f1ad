package io.isrwatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class OptionsTest {

    @Test
    void defaults() throws Exception {
        for (String args : new String[] {null, "", "  "}) {
            Options o = Options.parse(args);
            assertNull(o.bootstrapServers);
            assertEquals("isrwatch.events", o.topic);
            assertEquals("default", o.cluster);
            assertNull(o.file);
            assertNull(o.rawFile);
            assertTrue(o.toKafka());
            assertEquals(List.of(true, 1000L, 131_072, 60_000L, 200L, 100L), settings(o));
            assertEquals(Map.of(), o.producer);
        }
    }

    /** coalesce, coalesce.max.hold.ms, queue.capacity, stats.interval.ms, watermark.interval.ms, watermark.slack.ms. */
    private static List<Object> settings(Options o) {
        return List.of(o.coalesce, o.coalesceMaxHoldMs, o.queueCapacity, o.statsIntervalMs, o.watermarkIntervalMs,
            o.watermarkSlackMs);
    }

    @Test
    void everyOption() throws Exception {
        Options o = Options.parse("bootstrap.servers=a:9092,topic=t.x,cluster=prod-eu,file=/tmp/e.jsonl,"
            + "raw.file=/tmp/r.jsonl,producer.acks=all,producer.linger.ms=5,coalesce=false,coalesce.max.hold.ms=250,"
            + "queue.capacity=10,stats.interval.ms=0,watermark.interval.ms=0,watermark.slack.ms=60000");
        assertEquals("a:9092", o.bootstrapServers);
        assertEquals("t.x", o.topic);
        assertEquals("prod-eu", o.cluster);
        assertEquals(Path.of("/tmp/e.jsonl"), o.file);
        assertEquals(Path.of("/tmp/r.jsonl"), o.rawFile);
        assertFalse(o.toKafka());
        assertEquals(Map.of("acks", "all", "linger.ms", "5"), o.producer);
        assertEquals(List.of(false, 250L, 10, 0L, 0L, 60_000L), settings(o));
    }

    @Test
    void aSegmentWithoutEqualsContinuesTheValue() throws Exception {
        Options o = Options.parse("bootstrap.servers=a:9092,b:9092,c:9092,topic=x,producer.bootstrap.servers=d:1,e:2");
        assertEquals("a:9092,b:9092,c:9092", o.bootstrapServers);
        assertEquals("x", o.topic);
        assertEquals("d:1,e:2", o.producer.get("bootstrap.servers"));
    }

    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "nope=1|nope: unknown option",
        "coalesce=yes|coalesce: 'yes' is not true or false",
        "queue.capacity=ten|queue.capacity: 'ten' is not an integer",
        "queue.capacity=0|queue.capacity: 0 is out of range",
        "coalesce.max.hold.ms=-1|coalesce.max.hold.ms: -1 is out of range",
        "stats.interval.ms=-5|stats.interval.ms: -5 is out of range",
        "watermark.interval.ms=60001|watermark.interval.ms: 60001 is out of range [0, 60000]",
        "watermark.interval.ms=-1|watermark.interval.ms: -1 is out of range [0, 60000]",
        "watermark.interval.ms=0.5|watermark.interval.ms: '0.5' is not an integer",
        "watermark.slack.ms=60001|watermark.slack.ms: 60001 is out of range [0, 60000]",
        "watermark.slack.ms=-1|watermark.slack.ms: -1 is out of range [0, 60000]",
        "watermark.slack.ms=|watermark.slack.ms: '' is not an integer",
        "topic=a/b|topic: 'a/b' is not a valid Kafka topic name",
        "topic=..|topic: '..' is not a valid Kafka topic name",
        "topic=|topic: '' is not a valid Kafka topic name",
        "cluster=|cluster: must be 1-255 characters",
        "file=|file: must be a file path",
        "file=/x,raw.file=/x|raw.file: must differ from file",
        "bootstrap.servers=|bootstrap.servers: must not be empty",
        "topic=a,topic=b|topic: given twice",
        "producer.acks=1,producer.acks=all|producer.acks: given twice",
        "producer.=1|producer.: a producer property name must follow",
        "a:9092|'a:9092': expected key=value",
        "=x|'=x': empty option name",
    })
    void badOptionsNameTheOption(String args, String message) {
        Options.OptionException e = assertThrows(Options.OptionException.class, () -> Options.parse(args));
        assertTrue(e.getMessage().startsWith(message), e.getMessage());
    }
}
