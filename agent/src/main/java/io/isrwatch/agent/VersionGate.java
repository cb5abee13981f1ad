package io.isrwatch.agent;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import net.bytebuddy.description.method.MethodDescription;
import net.bytebuddy.description.type.TypeDescription;
import net.bytebuddy.dynamic.ClassFileLocator;
import net.bytebuddy.jar.asm.ClassReader;
import net.bytebuddy.jar.asm.ClassVisitor;
import net.bytebuddy.jar.asm.MethodVisitor;
import net.bytebuddy.jar.asm.Opcodes;
import net.bytebuddy.pool.TypePool;

/**
 * Decides, before anything is transformed, whether this JVM runs a Kafka the agent knows: a 3.9.x or 4.0.x-4.4.x
 * broker (ZooKeeper mode on 3.9 with either IBP, or KRaft) whose every instrumented method for its line and mode
 * exists with the expected descriptor and is still called from its expected caller. Reads class files without
 * loading them.
 */
final class VersionGate {

    private VersionGate() {
    }

    /** The kafka-clients version resource AppInfoParser reads, or null. */
    static String kafkaVersion(ClassLoader loader) {
        try (InputStream in = loader.getResourceAsStream("kafka/kafka-version.properties")) {
            if (in == null) {
                return null;
            }
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version");
        } catch (IOException e) {
            return null;
        }
    }

    /** Problems that make instrumenting unsafe for this version and mode (empty: go ahead). */
    static List<String> check(String kafkaVersion, Plan.Mode mode, ClassFileLocator classes) {
        List<String> problems = new ArrayList<>();
        if (kafkaVersion == null) {
            problems.add("no Kafka on the classpath (kafka/kafka-version.properties not found)");
            return problems;
        }
        Plan.Line line = Plan.Line.of(kafkaVersion);
        if (line == null) {
            problems.add("Kafka " + kafkaVersion + " is not a version this agent knows (" + Plan.KNOWN_VERSIONS + ")");
            return problems;
        }
        if (mode != Plan.Mode.KRAFT && line != Plan.Line.V3_9) {
            problems.add("Kafka " + kafkaVersion + " has no ZooKeeper mode");
            return problems;
        }
        TypePool pool = TypePool.Default.of(classes);
        for (Plan.Hook h : Plan.hooks(line, mode)) {
            TypePool.Resolution r = pool.describe(h.type());
            if (!r.isResolved()) {
                problems.add("class " + h.type() + " not found");
                continue;
            }
            TypeDescription type = r.resolve();
            boolean found = false;
            for (MethodDescription.InDefinedShape m : type.getDeclaredMethods()) {
                if (m.getInternalName().equals(h.method()) && m.getDescriptor().equals(h.descriptor())) {
                    found = true;
                    break;
                }
            }
            if (!found) {
                problems.add("method " + h.describe() + " not found");
                continue;
            }
            if (calls(classes, h.caller(), null, null, h.method(), h.descriptor()) < 1) {
                problems.add("method " + h.describe() + " is never called from " + h.caller()
                    + " (inlined into its caller?)");
            }
            if (h.clock() != null) {
                int n = calls(classes, h.type(), h.method(), h.descriptor(), "milliseconds", "()J");
                if (n != 1) {
                    problems.add("method " + h.describe() + " reads Time#milliseconds() " + n + " times, expected once");
                }
            }
        }
        for (Plan.Field f : Plan.fields(mode)) {
            TypePool.Resolution r = pool.describe(f.type());
            boolean found = r.isResolved() && r.resolve().getDeclaredFields().stream()
                .anyMatch(d -> d.getName().equals(f.name()) && d.getDescriptor().equals(f.descriptor()));
            if (!found) {
                problems.add("field " + f.describe() + " not found");
            }
        }
        return problems;
    }

    /**
     * How many invocations of {@code callee} (any owner: calls through an interface count) the class makes, within
     * the method {@code inMethod}{@code inDescriptor} (or anywhere when null); -1 when the class cannot be read.
     */
    static int calls(ClassFileLocator classes, String type, String inMethod, String inDescriptor, String callee,
                     String calleeDescriptor) {
        try {
            ClassFileLocator.Resolution r = classes.locate(type);
            if (!r.isResolved()) {
                return -1;
            }
            int[] calls = {0};
            new ClassReader(r.resolve()).accept(new ClassVisitor(Opcodes.ASM9) {
                @Override
                public MethodVisitor visitMethod(int access, String name, String desc, String sig, String[] ex) {
                    if (inMethod != null && (!name.equals(inMethod) || !desc.equals(inDescriptor))) {
                        return null;
                    }
                    return new MethodVisitor(Opcodes.ASM9) {
                        @Override
                        public void visitMethodInsn(int op, String owner, String n, String d, boolean itf) {
                            if (n.equals(callee) && d.equals(calleeDescriptor)) {
                                calls[0]++;
                            }
                        }
                    };
                }
            }, ClassReader.SKIP_DEBUG | ClassReader.SKIP_FRAMES);
            return calls[0];
        } catch (IOException e) {
            return -1;
        }
    }

    /**
     * The broker configuration kafka.Kafka was started with: {@code kafka.Kafka server.properties [--override k=v]...}
     * (from the {@code sun.java.command} property), or a problem.
     */
    static Properties brokerConfig(String command, List<String> problems) {
        if (command == null || command.isBlank()) {
            problems.add("cannot read the broker's command line (sun.java.command is not set)");
            return null;
        }
        String[] args = command.trim().split("\\s+");
        if (!args[0].equals("kafka.Kafka")) {
            problems.add("the JVM does not run kafka.Kafka (main class " + args[0] + ")");
            return null;
        }
        if (args.length < 2) {
            problems.add("kafka.Kafka was started without a properties file");
            return null;
        }
        Properties p = new Properties();
        try (InputStream in = Files.newInputStream(Path.of(args[1]))) {
            p.load(in);
        } catch (IOException | RuntimeException e) {
            problems.add("cannot read the broker properties " + args[1] + ": " + e);
            return null;
        }
        for (int i = 2; i < args.length; i++) {
            if (args[i].equals("--override") && i + 1 < args.length) {
                String kv = args[++i];
                int eq = kv.indexOf('=');
                if (eq > 0) {
                    p.setProperty(kv.substring(0, eq), kv.substring(eq + 1));
                }
            }
        }
        return p;
    }

    /**
     * The broker's mode from its properties: KRaft when {@code process.roles} includes {@code broker}; otherwise
     * ZooKeeper mode (3.9 only), whose {@code inter.broker.protocol.version} decides between ZooKeeper ISR writes
     * (below 2.7-IV2) and AlterPartition (2.7-IV2 and later, and the 3.9 default). Null, with a problem, when the
     * agent does not model it.
     */
    static Plan.Mode mode(Properties config, List<String> problems) {
        String roles = config.getProperty("process.roles", "").trim();
        if (!roles.isEmpty()) {
            boolean broker = false;
            for (String role : roles.split(",")) {
                broker |= role.trim().equals("broker");
            }
            if (!broker) {
                problems.add("process.roles=" + roles + " runs no broker: nothing to report");
                return null;
            }
            return Plan.Mode.KRAFT;
        }
        if (config.getProperty("zookeeper.connect", "").isBlank()) {
            problems.add("neither process.roles nor zookeeper.connect is set: neither a KRaft nor a ZooKeeper broker");
            return null;
        }
        if (Boolean.parseBoolean(config.getProperty("zookeeper.metadata.migration.enable", "false").trim())) {
            problems.add("zookeeper.metadata.migration.enable=true: KRaft migration is not modelled");
            return null;
        }
        String ibp = config.getProperty("inter.broker.protocol.version");
        if (ibp == null || ibp.isBlank()) {
            return Plan.Mode.ZK_ALTER_PARTITION; // Kafka 3.9's default IBP is 3.9
        }
        Boolean alterPartition = ZkHooks.ibpSendsAlterPartition(ibp.trim());
        if (alterPartition == null) {
            problems.add("inter.broker.protocol.version=" + ibp + " is not a version Kafka knows");
            return null;
        }
        return alterPartition ? Plan.Mode.ZK_ALTER_PARTITION : Plan.Mode.ZOOKEEPER;
    }
}
