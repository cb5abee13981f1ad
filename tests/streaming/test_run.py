"""`isrwatch run` in process: what the job commits to the store equals the local replay up to what it settled.

Each cluster keeps its own event time and each state key applies a cluster as far as it knows the
cluster's time (SPEC §6), so the job's store holds exactly what `isrwatch.state.replay` gives for the same
events: every partition's state and decisions up to the event time its record is exact at, each
cluster's propagation batches and brokers' pending sets up to that cluster's settled frontier, all
dead letters and counters — on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json

import pytest

from isrwatch.cli import build_parser
from isrwatch.cli.common import load_config
from isrwatch.cli.run import job_options
from isrwatch.lab.jars import spark_kafka_jars
from isrwatch.state.config import ConfigError
from isrwatch.store import open_store
from isrwatch.streaming.buckets import LAYOUT_FILE
from isrwatch.streaming.job import JobOptions, describe_failure
from isrwatch.streaming.sources import SourceError, parse_source
from isrwatch.streaming.spark import SparkSettings
from tests.support.jobs import CONFIG, assert_store_is_the_replay, dump, replay_of, run_job
from tests.support.state import fetch, lai, tick
from tests.support.streams import START_MS, Mix, events, in_order, write_files


def test_store_holds_the_replay_up_to_what_it_settled(spark, tmp_path, store_url):
    lines = events(Mix(partitions=60, events=8000, seed=3))
    paths = write_files(lines, tmp_path / "in", 4)
    run_job(tmp_path / "in", store_url, tmp_path / "checkpoint")
    got = dump(store_url)
    with open_store(store_url) as store:
        frontiers = store.event_time().clusters
        progress = store.latest_progress()
        inputs = {m: v for m, _, v in store.tallies()}["stream_input_rows"]
    # Each cluster settles on its own time: at most its newest event - lateness; the last line of every file
    # tells every state key how far its cluster has come, so the end of the input is not far behind.
    for cluster in ("east", "west"):
        newest = max(ev["ts"] for ev in lines if isinstance(ev, dict) and ev.get("cluster") == cluster)
        assert newest - CONFIG.allowed_lateness_ms - 3000 <= frontiers[cluster] <= newest - CONFIG.allowed_lateness_ms
    assert got["watermark"] == max(frontiers.values())
    expected = replay_of(store_url, paths)
    assert expected.lowest.summary["decisions_by_kind"]["shrink"] and expected.propagations
    assert_store_is_the_replay(got, expected)
    assert progress["watermark_ms"] == got["watermark"] and progress["batch_duration_ms"] > 0
    assert inputs == expected.highest.summary["lines"]


def test_late_events_are_dead_letters_and_change_nothing(spark, tmp_path):
    lines = events(Mix(partitions=30, events=3000, seed=8))
    late = [
        json.dumps(ev)
        for ev in (
            {
                "type": "fetch",
                "ts": START_MS + 1,
                "topic": "topic-0",
                "partition": 0,
                "replica": 1,
                "fetch_offset": 1,
                "leader_leo": 1,
                "cluster": "east",
            },
            {"type": "tick", "ts": START_MS + 2},  # every bucket gets it: still one dead letter
            {"type": "append", "ts": START_MS + 3, "topic": "topic-0", "partition": 0},
        )
    ]  # invalid as well
    on_time = write_files(lines, tmp_path / "on-time", 3)
    inbox = tmp_path / "in"
    inbox.mkdir()
    for i, path in enumerate(on_time):  # the late lines arrive with the last file, long after their time
        (inbox / path.name).write_text(path.read_text() + ("\n".join(late) + "\n" if i == 2 else ""))
    in_order(sorted(inbox.iterdir()))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    run_job(inbox, url, tmp_path / "checkpoint")
    got = dump(url)
    expected = replay_of(url, on_time)
    dead = [json.loads(d) for d in got["dead_letters"]]
    reasons = sorted(d["reason"].split(":")[0] for d in dead if d["raw"] in late)
    assert reasons == ["Object missing required field `leader_leo`", "late", "late"]
    tallies = {(m, labels.get("reason")): v for m, labels, v in got["tallies"]}
    assert tallies[("dead_letters", "late")] == 2 and tallies[("late_events", None)] == 2
    assert got["decisions"] == expected.decisions
    assert got["partitions"] == expected.partitions


@pytest.mark.parametrize("spec", ["files", "files:", "kafka:host:9092", "kafka:/topic", "mqtt:x/y"])
def test_bad_source_specs_name_the_expected_form(spec):
    with pytest.raises(SourceError, match="--source"):
        parse_source(spec)


def test_checkpoint_fixes_the_bucket_count_and_store_must_match_it(spark, tmp_path):
    inbox = tmp_path / "in"
    write_files(events(Mix(partitions=10, events=500, invalid=0)), inbox, 1)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    run_job(inbox, url, tmp_path / "checkpoint", buckets=4)
    assert json.loads((tmp_path / "checkpoint" / LAYOUT_FILE).read_text())["buckets"] == 4
    with pytest.raises(ConfigError, match="--buckets 4"):
        run_job(inbox, url, tmp_path / "checkpoint", buckets=8)
    with pytest.raises(ConfigError, match="another checkpoint"):
        run_job(inbox, url, tmp_path / "other-checkpoint")


def test_checkpoint_by_url_goes_through_the_hadoop_filesystem(spark, tmp_path):
    """Object-store checkpoints (s3a://, gs://, ...) use Spark's Hadoop FileSystem; file:// takes the same path."""
    inbox = tmp_path / "in"
    write_files(events(Mix(partitions=10, events=500, invalid=0)), inbox, 1)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    location = (tmp_path / "remote-checkpoint").as_uri()
    run_job(inbox, url, location, buckets=4)
    assert json.loads((tmp_path / "remote-checkpoint" / LAYOUT_FILE).read_text())["buckets"] == 4
    assert any((tmp_path / "remote-checkpoint" / "offsets").iterdir())
    with pytest.raises(ConfigError, match="--buckets 4"):  # the layout is read back through Hadoop
        run_job(inbox, url, location, buckets=8)


def test_run_help_documents_every_option(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = capsys.readouterr().out
    for option in (
        "--source",
        "--store",
        "--checkpoint",
        "--config",
        "--set",
        "--buckets",
        "--trigger",
        "--max-per-batch",
        "--starting",
        "--available-now",
        "--until-idle",
        "--state-store",
        "--shuffle-partitions",
        "--master",
        "--driver-memory",
        "--spark-conf",
        "--kafka-output",
        "--quiet",
        "files:DIR",
        "kafka-python:BOOTSTRAP/TOPICS",
        "spark.jars.packages",
        "allowed_lateness_ms",
    ):
        assert option in text, option


def test_run_options_are_the_jobs_options():
    """Each option lands in the JobOptions field of its name; --set and --spark-conf make the config and Spark's."""
    argv = ["run", "--source", "kafka:h:9092/events", "--trigger", "2", "--store-retry", "30", "--buckets", "4"]
    argv += ["--starting", "latest", "--set", "replica_lag_time_max_ms=10000", "--spark-conf", "spark.x.y=1"]
    args = build_parser().parse_args([*argv, "--master", "local[1]", "--until-idle", "9", "--kafka-output", "h:9092"])
    assert job_options(args) == JobOptions(
        source="kafka:h:9092/events",
        config=load_config(None, ["replica_lag_time_max_ms=10000"]),
        buckets=4,
        trigger_seconds=2.0,
        starting="latest",
        until_idle=9.0,
        kafka_output="h:9092",
        store_retry_seconds=30.0,
        spark=SparkSettings(
            master="local[1]", extra={"spark.x.y": "1"}, kafka_jars=tuple(str(p) for p in spark_kafka_jars())
        ),
    )
    with pytest.raises(ConfigError, match="--spark-conf 'x=1': expected spark.KEY=VALUE"):
        job_options(build_parser().parse_args(["run", "--spark-conf", "x=1"]))


def test_a_pending_propagation_goes_out_when_no_new_change_arrives(spark, tmp_path):
    """The last watermark move releases no line and no check of any bucket; the propagation is due anyway."""
    files = [
        [
            tick(500, "isr-expiration"),
            lai(1000, 1, [1], [1, 2], 0, leader_leo=100),
            fetch(1500, 2, 100, 100),  # replica 2 joins the ISR: a change for broker 1 to propagate
            fetch(9000, 2, 100, 100),
        ],  # watermark 6000: the change is applied, its batch is due at 7500
        [fetch(11000, 2, 100, 100)],
    ]  # watermark 8000: nothing of any bucket between 6000 and 8000
    inbox = tmp_path / "in"
    inbox.mkdir()
    for i, lines in enumerate(files):
        (inbox / f"{i}.jsonl").write_text("".join(json.dumps(ev) + "\n" for ev in lines))
    in_order(sorted(inbox.iterdir()))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    run_job(inbox, url, tmp_path / "checkpoint")
    got = dump(url)
    assert got["watermark"] == 8000
    assert [json.loads(p) for p in got["propagations"]] == [
        {
            "ts": 7500,
            "cluster": "default",
            "broker": 1,
            "partitions": [{"topic": "t", "partition": 0}],
            "trigger": "linger",
            "first_change_ts": 1500,
            "last_change_ts": 1500,
        }
    ]


def test_a_failed_query_is_described_in_one_line():
    message = (
        "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform "
        'latestOffset: Traceback (most recent call last):\n  File "x.py", line 1, in probe\n'
        "    raise TimeoutError(...)\nTimeoutError: Kafka at h:1 did not answer a fetch for ['x']\n"
        " SQLSTATE: 38000\n=== Streaming Query ===\nIdentifier: isrwatch [id = 1]\n"
    )
    assert describe_failure(Exception(message)) == (
        "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform "
        "latestOffset: TimeoutError: Kafka at h:1 did not answer a fetch for ['x']"
    )
    assert describe_failure(Exception("[STATE_STORE_ERROR] disk full")) == "[STATE_STORE_ERROR] disk full"
