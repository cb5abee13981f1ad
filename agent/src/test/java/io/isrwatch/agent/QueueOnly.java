package io.isrwatch.agent;

import java.util.List;

/** A sink that is never started: its queue shows what was offered, as {@code seq:type@ts} lines. */
final class QueueOnly extends NullSink {

    QueueOnly(String name, int capacity) {
        super(name, capacity);
    }

    List<String> lines() {
        return queuedEvents().stream().map(s -> s.seq() + ":" + s.event().type() + "@" + s.event().ts()).toList();
    }
}
