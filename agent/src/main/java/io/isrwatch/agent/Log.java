package io.isrwatch.agent;

import java.time.Instant;

/**
 * The agent's log lines, on the broker's stderr (kafkaServer.out under the stock scripts). Plain stderr rather than the
 * broker's logging backend: the refusal line must appear even before, or without, any slf4j binding.
 */
public final class Log {

    private Log() {
    }

    public static void info(String message) {
        line("INFO", message);
    }

    public static void warn(String message) {
        line("WARN", message);
    }

    private static void line(String level, String message) {
        System.err.println("[" + Instant.now() + "] " + level + " isrwatch-agent: " + message);
    }
}
