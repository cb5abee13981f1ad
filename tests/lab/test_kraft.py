"""`isrwatch lab` on real KRaft brokers (Kafka 4.4.0): what `up --kafka 4.4` starts, and each fault's effect on the
cluster, read from Kafka's admin API (DescribeTopicPartitions, DescribeMetadataQuorum, DescribeCluster), never from
isrwatch. One KRaft lab for the session (the `kraft_lab` fixture, tests/support/lab.py); every fault test leaves it
healthy. The times each fault took are printed (pytest -s shows them); no test asserts a duration.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from isrwatch.cli import main
from isrwatch.lab import faults, kraft
from isrwatch.lab.record import MONITOR_ID, Lab, LabError
from isrwatch.lab.truth import partition_epochs, registrations, wait_until
from isrwatch.processes.detached import alive
from tests.support import lab as session


def leader_victim(lab: Lab) -> tuple[session.States, int, set[tuple[str, int]]]:
    """On a healthy cluster: the partitions now, a broker that leads some of them but is not the active controller
    (whose fate is controller-failover's), and the partitions it leads."""
    session.wait_healthy(lab)
    active, _ = session.active_controller(lab)
    before = session.states(lab)
    victim = next(b.id for b in lab.brokers if b.id != active and session.led(before, b.id))
    return before, victim, session.led(before, victim)


def assert_new_leaders(before: session.States, moved: session.States, leads: set[tuple[str, int]]) -> None:
    """The controller elected each partition a new leader from its ISR, with a new leader epoch."""
    for key in leads:
        assert moved[key].leader in before[key].isr and moved[key].leader_epoch > before[key].leader_epoch, moved[key]


def test_up_kafka_4_starts_combined_kraft_nodes_with_elr_a_monitor_of_its_own_topics_and_load(kraft_lab: Lab):
    lab = session.current(kraft_lab)
    record = json.loads((Path(lab.dir) / "lab.json").read_text())
    assert (record["mode"], record["kafka_version"]) == ("kraft", "4.4.0")
    ports = [b["controller_port"] for b in record["brokers"]]
    assert record["controller_quorum"] == ",".join(f"{i}@127.0.0.1:{p}" for i, p in zip((1, 2, 3), ports, strict=True))
    assert record["controller_bootstrap"] == ",".join(f"127.0.0.1:{p}" for p in ports)
    assert record["zookeeper"] is None and record["zookeeper_process"] is None
    assert (record["broker_session_timeout_ms"], record["broker_heartbeat_interval_ms"]) == (18_000, 2_000)
    # Every node a voter; the quorum's leader is the active controller.
    quorum = kraft.describe_quorum(*lab.answering())
    assert quorum.voters == (1, 2, 3) and quorum.leader in (1, 2, 3) and quorum.observers == ()
    assert session.active_controller(lab) == (quorum.leader, quorum.leader_epoch)
    # ELR set at format, as the cluster reports it now and as lab.json recorded it.
    assert record["features"]["eligible.leader.replicas.version"] == 1
    assert kraft.finalized_features(*lab.answering())["eligible.leader.replicas.version"] == 1
    assert registrations(lab) == {1: False, 2: False, 3: False}
    assert faults.broker_configs(
        lab, 2, ["process.roles", "broker.session.timeout.ms", "replica.lag.time.max.ms", "node.id"]
    ) == {
        "process.roles": "broker,controller",
        "broker.session.timeout.ms": "18000",
        "replica.lag.time.max.ms": str(session.LAG_MS),
        "node.id": "2",
    }
    # The monitor is a one-node cluster of its own, with isrwatch's topics.
    assert kraft.describe_brokers(lab.monitor_bootstrap, MONITOR_ID) == {MONITOR_ID: False}
    with faults.admin(lab.monitor_bootstrap) as client:
        assert lab.events_topic in client.list_topics()
    now = session.states(lab)
    assert sorted(now) == [("orders", p) for p in range(6)] + [("payments", p) for p in range(3)]
    assert all(len(s.replicas) == 3 and set(s.isr) == set(s.replicas) and s.elr == () for s in now.values())
    assert session.growing(lab, list(now))  # the producer keeps every partition growing
    # The quorum controller's log: who became active, at which epoch.
    logs = "".join((Path(b.kafka_logs_dir) / "controller.log").read_text() for b in lab.brokers)
    assert "Becoming the active controller at epoch" in logs


def test_kraft_stall_the_leaders_shrink_the_stalled_follower_and_the_controller_does_not_fence_it(kraft_lab: Lab):
    lab = kraft_lab
    session.wait_healthy(lab)
    active, _ = session.active_controller(lab)
    before = session.states(lab)
    stalled = next(b.id for b in lab.brokers if b.id != active and session.followed(before, b.id))
    follows, leads = session.followed(before, stalled), session.led(before, stalled)
    epochs = partition_epochs(lab)  # from the metadata log: no admin API reports partition epochs
    window = session.fault_begins("stall", session.KRAFT_FAULT_LOG)  # for the reality suite (tests/reality)
    said = faults.stall(Path(lab.dir), stalled, session.STALL_S)
    assert "SIGSTOP" in said and "warning" not in said
    took, shrunk = session.shrunk_out(lab, stalled, follows)
    session.report(
        f"KRaft stall: broker {stalled} out of the ISR of all {len(follows)} partitions it follows after", took
    )
    for key in follows:  # the leaders shrank their ISRs: same leader, same leader epoch
        assert shrunk[key].leader == before[key].leader and shrunk[key].leader_epoch == before[key].leader_epoch
    # Until the stall ends the controller does not fence the broker: its leaderships stay (Kafka's default 9 s
    # session would have fenced it by now, and moved them).
    [fault] = [f for f in session.current(lab).faults if f.kind == "stall"]
    time.sleep(max(0.0, fault.ends_ms / 1000 - time.time() - 1.5))
    assert registrations(session.current(lab))[stalled] is False
    late = session.states(lab)
    assert all(late[k].leader == stalled and late[k].leader_epoch == before[k].leader_epoch for k in leads)
    session.stall_over(lab)
    session.report("KRaft stall: every ISR full again after SIGCONT", session.wait_healthy(lab))
    window.over()
    # Each shrink and each expand the controller committed is a partition change: a new partition epoch each.
    after = partition_epochs(lab)
    assert all(after[k] >= epochs[k] + 2 for k in follows), (epochs, after)


def test_kraft_fence_the_controller_fences_the_broker_moves_its_leaderships_and_removes_it_from_every_isr(
    kraft_lab: Lab, capsys
):
    lab = kraft_lab
    before, victim, leads = leader_victim(lab)
    argv = ["lab", "fault", "fence", "--broker", str(victim), "--seconds", "15", "--dir", lab.dir]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "a fence must outlast the broker's session, broker.session.timeout.ms (18000 ms), by 2 s" in err, err
    assert not session.current(lab).faults  # refused before anything happened

    started = time.monotonic()
    window = session.fault_begins("fence", session.KRAFT_FAULT_LOG)
    said = faults.fence(Path(lab.dir), victim, session.FENCE_S)
    assert "SIGSTOP" in said and "fences it" in said
    wait_until(f"broker {victim} fenced", lambda: registrations(session.current(lab)).get(victim) is True, 40, 0.2)
    session.report(f"KRaft fence: broker {victim} fenced by the controller after", time.monotonic() - started)
    _, moved = session.moved_out(lab, victim, leads, timeout=10)
    assert_new_leaders(before, moved, leads)
    assert registrations(session.current(lab))[victim] is True  # still paused: still fenced
    session.fault_over(lab, "fence", timeout=session.FENCE_S + 30)
    session.report(
        f"KRaft fence: broker {victim} unfenced and in every ISR again after SIGCONT", session.wait_healthy(lab)
    )
    window.over()
    assert registrations(session.current(lab))[victim] is False


def test_kraft_slow_throttles_the_follower_until_the_fault_ends(kraft_lab: Lab):
    lab = kraft_lab
    session.wait_healthy(lab)
    window = session.fault_begins("slow", session.KRAFT_FAULT_LOG)
    said = faults.slow(Path(lab.dir), 1, 3, rate=8192)
    assert "8192 B/s" in said
    assert faults.broker_configs(lab, 1, [faults.THROTTLED_RATE]) == {faults.THROTTLED_RATE: "8192"}
    session.fault_over(lab, "slow")
    assert faults.broker_configs(lab, 1, [faults.THROTTLED_RATE]) == {faults.THROTTLED_RATE: None}
    session.wait_healthy(lab)
    window.over()


def test_kraft_kill_fences_and_moves_leaderships_restart_brings_the_node_back_and_elect_restores_leaders(
    kraft_lab: Lab,
):
    lab = kraft_lab
    before, victim, leads = leader_victim(lab)
    server_log = Path(lab.broker(victim).kafka_logs_dir) / "server.log"
    epochs, read = kraft.broker_epochs(server_log, victim)  # the registration of its start
    started = time.monotonic()
    window = session.fault_begins("restart", session.KRAFT_FAULT_LOG)
    said = faults.kill(Path(lab.dir), victim)
    assert "SIGKILL" in said and "broker.session.timeout.ms (18000 ms)" in said
    assert not alive(session.current(lab).broker(victim))
    took, moved = session.moved_out(lab, victim, leads)
    session.report(f"KRaft kill: broker {victim}'s {len(leads)} leaderships moved, out of every ISR after", took)
    assert_new_leaders(before, moved, leads)
    assert registrations(session.current(lab))[victim] is True  # KRaft keeps the registration, fenced

    said = faults.restart(Path(lab.dir), victim)
    assert "started again" in said  # at once: a new incarnation needs no expired session
    session.report(f"KRaft restart: broker {victim} back in every ISR after", session.wait_healthy(lab))
    registered, _ = kraft.broker_epochs(server_log, victim, read)  # its new incarnation's, a new broker epoch
    assert epochs and registered and registered[-1] > epochs[-1], (epochs, registered)
    restarted = session.states(lab)
    assert all(restarted[k].leader != victim for k in leads)  # no automatic rebalance in the lab
    session.report("KRaft kill to healthy", time.monotonic() - started)
    window.over()

    window = session.fault_begins("elect", session.KRAFT_FAULT_LOG)
    said = faults.elect(Path(lab.dir))
    assert all(f"{t}-{p} " in said for t, p in leads if before[(t, p)].preferred_leader == victim), said
    elected = session.states(lab)  # the election answered once done: no waiting
    assert all(s.leader == s.preferred_leader for s in elected.values()), elected
    session.wait_healthy(lab)
    window.over()


def quorum_leader(lab: Lab) -> tuple[int | None, int]:
    """The quorum leader and its epoch, (None, -1) while no node answers DescribeMetadataQuorum (the voters are
    electing one: a node may refuse connections for a moment)."""
    try:
        return session.active_controller(lab)
    except LabError:
        return None, -1


def test_kraft_controller_failover_kills_the_quorum_leader_and_another_voter_takes_over(kraft_lab: Lab):
    lab = kraft_lab
    session.wait_healthy(lab)
    old, epoch = session.active_controller(lab)
    assert old is not None
    old_pid = session.current(lab).broker(old).pid
    window = session.fault_begins("controller-failover", session.KRAFT_FAULT_LOG)
    said = faults.controller_failover(Path(lab.dir))
    assert f"the active controller was node {old} (the metadata quorum's leader, leader epoch {epoch})" in said
    started = time.monotonic()
    deadline = started + 60
    while (now := quorum_leader(lab))[0] is None or now[1] <= epoch:
        assert time.monotonic() < deadline, f"no new quorum leader after 60 s: {now}"
        time.sleep(0.2)
    session.report(
        f"KRaft controller-failover: node {now[0]} quorum leader (epoch {now[1]}) after", time.monotonic() - started
    )
    assert now[0] != old
    assert kraft.describe_quorum(*session.current(lab).answering()).voters == (1, 2, 3)
    restarted = session.current(lab).broker(old)
    assert restarted.pid != old_pid and alive(restarted)
    session.report(
        f"KRaft controller-failover: node {old} back, every ISR full again after",
        session.wait_healthy(lab, timeout=120),
    )
    window.over()


def test_stall_and_fence_are_told_apart_by_the_kraft_session():
    assert faults.stall_warning(14, 18_000, "kraft") is None
    warning = faults.stall_warning(15, 18_000, "kraft")
    assert "broker.session.timeout.ms (18000 ms) less two heartbeat intervals" in warning
    assert "isrwatch lab fault fence" in warning


def test_broker_epochs_are_read_from_whole_registration_lines_of_the_node_on_from_an_offset(tmp_path: Path):
    log = tmp_path / "server.log"
    line = "[2026-11-26 20:18:01,801] INFO [BrokerLifecycleManager id={0}] Successfully registered broker {0} with "
    first = line.format(3) + "broker epoch 10 (kafka.server.BrokerLifecycleManager)\n"
    log.write_text(first + line.format(2))
    assert kraft.broker_epochs(tmp_path / "none.log", 3) == ([], 0)
    epochs, read = kraft.broker_epochs(log, 3)
    assert epochs == [10] and read == len(first)  # broker 2's line, unfinished, is read again
    with log.open("a") as more:
        more.write("broker epoch 11\n" + line.format(3) + "broker epoch 225\n")
    assert kraft.broker_epochs(log, 3, read)[0] == [225] and kraft.broker_epochs(log, 2, read)[0] == [11]


def test_partition_epochs_count_the_changes_after_each_partition_record_of_the_metadata_log():
    topic = '"topicId":"fYxUGgVtQ32CF8X_HqWHSA"'
    dump = "\n".join(
        f"| offset: {n} CreateTime: 1795729973744 keySize: -1 valueSize: 27 sequence: -1 headerKeys: [] payload: {p}"
        for n, p in enumerate(
            [
                '{"type":"TOPIC_RECORD","version":0,"data":{"name":"orders",' + topic + "}}",
                '{"type":"PARTITION_RECORD","version":2,"data":{"partitionId":0,' + topic + ',"partitionEpoch":0}}',
                '{"type":"PARTITION_RECORD","version":2,"data":{"partitionId":1,' + topic + ',"partitionEpoch":0}}',
                '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":1,' + topic + ',"isr":[2,3]}}',
                '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":1,' + topic + ',"isr":[2,3,1]}}',
                '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":0,"topicId":"other","isr":[1]}}',
            ]
        )
    )
    batch = "\nBaseOffset: 0 lastOffset: 5 count: 6"  # DumpLogSegments' batch lines carry no payload
    assert kraft.partition_epochs(dump + batch) == {("orders", 0): 0, ("orders", 1): 2}
    assert kraft.dump_log_segments("4.2.2") == "kafka.tools.DumpLogSegments"
    assert kraft.dump_log_segments("4.4.0") == "org.apache.kafka.tools.DumpLogSegments"
