"""`isrwatch lab` on real Kafka: what `up` starts, and each fault's effect on the cluster, read from
ZooKeeper and Kafka's admin API (never from isrwatch). Every fault test leaves the cluster healthy.

The times each fault took are printed (pytest -s shows them); no test asserts a duration.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from isrwatch.cli import main
from isrwatch.lab import config, faults
from isrwatch.lab.cluster import up
from isrwatch.lab.config import LabSpec
from isrwatch.lab.jars import default_agent, kafka_release, kafka_set
from isrwatch.lab.record import CHROOT, MONITOR_CHROOT, MONITOR_ID, Lab, LabError, load
from isrwatch.lab.truth import registered_brokers, registrations, wait_until, zookeeper
from isrwatch.processes.detached import alive
from isrwatch.state.config import Config
from isrwatch.state.replay import replay
from isrwatch.streaming.kafka_source import timestamp_types
from tests.support.lab import (
    AGENT_OPTIONS,
    LAG_MS,
    Restart,
    Stall,
    active_controller,
    after_last_fault,
    current,
    every_record,
    fault_begins,
    fault_over,
    followed,
    growing,
    led,
    process_state,
    progress,
    report,
    running_lab,
    stall_over,
    states,
    wait_for,
    wait_healthy,
)


def replica_sizes(lab: Lab, broker: int, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Bytes of each replica on the broker's disk (DescribeLogDirs): grows while the follower fetches."""
    with faults.admin(lab.bootstrap_servers) as client:
        [answer] = client.describe_log_dirs(list(lab.topics), brokers=[broker])
    return {
        (t["name"], p["partition_index"]): p["partition_size"]
        for d in answer["log_dirs"]
        for t in d["topics"]
        for p in t["partitions"]
        if (t["name"], p["partition_index"]) in partitions
    }


def test_up_starts_zookeeper_mode_brokers_with_ibp_2_6_a_monitor_topics_and_load(lab: Lab, lab_spec: LabSpec):
    record = json.loads((Path(lab.dir) / "lab.json").read_text())
    assert {"bootstrap_servers", "monitor_bootstrap", "zookeeper", "zookeeper_connect"} <= set(record)
    assert [(b["id"], b["port"]) for b in record["brokers"]] == [
        (1, lab.brokers[0].port),
        (2, lab.brokers[1].port),
        (3, lab.brokers[2].port),
    ]
    now = current(lab)  # the agent's tests, which run first, restarted some brokers (new pids)
    assert all(alive(b) and Path(b.log_dir).is_dir() for b in [*now.brokers, now.monitor])
    with zookeeper(lab.zookeeper) as zk:
        assert registered_brokers(zk, CHROOT) == {1, 2, 3}
        assert registered_brokers(zk, MONITOR_CHROOT) == {MONITOR_ID}
    now = states(lab)
    assert sorted(now) == [("orders", p) for p in range(6)] + [("payments", p) for p in range(3)]
    assert all(len(s.replicas) == 3 and set(s.isr) == set(s.replicas) for s in now.values())
    assert faults.broker_configs(lab, 2, ["inter.broker.protocol.version", "replica.lag.time.max.ms"]) == {
        "inter.broker.protocol.version": "2.6",
        "replica.lag.time.max.ms": str(LAG_MS),
    }
    with faults.admin(lab.monitor_bootstrap) as client:
        assert lab.events_topic in client.list_topics()
    # Kafka stamps the events on append: a record's timestamp is its arrival, not the sending broker's clock.
    assert timestamp_types(lab.monitor_bootstrap, [lab.events_topic]) == {lab.events_topic: "LogAppendTime"}

    assert growing(lab, list(now))  # a follower that stops fetching really falls behind

    # Every LeaderAndIsr a broker received is in its state-change.log (TRACE), the ISR checks' runs in scheduler.log.
    logs = Path(lab.brokers[0].kafka_logs_dir)
    assert (
        "Received LeaderAndIsr request LeaderAndIsrPartitionState(topicName='orders'"
        in (logs / "state-change.log").read_text()
    )
    assert "Beginning execution of scheduled task 'isr-expiration'" in (logs / "scheduler.log").read_text()


def test_the_agent_instruments_every_monitored_broker_but_not_the_monitor(lab: Lab, lab_spec: LabSpec):
    expected = (
        f"-javaagent:{Path(lab_spec.agent).resolve()}=bootstrap.servers={lab.monitor_bootstrap},"
        f"topic=isrwatch.events,cluster=lab,stats.interval.ms=10000"
    )
    for broker in current(lab).brokers:
        argv = Path(f"/proc/{broker.pid}/cmdline").read_bytes().decode().split("\0")
        assert expected in argv, argv
        said = Path(broker.log).read_text()  # the agent logs to the broker's stderr
        assert "isrwatch-agent: instrumenting Kafka 3.9.2" in said and "not instrumenting" not in said, said
        assert f"isrwatch-agent: sending events to topic isrwatch.events at {lab.monitor_bootstrap}" in said, said
    monitor = Path(f"/proc/{lab.monitor.pid}/cmdline").read_text().split("\0")
    assert not any(a.startswith("-javaagent") for a in monitor)


def test_agent_options_may_name_their_broker(tmp_path: Path):
    spec = LabSpec(agent=str(tmp_path / "a.jar"), agent_options=(("file", "{logs}/agent-{broker}.jsonl"),))
    assert config._agent_argument(spec, "127.0.0.1:9", 2, tmp_path / "logs") == [
        f"-javaagent:{tmp_path / 'a.jar'}=bootstrap.servers=127.0.0.1:9,topic=isrwatch.events,cluster=lab,"
        f"file={tmp_path / 'logs'}/agent-2.jsonl"
    ]


def test_up_agent_without_a_jar_takes_the_project_agent_and_names_make_agent_when_it_is_not_built(
    tmp_path: Path, monkeypatch, capsys
):
    unbuilt = tmp_path / "agent" / "target" / "isrwatch-agent.jar"
    monkeypatch.setenv("ISRWATCH_AGENT", str(unbuilt))
    assert main(["lab", "up", "--agent", "--dir", str(tmp_path / "lab")]) == 2
    assert f"--agent: {unbuilt} is not built yet: run `make agent`" in capsys.readouterr().err
    assert main(["lab", "up", "--agent", str(tmp_path / "other.jar"), "--dir", str(tmp_path / "lab")]) == 2
    assert f"--agent {tmp_path / 'other.jar'}: no such file" in capsys.readouterr().err
    assert not (tmp_path / "lab").exists()  # nothing started


def test_stall_drops_the_paused_broker_from_the_isr_of_every_partition_it_follows(session_stall: Stall):
    stall = session_stall  # run once for the session (tests/support/lab.py run_stall): the agent's tests read it too
    assert "SIGSTOP" in stall.said and "warning" not in stall.said
    assert stall.state == "T"
    assert stall.follows
    before, now = stall.before, stall.shrunk
    for key in stall.follows:  # the leaders shrank their ISRs: same leader and leader epoch, a new partition epoch
        assert now[key].leader == before[key].leader and now[key].leader_epoch == before[key].leader_epoch
        assert now[key].leader in now[key].isr and now[key].partition_epoch > before[key].partition_epoch
    assert stall.registered  # a stall, not a crash: its ZooKeeper session lived on
    assert stall.window.end_ms  # every ISR full again after SIGCONT


def test_slow_keeps_a_follower_that_fell_behind_fetching_but_out_of_the_isr(lab: Lab):
    wait_healthy(lab)
    # This pauses a leader; the reality suite audits it. Not within a lag of the last fault's rejoins: a clean CI run
    # that paused broker 1 a second after the session stall's follower rejoined saw the broker keep that follower on
    # resuming where the model shrank it (a race of its resumed threads the events did not show).
    after_last_fault(LAG_MS / 1000)
    wait_healthy(lab)
    slowed = 1
    follows = followed(states(lab), slowed)
    # 8 KB/s: well below the ~20 KB/s the producer sends to its replicas, and Kafka lets a fetch through
    # every few seconds (the quota is a rate over 11 one-second samples; a fetch brings up to 8 KB a partition).
    window = fault_begins("slow")
    said = faults.slow(Path(lab.dir), slowed, 25, rate=8192)
    assert "8192 B/s" in said
    # `slow` returns once the broker applies the throttle (topics first): a stall right after finds it in place.
    assert faults.broker_configs(lab, slowed, [faults.THROTTLED_RATE]) == {faults.THROTTLED_RATE: "8192"}
    [slow] = current(lab).faults
    # Kafka throttles only a follower outside the ISR: a short stall puts this one behind.
    faults.stall(Path(lab.dir), slowed, 10)
    wait_for(
        lab, f"broker {slowed} out of the ISRs", lambda s: all(slowed not in s[k].isr for k in follows), timeout=40
    )
    fault_over(lab, "stall")
    assert process_state(current(lab).broker(slowed).pid) != "T"
    # Until the throttle ends it fetches (its replicas grow) but stays behind, out of the ISR.
    sizes = [sum(replica_sizes(lab, slowed, follows).values())]
    while time.time() * 1000 < slow.ends_ms - 2000:
        now = states(lab)
        assert all(slowed not in now[k].isr for k in follows), now
        sizes.append(sum(replica_sizes(lab, slowed, follows).values()))
        time.sleep(0.5)
    assert sizes[-1] > sizes[0], sizes
    fault_over(lab, "slow")
    assert faults.broker_configs(lab, slowed, [faults.THROTTLED_RATE]) == {faults.THROTTLED_RATE: None}
    report(f"slow: broker {slowed} back in every ISR once the throttle ended after", wait_healthy(lab))
    window.over()


def test_a_paused_broker_is_neither_slowed_nor_stalled_again_and_a_slow_ending_in_a_stall_waits_for_it(
    lab: Lab, capsys
):
    wait_healthy(lab)
    broker = 2
    faults.slow(Path(lab.dir), broker, 2)
    # Shorter than the 5 s lag: the pause alone shrinks no ISR. The slow ends while the broker is stopped.
    faults.stall(Path(lab.dir), broker, 4)
    [stall] = [f for f in current(lab).faults if f.kind == "stall"]
    until = time.strftime("%H:%M:%S", time.localtime(stall.ends_ms / 1000))
    for kind in ("slow", "stall"):
        assert main(["lab", "fault", kind, "--broker", str(broker), "--seconds", "5", "--dir", lab.dir]) == 2
        err = capsys.readouterr().err
        assert f"broker {broker} is paused by a stall until {until}; {kind} it after it resumes" in err, err
    assert sorted(f.kind for f in current(lab).faults) == ["slow", "stall"]  # the refused ones left nothing
    fault_over(lab, "stall")
    fault_over(lab, "slow")  # its helper waited for the broker to answer, then removed the throttle
    assert faults.broker_configs(lab, broker, [faults.THROTTLED_RATE]) == {faults.THROTTLED_RATE: None}
    report("paused broker: refusals, and a slow that ended in a stall, healthy again after", wait_healthy(lab))


def test_kill_moves_leaderships_restart_brings_the_broker_back_and_elect_restores_leaders(
    lab: Lab, session_restart: Restart
):
    run = session_restart  # run once for the session (tests/support/lab.py run_restart): the agent's tests read it too
    killed, before, leads = run.broker, run.before, run.leads
    assert killed != run.controller  # the controller's fate is the controller-failover test's
    assert leads, f"broker {killed} leads nothing: {before}"
    assert "SIGKILL" in run.kill_said and run.dead
    for key in leads:  # the controller elected a new leader from the ISR, with a new leader epoch
        assert run.moved[key].leader in before[key].isr and run.moved[key].leader_epoch > before[key].leader_epoch
    assert all(killed not in s.isr for s in run.moved.values())
    assert not run.registered

    assert "started again" in run.restart_said
    assert all(run.restarted[k].leader != killed for k in leads)  # no automatic rebalance in the lab
    assert all(set(s.isr) == set(s.replicas) for s in run.restarted.values())  # back in every ISR

    preferred = {k for k in leads if before[k].preferred_leader == killed}
    assert preferred and all(f"{t}-{p} " in run.elect_said for t, p in preferred), run.elect_said
    assert all(s.leader == s.preferred_leader for s in run.elected.values()), run.elected  # no waiting

    # The slow fault begun before the kill ended while the broker was dead: its helper removed the throttle once the
    # restarted broker answered (given up, the config, which ZooKeeper keeps, would hold the broker back for good).
    assert f"broker {killed}'s replication as a follower throttled" in run.slow_said
    wait_until(
        f"broker {killed}'s throttle removed and its slow fault over",
        lambda: (
            faults.broker_configs(lab, killed, [faults.THROTTLED_RATE]) == {faults.THROTTLED_RATE: None}
            and not any(f.kind == "slow" for f in current(lab).faults)
        ),
        60,
        0.5,
    )


def test_controller_failover_elects_another_controller_with_a_new_epoch(lab: Lab):
    wait_healthy(lab)
    old, epoch = active_controller(lab)
    old_pid = current(lab).broker(old).pid
    before = states(lab)
    window = fault_begins("controller-failover")
    said = faults.controller_failover(Path(lab.dir))
    assert f"the active controller was broker {old}" in said
    deadline = time.monotonic() + 60
    started = time.monotonic()
    while (now := active_controller(lab))[1] == epoch or now[0] is None:
        assert time.monotonic() < deadline, f"no new controller after 60 s: {now}"
        time.sleep(0.2)
    report(f"controller-failover: broker {now[0]} controller (epoch {now[1]}) after", time.monotonic() - started)
    assert now[0] != old and now[1] == epoch + 1
    moved = led(before, old)
    took, after = wait_for(
        lab, f"broker {old}'s leaderships moved", lambda s: all(s[k].leader != old for k in moved), timeout=30
    )
    assert all(after[k].controller_epoch == epoch + 1 for k in moved)  # written by the new controller
    fault_over(lab, "restart")
    restarted = current(lab).broker(old)
    assert restarted.pid != old_pid and alive(restarted)
    report(f"controller-failover: broker {old} restarted, every ISR full again after", wait_healthy(lab))
    window.over()


def test_a_broker_that_cannot_start_is_reported_with_its_last_log_lines(tmp_path: Path, capsys):
    not_a_jar = tmp_path / "agent.jar"
    not_a_jar.write_text("not a jar")
    with pytest.raises(LabError) as failed:
        up(tmp_path / "lab", LabSpec(agent=str(not_a_jar), rate=0, start_timeout_s=60, kafka="3.9"), progress)
    message = str(failed.value)
    assert re.search(r"broker [123] exited during start-up; its last log lines", message), message
    assert "Error opening zip file or JAR manifest missing" in message  # the JVM's own words, from stdout.log
    assert not [p for p in load(tmp_path / "lab").processes() if alive(p)]
    assert main(["lab", "fault", "elect", "--dir", str(tmp_path / "lab")]) == 2
    assert "is not running: start it with isrwatch lab up" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["up", "--brokers", "2"], "--brokers 2: must be 3..9"),
        (["up", "--lag-ms", "100"], "--lag-ms 100: must be >= replica.fetch.wait.max.ms (500)"),
        (["up", "--topics", "orders"], "expected NAME:PARTITIONS"),
        (["up", "--agent", "--agent-options", "novalue"], "expected K=V"),
        (["up", "--agent-options", "file=x"], "no --agent to attach"),
        (["fault", "elect"], "no lab there"),
        (["down"], "nothing: no lab there (no such directory"),
        (["up", "--kafka", "5.0"], "--kafka 5.0: not a Kafka release the lab runs"),
        (["up", "--kafka", "4.4", "--ibp", "3.9"], "--ibp 3.9: only for ZooKeeper mode (--kafka 3.9)"),
    ],
)
def test_bad_lab_options_exit_2_naming_the_problem(argv, message, tmp_path, capsys):
    assert main(["lab", *argv, "--dir", str(tmp_path / "nothing")]) == 2
    assert message in capsys.readouterr().err


def test_faults_refuse_the_monitor_and_unknown_brokers(lab: Lab, capsys):
    assert main(["lab", "fault", "stall", "--broker", str(MONITOR_ID), "--seconds", "1", "--dir", lab.dir]) == 2
    assert "the monitor broker 100 takes no faults" in capsys.readouterr().err
    assert main(["lab", "fault", "kill", "--broker", "7", "--dir", lab.dir]) == 2
    assert "the lab's brokers are 1, 2, 3" in capsys.readouterr().err


def test_kafka_versions_name_a_release_a_line_means_its_newest():
    assert [kafka_release(v) for v in ("3.9", "3.9.2", "4.0", "4.3", "4.3.0", "4.4", "4.4.0")] == [
        "3.9.2",
        "3.9.2",
        "4.0.2",
        "4.3.1",
        "4.3.0",
        "4.4.0",
        "4.4.0",
    ]
    assert LabSpec(kafka="4.4").mode() == "kraft" and LabSpec(kafka="3.9").mode() == "zookeeper"
    assert kafka_set("4.4.0").directory.name == "kafka-4.4.0" and kafka_set().directory.name == "kafka"


def test_kafka_3_9_with_ibp_3_9_runs_the_agent_in_alter_partition_mode_and_isrwatch_decides_what_it_did(
    tmp_path: Path,
):
    """ZooKeeper mode with IBP 3.9: leaders propose ISR changes to the controller with AlterPartition (the agent's
    ZK_ALTER_PARTITION mode). A stall of one broker: its leaders shrink it and add it back, the agents report the
    requests the brokers sent and their answers, and a replay of what they sent decides the same changes with no
    divergence from the brokers other than timing."""
    spec = LabSpec(
        kafka="3.9",
        ibp="3.9",
        lag_ms=LAG_MS,
        topics=config.parse_topics("orders:3"),
        rate=60,
        agent=str(default_agent()),
        agent_options=AGENT_OPTIONS,
    )
    started = time.monotonic()
    with running_lab(tmp_path / "lab", spec) as lab:
        report("lab up --kafka 3.9 --ibp 3.9 --agent", time.monotonic() - started)
        record = json.loads((Path(lab.dir) / "lab.json").read_text())
        assert (record["mode"], record["kafka_version"], record["inter_broker_protocol_version"]) == (
            "zookeeper",
            "3.9.2",
            "3.9",
        )
        assert faults.broker_configs(lab, 1, ["inter.broker.protocol.version"]) == {
            "inter.broker.protocol.version": "3.9"
        }
        assert registrations(lab) == {1: False, 2: False, 3: False}
        wait_healthy(lab)
        stalled = 2
        follows = followed(states(lab), stalled)
        faults.stall(Path(lab.dir), stalled, 8)
        stall_over(lab)
        report("ibp 3.9: healthy again after the stall", wait_healthy(lab))
        time.sleep(3)  # the agents' last events (held fetches, the sink's batch) reach the topic
        records = every_record(lab)
    (tmp_path / "events.jsonl").write_bytes(b"".join(r.value + b"\n" for r in records))  # kept for a failure
    events = [json.loads(r.value) for r in records]
    ticks = [e for e in events if e["type"] == "tick" and e.get("isr_protocol")]
    assert ticks and {(t["isr_protocol"], t["kafka_version"]) for t in ticks} == {("alter_partition", "3.9.2")}
    kinds = {e["type"] for e in events}
    assert {"alter_partition_sent", "alter_partition_response"} <= kinds and "isr_change_propagated" not in kinds
    result = replay([[json.dumps(e) for e in events]], Config(replica_lag_time_max_ms=LAG_MS).with_profile("agent"))
    changed = {(d.kind.value, d.topic, d.partition) for d in result.decisions if d.replicas_changed == [stalled]}
    assert {("shrink", t, p) for t, p in follows} <= changed and {("expand", t, p) for t, p in follows} <= changed
    assert result.dead_letters == []
    wrong = [d for d in result.divergences if d.kind.value != "timing" or d.cause is None]
    print(  # for the CI log: what the brokers did and how the model met it
        f"\n  ibp 3.9: {len(events)} agent events, {len(result.decisions)} decisions, "
        f"{len(result.divergences)} divergences",
        flush=True,
    )
    assert wrong == [], wrong


def test_stall_warns_when_it_may_outlast_the_zookeeper_session():
    assert faults.stall_warning(12, 18_000) is None
    assert "2/3 of zookeeper.session.timeout.ms (18000 ms)" in faults.stall_warning(13, 18_000)


def test_lab_help_documents_every_command_fault_and_option(capsys):
    from isrwatch.cli import build_parser

    for argv, words in (
        (
            ["lab", "up"],
            [
                "--dir",
                "--kafka",
                "--ibp",
                "KRaft",
                "4.4.0",
                "combined broker+controller",
                "eligible.leader.replicas.version=1",
                "broker.session.timeout.ms=18000",
                "controller_quorum",
                "DescribeMetadataQuorum",
                "--brokers",
                "--lag-ms",
                "--topics",
                "--rate",
                "--agent",
                "--agent-options",
                "make agent",
                "{broker}",
                "--profile agent",
                "lab.json",
                "state-change.log",
            ],
        ),
        (
            ["lab", "fault", "stall"],
            [
                "--broker",
                "--seconds",
                "zookeeper.session.timeout.ms",
                "controller-failover",
                "elect",
                "restart",
                "slow",
            ],
        ),
        (["lab", "fault", "slow"], ["--rate", "outside the ISR"]),
        (["lab", "fault", "fence"], ["--broker", "--seconds", "fences it", "broker.session.timeout.ms", "20 s"]),
        (["lab", "down"], ["ports free", "--graceful", "controlled"]),
    ):
        with pytest.raises(SystemExit):
            build_parser().parse_args([*argv, "--help"])
        text = capsys.readouterr().out
        for word in words:
            assert word in text, (argv, word)
