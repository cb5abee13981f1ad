"""`isrwatch simulate`: its options, its sinks and its pacing, through the real command."""

from __future__ import annotations

import json
import shlex
import uuid
from pathlib import Path

import msgspec
import pytest
from kafka import KafkaConsumer

from isrwatch.cli import main
from isrwatch.lab.record import Lab
from isrwatch.sim.config import SimConfig
from isrwatch.sim.faults import parse_fault
from isrwatch.sim.model import simulate, simulate_events, with_scenario
from isrwatch.sim.pacing import Pacer, run
from isrwatch.sim.sinks import DirectorySink
from isrwatch.state.config import Config
from isrwatch.state.events import parse_event

LAG = ["--set", "replica_lag_time_max_ms=10000"]


def test_out_dir_files_hold_exactly_the_models_events_and_replay_to_a_stuck_shrink(tmp_path, capsys):
    out = tmp_path / "events"
    assert (
        main(
            [
                "simulate",
                "--speed",
                "0",
                "--scenario",
                "stall",
                *LAG,
                "--seed",
                "5",
                "--out-dir",
                str(out),
                "--rotate",
                "5s",
            ]
        )
        == 0
    )
    files = sorted(out.iterdir())
    assert files and all(f.name.startswith("events-") and f.suffix == ".jsonl" for f in files)  # no temp files left
    lines = [line for f in files for line in f.read_bytes().splitlines()]
    config, faults = with_scenario(SimConfig(kafka=Config(replica_lag_time_max_ms=10_000)), "stall")
    assert lines == [msgspec.json.encode(e) for e in simulate(config, faults, 5)]
    first_ts = [json.loads(f.read_bytes().splitlines()[0])["ts"] for f in files]
    assert first_ts == sorted(first_ts) and all(b - a >= 5000 for a, b in zip(first_ts, first_ts[1:], strict=False))
    assert "stall:broker=2:start=10s:end=35s" in capsys.readouterr().err

    result = tmp_path / "replay"
    assert main(["replay", *map(str, files), "--out", str(result), *LAG]) == 0
    summary = json.loads((result / "summary.json").read_text())
    assert summary["shrinks_by_reason"] == {"stuck": summary["decisions_by_kind"]["expand"]}


def test_a_second_run_into_the_same_directory_continues_the_numbering(tmp_path):
    out = tmp_path / "events"
    for _ in range(2):
        assert main(["simulate", "--speed", "0", "--duration", "3s", "--out-dir", str(out)]) == 0
    assert [f.name for f in sorted(out.iterdir())] == [f"events-{n:08d}.jsonl" for n in range(1, 7)]


def test_the_directory_never_shows_half_a_file(tmp_path):
    sink = DirectorySink(tmp_path, rotate_ms=200)
    encode = msgspec.json.encode
    written = 0
    for ev in simulate_events(SimConfig(duration_ms=2000), [], 1):
        sink.write(ev, encode(ev) + b"\n")
        written += 1
        visible = list(tmp_path.glob("events-*.jsonl"))
        for f in visible:  # a reader listing the directory now sees only whole files of valid events
            data = f.read_bytes()
            assert data.endswith(b"\n")
            assert all(type(parse_event(line, 0)).__name__ != "DeadLetter" for line in data.splitlines())
    sink.close()
    files = sorted(tmp_path.glob("events-*.jsonl"))
    assert len(files) >= 10 and sum(len(f.read_bytes().splitlines()) for f in files) == written
    assert list(tmp_path.glob(".*")) == []


def test_a_sink_on_the_storys_clock_dates_each_file_by_it(tmp_path):
    """The demo's sink: each file shows the story's clock when it was published as its modification time (a file
    source's arrival), from a pacer whose clock runs 4 times the wall's pace."""
    wall = [100.0]
    pacer = Pacer(4, None, 1_800_000_000_000, clock=lambda: wall[0], sleep=lambda s: None)
    sink = DirectorySink(tmp_path, 1000, pacer.now_ms)
    published = []
    for ev in simulate_events(SimConfig(start_ms=1_800_000_000_000, duration_ms=3000), [], 1):
        wall[0] = 100.0 + (ev.ts - 1_800_000_000_000) / 4000  # the pacer's moment for it
        files = len(list(tmp_path.glob("events-*.jsonl")))
        sink.write(ev, msgspec.json.encode(ev) + b"\n")
        if len(list(tmp_path.glob("events-*.jsonl"))) > files:
            published.append(pacer.now_ms())
    sink.close()
    published.append(pacer.now_ms())
    files = sorted(tmp_path.glob("events-*.jsonl"))
    assert len(files) == len(published) >= 3
    assert [f.stat().st_mtime_ns // 1_000_000 for f in files] == published
    for f, at in zip(files, published, strict=True):  # dated at or after each of its events, within a file's span
        ts = [parse_event(line, 0).ts for line in f.read_bytes().splitlines()]
        assert max(ts) <= at < min(ts) + 1000 + 50


def test_stdout_with_faults_from_a_json_file_and_the_command_line(tmp_path, capsysbinary):
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps([{"kind": "crash", "broker": 3, "start": "2s", "end": 20}]))
    assert (
        main(
            [
                "simulate",
                "--speed",
                "0",
                "--brokers",
                "3",
                "--topic",
                "t:3:3",
                "--faults",
                str(faults),
                "--fault",
                "failover:start=25s:stale=1",
                "--duration",
                "30s",
                "--cluster",
                "east",
                *LAG,
            ]
        )
        == 0
    )
    captured = capsysbinary.readouterr()
    events = [json.loads(line) for line in captured.out.splitlines()]
    assert {e["cluster"] for e in events} == {"east"} and {e["topic"] for e in events} == {"t"}
    assert b"crash:broker=3:start=2s:end=20s; failover:start=25s" in captured.err
    assert not [e for e in events if e["type"] == "fetch" and e["replica"] == 3 and 2000 <= e["ts"] < 20_000]
    zombie = [e for e in events if e["type"] == "leader_and_isr" and e["ts"] > 25_000]
    assert len(zombie) == 1 and zombie[0]["controller_epoch"] == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--fault", "stall:broker=7:start=1s"], "brokers are 1..4"),
        (["--topic", "orders:six:3"], "expected NAME:PARTITIONS:RF"),
        (["--start", "yesterday"], "--start 'yesterday'"),
        (["--faults", "/nonexistent.json"], "No such file"),
        (["--set", "replica_lag_time_max_ms=0"], "replica_lag_time_max_ms: must be >= 1"),
        (["--fault", "stuck-controller:broker=1:start=1s"], "--isr-protocol alter_partition"),
        (["--isr-protocol", "alter_partition", "--set", 'kafka_version="2.6"'], "Kafka 2.6 has no AlterPartition"),
    ],
)
def test_bad_options_exit_2_naming_the_problem(argv, message, capsys):
    assert main(["simulate", "--speed", "0", *argv]) == 2
    assert message in capsys.readouterr().err


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


def test_pacing_holds_events_until_their_scaled_event_time():
    clock = FakeClock()
    sent: list[tuple[float, int]] = []

    class Recorder:
        def write(self, ev, line):
            sent.append((clock.now - 100.0, ev.ts))

        def flush(self):
            pass

        def close(self):
            pass

    events = [e for e in simulate_events(SimConfig(start_ms=50_000, duration_ms=3000), [], 2)]
    count = run(iter(events), Recorder(), Pacer(2.0, None, 50_000, clock=clock, sleep=clock.sleep))
    assert count == len(events)
    # At speed 2 each event goes at half its event-time offset: waits under 2 ms are skipped, never more.
    assert all(abs(wall - (ts - 50_000) / 2000) <= 0.002 + 1e-9 for wall, ts in sent)
    assert clock.now - 100.0 == pytest.approx((events[-1].ts - 50_000) / 2000, abs=0.003)


def test_rate_spaces_events_and_speed_zero_does_not_wait():
    clock = FakeClock()
    pacer = Pacer(0, 100.0, 0, clock=clock, sleep=clock.sleep)
    waits = []
    for ts in range(10):
        wait = pacer.due(ts)
        waits.append(round(wait, 6))
        if wait > 0:
            clock.sleep(wait)
    assert waits == [0.0] + [0.01] * 9
    assert Pacer(0, None, 0, clock=clock, sleep=clock.sleep).due(10**9) <= 0


def test_stop_ends_a_paced_run_and_still_publishes_the_open_file(tmp_path):
    clock = FakeClock()
    events = simulate_events(SimConfig(duration_ms=60_000), [parse_fault("stall:broker=1:start=1s")], 4)
    count = run(
        events,
        DirectorySink(tmp_path, 10_000),
        Pacer(1.0, None, 0, clock=clock, sleep=clock.sleep),
        stop=lambda: clock.now - 100.0 >= 5,
    )
    lines = [line for f in sorted(tmp_path.iterdir()) for line in Path(f).read_bytes().splitlines()]
    assert 0 < count == len(lines)
    assert json.loads(lines[-1])["ts"] < 5100


def test_kafka_records_keyed_by_partition_in_order(lab: Lab) -> None:
    """To the lab's monitor broker (isrwatch's own traffic), into a topic the producer creates."""
    topic = f"sim.events.{uuid.uuid4().hex[:8]}"
    assert (
        main(
            [
                "simulate",
                "--speed",
                "0",
                "--duration",
                "5s",
                "--kafka",
                lab.monitor_bootstrap,
                "--kafka-topic",
                topic,
                "--seed",
                "9",
            ]
        )
        == 0
    )
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=lab.monitor_bootstrap,
        auto_offset_reset="earliest",
        group_id=None,
        consumer_timeout_ms=5000,
    )
    records = list(consumer)
    consumer.close()
    expected = [msgspec.json.encode(e) for e in simulate(SimConfig(duration_ms=5000), [], 9)]
    assert sorted(r.value for r in records) == sorted(expected)
    by_key: dict[bytes, list[dict]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        event = json.loads(r.value)
        assert r.key == f"{event['topic']}-{event['partition']}".encode()
        by_key.setdefault(r.key, []).append(event)
    # A Kafka partition keeps each key's records in order: per partition, seq only grows.
    assert all([e["seq"] for e in events] == sorted(e["seq"] for e in events) for events in by_key.values())


def test_alter_partition_leaders_replay_with_the_settings_the_simulator_names(tmp_path, capsys):
    """`isrwatch simulate --isr-protocol alter_partition`: the stuck controller's answers wait in flight, and the replay
    with the `--set` options the simulator prints reads every response as the answer to its proposal."""
    out = tmp_path / "events"
    argv = ["simulate", "--speed", "0", "--isr-protocol", "alter_partition", "--duration", "50s", *LAG]
    faults = ["--fault", "stall:broker=2:start=5s:end=25s", "--fault", "stuck-controller:broker=1:start=1s:end=40s"]
    assert main([*argv, *faults, "--controller-latency", "30ms", "--out-dir", str(out)]) == 0
    judge = capsys.readouterr().err.split("Judge it with ", 1)[1].split("\n", 1)[0]
    settings = shlex.split(judge)  # as a shell reads it
    assert settings[-4:] == ["--set", 'kafka_version="3.9"', "--set", 'isr_protocol="alter_partition"']
    result = tmp_path / "replay"
    assert main(["replay", *map(str, sorted(out.iterdir())), "--out", str(result), *settings]) == 0
    summary = json.loads((result / "summary.json").read_text())
    assert summary["alter_partition_requests"] > 0 and summary["ignored_alter_partition_responses_by_reason"] == {}
    requests = [json.loads(line) for line in (result / "alter_partitions.jsonl").read_text().splitlines()]
    held = [r for r in requests if r["broker"] == 1 and r["response_ms"] == 40_000]
    assert held and all(r["response_ms"] - r["sent_ms"] >= 30 for r in requests)
