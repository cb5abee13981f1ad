package io.isrwatch.agent;

import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.function.IntSupplier;
import java.util.function.Supplier;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Sends each event as one record keyed by the broker id, with the broker's own kafka-clients producer. The producer is
 * created on the writer thread once the broker knows its id and listeners; it never runs on a Kafka thread.
 */
public final class KafkaSink extends Sink {

    private final String topic;
    private final String cluster;
    private final IntSupplier broker;
    private final Supplier<Properties> config;
    private KafkaProducer<String, String> producer;
    /** Why the producer could not be created (its configuration was rejected): every event then fails fast. */
    private String broken;

    /** {@code config} returns null until the producer can be configured (the broker has not started yet). */
    public KafkaSink(int capacity, String topic, String cluster, IntSupplier broker, Supplier<Properties> config) {
        super("kafka", capacity);
        this.topic = topic;
        this.cluster = cluster;
        this.broker = broker;
        this.config = config;
    }

    /** The producer properties: the agent's defaults, then the user's {@code producer.*} options. */
    public static Properties producerProperties(String bootstrap, String securityProtocol, int broker,
                                                Map<String, String> user) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        if (securityProtocol != null) {
            p.put("security.protocol", securityProtocol);
        }
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "isrwatch-agent-" + broker);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "50");
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "gzip"); // readable by every client, kafka-python included
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "5000");
        p.putAll(user);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return p;
    }

    private KafkaProducer<String, String> producer() throws InterruptedException {
        while (producer == null) {
            if (broken != null) {
                throw new IllegalStateException(broken);
            }
            Properties p = config.get();
            if (p == null) {
                Thread.sleep(100);
                continue;
            }
            try {
                producer = new KafkaProducer<>(p);
            } catch (RuntimeException e) {
                broken = "the producer could not be created: " + e.getMessage();
                Log.warn(broken + " (no events will be sent; check the producer.* options)");
                throw e;
            }
            Log.info("sending events to topic " + topic + " at " + p.get(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG));
        }
        return producer;
    }

    @Override
    protected void write(Stamped s) throws Exception {
        int id = broker.getAsInt();
        producer().send(new ProducerRecord<>(topic, Integer.toString(id), Json.encode(s.event(), s.seq(), cluster, id)),
            (metadata, exception) -> {
                if (exception != null) {
                    failed(exception);
                }
            });
    }

    @Override
    protected void idle() {
    }

    @Override
    protected void release(long timeoutMs) {
        if (producer != null) {
            producer.close(Duration.ofMillis(timeoutMs));
        }
    }
}
