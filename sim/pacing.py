"""Real-time pacing: events go out when their event time has come on the wall clock (scaled by a speed)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import msgspec

from isrwatch.state.events import Event

from .sinks import Sink


class Pacer:
    """Holds each event back until its event time, scaled by `speed`, has come on the wall clock, and
    spaces events at most `rate` per second; speed 0 and no rate = as fast as possible."""

    def __init__(
        self,
        speed: float,
        rate: float | None,
        first_ts: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.speed = speed
        self.interval = 1 / rate if rate else 0.0
        self.first_ts = first_ts
        self.clock = clock
        self.sleep = sleep
        self.started = clock()
        self.next_free = self.started

    def now_ms(self) -> int:
        """The story's clock (epoch ms, `speed` > 0): the event time due now, running `speed` times the wall's pace."""
        return self.first_ts + round((self.clock() - self.started) * 1000 * self.speed)

    def due(self, ts: int) -> float:
        """Seconds until an event at `ts` may go (<= 0: now)."""
        at = self.next_free
        if self.speed > 0:
            at = max(at, self.started + (ts - self.first_ts) / 1000 / self.speed)
        self.next_free = max(at, self.clock()) + self.interval if self.interval else at
        return at - self.clock()


def run(events: Iterable[Event], sink: Sink, pacer: Pacer | None, stop: Callable[[], bool] = lambda: False) -> int:
    """Write events to the sink, paced; returns how many went out. Flushes before every wait."""
    encode = msgspec.json.Encoder().encode_into
    buf = bytearray()
    count = 0
    try:
        for ev in events:
            if pacer is not None:
                wait = pacer.due(ev.ts)
                if wait > 0.002:
                    sink.flush()
                    if stop():
                        break
                    pacer.sleep(wait)
            encode(ev, buf)
            buf.extend(b"\n")
            sink.write(ev, bytes(buf))
            count += 1
    finally:
        sink.close()
    return count
