"""The lab's steady producer: small records, round-robin over every partition of the lab topics.

Every partition gets data all the time, so a follower that stops fetching (or falls behind) really
is out of sync: Kafka never expires a follower that is at the leader's log end offset. acks=1 keeps
the load steady while faults stall or kill the leaders' followers. Runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m isrwatch.lab.load", description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topics", required=True, metavar="NAME:PARTITIONS,...")
    parser.add_argument("--rate", type=int, default=200, help="records per second over all partitions")
    parser.add_argument("--size", type=int, default=100, help="bytes per record (default 100)")
    args = parser.parse_args(argv)

    from kafka import KafkaProducer

    partitions = [
        (name, p) for item in args.topics.split(",") for name, count in [item.split(":")] for p in range(int(count))
    ]
    # A 50 ms linger gathers each leader's partitions into one request: a third of the requests (and of the
    # brokers' CPU) that one request per record would cost.
    producer = KafkaProducer(
        bootstrap_servers=args.bootstrap.split(","),
        acks=1,
        enable_idempotence=False,
        linger_ms=50,
        # A stalled broker must not stall the load on the others: a send waits at most 0.5 s for metadata or
        # buffer space, and a request to a paused broker gives up after 5 s (its partitions' records fail and are
        # counted; the rest keep flowing).
        max_block_ms=500,
        request_timeout_ms=5000,
        client_id="isrwatch-lab-load",
    )
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    counts = {"sent": 0, "failed": 0}
    last_error: list[str] = []

    def failed(exc: Exception) -> None:
        counts["failed"] += 1
        last_error[:] = [f"{type(exc).__name__}: {exc}"]

    record = b'{"n": %d, "ts": %d, "pad": "' + b"x" * max(0, args.size - 40) + b'"}'
    started = time.monotonic()
    reported = started
    print(f"producing {args.rate} records/s of {args.size} B to {len(partitions)} partitions", flush=True)
    while not stopping:
        due = int((time.monotonic() - started) * args.rate)
        while counts["sent"] < due and not stopping:
            topic, partition = partitions[counts["sent"] % len(partitions)]
            value = record % (counts["sent"], time.time() * 1000)
            try:
                producer.send(topic, value, partition=partition).add_errback(failed)
            except Exception as exc:  # KafkaTimeoutError and the like: count it, keep the others' load going
                failed(exc)
            counts["sent"] += 1
        if time.monotonic() - reported >= 30:
            reported = time.monotonic()
            print(
                f"sent {counts['sent']:,}, failed {counts['failed']:,}"
                + (f" (last: {last_error[0]})" if last_error else ""),
                flush=True,
            )
        time.sleep(0.02)
    producer.flush(timeout=5)
    producer.close(timeout=5)
    print(f"stopped: sent {counts['sent']:,}, failed {counts['failed']:,}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
