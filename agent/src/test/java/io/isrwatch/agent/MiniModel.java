package io.isrwatch.agent;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * A small Java rendering of isrwatch's leader model (SPEC §4 with the 3.9 rules: min-ISR gate and caught-up outsiders
 * on the HW, lastFetchLeaderLogEndOffset = max), for the coalescer's equivalence property. It replays a stream in
 * (ts, seq) order and records every decision, every HW move and every follower's state at each isr-expiration tick.
 */
final class MiniModel {

    record Stamped(long seq, Event event) {
    }

    static final class Follower {
        long leo = -1;
        long lcu;
        long lfl;
        long lfm;
    }

    static final class Part {
        int leader = -1;
        int leaderEpoch = -1;
        List<Integer> replicas = List.of();
        TreeSet<Integer> isr = new TreeSet<>();
        long hw;
        long leaderLeo;
        long leoStart;
        TreeMap<Integer, Follower> followers = new TreeMap<>();
    }

    final long lag;
    final int minIsr;
    final Map<String, Part> parts = new TreeMap<>();
    final List<String> outputs = new ArrayList<>();

    MiniModel(long lag, int minIsr) {
        this.lag = lag;
        this.minIsr = minIsr;
    }

    static List<String> replay(List<Stamped> stream, long lag, int minIsr) {
        List<Stamped> sorted = new ArrayList<>(stream);
        sorted.sort(Comparator.comparingLong((Stamped s) -> s.event().sortTs()).thenComparingLong(Stamped::seq));
        MiniModel m = new MiniModel(lag, minIsr);
        for (Stamped s : sorted) {
            m.apply(s.event());
        }
        m.snapshot("end", Long.MAX_VALUE);
        return m.outputs;
    }

    private Part part(String topic, int partition) {
        return parts.computeIfAbsent(topic + "-" + partition, k -> new Part());
    }

    void apply(Event e) {
        if (e instanceof Event.LeaderAndIsr lai) {
            Part p = part(lai.topic(), lai.partition());
            if (lai.leaderEpoch() <= p.leaderEpoch) {
                outputs.add("rejected " + lai.topic() + "-" + lai.partition() + " @" + lai.ts());
                return;
            }
            boolean newLeader = lai.leader() != p.leader;
            p.leader = lai.leader();
            p.leaderEpoch = lai.leaderEpoch();
            p.replicas = new ArrayList<>();
            for (int r : lai.replicas()) {
                p.replicas.add(r);
            }
            p.isr = new TreeSet<>();
            for (int r : lai.isr()) {
                p.isr.add(r);
            }
            TreeMap<Integer, Follower> fs = new TreeMap<>();
            for (int r : lai.replicas()) {
                if (r != lai.leader()) {
                    fs.put(r, p.followers.getOrDefault(r, new Follower()));
                }
            }
            p.followers = fs;
            p.leaderLeo = lai.leaderLeo();
            p.leoStart = lai.leaderLeo();
            p.hw = lai.hw();
            for (Map.Entry<Integer, Follower> f : fs.entrySet()) {
                boolean inSync = p.isr.contains(f.getKey());
                Follower x = f.getValue();
                if (newLeader) {
                    x.leo = -1;
                    x.lfl = -1;
                    x.lfm = 0;
                } else {
                    x.lfl = p.leaderLeo;
                    x.lfm = inSync ? lai.ts() : 0;
                }
                x.lcu = inSync ? lai.ts() : 0;
            }
            outputs.add("lai " + lai.topic() + "-" + lai.partition() + " @" + lai.ts());
            hwRule(lai.topic() + "-" + lai.partition(), p, lai.ts());
        } else if (e instanceof Event.Fetch f) {
            Part p = part(f.topic(), f.partition());
            Follower x = p.followers.get(f.replica());
            if (p.leader < 0 || x == null || (f.currentLeaderEpoch() >= 0 && f.currentLeaderEpoch() != p.leaderEpoch)
                || f.fetchOffset() > f.leaderLeo()) {
                return;
            }
            long o = f.fetchOffset();
            long l = f.leaderLeo();
            long clock = f.fetchMs(); // Kafka's fetchTimeMs: the follower's times and the HW rule's now
            if (o >= l) {
                x.lcu = Math.max(x.lcu, clock);
            } else if (o >= x.lfl) {
                x.lcu = Math.max(x.lcu, x.lfm);
            }
            boolean leoChanged = x.leo != o;
            x.leo = o;
            x.lfl = Math.max(l, x.lfl);
            x.lfm = clock;
            p.leaderLeo = Math.max(p.leaderLeo, l);
            String key = f.topic() + "-" + f.partition();
            if (!p.isr.contains(f.replica()) && x.leo >= p.hw && x.leo >= p.leoStart) {
                p.isr.add(f.replica());
                outputs.add("expand " + key + " r" + f.replica() + " @" + f.ts() + " isr=" + p.isr);
                hwRule(key, p, clock);
            }
            if (leoChanged) {
                hwRule(key, p, clock);
            }
        } else if (e instanceof Event.Append a) {
            Part p = part(a.topic(), a.partition());
            if (p.leader < 0) {
                return;
            }
            p.leaderLeo = Math.max(p.leaderLeo, a.leaderLeo());
            hwRule(a.topic() + "-" + a.partition(), p, a.ts());
        } else if (e instanceof Event.Tick t && t.task().equals(Event.Tick.ISR_EXPIRATION)) {
            for (Map.Entry<String, Part> en : parts.entrySet()) {
                Part p = en.getValue();
                if (p.leader < 0) {
                    continue;
                }
                List<String> out = new ArrayList<>();
                for (int r : new ArrayList<>(p.isr)) {
                    Follower x = p.followers.get(r);
                    if (r != p.leader && x != null && x.leo != p.leaderLeo && t.ts() - x.lcu > lag) {
                        p.isr.remove(r);
                        out.add(r + (t.ts() - x.lfm > lag ? ":stuck" : ":slow"));
                    }
                }
                if (!out.isEmpty()) {
                    outputs.add("shrink " + en.getKey() + " " + out + " @" + t.ts() + " isr=" + p.isr);
                    hwRule(en.getKey(), p, t.ts());
                }
            }
            snapshot("tick", t.ts());
        }
    }

    private void hwRule(String key, Part p, long now) {
        if (p.isr.size() < Math.min(minIsr, p.replicas.size())) {
            return;
        }
        long n = p.leaderLeo;
        for (Map.Entry<Integer, Follower> f : p.followers.entrySet()) {
            Follower x = f.getValue();
            boolean caughtUp = p.leaderLeo == x.leo || now - x.lcu <= lag;
            if (x.leo < n && (p.isr.contains(f.getKey()) || caughtUp)) {
                n = x.leo;
            }
        }
        if (n > p.hw) {
            p.hw = n;
            outputs.add("hw " + key + "=" + n + " @" + now);
        }
    }

    private void snapshot(String what, long ts) {
        StringBuilder sb = new StringBuilder(what).append(" @").append(ts);
        for (Map.Entry<String, Part> en : parts.entrySet()) {
            Part p = en.getValue();
            sb.append(' ').append(en.getKey()).append("{hw=").append(p.hw).append(",leo=").append(p.leaderLeo)
                .append(",isr=").append(p.isr);
            for (Map.Entry<Integer, Follower> f : p.followers.entrySet()) {
                Follower x = f.getValue();
                sb.append(",r").append(f.getKey()).append('=').append(x.leo).append('/').append(x.lcu).append('/')
                    .append(x.lfl).append('/').append(x.lfm);
            }
            sb.append('}');
        }
        outputs.add(sb.toString());
    }
}
