"""`isrwatch lab up|fault|down`: the command line over isrwatch.lab.cluster and isrwatch.lab.faults."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import faults, kraft
from .cluster import down, up
from .config import (
    DEFAULT_TOPICS,
    INTER_BROKER_PROTOCOL_VERSION,
    INTER_BROKER_PROTOCOL_VERSIONS,
    ZOOKEEPER_SESSION_TIMEOUT_MS,
    LabSpec,
    parse_topics,
)
from .jars import KAFKA_NEWEST, KRAFT_RELEASES, ZOOKEEPER_RELEASE, default_agent
from .record import EVENTS_TOPIC, MONITOR_ID, LabError

KRAFT_SESSION_S = kraft.BROKER_SESSION_TIMEOUT_MS // 1000
KRAFT_STALL_S = faults.stall_limit_s(kraft.BROKER_SESSION_TIMEOUT_MS, "kraft")
NEWEST_LINE = KAFKA_NEWEST.rsplit(".", 1)[0]
ELR = kraft.ELIGIBLE_LEADER_REPLICAS_VERSION
HEARTBEAT_MS = kraft.BROKER_HEARTBEAT_INTERVAL_MS
MARGIN_S = faults.FENCE_MARGIN_S
DESCRIPTION = f"""A real Kafka cluster on loopback, for demos, tests and operators who want to see isrwatch on the
real thing: N brokers, topics with replication factor 3 under a steady producer load, and a monitor broker
(id {MONITOR_ID}, a one-broker cluster of its own) for isrwatch's own topics, which faults never touch.

--kafka picks the Kafka release and with it the mode (default {NEWEST_LINE}, KRaft: `demo --real` runs the same):
  3.9 ({ZOOKEEPER_RELEASE})  ZooKeeper mode: ZooKeeper and N brokers. --ibp
      {INTER_BROKER_PROTOCOL_VERSION} (the default) writes ISR changes to ZooKeeper with the ZooKeeper-era propagation
      isrwatch models (2.5 s checks, 5 s linger, 60 s max delay); --ibp 3.9 sends AlterPartition to the
      controller instead. The monitor runs under its own ZooKeeper chroot.
  4.x (4.0 .. {NEWEST_LINE}; a line means its newest release, e.g. {NEWEST_LINE} = {KAFKA_NEWEST}; or an exact release:
      {", ".join(KRAFT_RELEASES)})
      KRaft: N combined broker+controller nodes (process.roles=broker,controller), every one a voter of one
      static quorum (controller.quorum.voters); on a 2-core machine three JVMs instead of three brokers
      and three controllers. The monitor is a one-node KRaft cluster of its own, same release. Formatted
      with eligible.leader.replicas.version={ELR} (ELR on, what a new 4.4.0 cluster gets by default; set
      explicitly for every 4.x release: 4.0.x defaults to 0). The nodes run
      broker.session.timeout.ms={KRAFT_SESSION_S * 1000} (Kafka's default: 9000) and broker.heartbeat.interval.ms=
      {HEARTBEAT_MS}, so that `stall` and `fence` are different faults: a stall of up to {KRAFT_STALL_S:g} s stays a
      stall (the leaders shrink the broker after --lag-ms, the controller does not fence it), a fence of at
      least {KRAFT_SESSION_S + MARGIN_S:g} s is fenced by the controller.

The jars come from Maven Central on first use, one set per release, into jars/kafka (3.9.2) or
jars/kafka-<release> of the tools directory: $ISRWATCH_TOOLS, else a clone's .tools/, else the user's
cache directory (~/.cache/isrwatch). `make test` and scripts/provision.sh fetch 3.9.2 and {KAFKA_NEWEST}."""

UP_EPILOG = f"""DIR/lab.json records the mode (zookeeper or kraft), kafka_version, the bootstrap servers, the
monitor's bootstrap, and per broker its id, pid, port, log directory (log.dirs) and its logs
(kafka_logs_dir: server.log, state-change.log, controller.log, scheduler.log with the real isr-expiration
run times). ZooKeeper mode adds the ZooKeeper address, zookeeper_session_timeout_ms and
inter_broker_protocol_version (state-change.log has every LeaderAndIsr at TRACE); KRaft adds the
controller quorum (controller_quorum: controller.quorum.voters, controller_bootstrap, each node's
controller_port), cluster_id, broker_session_timeout_ms, broker_heartbeat_interval_ms and the finalized
feature levels the cluster reported (features: metadata.version, eligible.leader.replicas.version, ...).
The cluster's truth: ZooKeeper's partition state znodes in ZooKeeper mode; in KRaft Kafka's admin API,
DescribeTopicPartitions (leader, leader epoch, ISR, ELR), DescribeMetadataQuorum (the active controller is
the quorum leader) and DescribeCluster (registered and fenced brokers). Brokers use 512 MB heaps, the
serial collector and small thread pools: the lab fits a 2-core machine.

With --agent, every monitored broker runs isrwatch-agent (agent/README.md) and sends its events to the
monitor broker's {EVENTS_TOPIC} topic, where isrwatch reads them:
  isrwatch lab up --dir var/lab --agent
  isrwatch run --source kafka:<monitor bootstrap>/{EVENTS_TOPIC} --profile agent \\
      --set replica_lag_time_max_ms=<the lab's --lag-ms> --store sqlite:///var/lab.db
The agent logs to each broker's stdout.log (kafka_logs_dir), prefixed isrwatch-agent:, with its
counters (written, dropped, failed) every stats.interval.ms."""

SESSION_S = ZOOKEEPER_SESSION_TIMEOUT_MS // 1000
FAULT_EPILOG = f"""kinds (every kind works in both modes, with the same flags):
  stall --broker ID --seconds N
      SIGSTOP the broker, SIGCONT after N s: its followers stop fetching and each leader drops it from the
      ISR once it is replica.lag.time.max.ms behind. A stall must stay shorter than the broker's session: a
      longer stop is a crash (ZooKeeper mode) or a fence (KRaft), not a stall. ZooKeeper mode:
      zookeeper.session.timeout.ms {SESSION_S} s, and as its client pings every third of the timeout only
      N <= {SESSION_S * 2 // 3} s is safe. KRaft: broker.session.timeout.ms {KRAFT_SESSION_S} s, heartbeats every
      {HEARTBEAT_MS // 1000} s, N <= {KRAFT_STALL_S:g} s is safe. A longer N gets a warning.
  fence --broker ID --seconds N
      SIGSTOP the broker past its session, SIGCONT after N s (N >= the session + {MARGIN_S:g} s:
      {SESSION_S + MARGIN_S:g} s in ZooKeeper mode, {KRAFT_SESSION_S + MARGIN_S:g} s in KRaft). KRaft: the controller
      fences it once its last heartbeat is broker.session.timeout.ms old, moves its leaderships and removes
      it from every ISR (the leaders it follows may have shrunk it already, after the lag); on SIGCONT it is
      unfenced and the leaders add it back. ZooKeeper mode: its session expires and the controller does the same.
  slow --broker ID --seconds N [--rate BYTES_PER_S]
      throttle the broker's replication as a follower with Kafka's replication quotas (default
      {faults.SLOW_RATE} B/s) for N s. Kafka throttles only a follower outside the ISR: one that fell behind (after
      a stall or restart) keeps fetching but stays behind until the throttle ends.
  kill --broker ID
      SIGKILL: once its session expires (ZooKeeper) or the controller fences it (KRaft) the controller
      moves its leaderships and removes it from every ISR.
  restart --broker ID
      SIGKILL if running, then a fresh start on the same log directory (ZooKeeper mode: once ZooKeeper has
      dropped the old registration; KRaft: at once, as a new incarnation).
  elect
      preferred leader election over every partition.
  controller-failover
      kill the active controller and restart it: another broker takes over with a new controller epoch.
      KRaft: the active controller is the metadata quorum's leader (DescribeMetadataQuorum); the other
      voters elect a new leader with a higher epoch.

Each fault returns at once and prints what it did; one with --seconds ends by itself."""

KIND_HELP = {
    "stall": "pause a broker (SIGSTOP, SIGCONT after N s) so its followers stop fetching",
    "fence": "pause a broker past its session timeout so the controller fences it, then let it come back",
    "slow": "throttle a broker's replication as a follower with Kafka's replication quotas for N s",
    "kill": "SIGKILL a broker: the controller moves its leaderships once its session expires",
    "restart": "SIGKILL a broker if running, then start it afresh on the same log directory",
    "elect": "run a preferred leader election over every partition",
    "controller-failover": "kill the active controller and restart it",
}


def add_kafka_option(p: argparse.ArgumentParser, default: str | None, what: str) -> None:
    """`--kafka VERSION`, the release a lab runs, as every command that starts a lab takes it (`lab up`, `demo
    --real`, `bench latency`); `what` says what it is for there."""
    p.add_argument(
        "--kafka",
        default=default,
        metavar="VERSION",
        help=f"{what}: 3.9 (ZooKeeper mode, {ZOOKEEPER_RELEASE}) or 4.x (KRaft, AlterPartition; "
        f"a line such as 4.4 means its newest release, {KAFKA_NEWEST} for 4.4, or an exact release)"
        + ("" if default is None else f" (default {default})"),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="lab_command", required=True, metavar="up|fault|down")

    u = sub.add_parser(
        "up",
        help="start the brokers (ZooKeeper mode or KRaft), the monitor broker, topics and a producer",
        description=DESCRIPTION,
        epilog=UP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    u.add_argument(
        "--dir",
        required=True,
        type=Path,
        help="the lab's directory: configs, data, logs, lab.json "
        "(new, empty, or a stopped lab's, whose data is replaced)",
    )
    add_kafka_option(u, NEWEST_LINE, "the Kafka release")
    u.add_argument(
        "--ibp",
        choices=INTER_BROKER_PROTOCOL_VERSIONS,
        help=f"ZooKeeper mode only: inter.broker.protocol.version, {INTER_BROKER_PROTOCOL_VERSION} (the default: ISR "
        "changes written to ZooKeeper) or 3.9 (AlterPartition to the controller)",
    )
    u.add_argument(
        "--brokers", type=int, default=3, help="number of brokers (KRaft: combined nodes), ids 1..N (3..9; default 3)"
    )
    u.add_argument(
        "--lag-ms",
        type=int,
        default=10_000,
        help="replica.lag.time.max.ms (>= 500, Kafka's replica.fetch.wait.max.ms; default 10000)",
    )
    u.add_argument(
        "--topics",
        default=DEFAULT_TOPICS,
        metavar="NAME:PARTITIONS,...",
        help=f"topics to create, replication factor 3 (default {DEFAULT_TOPICS})",
    )
    u.add_argument(
        "--rate",
        type=int,
        default=200,
        metavar="RECORDS_PER_S",
        help="steady producer load over every partition of the topics, 100-byte records, acks=1 "
        "(default 200; 0 = none)",
    )
    u.add_argument(
        "--agent",
        nargs="?",
        const="",
        metavar="JAR",
        help="attach a Java agent to every broker but the monitor: "
        f"-javaagent:JAR=bootstrap.servers=<monitor>,topic={EVENTS_TOPIC},cluster=lab[,OPTIONS]. Without JAR: "
        "isrwatch-agent from $ISRWATCH_AGENT, else a clone's agent/target/isrwatch-agent.jar (`make agent` builds "
        "it), else isrwatch-agent.jar in the tools directory ($ISRWATCH_TOOLS, else ~/.cache/isrwatch): here "
        f"{default_agent()}",
    )
    u.add_argument(
        "--agent-options",
        default="",
        metavar="K=V,...",
        help="more options for the agent (agent/README.md), after the three above (a key given again wins); "
        "{broker} in a value is the broker's id, {logs} its kafka_logs_dir, e.g. file={logs}/agent.jsonl",
    )
    u.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        metavar="SECONDS",
        help="give up when the brokers have not started, or the topics have no full ISRs, after this long "
        "(default 180)",
    )

    f = sub.add_parser(
        "fault",
        help="inject a real fault: stall, fence, slow, kill, restart, elect, controller-failover",
        description="Inject a fault into the lab's brokers (never the monitor broker).",
        epilog=FAULT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kinds = f.add_subparsers(dest="kind", required=True, metavar="KIND")
    for kind in faults.KINDS:
        k = kinds.add_parser(
            kind,
            help=KIND_HELP[kind],
            description=KIND_HELP[kind] + ".",
            epilog=FAULT_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        k.add_argument("--dir", required=True, type=Path, help="the lab's directory")
        if kind in ("stall", "fence", "slow", "kill", "restart"):
            k.add_argument("--broker", required=True, type=int, metavar="ID", help="the broker's id")
        if kind in ("stall", "fence", "slow"):
            k.add_argument("--seconds", required=True, type=float, metavar="N", help="how long the fault lasts")
        if kind == "slow":
            k.add_argument(
                "--rate",
                type=int,
                default=faults.SLOW_RATE,
                metavar="BYTES_PER_S",
                help=f"follower.replication.throttled.rate (default {faults.SLOW_RATE})",
            )

    d = sub.add_parser(
        "down",
        help="stop everything the lab runs; data and logs stay",
        description="Stop the producer, fault helpers, brokers and ZooKeeper (in KRaft: the nodes and the monitor; "
        "no process left, ports free). Data and logs stay in DIR.",
    )
    d.add_argument("--dir", required=True, type=Path, help="the lab's directory")
    d.add_argument(
        "--graceful",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first SIGTERM the brokers and give them this long to shut down as Kafka does (controlled "
        "shutdown; an agent drains its events), then SIGKILL what is left (default 0: SIGKILL at once)",
    )


def _progress(message: str) -> None:
    print(f"isrwatch lab: {message}", file=sys.stderr, flush=True)


def spec_from(args: argparse.Namespace) -> LabSpec:
    options = []
    for pair in filter(None, args.agent_options.split(",")):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise LabError(f"--agent-options {args.agent_options!r}: expected K=V[,K=V...], got {pair!r}")
        options.append((key, value))
    if options and args.agent is None:
        raise LabError("--agent-options: options for an agent, but no --agent to attach")
    return LabSpec(
        brokers=args.brokers,
        lag_ms=args.lag_ms,
        topics=parse_topics(args.topics),
        rate=args.rate,
        agent=str(default_agent()) if args.agent == "" else args.agent,
        agent_options=tuple(options),
        start_timeout_s=args.timeout,
        kafka=args.kafka,
        ibp=args.ibp,
    )


def main(args: argparse.Namespace) -> int:
    try:
        if args.lab_command == "up":
            lab = up(args.dir, spec_from(args), _progress)
            lines = [
                f"{lab.dir}/lab.json",
                f"  bootstrap servers  {lab.bootstrap_servers}",
                f"  monitor bootstrap  {lab.monitor_bootstrap}",
                f"  mode               {lab.mode}, Kafka {lab.kafka_version}",
                (
                    f"  ZooKeeper          {lab.zookeeper_connect}"
                    if lab.zookeeper_connect
                    else f"  controller quorum  {lab.controller_quorum}"
                ),
                *(
                    [f"  agent              {lab.agent} -> {lab.monitor_bootstrap}/{lab.events_topic}"]
                    * bool(lab.agent)
                ),
                f"  faults             isrwatch lab fault stall --broker 2 --seconds 12 --dir {lab.dir}",
                f"  stop               isrwatch lab down --dir {lab.dir}",
            ]
            print("\n".join(lines))
        elif args.lab_command == "down":
            down(args.dir, _progress, args.graceful)
        else:
            kind = args.kind
            if kind == "stall":
                said = faults.stall(args.dir, args.broker, args.seconds)
            elif kind == "fence":
                said = faults.fence(args.dir, args.broker, args.seconds)
            elif kind == "slow":
                said = faults.slow(args.dir, args.broker, args.seconds, args.rate)
            elif kind == "kill":
                said = faults.kill(args.dir, args.broker)
            elif kind == "restart":
                said = faults.restart(args.dir, args.broker)
            elif kind == "elect":
                said = faults.elect(args.dir)
            else:
                said = faults.controller_failover(args.dir)
            print(said)
    except LabError as exc:
        print(f"isrwatch lab: error: {exc}", file=sys.stderr)
        return 2
    return 0
