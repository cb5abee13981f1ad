package io.isrwatch.agent;

import java.nio.file.Path;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * The agent's options, parsed from the {@code -javaagent:isrwatch-agent.jar=k=v,k=v} argument string.
 * A segment without {@code =} continues the previous value, so {@code bootstrap.servers=a:9092,b:9092} works.
 */
public final class Options {

    /** A bad option: the message names the option and the reason. */
    public static final class OptionException extends Exception {
        private static final long serialVersionUID = 1L;

        OptionException(String message) {
            super(message);
        }
    }

    public static final String DEFAULT_TOPIC = "isrwatch.events";
    public static final String DEFAULT_CLUSTER = "default";
    private static final Pattern TOPIC = Pattern.compile("[A-Za-z0-9._-]{1,249}");
    private static final Pattern CLUSTER = Pattern.compile("[^\\x00-\\x1f\\x7f]{1,255}");

    /** Null: the broker's own first listener, known once the broker starts. */
    public final String bootstrapServers;
    public final String topic;
    public final String cluster;
    /** Null: send to Kafka. */
    public final Path file;
    /** Null: no uncoalesced copy. */
    public final Path rawFile;
    public final Map<String, String> producer;
    public final boolean coalesce;
    public final long coalesceMaxHoldMs;
    public final int queueCapacity;
    public final long statsIntervalMs;
    /** How often the timer emits a watermark (0: never). */
    public final long watermarkIntervalMs;
    /** The floor of the watermark's slack behind the broker's clock (it adapts upwards to capture delays). */
    public final long watermarkSlackMs;

    private Options(Map<String, String> kv, Map<String, String> producer) throws OptionException {
        this.bootstrapServers = kv.remove("bootstrap.servers");
        if (bootstrapServers != null && bootstrapServers.isBlank()) {
            throw new OptionException("bootstrap.servers: must not be empty");
        }
        this.topic = kv.getOrDefault("topic", DEFAULT_TOPIC);
        kv.remove("topic");
        if (!TOPIC.matcher(topic).matches() || topic.equals(".") || topic.equals("..")) {
            throw new OptionException("topic: '" + topic + "' is not a valid Kafka topic name");
        }
        this.cluster = kv.getOrDefault("cluster", DEFAULT_CLUSTER);
        kv.remove("cluster");
        if (!CLUSTER.matcher(cluster).matches()) {
            throw new OptionException("cluster: must be 1-255 characters without control characters");
        }
        this.file = path(kv, "file");
        this.rawFile = path(kv, "raw.file");
        if (file != null && file.equals(rawFile)) {
            throw new OptionException("raw.file: must differ from file");
        }
        this.coalesce = bool(kv, "coalesce", true);
        this.coalesceMaxHoldMs = number(kv, "coalesce.max.hold.ms", 1000, 0, 3_600_000);
        this.queueCapacity = (int) number(kv, "queue.capacity", 131_072, 1, 1 << 26);
        this.statsIntervalMs = number(kv, "stats.interval.ms", 60_000, 0, Long.MAX_VALUE);
        this.watermarkIntervalMs = number(kv, "watermark.interval.ms", 200, 0, 60_000);
        this.watermarkSlackMs = number(kv, "watermark.slack.ms", 100, 0, 60_000);
        if (!kv.isEmpty()) {
            throw new OptionException(kv.keySet().iterator().next() + ": unknown option (known: bootstrap.servers, "
                + "topic, cluster, file, raw.file, producer.*, coalesce, coalesce.max.hold.ms, queue.capacity, "
                + "stats.interval.ms, watermark.interval.ms, watermark.slack.ms)");
        }
        this.producer = Collections.unmodifiableMap(producer);
    }

    /** Parses the agent argument string (null or blank: all defaults). */
    public static Options parse(String agentArgs) throws OptionException {
        Map<String, String> kv = new LinkedHashMap<>();
        Map<String, String> producer = new LinkedHashMap<>();
        String lastKey = null;
        Map<String, String> lastMap = null;
        if (agentArgs != null && !agentArgs.isBlank()) {
            for (String segment : agentArgs.split(",", -1)) {
                int eq = segment.indexOf('=');
                if (eq < 0) {
                    if (lastKey == null) {
                        throw new OptionException("'" + segment + "': expected key=value");
                    }
                    lastMap.put(lastKey, lastMap.get(lastKey) + "," + segment);
                    continue;
                }
                String key = segment.substring(0, eq).trim();
                String value = segment.substring(eq + 1).trim();
                if (key.isEmpty()) {
                    throw new OptionException("'" + segment + "': empty option name");
                }
                Map<String, String> target = kv;
                if (key.startsWith("producer.")) {
                    key = key.substring("producer.".length());
                    if (key.isEmpty()) {
                        throw new OptionException("producer.: a producer property name must follow");
                    }
                    target = producer;
                }
                if (target.containsKey(key)) {
                    throw new OptionException((target == producer ? "producer." : "") + key + ": given twice");
                }
                target.put(key, value);
                lastKey = key;
                lastMap = target;
            }
        }
        return new Options(kv, producer);
    }

    private static Path path(Map<String, String> kv, String key) throws OptionException {
        String v = kv.remove(key);
        if (v == null) {
            return null;
        }
        if (v.isEmpty()) {
            throw new OptionException(key + ": must be a file path");
        }
        return Path.of(v);
    }

    private static boolean bool(Map<String, String> kv, String key, boolean dflt) throws OptionException {
        String v = kv.remove(key);
        if (v == null) {
            return dflt;
        }
        return switch (v) {
            case "true" -> true;
            case "false" -> false;
            default -> throw new OptionException(key + ": '" + v + "' is not true or false");
        };
    }

    private static long number(Map<String, String> kv, String key, long dflt, long min, long max)
        throws OptionException {
        String v = kv.remove(key);
        if (v == null) {
            return dflt;
        }
        long n;
        try {
            n = Long.parseLong(v);
        } catch (NumberFormatException e) {
            throw new OptionException(key + ": '" + v + "' is not an integer");
        }
        if (n < min || n > max) {
            throw new OptionException(key + ": " + n + " is out of range [" + min + ", " + max + "]");
        }
        return n;
    }

    /** True when events go to a Kafka topic (no {@code file=}). */
    public boolean toKafka() {
        return file == null;
    }
}
