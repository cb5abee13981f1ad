"""The status page in a real headless chromium, over a real `isrwatch serve`, over a store filled by a real
replay of the simulator's stall: it must show the stalled broker's partitions under-replicated, with the
out-of-sync replica highlighted, and cause no console error."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import httpx

from isrwatch.cli import main
from tests.support.kraft import QUEUED, STUCK, UNTIL, settings_args, write_events
from tests.support.net import PLAYWRIGHT_CORE, ROOT, serving

LAG = ["--set", "replica_lag_time_max_ms=10000"]
RED = "rgb(198, 40, 40)"  # --bad in style.css


def browse(
    url: str, screenshot: Path, wait_for: str = "#partitions tbody tr[data-partition]", token: str | None = None
) -> dict:
    done = subprocess.run(
        ["node", str(Path(__file__).with_name("status_page.cjs")), url, str(screenshot), wait_for],
        env={**os.environ, "PLAYWRIGHT_CORE": str(PLAYWRIGHT_CORE), **({"TOKEN": token} if token else {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_status_page_shows_the_stalled_brokers_partitions_with_the_replica_out_of_sync(tmp_path):
    start = int(time.time() * 1000) - 90_000  # recent, so the page reads the store as a live stream would
    events = tmp_path / "events"
    # Broker 2 stalls long enough to be shrunk; broker 3 stalls 7 s before the end: near its lag limit.
    assert (
        main(
            [
                "simulate",
                "--speed",
                "0",
                "--start",
                str(start),
                "--fault",
                "stall:broker=2:start=10s",
                "--fault",
                "stall:broker=3:start=38s",
                "--duration",
                "45s",
                *LAG,
                "--seed",
                "3",
                "--out-dir",
                str(events),
                "--rotate",
                "10s",
            ]
        )
        == 0
    )
    store = f"sqlite:///{tmp_path / 'isrwatch.db'}"
    assert (
        main(
            [
                "replay",
                *map(str, sorted(events.iterdir())),
                "--store",
                store,
                *LAG,
                "--set",
                f"schedule_origin_ms={start}",
            ]
        )
        == 0
    )

    with serving(store) as base:
        under, near = (
            {
                f"{p['topic']}-{p['partition']}": p
                for p in httpx.get(f"{base}/v1/partitions", params={"state": state}).json()["partitions"]
            }
            for state in ("under_replicated", "shrink_predicted")
        )
        seen = browse(base + "/", tmp_path / "status.png")

    assert seen["problems"] == [] and seen["error"] is None
    assert not seen["alterPartitionShown"]  # ZooKeeper mode: no AlterPartition section
    assert under and all(p["out-of-sync"] == [2] for p in under.values())
    expected = set(under)
    rows = seen["partitions"]
    assert len(rows) == 15 and {r["partition"] for r in rows if r["problem"]} == expected
    assert {r["partition"] for r in rows[: len(expected)]} == expected  # problems first
    for row in rows:
        for replica in row["replicas"]:
            out = row["partition"] in expected and replica["id"] == 2
            assert replica["oos"] is out and (replica["background"] == RED) is out
        hosts_2 = any(r["id"] == 2 for r in row["replicas"])
        assert ("2" in row["isr"].split(", ")) is (hosts_2 and row["partition"] not in expected)
    assert near and sorted(seen["problemsOnly"]) == sorted(expected | set(near))
    card = seen["summary"]["under_replicated"]
    assert card["value"] == str(len(expected)) and "bad" in card["classes"]
    assert seen["summary"]["total"]["value"] == "15"

    shrinks = [d for d in seen["decisions"] if d["dataset"]["kind"] == "shrink"]
    assert len(shrinks) == len(expected) and all(d["cells"][-1] == "2 stuck" for d in shrinks)
    batches = seen["propagations"]
    assert batches and all(b["dataset"]["trigger"] == "linger" for b in batches)
    assert all(5.0 < float(b["cells"][-1].removesuffix(" s")) <= 7.5 for b in batches)
    assert sum(int(b["cells"][2].split(":")[0]) for b in batches) == len(expected)
    assert {b["cells"][0] for b in seen["brokers"]} == {"1", "2", "3", "4"}
    followers = seen["followers"]
    assert {f["cells"][0] for f in followers} >= set(near) and all(f["cells"][1] == "3" for f in followers)
    assert all(re.fullmatch(r"\d+\.\d s ago", f["cells"][2]) for f in followers)
    assert all(re.fullmatch(r"\d+\.\d s|over by \d+\.\d s", f["cells"][4]) for f in followers)


def test_status_page_before_the_first_batch_says_so_without_errors(tmp_path):
    with serving(f"sqlite:///{tmp_path / 'empty.db'}") as base:
        seen = browse(base + "/", tmp_path / "empty.png", "#partitions tbody tr.empty")
    assert seen["problems"] == [] and seen["error"] is None
    assert seen["status"] == "no batch yet" and seen["partitions"] == []
    assert seen["timeline"]["span"] == "no micro-batch yet" and seen["timeline"]["clusters"] is None
    assert [r["cells"] for r in seen["decisions"]] == [["no decisions yet"]]
    assert seen["summary"]["total"]["value"] == "0"


def test_behind_a_token_the_page_asks_once_keeps_it_for_the_session_and_shows_the_data(scenario_url, tmp_path):
    with serving(scenario_url, "--token", "s3cret") as base:
        assert httpx.get(f"{base}/v1/partitions").status_code == 401
        seen = browse(base + "/", tmp_path / "token.png", token="s3cret")
    assert seen["login"] == {
        "askedFirst": True,
        "wrongToken": "That token was not accepted.",
        "askedAgainAfterReload": False,
    }
    assert seen["problems"] == [] and seen["error"] is None
    assert [r["partition"] for r in seen["partitions"]] == ["orders-0"] and seen["partitions"][0]["problem"]


def test_status_page_shows_where_the_model_and_the_brokers_disagree(tmp_path):
    """Agent input (tests/api/test_audit.py): cluster "a" diverged by timing only, cluster "b" had a shrink and a
    batch its broker never made: those rows stand out, timing ones do not."""
    from tests.support.audit import END, agent_events

    events = tmp_path / "agent.jsonl"
    events.write_text("".join(json.dumps(ev) + "\n" for ev in agent_events()))
    store = f"sqlite:///{tmp_path / 'isrwatch.db'}"
    argv = ["replay", str(events), "--profile", "agent", *LAG, "--until", str(END), "--store", store]
    assert main(argv) == 0
    with serving(store) as base:
        seen = browse(base + "/", tmp_path / "audit.png", "#divergences tbody tr[data-kind]")
    assert seen["problems"] == [] and seen["error"] is None
    rows = seen["divergences"]
    kinds = sorted((r["cells"][1], r["cells"][2], r["dataset"]["kind"]) for r in rows)
    assert kinds == [
        ("a/1", "ISR-change batch", "timing"),
        ("a/1", "ISR-change batch", "timing"),
        ("a/1", "t-0 epoch 1", "timing"),
        ("b/1", "ISR-change batch", "unexplained_by_model"),
        ("b/1", "t-0 epoch 1", "unexplained_by_model"),
    ]
    assert all(("problem" in r["classes"]) is (r["dataset"]["kind"] != "timing") for r in rows)
    [shrink] = [r for r in rows if r["cells"][1] == "b/1" and r["cells"][2] == "t-0 epoch 1"]
    assert shrink["cells"][4:] == ["shrink → [1,2]", "—", "3500 ms"]
    # each timing row names the rule that excused it; the counts by cause come from the metric
    causes = sorted((r["cells"][2], r["cells"][3], r["dataset"].get("cause")) for r in rows)
    assert causes == [
        ("ISR-change batch", "timing shifted", "shifted"),
        ("ISR-change batch", "timing shifted", "shifted"),
        ("ISR-change batch", "unexplained_by_model", None),
        ("t-0 epoch 1", "timing margin", "margin"),
        ("t-0 epoch 1", "unexplained_by_model", None),
    ]
    assert seen["timingCauses"] == ["margin 1", "shifted 2"]
    assert seen["timeline"]["clusters"] == {"options": ["a", "b"], "value": "a"}  # two clusters: a picker


def test_status_page_shows_the_pending_isr_changes_and_each_brokers_alter_partition_queue(tmp_path):
    """The KRaft cluster of tests/support/kraft.py: broker 1's request has been in flight for 25.1 s with a second
    proposal queued behind it; both partitions are pending shrinks whose committed ISR is still full."""
    events = write_events(tmp_path / "kraft.jsonl")
    store = f"sqlite:///{tmp_path / 'isrwatch.db'}"
    assert main(["replay", str(events), *settings_args(), "--until", str(UNTIL), "--store", store]) == 0
    with serving(store) as base:
        seen = browse(base + "/", tmp_path / "alter-partition.png", "#isr-pending tbody tr[data-partition]")
    assert seen["problems"] == [] and seen["error"] is None
    assert seen["alterPartitionShown"]
    pending = [r["cells"] for r in seen["isrPending"]]
    assert [cells[:5] for cells in pending] == [
        [f"{t}-{p}", "1", "pending shrink", "1, 2, 3", "1, 2, 3"] for t, p in (STUCK, QUEUED)
    ]
    # A just-written store reads as a live stream: the age runs on from 25.1 s between polls.
    assert all(25.1 <= float(cells[5].removesuffix(" s ago")) < 60 for cells in pending)
    brokers = {r["dataset"]["broker"]: r for r in seen["alterPartitionBrokers"]}
    assert brokers["1"]["cells"] == ["1", "1", "1 partition", "25.1 s"] and "warning" in brokers["1"]["classes"]
    assert brokers["2"]["cells"] == ["2", "0", "none", "—"] and brokers["2"]["classes"] == []
    assert set(brokers) == {"1", "2"}  # broker 3 leads nothing: it has no manager
    # Each proposal reads as one, with what became of it: the refused one is no expand (nor any shrink).
    kinds = sorted((r["cells"][1], r["cells"][2]) for r in seen["decisions"] if r["dataset"])
    assert kinds == [
        ("ledger-0", "shrink proposed → pending"),
        ("ledger-1", "shrink proposed → pending"),
        ("ledger-2", "expand proposed → committed"),
        ("ledger-3", "expand proposed → committed"),
        ("ledger-3", "expand proposed → refused INELIGIBLE_REPLICA"),
    ]
    assert not seen["propagationsShown"]  # its leaders send no ISR-change batch


def test_status_page_flags_a_broker_whose_clock_is_off(tmp_path):
    """The agent recording of three 3.9 brokers with broker 1's clock a year ahead and broker 3's ten minutes behind
    (tests/state/test_clock.py), replayed into a store: /v1/brokers and /metrics give their offsets over real HTTP,
    the page flags both as clock-skewed with the offset, and broker 2 not."""
    from tests.support.clock import SKEW, TOLERANCE_MS, skewed_lines

    events = tmp_path / "agent.jsonl"
    events.write_bytes(b"".join(line + b"\n" for b in (1, 2, 3) for line in skewed_lines(b)))
    store = f"sqlite:///{tmp_path / 'isrwatch.db'}"
    argv = ["replay", str(events), "--profile", "agent", "--set", "replica_lag_time_max_ms=6000", "--store", store]
    assert main(argv) == 0
    with serving(store) as base:
        listed = {b["broker"]: b["clock_offset_ms"] for b in httpx.get(f"{base}/v1/brokers").json()["brokers"]}
        exported = {
            int(m[1]): float(m[2])
            for m in re.finditer(
                r'^isrwatch_broker_clock_offset_seconds\{broker="(\d+)",cluster="lab"\} (\S+)$',
                httpx.get(f"{base}/metrics").text,
                re.M,
            )
        }
        seen = browse(base + "/", tmp_path / "clock.png", "#brokers tbody tr[data-broker]")
    assert set(listed) == set(exported) == {1, 2, 3}
    for broker, offset in listed.items():
        assert abs(offset - SKEW.get(broker, 0)) < TOLERANCE_MS
        assert exported[broker] == offset / 1000
    assert seen["problems"] == [] and seen["error"] is None
    rows = {r["dataset"]["broker"]: r for r in seen["brokers"]}
    assert rows["1"]["cells"][-1] == "+365.0 d clock skewed" and "problem" in rows["1"]["classes"]
    assert re.fullmatch(r"−9\.\d min clock skewed", rows["3"]["cells"][-1]) and "problem" in rows["3"]["classes"]
    assert rows["2"]["cells"][-1] == "+0.0 s"  # no flag (its row may stand out for a replica out of sync)


CLOCK = re.compile(r"\d\d:\d\d:\d\d\.\d{3}")  # the page's clock, and the demo terminal's (cli/demo.py `_clock`)


def _story(tmp_path: Path, duration: str, *options: str, judge: Sequence[str] = ()) -> tuple[str, int]:
    """A simulated story ending about now (so the page reads it as a live stream would), replayed into a store: its
    URL and the story's start."""
    start = int(time.time() * 1000) - 300_000
    events = tmp_path / "events"
    simulate = ["simulate", "--speed", "0", "--start", str(start), "--duration", duration, *options, *LAG]
    assert main([*simulate, "--seed", "3", "--out-dir", str(events), "--rotate", "10s"]) == 0
    store = f"sqlite:///{tmp_path / 'isrwatch.db'}"
    replay = ["replay", *map(str, sorted(events.iterdir())), "--store", store, *LAG, *judge]
    assert main([*replay, "--set", f"schedule_origin_ms={start}"]) == 0
    return store, start


def _consistent(seen: dict) -> None:
    """Nothing on the page contradicts anything else on it: the cards, the Partitions table, the Brokers table, the
    AlterPartition panel and the picture's last counts tell the same numbers, on one clock."""
    cards = {key: int(card["value"]) for key, card in seen["summary"].items()}
    rows = seen["partitions"]
    badges = {r["partition"]: r["badges"] for r in rows}
    assert cards["under_replicated"] == sum("under-replicated" in b for b in badges.values())
    assert cards["offline"] == sum("offline" in b for b in badges.values())
    pending_rows = {r["dataset"]["partition"] for r in seen["isrPending"] if "partition" in r["dataset"]}
    pending_badges = {p for p, b in badges.items() if any(x.startswith("pending") for x in b)}
    assert cards["pending"] == len(pending_rows) == len(pending_badges) and pending_badges == pending_rows
    brokers = {r["dataset"]["broker"]: r["cells"] for r in seen["brokers"]}
    for broker, cells in brokers.items():
        chips = sum(c["id"] == int(broker) and c["oos"] for r in rows for c in r["replicas"])
        assert int(cells[3]) == chips, (broker, cells)  # out of sync, as a follower
        assert int(cells[5]) == sum(  # pending ISR changes of the partitions it leads
            r["leader"] == broker and any(x.startswith("pending") for x in r["badges"]) for r in rows
        )
    picture = seen["timeline"]
    counts = picture["counts"]
    if counts["under-replicated"]:
        assert counts["under-replicated"][-1][1] == cards["under_replicated"]
        assert counts["under min ISR"][-1][1] == cards["under_min_isr"]
        assert counts["offline"][-1][1] == cards["offline"]
    still_out = {iv["broker"] for iv in picture["intervals"] if iv["kind"] == "out_of_sync" and iv["end_ms"] is None}
    assert still_out == {int(b) for b, cells in brokers.items() if int(cells[3]) > 0}
    assert all(CLOCK.fullmatch(r["cells"][0]) for r in seen["decisions"] if r["dataset"])
    assert CLOCK.search(picture["span"])


def test_the_timeline_shows_broker_2s_stall_as_its_out_of_sync_interval_and_one_incident(tmp_path):
    """Broker 2 stalls from 30 s to 80 s and is shrunk out of its ISRs, broker 4 crashes from 120 s to 170 s, broker 3
    stalls from 215 s to the end (4 min): the picture's lane of broker 2 holds one out-of-sync interval from its first
    shrink to its last expand (within a micro-batch), its incident is a band whose summary shows on hover and in the
    list, a click zooms to it; broker 3 is still out of sync at the end, as the tables say."""
    faults = ("stall:broker=2:start=30s:end=80s", "crash:broker=4:start=120s:end=170s", "stall:broker=3:start=215s")
    store, start = _story(tmp_path, "240s", *(arg for fault in faults for arg in ("--fault", fault)))
    with serving(store) as base:
        decisions = httpx.get(f"{base}/v1/decisions", params={"page_size": 1000}).json()["decisions"]
        incidents = httpx.get(f"{base}/v1/incidents").json()["incidents"]
        seen = browse(base + "/", tmp_path / "timeline.png", "#incident-list li[data-incident]")
    assert seen["problems"] == [] and seen["error"] is None
    shrinks = [d for d in decisions if d["kind"] == "shrink" and d["replicas_changed"] == [2]]
    expands = [d for d in decisions if d["kind"] == "expand" and d["replicas_changed"] == [2]]
    assert shrinks and len(expands) == len(shrinks)
    picture = seen["timeline"]
    assert picture["lanes"] == ["cluster", "broker 1", "broker 2", "broker 3", "broker 4"]
    [interval] = [iv for iv in picture["intervals"] if iv["broker"] == 2 and iv["kind"] == "out_of_sync"]
    batch = 2000  # the demo's micro-batch (`isrwatch run --trigger 2`)
    assert abs(interval["start_ms"] - min(d["ts"] for d in shrinks)) <= batch
    assert abs(interval["end_ms"] - max(d["ts"] for d in expands)) <= batch
    assert interval["partitions"] == len(shrinks)
    assert start + 30_000 < interval["start_ms"] < interval["end_ms"] < start + 85_000
    assert picture["since"] <= interval["start_ms"] and interval["end_ms"] <= picture["until"]
    markers = {(m["kind"], m["topic"], m["partition"], m["ts"]) for m in picture["markers"]}
    assert {("shrink", d["topic"], d["partition"], d["ts"]) for d in shrinks} <= markers
    # Broker 2's stall is one incident: a band across the lanes, its summary on hover and in the list.
    [incident] = [i for i in incidents if i["kind"] == "stuck" and i["brokers"] == [2]]
    [band] = [b for b in picture["bands"] if b["id"] == incident["id"]]
    assert band["summary"] == incident["summary"] and "broker 2" in incident["summary"]
    assert abs(band["start"] - interval["start_ms"]) <= batch and abs(band["end"] - interval["end_ms"]) <= batch
    listed = {i["id"]: i for i in picture["incidents"]}
    assert incident["summary"] in listed[incident["id"]]["text"] and "closed" in listed[incident["id"]]["classes"]
    assert picture["bands"][0]["id"] == incident["id"] and incident["summary"] in picture["hovered"]
    zoomed = picture["zoomed"]
    assert zoomed["since"] < interval["start_ms"] < interval["end_ms"] < zoomed["until"]
    assert zoomed["until"] - zoomed["since"] < 60_000 < picture["until"] - picture["since"]
    # Broker 2 was removed from as many ISRs as it had shrinks; broker 3 is still out.
    brokers = {r["dataset"]["broker"]: r["cells"] for r in seen["brokers"]}
    assert int(brokers["2"][4]) == len(shrinks) and int(brokers["3"][3]) > 0
    assert not seen["alterPartitionShown"] and seen["propagationsShown"]
    _consistent(seen)
    # The first screen (tmp_path's timeline-top.png) is the README's picture: ISRWATCH_SCREENSHOT=1 renews it.
    if os.environ.get("ISRWATCH_SCREENSHOT") == "1":
        shutil.copyfile(tmp_path / "timeline-top.png", ROOT / "docs" / "img" / "status-page.png")


def test_in_alter_partition_mode_a_proposal_reads_as_one_and_the_page_agrees_with_itself(tmp_path):
    """The AlterPartition demo's stuck-queue story, cut while the controller holds broker 1's answers: its
    shrinks are proposals, pending; the pending card, the Partitions table, the Brokers table and the AlterPartition
    panel count the same partitions, none of them under-replicated (the committed ISR stands); no batch panel, no
    last propagation; the picture holds broker 1's request in flight, open."""
    judge = ["--set", 'kafka_version="3.9"', "--set", 'isr_protocol="alter_partition"']
    store, start = _story(
        tmp_path, "45s", "--isr-protocol", "alter_partition", "--scenario", "stuck-queue", judge=judge
    )
    with serving(store) as base:
        seen = browse(base + "/", tmp_path / "alter-partition-timeline.png", "#isr-pending tbody tr[data-partition]")
        decisions = httpx.get(f"{base}/v1/decisions", params={"kind": "shrink", "page_size": 1000}).json()["decisions"]
    assert seen["problems"] == [] and seen["error"] is None
    assert seen["alterPartitionShown"] and not seen["propagationsShown"]
    # `removed from ISRs` counts the committed shrinks only: a pending or refused proposal removed no one.
    committed = Counter(
        r for d in decisions if (d["proposal"] or {}).get("state") == "committed" for r in d["replicas_changed"]
    )
    assert any((d["proposal"] or {}).get("state") != "committed" for d in decisions)
    removed = {
        int(b): 0 if cells[4] in ("—", "") else int(cells[4])
        for b, cells in ((r["dataset"]["broker"], r["cells"]) for r in seen["brokers"])
    }
    assert removed == {b: committed.get(b, 0) for b in removed}
    assert "unannounced" not in seen["summary"]  # no leader batches
    proposals = [r for r in seen["decisions"] if r["dataset"].get("kind") in ("shrink", "expand")]
    assert proposals and all("proposal" in r["dataset"] for r in proposals)
    for r in proposals:  # a refused proposal reads "shrink proposed → refused ERROR", never as a shrink
        assert r["cells"][2].startswith(f"{r['dataset']['kind']} proposed → {r['dataset']['proposal']}")
    assert any(r["dataset"]["proposal"] == "pending" for r in proposals)
    assert int(seen["summary"]["pending"]["value"]) > 0
    brokers = {r["dataset"]["broker"]: r["cells"] for r in seen["brokers"]}
    assert all(cells[6] in ("—", "0") and cells[7] == "—" for cells in brokers.values())  # never a batch
    picture = seen["timeline"]
    assert any(
        iv["broker"] == 1 and iv["kind"] == "alter_partition_in_flight" and iv["end_ms"] is None
        for iv in picture["intervals"]
    )
    _consistent(seen)


def test_with_two_clusters_the_picture_ends_at_the_pictured_clusters_own_time(tmp_path):
    """Two clusters replayed into one store, each to its own end: alpha's story ends 2 min before beta's. The
    timeline of alpha (the page's first) ends at alpha's settled time, on the page and in `GET /v1/timeline`, not
    at the store's watermark (beta's)."""
    start = int(time.time() * 1000) - 300_000
    store = f"sqlite:///{tmp_path / 'isrwatch.db'}"
    for cluster, duration in (("alpha", "120s"), ("beta", "240s")):
        events = tmp_path / cluster
        simulate = ["simulate", "--speed", "0", "--start", str(start), "--duration", duration, "--cluster", cluster]
        stall = ["--fault", "stall:broker=2:start=30s:end=80s"]
        assert main([*simulate, *stall, *LAG, "--seed", "3", "--out-dir", str(events), "--rotate", "10s"]) == 0
        replay = ["replay", *map(str, sorted(events.iterdir())), "--store", store, *LAG]
        assert main([*replay, "--set", f"schedule_origin_ms={start}"]) == 0
    with serving(store) as base:
        ends = {c: httpx.get(f"{base}/v1/timeline", params={"cluster": c}).json()["until"] for c in ("alpha", "beta")}
        watermark = httpx.get(f"{base}/v1/partitions", params={"page_size": 1}).json()["as_of_ms"]
        seen = browse(base + "/", tmp_path / "two.png", "#incident-list li[data-incident]")
    assert seen["problems"] == [] and seen["error"] is None
    assert watermark == ends["beta"] and 100_000 < ends["beta"] - ends["alpha"] < 140_000
    picture = seen["timeline"]
    assert picture["clusters"] == {"options": ["alpha", "beta"], "value": "alpha"}
    assert picture["until"] == ends["alpha"] and picture["until"] - picture["since"] == 5 * 60_000
    assert all(iv["start_ms"] <= ends["alpha"] for iv in picture["intervals"])
