package io.isrwatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import java.util.jar.JarFile;
import java.util.stream.Stream;
import net.bytebuddy.description.method.MethodDescription;
import net.bytebuddy.description.type.TypeDefinition;
import net.bytebuddy.description.type.TypeDescription;
import net.bytebuddy.dynamic.ClassFileLocator;
import net.bytebuddy.jar.asm.ClassReader;
import net.bytebuddy.jar.asm.ClassVisitor;
import net.bytebuddy.jar.asm.MethodVisitor;
import net.bytebuddy.jar.asm.Opcodes;
import net.bytebuddy.pool.TypePool;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The static check against the released jars of every line the agent supports (fetched by Maven coordinates into
 * target/kafka-jars/VERSION by the pom's maven-dependency-plugin executions). Reads class files only: no broker runs.
 * For each version: the version gate passes in every mode that version has (every hook's class, method, descriptor and
 * caller), and every Kafka member the agent's version-independent code references (typed calls and field reads in
 * Hooks, Advices, Agent, Reflect) exists in that release with the same descriptor. 3.9-only code (ZkHooks,
 * ZkAdvices) is checked against 3.9.2.
 */
class KafkaJarsTest {

    private static final String[] VERSIONS = {"3.9.2", "4.0.2", "4.1.2", "4.2.2", "4.3.1", "4.4.0"};

    private static Path jars(String version) {
        String base = System.getProperty("isrwatch.kafka.jars", "target/kafka-jars");
        Path dir = Path.of(base, version);
        assertTrue(Files.isDirectory(dir), "no jars at " + dir + " (run through Maven: the pom fetches them)");
        return dir;
    }

    private static ClassFileLocator locator(String version) throws IOException {
        List<ClassFileLocator> list = new ArrayList<>();
        try (Stream<Path> s = Files.list(jars(version))) {
            for (Path p : s.filter(p -> p.toString().endsWith(".jar")).sorted().toList()) {
                list.add(ClassFileLocator.ForJarFile.of(p.toFile()));
            }
        }
        list.add(ClassFileLocator.ForClassLoader.ofBootLoader()); // java.* supertypes
        return new ClassFileLocator.Compound(list);
    }

    private static String versionOf(String version) throws IOException {
        Path clients = jars(version).resolve("kafka-clients-" + version + ".jar");
        try (JarFile jar = new JarFile(clients.toFile());
             InputStream in = jar.getInputStream(jar.getEntry("kafka/kafka-version.properties"))) {
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version");
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"3.9.2", "4.0.2", "4.1.2", "4.2.2", "4.3.1", "4.4.0"})
    void theGateAcceptsEveryModeOfTheRelease(String version) throws IOException {
        assertEquals(version, versionOf(version));
        Plan.Line line = Plan.Line.of(version);
        assertNotNull(line);
        try (ClassFileLocator classes = locator(version)) {
            for (Plan.Mode mode : Plan.Mode.values()) {
                List<String> problems = VersionGate.check(version, mode, classes);
                if (line == Plan.Line.V3_9 || mode == Plan.Mode.KRAFT) {
                    assertEquals(List.of(), problems, version + " " + mode);
                } else {
                    assertEquals(List.of("Kafka " + version + " has no ZooKeeper mode"), problems);
                }
            }
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"3.9.2", "4.0.2", "4.1.2", "4.2.2", "4.3.1", "4.4.0"})
    void theDescriptorsOfAnotherLineAreRefused(String version) throws IOException {
        // Each line's plan fails on the other lines' jars wherever a descriptor moved: the gate is not vacuous.
        // (4.2 and 4.3 have the same hook descriptors: 4.3 moved HostedPartition and KRaftMetadataCache only.)
        Plan.Line own = Plan.Line.of(version);
        try (ClassFileLocator classes = locator(version)) {
            for (Plan.Line other : Plan.Line.values()) {
                if (Plan.hooks(other, Plan.Mode.KRAFT).equals(Plan.hooks(own, Plan.Mode.KRAFT))) {
                    continue;
                }
                List<String> problems = VersionGate.check(other.prefix + "0", Plan.Mode.KRAFT, classes);
                assertTrue(!problems.isEmpty(), other + " plan on " + version + " jars");
            }
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"3.9.2", "4.0.2", "4.1.2", "4.2.2", "4.3.1", "4.4.0"})
    void everyKafkaMemberTheAgentUsesExists(String version) throws IOException {
        List<String> agentClasses = new ArrayList<>();
        for (File f : new File("target/classes/io/isrwatch/agent").listFiles()) {
            String n = f.getName();
            boolean zkOnly = n.startsWith("ZkHooks") || n.startsWith("ZkAdvices") || n.startsWith("VersionGate");
            if (n.endsWith(".class") && (!zkOnly || version.startsWith("3.9."))) {
                agentClasses.add(f.getPath());
            }
        }
        TreeSet<String> missing = new TreeSet<>();
        int checked = 0;
        try (ClassFileLocator classes = locator(version)) {
            TypePool pool = TypePool.Default.of(classes);
            for (String path : agentClasses) {
                for (String[] ref : kafkaReferences(Files.readAllBytes(Path.of(path)))) {
                    checked++;
                    if (!resolves(pool, ref)) {
                        missing.add(ref[0] + "." + ref[1] + ref[2] + " (from " + Path.of(path).getFileName() + ")");
                    }
                }
            }
        }
        assertTrue(checked > 40, "only " + checked + " references found");
        assertEquals(new TreeSet<String>(), missing, "Kafka " + version);
    }

    /** Member references (owner, name, descriptor, kind) to Kafka classes in one agent class file. */
    private static List<String[]> kafkaReferences(byte[] classFile) {
        List<String[]> refs = new ArrayList<>();
        new ClassReader(classFile).accept(new ClassVisitor(Opcodes.ASM9) {
            @Override
            public MethodVisitor visitMethod(int access, String name, String desc, String sig, String[] ex) {
                return new MethodVisitor(Opcodes.ASM9) {
                    @Override
                    public void visitMethodInsn(int op, String owner, String n, String d, boolean itf) {
                        if (kafka(owner)) {
                            refs.add(new String[] {owner, n, d, "m"});
                        }
                    }

                    @Override
                    public void visitFieldInsn(int op, String owner, String n, String d) {
                        if (kafka(owner)) {
                            refs.add(new String[] {owner, n, d, "f"});
                        }
                    }

                    @Override
                    public void visitTypeInsn(int op, String type) {
                        if (kafka(type)) {
                            refs.add(new String[] {type, "", "", "t"});
                        }
                    }
                };
            }
        }, ClassReader.SKIP_DEBUG | ClassReader.SKIP_FRAMES);
        return refs;
    }

    private static boolean kafka(String owner) {
        return owner.startsWith("kafka/") || owner.startsWith("org/apache/kafka/");
    }

    private static boolean resolves(TypePool pool, String[] ref) {
        TypePool.Resolution r = pool.describe(ref[0].replace('/', '.'));
        if (!r.isResolved()) {
            return false;
        }
        if (ref[3].equals("t")) {
            return true;
        }
        // The member, declared in the class or inherited (superclasses and interfaces).
        List<TypeDefinition> todo = new ArrayList<>();
        todo.add(r.resolve());
        while (!todo.isEmpty()) {
            TypeDescription t = todo.remove(todo.size() - 1).asErasure();
            if (ref[3].equals("f")) {
                if (t.getDeclaredFields().stream()
                    .anyMatch(f -> f.getName().equals(ref[1]) && f.getDescriptor().equals(ref[2]))) {
                    return true;
                }
            } else {
                for (MethodDescription.InDefinedShape m : t.getDeclaredMethods()) {
                    if (m.getInternalName().equals(ref[1]) && m.getDescriptor().equals(ref[2])) {
                        return true;
                    }
                }
            }
            if (t.getSuperClass() != null) {
                todo.add(t.getSuperClass());
            }
            todo.addAll(t.getInterfaces());
        }
        return false;
    }
}
