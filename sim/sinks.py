"""Where simulated events go: a stream (stdout), JSONL files rotating into a directory, or a Kafka topic."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

from isrwatch.state.events import Event


class PendingFile:
    """A file written under a hidden name (Spark's file source skips names starting with `.`) and renamed into
    place once complete, so a reader never sees half a file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.temp = path.with_name(f".{path.name}.tmp")
        self.fh: IO[bytes] = open(self.temp, "wb")  # noqa: SIM115 - kept open across writes, closed by publish

    def write(self, data: bytes) -> None:
        self.fh.write(data)

    def publish(self, mtime_ms: int | None = None) -> None:
        """Rename it into place; `mtime_ms`: the modification time it shows (default: the OS's, now), set before the
        rename so that a reader never sees another."""
        self.fh.close()
        if mtime_ms is not None:
            os.utime(self.temp, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
        os.replace(self.temp, self.path)


class Sink(Protocol):
    def write(self, ev: Event, line: bytes) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class StreamSink:
    """JSON lines to a binary stream (stdout)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream

    def write(self, ev: Event, line: bytes) -> None:
        self.stream.write(line)

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        self.stream.flush()


class DirectorySink:
    """JSONL files rotating into a directory a file source watches, each published whole (`PendingFile`).

    A file covers `rotate_ms` of event time; names sort in time order and continue after the files
    already there. `clock` (epoch ms): the story's clock, which dates each file when it is published. A file source
    takes a file's modification time as its lines' arrival, against which their times are judged (`max_future_ms`,
    the brokers' clock offsets); a story played faster than real time runs ahead of the wall clock, not of its own.
    """

    def __init__(self, directory: Path, rotate_ms: int, clock: Callable[[], int] | None = None) -> None:
        self.dir = directory
        self.clock = clock
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rotate_ms = max(1, rotate_ms)
        numbers = [int(p.stem.split("-")[1]) for p in self.dir.glob("events-*.jsonl") if p.stem.split("-")[1].isdigit()]
        self.number = max(numbers, default=0)
        self.file: PendingFile | None = None
        self.first_ts = 0
        self.files = 0

    def write(self, ev: Event, line: bytes) -> None:
        if self.file is not None and ev.ts - self.first_ts >= self.rotate_ms:
            self._publish()
        if self.file is None:
            self.number += 1
            self.first_ts = ev.ts
            self.file = PendingFile(self.dir / f"events-{self.number:08d}.jsonl")
        self.file.write(line)

    def _publish(self) -> None:
        assert self.file is not None
        self.file.publish(None if self.clock is None else self.clock())
        self.file = None
        self.files += 1

    def flush(self) -> None:
        """Nothing to do: a file becomes visible only whole, when its event-time span is over."""

    def close(self) -> None:
        if self.file is not None:
            self._publish()


class Producer(Protocol):
    """What the Kafka sink needs of a producer (the command line passes `isrwatch.streaming.producer.JsonProducer`)."""

    def send(self, topic: str, key: bytes, value: bytes) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class KafkaSink:
    """Records to a Kafka topic, keyed by partition so each partition's events stay in order."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.topic = topic
        self.producer = producer

    def write(self, ev: Event, line: bytes) -> None:
        key = f"{ev.topic}-{ev.partition}".encode()  # type: ignore[union-attr]  # the simulator emits no ticks
        self.producer.send(self.topic, key=key, value=line[:-1])

    def flush(self) -> None:
        self.producer.flush()

    def close(self) -> None:
        self.producer.close()
