package io.isrwatch.agent;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.function.IntSupplier;

/** Appends events as JSON lines to a file (for log shippers and tests); flushed whenever the queue runs empty. */
public final class FileSink extends Sink {

    private final String cluster;
    private final IntSupplier broker;
    private final BufferedWriter out;

    public FileSink(String name, Path path, int capacity, String cluster, IntSupplier broker) throws IOException {
        super(name, capacity);
        this.cluster = cluster;
        this.broker = broker;
        Path parent = path.toAbsolutePath().getParent();
        if (parent != null) {
            Files.createDirectories(parent);
        }
        this.out = new BufferedWriter(new OutputStreamWriter(Files.newOutputStream(path, StandardOpenOption.CREATE,
            StandardOpenOption.APPEND, StandardOpenOption.WRITE), StandardCharsets.UTF_8), 1 << 16);
    }

    @Override
    protected void write(Stamped s) throws IOException {
        out.write(Json.encode(s.event(), s.seq(), cluster, broker.getAsInt()));
        out.write('\n');
    }

    @Override
    protected void idle() throws IOException {
        out.flush();
    }

    @Override
    protected void release(long timeoutMs) {
        try {
            out.close();
        } catch (IOException e) {
            failed(e);
        }
    }
}
