package io.isrwatch.agent;

import static net.bytebuddy.matcher.ElementMatchers.hasDescriptor;
import static net.bytebuddy.matcher.ElementMatchers.isDeclaredBy;
import static net.bytebuddy.matcher.ElementMatchers.nameStartsWith;
import static net.bytebuddy.matcher.ElementMatchers.named;
import static net.bytebuddy.matcher.ElementMatchers.not;

import java.lang.instrument.Instrumentation;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicReference;
import net.bytebuddy.agent.builder.AgentBuilder;
import net.bytebuddy.asm.Advice;
import net.bytebuddy.asm.AsmVisitorWrapper;
import net.bytebuddy.asm.MemberSubstitution;
import net.bytebuddy.description.type.TypeDescription;
import net.bytebuddy.dynamic.ClassFileLocator;
import net.bytebuddy.dynamic.DynamicType;
import net.bytebuddy.utility.JavaModule;
import org.apache.kafka.common.utils.Time;

/**
 * {@code -javaagent:isrwatch-agent.jar=OPTIONS}: checks the Kafka it is attached to, then instruments it. Anything
 * wrong (a bad option, an unknown Kafka, a mode it does not model, a hook point missing) gives one log line and leaves
 * the broker untouched; nothing here can stop the broker from starting.
 */
public final class Agent {

    private Agent() {
    }

    public static void premain(String args, Instrumentation inst) {
        try {
            start(args, inst);
        } catch (Throwable t) {
            Hooks.disable("start failed: " + t);
            Log.warn("not instrumenting the broker: start failed: " + t);
        }
    }

    private static void start(String args, Instrumentation inst) throws Exception {
        Options options;
        try {
            options = Options.parse(args);
        } catch (Options.OptionException e) {
            Log.warn("not instrumenting the broker: bad option " + e.getMessage());
            return;
        }
        ClassLoader loader = ClassLoader.getSystemClassLoader();
        String version = VersionGate.kafkaVersion(loader);
        List<String> problems = new ArrayList<>();
        Plan.Mode mode = null;
        Properties config = VersionGate.brokerConfig(System.getProperty("sun.java.command"), problems);
        if (config != null) {
            mode = VersionGate.mode(config, problems);
        }
        if (mode != null) {
            problems.addAll(VersionGate.check(version, mode, ClassFileLocator.ForClassLoader.of(loader)));
        }
        if (!problems.isEmpty()) {
            Log.warn("not instrumenting the broker: " + String.join("; ", problems));
            return;
        }

        Sink main;
        AtomicReference<Properties> producerConfig = new AtomicReference<>();
        if (options.toKafka()) {
            main = new KafkaSink(options.queueCapacity, options.topic, options.cluster, Hooks::brokerId,
                producerConfig::get);
        } else {
            main = new FileSink("file", options.file, options.queueCapacity, options.cluster, Hooks::brokerId);
        }
        Sink raw = options.rawFile == null ? null
            : new FileSink("raw", options.rawFile, options.queueCapacity, options.cluster, Hooks::brokerId);
        Recorder recorder = new Recorder(main, raw, options.coalesce, System.currentTimeMillis() * 1000,
            options.watermarkIntervalMs, options.watermarkSlackMs, System::currentTimeMillis);
        Hooks.activate(recorder, version, options.toKafka() ? options.topic : null, mode,
            brokerConfig -> producerConfig.set(producerProperties(options, brokerConfig)));

        List<Plan.Hook> hooks = Plan.hooks(Plan.Line.of(version), mode);
        install(inst, hooks);
        main.start();
        if (raw != null) {
            raw.start();
        }
        startTimer(recorder, options);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> shutdown(recorder), "isrwatch-agent-shutdown"));
        Log.info("instrumenting Kafka " + version + " in mode " + mode + " (isr_protocol " + mode.isrProtocol + ", "
            + hooks.size() + " hooks); events to "
            + (options.toKafka() ? "topic " + options.topic : options.file) + (raw != null ? ", raw to " + options.rawFile
            : "") + ", coalesce=" + options.coalesce + ", watermark.interval.ms=" + options.watermarkIntervalMs
            + ", cluster=" + options.cluster);
    }

    /** The producer's settings once the broker's own listeners are known (the default bootstrap). */
    private static Properties producerProperties(Options options, Object config) {
        String bootstrap = options.bootstrapServers;
        String protocol = null;
        if (bootstrap == null) {
            // KafkaConfig#listeners: a Seq of kafka.cluster.EndPoint (3.9, 4.0) or org.apache.kafka.common.Endpoint.
            Object first;
            try {
                first = Reflect.list(Reflect.call(config, "listeners")).get(0);
                String host = (String) Reflect.call(first, "host");
                host = host == null || host.isBlank() || host.equals("0.0.0.0") ? "localhost" : host;
                bootstrap = host + ":" + Reflect.intValue(first, "port");
                protocol = ((org.apache.kafka.common.security.auth.SecurityProtocol)
                    Reflect.call(first, "securityProtocol")).name;
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("cannot read the broker's listeners: " + e, e);
            }
        }
        return KafkaSink.producerProperties(bootstrap, protocol, Hooks.brokerId(), options.producer);
    }

    /** {@code -Disrwatch.agent.debug=true}: log each class the agent transforms. */
    private static final boolean DEBUG = Boolean.getBoolean("isrwatch.agent.debug");

    private static void install(Instrumentation inst, List<Plan.Hook> hooks) throws NoSuchMethodException {
        Map<String, List<Plan.Hook>> byType = new LinkedHashMap<>();
        for (Plan.Hook h : hooks) {
            byType.computeIfAbsent(h.type(), k -> new ArrayList<>()).add(h);
        }
        AgentBuilder builder = new AgentBuilder.Default()
            .disableClassFormatChanges()
            .with(AgentBuilder.RedefinitionStrategy.RETRANSFORMATION)
            .with(new AgentBuilder.Listener.Adapter() {
                @Override
                public void onError(String typeName, ClassLoader classLoader, JavaModule module, boolean loaded,
                                    Throwable throwable) {
                    Hooks.disable("instrumenting " + typeName + " failed: " + throwable);
                }

                @Override
                public void onTransformation(TypeDescription type, ClassLoader classLoader, JavaModule module,
                                             boolean loaded, DynamicType dynamicType) {
                    if (DEBUG) {
                        Log.info("instrumented " + type.getName() + (loaded ? " (retransformed)" : ""));
                    }
                }

                @Override
                public void onIgnored(TypeDescription type, ClassLoader classLoader, JavaModule module,
                                      boolean loaded) {
                    if (DEBUG && byType.containsKey(type.getName())) {
                        Log.info("ignored " + type.getName() + " (loader " + classLoader + ")");
                    }
                }
            })
            .ignore(not(nameStartsWith("kafka.").or(nameStartsWith("org.apache.kafka.server."))));
        for (Map.Entry<String, List<Plan.Hook>> e : byType.entrySet()) {
            List<AsmVisitorWrapper> visitors = new ArrayList<>();
            for (Plan.Hook h : e.getValue()) {
                visitors.add(visitor(h));
            }
            builder = builder.type(named(e.getKey())).transform(
                (DynamicType.Builder<?> b, TypeDescription type, ClassLoader cl, JavaModule m,
                 java.security.ProtectionDomain pd) -> {
                    DynamicType.Builder<?> result = b;
                    for (AsmVisitorWrapper v : visitors) {
                        result = result.visit(v);
                    }
                    return result;
                });
        }
        // Load (not initialise) every class to instrument before the transformer is installed, so the
        // retransformation pass sees all of them. Otherwise a class first loaded as a side effect of retransforming
        // another (the JVM verifies the retransformed Partition, which loads the 4.1+ Java Replica) is loaded inside
        // ByteBuddy's transformer, which skips classes loaded re-entrantly: Replica was never instrumented and no
        // fetch was reported (seen on a 4.4.0 broker).
        ClassLoader loader = ClassLoader.getSystemClassLoader();
        for (String type : byType.keySet()) {
            try {
                Class.forName(type, false, loader);
            } catch (ClassNotFoundException | LinkageError e) {
                Log.warn("cannot preload " + type + ": " + e);
            }
        }
        builder.installOn(inst);
    }

    private static AsmVisitorWrapper visitor(Plan.Hook h) throws NoSuchMethodException {
        var method = named(h.method()).and(hasDescriptor(h.descriptor()));
        if (h.exit() != null) {
            var exit = Advice.withCustomMapping().bind(Advices.Exited.class, h.exit());
            return (h.advice() == null ? exit.to(Advices.Exit.class) : exit.to(h.advice(), Advices.Exit.class))
                .on(method);
        }
        if (h.advice() != null) {
            return Advice.to(h.advice()).on(method);
        }
        return MemberSubstitution.relaxed()
            .method(named("milliseconds").and(isDeclaredBy(named(Plan.TIME))))
            .replaceWith(ZkHooks.class.getMethod(h.clock(), Time.class))
            .on(method);
    }

    private static volatile boolean stopping;

    /** Every 100 ms (or each watermark.interval.ms when shorter): age flushes, watermarks, the counters line. */
    private static void startTimer(Recorder recorder, Options options) {
        long period = options.watermarkIntervalMs > 0 ? Math.min(100, options.watermarkIntervalMs) : 100;
        Thread t = new Thread(() -> {
            long nextStats = options.statsIntervalMs > 0 ? System.currentTimeMillis() + options.statsIntervalMs
                : Long.MAX_VALUE;
            while (!stopping) {
                try {
                    Thread.sleep(period);
                    long now = System.currentTimeMillis();
                    if (Hooks.recorder() == recorder) {
                        recorder.timerTurn();
                        recorder.flushHeldBefore(now - options.coalesceMaxHoldMs);
                        if (Hooks.brokerId() >= 0) { // a line needs its broker, known once the broker starts
                            recorder.watermarkIfDue();
                        }
                    }
                    if (now >= nextStats) {
                        nextStats = now + options.statsIntervalMs;
                        Log.info(recorder.stats() + " hook_errors=" + Hooks.errors());
                    }
                } catch (InterruptedException e) {
                    return;
                } catch (Throwable e) {
                    Log.warn("timer: " + e);
                }
            }
        }, "isrwatch-agent-timer");
        t.setDaemon(true);
        t.start();
    }

    private static void shutdown(Recorder recorder) {
        try {
            Hooks.awaitBrokerStopped(30_000);
            stopping = true;
            recorder.flushAll();
            recorder.main().close(3000);
            if (recorder.raw() != null) {
                recorder.raw().close(3000);
            }
            Log.info("stopped: " + recorder.stats() + " hook_errors=" + Hooks.errors());
        } catch (Throwable t) {
            Log.warn("shutdown: " + t);
        }
    }
}
