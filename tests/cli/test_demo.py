"""`isrwatch demo` end to end: the real simulator, the real streaming job in local Spark and the real API.
The story's stall must turn into a stuck shrink whose batch goes 5-7.5 s later, the recovery into an
expand, all in the store and on the terminal; Ctrl-C must stop every process the demo started. With
--isr-protocol alter_partition, a held AlterPartition request must show in the API with its queue, then its commit."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request

import msgspec

from isrwatch.cli import main
from isrwatch.store import open_store
from tests.support.demo import DEMO_PROCESSES, interrupt, running_demo, stopped_cleanly
from tests.support.net import free_port

LINGER, CHECK = 5000, 2500


def test_demo_shows_a_stall_becoming_a_shrink_its_batch_and_an_expand_then_stops_cleanly(tmp_path):
    port = free_port()
    workdir = tmp_path / "demo"
    out: list[str] = []
    seen = {"shrink": False, "shrink batch": False, "expand": False, "expand batch": False, "incident": False}
    with running_demo(port, workdir, "--speed", "2", "--duration", "170") as proc:
        for line in proc.stdout:  # --duration ends the demo (and this loop) if the story never shows
            out.append(line)
            if "SHRINK" in line and "replica 2 stuck" in line:
                seen["shrink"] = True
            elif "INCIDENT opened  stuck" in line and "broker 2 stopped fetching" in line:
                seen["incident"] = True
            elif "BATCH" in line and seen["shrink"] and not seen["expand"]:
                seen["shrink batch"] = True
            elif "EXPAND" in line and "replica 2 caught up" in line:
                seen["expand"] = True
            elif "BATCH" in line and seen["expand"]:
                seen["expand batch"] = True
                break
        assert all(seen.values()), "".join(out)
        started, rest = interrupt(proc, port, timeout=90)
    assert len(started) >= DEMO_PROCESSES
    stopped_cleanly(proc, port, "".join(out) + rest, started)

    with open_store(f"sqlite:///{workdir / 'isrwatch.db'}") as store:
        decisions = msgspec.to_builtins(store.decisions(limit=1000).items)
        batches = sorted(msgspec.to_builtins(store.propagations(limit=1000).items), key=lambda b: b["ts"])
    start = min(d["ts"] for d in decisions)
    shrinks = [d for d in decisions if d["kind"] == "shrink" and d["reasons"] == {"2": "stuck"}]
    expands = [d for d in decisions if d["kind"] == "expand" and d["replicas_changed"] == [2]]
    assert shrinks and expands
    stall_start, stall_end = start + 15_000, start + 40_000  # the story's first fault
    assert all(stall_start + 10_000 - 600 < d["ts"] <= stall_start + 15_000 for d in shrinks)
    assert {(d["topic"], d["partition"]) for d in expands} == {(d["topic"], d["partition"]) for d in shrinks}
    assert all(stall_end < d["ts"] < stall_end + 1000 for d in expands)
    for d in shrinks + expands:
        batch = next(
            b
            for b in batches
            if b["broker"] == d["leader"]
            and b["ts"] > d["ts"]
            and {"topic": d["topic"], "partition": d["partition"]} in b["partitions"]
        )
        assert batch["trigger"] == "linger" and LINGER < batch["ts"] - d["ts"] <= LINGER + CHECK


def _get(port: int, path: str) -> dict | None:
    """One API answer, None while the API is not up yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return json.load(r)
    except OSError:
        return None


def test_demo_with_alter_partition_shows_a_stuck_queue_then_its_commit(tmp_path):
    """The stuck-queue story (sim/faults.py): the controller holds broker 1's answers from 15 s to 70 s while broker
    2 stalls (15-40 s). Broker 1's shrink of orders-1 goes at 25 s and stays in flight, its shrink of payments-2
    waits in its queue (one request in flight per broker: AlterPartitionManager@3.9.0-rc3 L142-180, SPEC §4.9 rule
    4), orders-1 stays pending_shrink (Partition@3.9.0-rc3 isInflight, rule 1); at 70 s the answer commits it."""
    port = free_port()
    workdir = tmp_path / "demo"
    stuck = committed = None
    with running_demo(port, workdir, "--isr-protocol", "alter_partition", "--speed", "2", "--duration", "120") as proc:
        deadline = time.monotonic() + 90
        while committed is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            brokers = (_get(port, "/v1/brokers") or {}).get("brokers", [])
            pending = (_get(port, "/v1/partitions?state=isr_pending") or {}).get("partitions", [])
            one = next((b for b in brokers if b["broker"] == 1), None)
            in_flight = one is not None and (one.get("in_flight_age_ms") or 0) > 0 and one["queue_size"] >= 1
            if stuck is None and in_flight and pending:
                stuck = one, pending
            requests = (_get(port, "/v1/alter-partitions?broker=1") or {}).get("alter_partitions", [])
            committed = next((r for r in requests if r["response_ms"] - r["sent_ms"] >= 40_000), None)
        assert stuck is not None and committed is not None, (stuck, committed)
        out: list[str] = []
        for line in proc.stdout:  # the narration's next 2 s look tells the answer (--duration ends this loop)
            out.append(line)
            if "COMMIT  broker 1's request answered after 4" in line:
                break
        started, rest = interrupt(proc, port, timeout=90)
    told = "".join(out) + rest
    stopped_cleanly(proc, port, told, started)
    one, pending = stuck
    assert one["in_flight_partitions"] == 1, one
    assert any(p["leader"] == 1 and p["isr_state"] == "pending_shrink" for p in pending), pending
    assert [(p["topic"], p["partition"], p["kind"], p["error"]) for p in committed["partitions"]] == [
        ("orders", 1, "shrink", None)
    ]
    assert committed["partitions"][0]["committed_isr"] == committed["partitions"][0]["proposed_isr"] == [1, 3]
    assert "STUCK   broker 1's AlterPartition request (1 partition) unanswered" in told
    assert re.search(r"COMMIT  broker 1's request answered after 4\d\.\d s: orders-1 \[1,3\]", told), told


def test_demo_at_speed_4_judges_its_events_by_the_storys_clock(tmp_path):
    """At --speed 4 the story's event time gains 3 s on the wall clock every second: 25 s in, its events are 75 s
    ahead of the wall, past max_future_ms (60 s). Its files are dated by the story's clock (a file's modification
    time is its lines' arrival), so however far the job lags, no event is refused as ts_in_future."""
    port = free_port()
    workdir = tmp_path / "demo"
    settled = 0
    with running_demo(port, workdir, "--speed", "4", "--duration", "450") as proc:
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)  # the pipe never fills
        reader.start()
        deadline = time.monotonic() + 420  # a loaded machine's Spark may take minutes over its first batch
        while settled < 110_000 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1)
            as_of = (_get(port, "/v1/partitions?page_size=1") or {}).get("as_of_ms")
            if as_of is not None:  # how far into the story the job has settled
                settled = as_of - json.loads((workdir / "config.json").read_text())["schedule_origin_ms"]
        assert settled >= 110_000, "".join(out)  # its files from 27.5 s in: 82.5 s ahead of the wall clock
        started, rest = interrupt(proc, port, timeout=90)
        reader.join(timeout=10)
    stopped_cleanly(proc, port, "".join(out) + rest, started)
    with open_store(f"sqlite:///{workdir / 'isrwatch.db'}") as store:
        refused = [d for d in store.dead_letters(limit=1000).items if "ts_in_future" in d["reason"]]
    assert refused == []


def test_demo_refuses_isr_protocol_with_real(tmp_path, capsys):
    """The real story's brokers write their ISR as their Kafka release does (--kafka): the flag would be a lie."""
    assert main(["demo", "--real", "--isr-protocol", "alter_partition", "--dir", str(tmp_path / "demo")]) == 2
    assert "--isr-protocol alter_partition: not with --real" in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()  # refused before anything started
