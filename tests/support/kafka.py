"""Topics on a real Kafka broker, created and written as the tests need them."""

from __future__ import annotations

import json
import uuid
import zlib

from isrwatch.lab import faults
from isrwatch.lab.record import Lab

PARTITIONS = 2


def new_topic(lab: Lab, configs: dict[str, str] | None = None) -> str:
    """A topic of its own on the monitored cluster: replication factor 3, leaders on different brokers, stamped on
    append (LogAppendTime) as isrwatch's events topic must be, unless `configs` says otherwise."""
    from kafka.admin import NewTopic

    name = f"events-{uuid.uuid4().hex[:8]}"
    settings = {"message.timestamp.type": "LogAppendTime", **(configs or {})}
    with faults.admin(lab.bootstrap_servers) as client:
        client.create_topics([NewTopic(name, PARTITIONS, 3, topic_configs=settings)])
    return name


def produce(
    bootstrap: str,
    topic: str,
    lines: list[dict | bytes],
    partition: int | None = None,
    timestamp_ms: int | None = None,
) -> None:
    """Events keyed to a partition by their Kafka topic (each partition's events stay in order), raw bytes to
    partition 0; everything to `partition` when given. `timestamp_ms`: the producer's record timestamp."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for line in lines:
        if partition is not None or isinstance(line, bytes):
            value = line if isinstance(line, bytes) else json.dumps(line).encode()
            producer.send(topic, value, partition=partition or 0, timestamp_ms=timestamp_ms)
        else:
            producer.send(
                topic,
                json.dumps(line).encode(),
                partition=zlib.crc32(str(line.get("topic")).encode()) % PARTITIONS,
                timestamp_ms=timestamp_ms,
            )
    producer.flush()
    producer.close()
