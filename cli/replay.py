"""Replay recorded events through the replica engine and write its outputs.

Replay JSONL events (SPEC §3) in (ts, seq) order, run the scheduled isr-expiration and propagation checks up
to --until, and write decisions.jsonl, propagations.jsonl, state.jsonl, dead_letter.jsonl, incidents.jsonl and
summary.json into --out (with agent input also observed.jsonl and divergences.jsonl; with AlterPartition leaders also
alter_partitions.jsonl), and/or the store, in one pass.
Replaying the same events with another --set replica_lag_time_max_ms=... shows how many shrinks it would cause.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

import msgspec

from isrwatch.state.config import ConfigError
from isrwatch.state.replay import ReplayResult
from isrwatch.store import StreamPosition, default_store, open_store

from .common import CONFIG_HELP, add_config_arguments, add_store_argument, command, load_config, say


def add_parser(sub: argparse._SubParsersAction) -> None:
    rp = command(sub, "replay", __doc__, main, epilog=CONFIG_HELP)
    rp.add_argument(
        "events",
        nargs="+",
        metavar="EVENTS.jsonl",
        help="event files, one JSON object per line; a missing seq is the line number",
    )
    rp.add_argument("--out", metavar="DIR", help="output directory (created if missing)")
    add_store_argument(
        rp,
        "also write the outputs to this store as one batch, for `isrwatch serve`; --store alone: the default store",
        nargs="?",
        default=None,
        const=default_store(),
    )
    add_config_arguments(rp)
    rp.add_argument(
        "--until",
        type=int,
        metavar="TS",
        help="end time in epoch ms: events and scheduled checks up to and including it are "
        "applied (default: the largest ts of a valid event)",
    )
    rp.add_argument(
        "--now",
        type=int,
        metavar="TS",
        help="judge the events as if they all arrived at TS (epoch ms): one dated more than max_future_ms after it "
        "is refused as ts_in_future, as the stream refuses it (default: trust the recorded times)",
    )
    rp.add_argument(
        "--engine",
        choices=["local", "spark"],
        default="local",
        help="local: one Python process (default); spark: the streaming query in local Spark",
    )


def main(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.set, args.profile)
    if not args.out and not args.store:
        raise ConfigError("give --out DIR, --store [URL] or both")
    for path in args.events:
        if not Path(path).is_file():
            raise ConfigError(f"events file {path}: no such file")
    if args.engine == "spark":
        from isrwatch.streaming.replay_spark import replay_spark

        result = replay_spark(args.events, config, args.until, progress=say, now=args.now)
    else:
        from isrwatch.state.replay import replay

        with contextlib.ExitStack() as stack:
            handles = [stack.enter_context(open(path, "rb")) for path in args.events]
            result = replay(handles, config, args.until, progress=say, clock=time.perf_counter, now=args.now)
    written = []
    if args.out:
        write_outputs(Path(args.out), result)
        written.append(f"{args.out}/")
    if args.store:
        written.append(f"batch {store_replay(args.store, result)} of {args.store}")
    s = result.summary
    say(
        f"{s['lines']:,} lines, {s['events']:,} events, {s['dead_letters']:,} dead letters -> "
        f"{s['decisions']:,} decisions {s['decisions_by_kind']}, {s['propagations']:,} propagations, "
        f"{s['partitions']:,} partitions; {s.get('events_per_second') or 0:,} lines/s; wrote {' and '.join(written)}"
    )
    if s.get("observed_by_type"):
        say(f"observed {s['observed_by_type']}; divergences {s['divergences_by_kind'] or 'none'}")
    if s.get("events_after_until"):
        say(f"warning: {s['events_after_until']:,} events after --until {s['until']} were not applied")
    return 0


def write_outputs(out: Path, result: ReplayResult) -> None:
    """Write the replay output files (SPEC §5 fields), one JSON object per line, and summary.json; when the input
    holds agent events, also what the brokers did (observed.jsonl) and where the model disagrees
    (divergences.jsonl)."""
    out.mkdir(parents=True, exist_ok=True)
    encode = msgspec.json.encode
    files = (
        ("decisions", result.decisions),
        ("propagations", result.propagations),
        ("state", result.records),
        ("dead_letter", [d.to_record() for d in result.dead_letters]),
        ("incidents", [i.to_record() for i in result.incidents]),
    )
    if result.observed or result.divergences:  # agent input: what brokers did, and the audit
        files += (("observed", result.observed), ("divergences", result.divergences))
    if result.alter_partitions or any(b.queue is not None for b in result.brokers):  # some leader uses AlterPartition
        files += (("alter_partitions", result.alter_partitions),)
    for name, rows in files:
        with open(out / f"{name}.jsonl", "wb") as fh:
            for row in rows:
                fh.write(encode(row))
                fh.write(b"\n")
    (out / "summary.json").write_text(json.dumps(result.summary, indent=2, sort_keys=True) + "\n")


def store_replay(url: str, result: ReplayResult) -> int:
    """Write a replay's outputs to the store as one batch after the last one; returns its batch id.

    The watermark is the end of the replay (every check up to --until ran), so the API judges
    "how long ago" at that event time; so is each replayed cluster's settled time (SPEC §6), so that a store
    replayed into one cluster at a time keeps each cluster's own.
    """
    with open_store(url) as store:
        job = store.holder()
        if job is not None:
            raise ConfigError(refusal(url, job, store.stream_position()))
        last = store.last_batch_id()
        batch_id = 0 if last is None else last + 1
        end = result.summary["until"] + 1
        clusters = sorted({r.cluster for r in result.records} | result.frontiers.keys())
        store.write_batch(batch_id, result, watermark_ms=end, frontiers=dict.fromkeys(clusters, end))
    return batch_id


def refusal(url: str, job: dict, position: StreamPosition | None) -> str:
    """Why a replay may not write into a store a streaming job writes: its batches would take the job's ids."""
    when = "it has committed no batch yet"
    if position is not None:
        age = time.time() - position.committed_wall_ms / 1000
        when = f"its last batch ({position.batch_id}) committed {age:,.0f} s ago"
    return (
        f"store {url} is written by streaming job {job.get('job')} (pid {job.get('pid')} on {job.get('host')}, "
        f"checkpoint {job.get('checkpoint')}; {when}); a replay would take the job's next batch ids. "
        "Replay into another store."
    )
