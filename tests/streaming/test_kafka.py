"""`isrwatch run` on the lab's real Kafka brokers: Spark's Kafka source (`kafka:`), the kafka-python source and
the Kafka output topics. Events go to a topic with replication factor 3 on the monitored cluster; outputs
go to the monitor broker, as in production (isrwatch's own traffic off the brokers it watches).

In each test the store equals `isrwatch.state.replay` of the same events up to the times the store says it settled.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec
import pytest
from fastapi.testclient import TestClient

from isrwatch.api.app import create_app
from isrwatch.lab import faults
from isrwatch.lab.jars import artifacts_in, ensure, kafka_set, pyspark_jars, spark_kafka_jars
from isrwatch.lab.record import Lab
from isrwatch.state.config import Config
from isrwatch.store import open_store
from isrwatch.streaming.kafka_source import BOOTSTRAP_TIMEOUT_ENV
from tests.support.hostile import CONFIG as SCENARIO_CONFIG_ARGS
from tests.support.hostile import SCENARIO, hostile_lines
from tests.support.jobs import CONFIG, dump, replay_of, run_job
from tests.support.kafka import new_topic, produce
from tests.support.net import free_port
from tests.support.state import canonical
from tests.support.streams import Mix, events

SCENARIO_CONFIG = SCENARIO_CONFIG_ARGS[1]


def event_rows(seed: int, count: int) -> list[dict]:
    rows = [ev for ev in events(Mix(partitions=30, events=count, seed=seed, invalid=0)) if isinstance(ev, dict)]
    for seq, ev in enumerate(rows, start=1):
        ev["seq"] = seq  # Kafka offsets would differ from line numbers: give every event its own
    return rows


def end_offsets(bootstrap: str, topics: list[str]) -> dict:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        return consumer.end_offsets([TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t)])
    finally:
        consumer.close()


def records_after(bootstrap: str, start: dict) -> list:
    """Every record written to the partitions since the `start` offsets, up to their end now."""
    from kafka import KafkaConsumer, TopicPartition

    stop = end_offsets(bootstrap, sorted({tp.topic for tp in start}))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    consumer.assign(list(start))
    for tp, offset in start.items():
        consumer.seek(tp, offset)
    records = []
    try:
        while any(consumer.position(tp) < stop[tp] for tp in start):
            for batch in consumer.poll(timeout_ms=1000).values():
                records += [r for r in batch if r.offset < stop[TopicPartition(r.topic, r.partition)]]
    finally:
        consumer.close()
    return records


def written(tmp_path: Path, rows: list[dict]) -> Path:
    """The produced events as a file, for the replay the store is compared with."""
    source = tmp_path / "events.jsonl"
    source.write_text("".join(json.dumps(ev) + "\n" for ev in rows))
    return source


def test_spark_kafka_source_restarted_mid_topic_loses_and_duplicates_nothing(spark, tmp_path, lab: Lab):
    """Two runs on one checkpoint: the first reads the topic as far as it went, the second the rest."""
    topic = new_topic(lab)
    rows = event_rows(seed=5, count=4000)
    half = len(rows) // 2
    url = f"sqlite:///{tmp_path / 'store.db'}"
    source = f"kafka:{lab.bootstrap_servers}/{topic}"
    produce(lab.bootstrap_servers, topic, [*rows[:half], b"{broken first"])
    run_job(source, url, tmp_path / "checkpoint", max_per_batch=None)
    with open_store(url) as store:
        first_run = store.last_batch_id()
    produce(lab.bootstrap_servers, topic, [*rows[half:], b"{broken second"])
    run_job(source, url, tmp_path / "checkpoint", max_per_batch=None)
    got = dump(url)
    expected = replay_of(url, [written(tmp_path, rows)])
    assert expected.highest.summary["decisions_by_kind"]["shrink"]
    assert got["decisions"] == expected.decisions and got["partitions"] == expected.partitions
    assert got["propagations"] == expected.propagations
    assert sorted(json.loads(d)["raw"] for d in got["dead_letters"]) == ["{broken first", "{broken second"]
    with open_store(url) as store:
        assert store.last_batch_id() > first_run  # the second run went on from the first one's offsets


def test_kafka_python_source_and_kafka_output(spark, tmp_path, lab: Lab):
    """Events from two Kafka partitions (read by offset ranges, several batches) in; decisions out to Kafka."""
    topic = new_topic(lab)
    rows = event_rows(seed=4, count=4000)
    produce(lab.bootstrap_servers, topic, [*rows, b"{broken"])
    url = f"sqlite:///{tmp_path / 'store.db'}"
    outputs = end_offsets(lab.monitor_bootstrap, ["isrwatch.decisions", "isrwatch.propagations", "isrwatch.incidents"])
    source = f"kafka-python:{lab.bootstrap_servers}/{topic}"
    run_job(source, url, tmp_path / "checkpoint", max_per_batch=len(rows) // 3, kafka_output=lab.monitor_bootstrap)
    got = dump(url)
    expected = replay_of(url, [written(tmp_path, rows)])
    assert got["decisions"] == expected.decisions and got["partitions"] == expected.partitions
    assert [json.loads(d)["raw"] for d in got["dead_letters"]] == ["{broken"]
    with open_store(url) as store:
        assert store.last_batch_id() >= 3
    sent: dict[str, list] = {"isrwatch.decisions": [], "isrwatch.propagations": [], "isrwatch.incidents": []}
    ids: dict[str, set] = {topic: set() for topic in sent}
    for record in records_after(lab.monitor_bootstrap, outputs):
        headers = dict(record.headers)
        ids[record.topic].add((int(headers["isrwatch-batch"]), int(headers["isrwatch-seq"])))
        value = json.loads(record.value)
        if record.topic.endswith("decisions"):
            key = f"{value['cluster']}/{value['topic']}/{value['partition']}"
        elif record.topic.endswith("incidents"):
            key = f"{value['cluster']}/{value['id']}"
        else:
            key = f"{value['cluster']}/{value['broker']}"
        assert record.key.decode() == key
        sent[record.topic].append(value)
    assert canonical(sent["isrwatch.decisions"]) == got["decisions"]
    assert canonical(sent["isrwatch.propagations"]) == got["propagations"]
    with open_store(url) as store:  # the latest version of each incident sent is the store's
        latest = {f"{i['cluster']}/{i['id']}": i for i in sent["isrwatch.incidents"]}
        assert latest == {
            f"{i['cluster']}/{i['id']}": store.incident(i["id"]) for i in store.incidents(limit=1000).items
        }
    # Every record names its batch and place in it, once: the key a consumer drops repeats by.
    assert {t: len(v) for t, v in ids.items()} == {t: len(v) for t, v in sent.items()}


def test_without_provisioned_connector_the_kafka_source_says_how_to_add_it(tmp_path):
    """A fresh JVM with no .tools (ISRWATCH_TOOLS elsewhere): the clear error, not a stack trace."""
    env = {**os.environ, "ISRWATCH_TOOLS": str(tmp_path / "no-tools")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "isrwatch.cli",
            "run",
            "--source",
            "kafka:127.0.0.1:9/events",
            "--store",
            f"sqlite:///{tmp_path / 'store.db'}",
            "--checkpoint",
            str(tmp_path / "cp"),
            "--available-now",
            "--driver-memory",
            "512m",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "Spark's Kafka connector is not on the classpath. Provision it into .tools/jars/spark-kafka" in done.stderr
    assert "spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:" in done.stderr


def test_provisioned_jars_hold_kafka_3_9_and_only_the_connector_jars_pyspark_lacks(monkeypatch, tmp_path):
    connector = spark_kafka_jars()
    names = {p.name for p in connector}
    from importlib.metadata import version

    assert f"spark-sql-kafka-0-10_2.13-{version('pyspark')}.jar" in names and "kafka-clients-3.9.2.jar" in names
    assert not artifacts_in(connector[0].parent) & artifacts_in(pyspark_jars())
    # Complete sets are used as they are: no Maven on the PATH, nothing fetched.
    monkeypatch.setenv("PATH", str(tmp_path))
    kafka = {p.name for p in ensure(kafka_set(), lambda message: None)}
    assert {
        "kafka_2.13-3.9.2.jar",
        "kafka-tools-3.9.2.jar",
        "reload4j-1.2.25.jar",
        "slf4j-reload4j-1.7.36.jar",
        "zookeeper-3.8.4.jar",
    } <= kafka


@pytest.mark.parametrize("kind", ["kafka", "kafka-python"])
def test_hostile_records_on_both_kafka_sources_end_as_dead_letters(spark, tmp_path: Path, lab: Lab, kind: str):
    """Corrupt records, and one from a broker whose clock is a year ahead (judged against the Kafka record's
    timestamp), between a scenario's events: each hostile record is a dead letter with its reason, the future one
    `ts_in_future`, and the outputs are the scenario's alone."""
    valid = (SCENARIO.parent / f"{SCENARIO.name}.events.jsonl").read_bytes().splitlines()
    hostile = [line for line in hostile_lines() if len(line) < 900_000]  # Kafka's default max.message.bytes
    year_ahead = int(time.time() * 1000) + 365 * 86_400_000
    hostile.append(json.dumps({"type": "tick", "ts": year_ahead, "task": "isr-expiration", "seq": 99_999}).encode())
    topic = new_topic(lab)
    records = [line for pair in itertools.zip_longest(valid, hostile) for line in pair if line is not None]
    produce(lab.bootstrap_servers, topic, records, partition=0)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    config = Config.from_dict(msgspec.json.decode(Path(SCENARIO_CONFIG).read_bytes()))
    said: list[str] = []
    source = f"{kind}:{lab.bootstrap_servers}/{topic}"
    run_job(source, url, tmp_path / "checkpoint", config, max_per_batch=None, echo=said.append)
    assert not [line for line in said if "warning" in line]  # a LogAppendTime topic: nothing to say
    got = dump(url)
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(b"\n".join(valid) + b"\n")
    expected = replay_of(url, [clean])
    assert expected.highest.summary["decisions_by_kind"]["shrink"]
    assert got["decisions"] == expected.decisions and got["propagations"] == expected.propagations
    assert got["partitions"] == expected.partitions
    with open_store(url) as store:
        dead = store.dead_letters(limit=100).items
    assert len(dead) == len(hostile) and all(d["reason"] for d in dead)
    assert [d["field"] for d in dead if d["reason"].startswith("ts_in_future")] == ["ts"]


@pytest.mark.parametrize("kind", ["kafka", "kafka-python"])
def test_a_create_time_topic_is_named_once_and_its_record_timestamps_are_no_arrival(
    spark, tmp_path: Path, lab: Lab, kind: str
):
    """A topic left at CreateTime carries the senders' clocks (here one ten minutes behind the events' own): they
    are not taken as arrival times, so no event is refused as `ts_in_future` against them and the outputs are the
    replay's; the job says so once at start, naming the topic and the command that fixes it."""
    topic = new_topic(lab, {"message.timestamp.type": "CreateTime", "retention.ms": "-1"})  # kept: stamped 2023
    rows = event_rows(seed=7, count=1500)
    produce(lab.bootstrap_servers, topic, rows, timestamp_ms=min(ev["ts"] for ev in rows) - 600_000)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    said: list[str] = []
    source = f"{kind}:{lab.bootstrap_servers}/{topic}"
    run_job(source, url, tmp_path / "checkpoint", max_per_batch=700, echo=said.append)
    warnings = [line for line in said if line.startswith("warning")]
    assert len(warnings) == 1, said
    assert f"topic {topic} has message.timestamp.type=CreateTime" in warnings[0]
    assert (
        f"kafka-configs --bootstrap-server {lab.bootstrap_servers} --alter --entity-type topics --entity-name {topic} "
        "--add-config message.timestamp.type=LogAppendTime" in warnings[0]
    )
    got = dump(url)
    assert got["dead_letters"] == []  # with the sender's clock as arrival, every event was ts_in_future
    expected = replay_of(url, [written(tmp_path, rows)])
    assert got["decisions"] and got["decisions"] == expected.decisions and got["partitions"] == expected.partitions


@pytest.mark.parametrize("kind", ["kafka", "kafka-python"])
def test_records_deleted_before_the_job_read_them_are_counted_logged_and_on_readyz(
    spark, tmp_path: Path, lab: Lab, kind: str
):
    """The job reads half a topic and stops; more is written and the first records of a partition the job has not
    read yet are deleted (deleteRecords, as retention would). Resumed from its checkpoint the job reads the rest,
    counts the deleted records in isrwatch_source_lost_records_total, says which offsets, and /readyz shows them."""
    from prometheus_client.parser import text_string_to_metric_families

    topic = new_topic(lab)
    rows = event_rows(seed=8, count=2000)
    half = len(rows) // 2
    url = f"sqlite:///{tmp_path / 'store.db'}"
    source = f"{kind}:{lab.bootstrap_servers}/{topic}"
    produce(lab.bootstrap_servers, topic, rows[:half])
    run_job(source, url, tmp_path / "checkpoint", max_per_batch=None)
    read = end_offsets(lab.bootstrap_servers, [topic])
    produce(lab.bootstrap_servers, topic, rows[half:])
    ends = end_offsets(lab.bootstrap_servers, [topic])
    tp, gone = max(ends, key=lambda tp: ends[tp] - read[tp]), 50  # the partition with the most unread records
    assert ends[tp] > read[tp] + gone
    with faults.admin(lab.bootstrap_servers) as client:
        client.delete_records({tp: read[tp] + gone})
    said: list[str] = []
    run_job(source, url, tmp_path / "checkpoint", max_per_batch=None, echo=said.append)
    with open_store(url) as store:
        assert store.lost_records() == [(topic, tp.partition, gone)]
        assert sum(v for name, _, v in store.tallies() if name == "stream_input_rows") == len(rows) - gone
    lines = [line for line in said if "source lost" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: batch "), said
    first = read[tp]
    assert f"source lost {gone} records of {topic}-{tp.partition}: offsets {first}-{first + gone - 1} were" in lines[0]
    with TestClient(create_app(url, ready_max_watermark_lag_s=0)) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["source_lost_records"] == [{"topic": topic, "partition": tp.partition, "records": gone}]
        families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    samples = families["isrwatch_source_lost_records"].samples
    assert [(s.labels, s.value) for s in samples if s.name.endswith("_total")] == [
        ({"topic": topic, "partition": str(tp.partition)}, gone)
    ]


class Outage:
    """A TCP forwarder to a broker that is not there until `restore()`: the network between a job and its Kafka."""

    def __init__(self, target: str) -> None:
        self.port = free_port()
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.server: socket.socket | None = None

    def restore(self) -> None:
        self.server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self.server is not None
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def test_kafka_python_source_waits_for_an_unreachable_kafka_and_loses_nothing(tmp_path: Path, lab: Lab):
    """`isrwatch run` started while its Kafka cannot be reached says so on stderr, retries with backoff, and once
    the network is back reads every event: the store equals the replay."""
    topic = new_topic(lab)
    rows = event_rows(seed=6, count=2000)
    produce(lab.bootstrap_servers, topic, rows)
    outage = Outage(lab.bootstrap_servers.split(",")[0])
    url = f"sqlite:///{tmp_path / 'store.db'}"
    config = tmp_path / "config.json"
    config.write_bytes(json.dumps(CONFIG.to_dict()).encode())
    argv = [sys.executable, "-m", "isrwatch.cli", "run", "--source", f"kafka-python:127.0.0.1:{outage.port}/{topic}",
            "--store", url, "--checkpoint", str(tmp_path / "cp"), "--config", str(config), "--available-now",
            "--driver-memory", "512m"]  # fmt: skip
    stderr = tmp_path / "stderr.txt"
    # Nothing answers through the outage: each try gives up after 2 s instead of 10 (two tries and a warning: 53 s).
    env = {**os.environ, BOOTSTRAP_TIMEOUT_ENV: "2000"}
    with open(stderr, "wb") as err:
        job = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = time.monotonic() + 180
        while stderr.read_text().count("unreachable") < 2:  # it has waited and tried again
            assert job.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.5)
        outage.restore()
        assert job.wait(300) == 0, stderr.read_text()
    finally:
        job.kill()
        outage.close()
    assert f"Kafka at 127.0.0.1:{outage.port} unreachable while reading where the topics " in stderr.read_text()
    got = dump(url)
    expected = replay_of(url, [written(tmp_path, rows)])
    assert got["decisions"] and got["decisions"] == expected.decisions
    assert got["partitions"] == expected.partitions and got["propagations"] == expected.propagations
