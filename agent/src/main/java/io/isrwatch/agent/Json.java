package io.isrwatch.agent;

/** Minimal JSON writer for the event contract: one object per line, snake_case keys, strings escaped per RFC 8259. */
public final class Json {

    private Json() {
    }

    /** The event as one JSON object (no newline): common fields, a partition event's topic and partition, its own. */
    public static String encode(Event e, long seq, String cluster, int broker) {
        Writer w = new Writer(160);
        w.beginObject().field("type", e.type()).field("ts", e.ts()).field("cluster", cluster)
            .field("broker", broker).field("seq", seq);
        if (e instanceof Event.PartitionEvent p) {
            w.field("topic", p.topic()).field("partition", p.partition());
        }
        e.writeFields(w);
        return w.endObject().toString();
    }

    /** Appends {@code s} as a JSON string literal. */
    static void quote(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                case '\b' -> sb.append("\\b");
                case '\f' -> sb.append("\\f");
                default -> {
                    if (c < 0x20 || c == 0x7f || c == '\u2028' || c == '\u2029') {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
                }
            }
        }
        sb.append('"');
    }

    /** A streaming writer that inserts commas itself; callers only pair begin/end. */
    public static final class Writer {
        private final StringBuilder sb;
        private boolean first = true;

        Writer(int capacity) {
            sb = new StringBuilder(capacity);
        }

        private void comma() {
            if (!first) {
                sb.append(',');
            }
            first = false;
        }

        public Writer key(String k) {
            comma();
            quote(sb, k);
            sb.append(':');
            first = true; // the value that follows takes no comma
            return this;
        }

        public Writer beginObject() {
            return open('{');
        }

        public Writer endObject() {
            return close('}');
        }

        public Writer beginArray() {
            return open('[');
        }

        public Writer endArray() {
            return close(']');
        }

        private Writer open(char bracket) {
            comma();
            sb.append(bracket);
            first = true;
            return this;
        }

        private Writer close(char bracket) {
            sb.append(bracket);
            first = false;
            return this;
        }

        /** The key, and the buffer to append its value to. */
        private StringBuilder value(String k) {
            key(k);
            first = false;
            return sb;
        }

        public Writer field(String k, String v) {
            quote(value(k), v);
            return this;
        }

        public Writer field(String k, long v) {
            value(k).append(v);
            return this;
        }

        public Writer field(String k, boolean v) {
            value(k).append(v);
            return this;
        }

        /** The field only {@code when} it holds: absent values (unknown offsets and times, no id) are left out. */
        public Writer fieldIf(boolean when, String k, long v) {
            return when ? field(k, v) : this;
        }

        /** A string field that is written as JSON null when {@code v} is null. */
        public Writer fieldOrNull(String k, String v) {
            if (v == null) {
                value(k).append("null");
                return this;
            }
            return field(k, v);
        }

        public Writer field(String k, long[] v) {
            value(k).append('[');
            for (int i = 0; i < v.length; i++) {
                if (i > 0) {
                    sb.append(',');
                }
                sb.append(v[i]);
            }
            sb.append(']');
            return this;
        }

        public Writer field(String k, int[] v) {
            return field(k, java.util.Arrays.stream(v).asLongStream().toArray());
        }

        @Override
        public String toString() {
            return sb.toString();
        }
    }
}
