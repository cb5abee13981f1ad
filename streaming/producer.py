"""The one Kafka producer isrwatch writes JSON records with (simulated input, decision and batch outputs)."""

from __future__ import annotations

from typing import Any


class JsonProducer:
    """kafka-python's producer for records that are already JSON bytes; `acks` as Kafka's producer takes it."""

    def __init__(self, bootstrap: str, acks: int | str = "all", linger_ms: int = 20, **settings: Any) -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap.split(","), acks=acks, linger_ms=linger_ms, **settings
        )

    def send(self, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]] | None = None) -> None:
        self.producer.send(topic, key=key, value=value, headers=headers)

    def flush(self) -> None:
        self.producer.flush()

    def close(self, timeout: float = 5) -> None:
        self.producer.flush()
        self.producer.close(timeout=timeout)
