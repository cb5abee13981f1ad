package io.isrwatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import net.bytebuddy.ByteBuddy;
import net.bytebuddy.description.modifier.Visibility;
import net.bytebuddy.dynamic.ClassFileLocator;
import net.bytebuddy.implementation.FixedValue;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** The gate against the real Kafka 3.9.2 jars (the provided dependencies are on the test classpath). */
class VersionGateTest {

    private static final ClassFileLocator KAFKA = ClassFileLocator.ForClassLoader.ofSystemLoader();

    @Test
    void theKafkaOnTheClasspathIsKnown() {
        assertEquals("3.9.2", VersionGate.kafkaVersion(getClass().getClassLoader()));
        for (Plan.Mode m : Plan.Mode.values()) {
            assertEquals(List.of(), VersionGate.check("3.9.2", m, KAFKA), m.toString());
        }
    }

    @Test
    void eachSubstitutedMethodReadsTheClockOnce() {
        for (Plan.Hook h : Plan.hooks(Plan.Line.V3_9, Plan.Mode.ZOOKEEPER)) {
            if (h.clock() != null) {
                assertEquals(1, VersionGate.calls(KAFKA, h.type(), h.method(), h.descriptor(), "milliseconds", "()J"),
                    h.describe());
            }
        }
    }

    @Test
    void aMethodKafkaInlinedIntoItsCallerIsRefused() {
        // Kafka's Scala build inlines ReplicaManager#makeFollowers into becomeLeaderOrFollower: a hook on it would
        // never run. The gate finds such dead copies by looking for a call in the expected caller.
        String makeFollowers = "(IILscala/collection/Map;ILscala/collection/mutable/Map;"
            + "Lkafka/server/checkpoints/OffsetCheckpoints;Lscala/Function1;)Lscala/collection/Set;";
        assertEquals(0, VersionGate.calls(KAFKA, Plan.REPLICA_MANAGER, null, null, "makeFollowers", makeFollowers));
        assertTrue(VersionGate.calls(KAFKA, Plan.REPLICA_MANAGER, null, null, "maybeShrinkIsr", "()V") >= 1);
    }

    @Test
    void anUnknownVersionIsRefused() {
        assertEquals(List.of("Kafka 3.8.1 is not a version this agent knows (3.9.x, 4.0.x-4.4.x)"),
            VersionGate.check("3.8.1", Plan.Mode.KRAFT, KAFKA));
        assertEquals(List.of("Kafka 4.5.0 is not a version this agent knows (3.9.x, 4.0.x-4.4.x)"),
            VersionGate.check("4.5.0", Plan.Mode.KRAFT, KAFKA));
        assertEquals(List.of("Kafka 4.0.2 has no ZooKeeper mode"), VersionGate.check("4.0.2", Plan.Mode.ZOOKEEPER, KAFKA));
        assertEquals(List.of("no Kafka on the classpath (kafka/kafka-version.properties not found)"),
            VersionGate.check(null, Plan.Mode.KRAFT, KAFKA));
    }

    @Test
    void aMissingMethodIsRefusedByName() throws Exception {
        // A kafka.cluster.Replica whose updateFetchStateOrThrow has another signature.
        byte[] fake = new ByteBuddy().subclass(Object.class).name("kafka.cluster.Replica")
            .defineMethod("updateFetchStateOrThrow", void.class, Visibility.PUBLIC).withParameters(long.class)
            .intercept(FixedValue.originType()).make().getBytes();
        ClassFileLocator locator = new ClassFileLocator.Compound(
            ClassFileLocator.Simple.of("kafka.cluster.Replica", fake), KAFKA);
        assertEquals(List.of("method kafka.cluster.Replica#updateFetchStateOrThrow"
            + "(Lorg/apache/kafka/storage/internals/log/LogOffsetMetadata;JJJJ)V not found"),
            VersionGate.check("3.9.2", Plan.Mode.ZOOKEEPER, locator));
    }

    @Test
    void aMissingClassIsRefusedByName() {
        ClassFileLocator noZk = new ClassFileLocator() {
            @Override
            public Resolution locate(String name) throws java.io.IOException {
                return name.equals("kafka.zk.KafkaZkClient") ? new Resolution.Illegal(name) : KAFKA.locate(name);
            }

            @Override
            public void close() {
            }
        };
        assertEquals(List.of("class kafka.zk.KafkaZkClient not found"), VersionGate.check("3.9.2", Plan.Mode.ZOOKEEPER, noZk));
    }

    @Test
    void brokerConfigComesFromTheCommandLineWithOverrides(@TempDir Path dir) throws Exception {
        Path props = dir.resolve("b1.properties");
        Files.writeString(props, "broker.id=1\nzookeeper.connect=127.0.0.1:2181\ninter.broker.protocol.version=3.9\n");
        List<String> problems = new ArrayList<>();
        Properties p = VersionGate.brokerConfig("kafka.Kafka " + props
            + " --override inter.broker.protocol.version=2.6 --override broker.id=7", problems);
        assertEquals(List.of(), problems);
        assertNotNull(p);
        assertEquals("2.6", p.getProperty("inter.broker.protocol.version"));
        assertEquals("7", p.getProperty("broker.id"));
        assertEquals(Plan.Mode.ZOOKEEPER, VersionGate.mode(p, problems));
        assertEquals(List.of(), problems);
    }

    @Test
    void otherCommandLinesAreRefused() {
        List<String> problems = new ArrayList<>();
        assertNull(VersionGate.brokerConfig(null, problems));
        assertNull(VersionGate.brokerConfig("org.example.Main x", problems));
        assertNull(VersionGate.brokerConfig("kafka.Kafka", problems));
        assertNull(VersionGate.brokerConfig("kafka.Kafka /no/such/file.properties", problems));
        assertEquals(4, problems.size());
        assertEquals("cannot read the broker's command line (sun.java.command is not set)", problems.get(0));
        assertEquals("the JVM does not run kafka.Kafka (main class org.example.Main)", problems.get(1));
        assertEquals("kafka.Kafka was started without a properties file", problems.get(2));
        assertTrue(problems.get(3).startsWith("cannot read the broker properties /no/such/file.properties"));
    }

    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "2.6|ZOOKEEPER|",
        "2.6-IV0|ZOOKEEPER|",
        "2.4|ZOOKEEPER|",
        "2.7-IV1|ZOOKEEPER|",
        "2.7|ZK_ALTER_PARTITION|",
        "2.7-IV2|ZK_ALTER_PARTITION|",
        "3.9|ZK_ALTER_PARTITION|",
        "''|ZK_ALTER_PARTITION|",
        "banana||inter.broker.protocol.version=banana is not a version Kafka knows",
    })
    void theIbpPicksTheZooKeeperMode(String ibp, String mode, String problem) {
        Properties p = new Properties();
        p.setProperty("zookeeper.connect", "127.0.0.1:2181");
        if (!ibp.isEmpty()) {
            p.setProperty("inter.broker.protocol.version", ibp);
        }
        List<String> problems = new ArrayList<>();
        Plan.Mode m = VersionGate.mode(p, problems);
        if (problem == null) {
            assertEquals(List.of(), problems);
            assertEquals(Plan.Mode.valueOf(mode), m);
        } else {
            assertNull(m);
            assertEquals(List.of(problem), problems);
        }
    }

    @Test
    void kraftBrokersAreAcceptedControllersAndMigrationAreNot() {
        List<String> problems = new ArrayList<>();
        for (String roles : new String[] {"broker", "broker,controller", " controller , broker "}) {
            Properties kraft = new Properties();
            kraft.setProperty("process.roles", roles);
            assertEquals(Plan.Mode.KRAFT, VersionGate.mode(kraft, problems), roles);
        }
        assertEquals(List.of(), problems);
        Properties controller = new Properties();
        controller.setProperty("process.roles", "controller");
        assertNull(VersionGate.mode(controller, problems));
        assertEquals(List.of("process.roles=controller runs no broker: nothing to report"), problems);
        Properties migrating = new Properties();
        migrating.setProperty("zookeeper.connect", "127.0.0.1:2181");
        migrating.setProperty("zookeeper.metadata.migration.enable", "true");
        problems.clear();
        assertNull(VersionGate.mode(migrating, problems));
        assertEquals(List.of("zookeeper.metadata.migration.enable=true: KRaft migration is not modelled"), problems);
        problems.clear();
        assertNull(VersionGate.mode(new Properties(), problems));
        assertEquals(1, problems.size());
    }
}
