"""Each reporting broker's clock offset from its cluster (SPEC §6, clock offsets): how a wrong clock is shown.

A Kafka leader judges its partitions on its own `time.milliseconds()`, and the agent stamps every event (`ts`) with
it. Where the input says when an event reached isrwatch (`received`: a LogAppendTime record's timestamp, a file's
modification time), `ts - received` is the broker's clock offset minus the event's delivery delay. Per broker, the
*lead* is the largest such difference over the latest two arrival windows: the event delivered fastest, so delivery
delay and bursts do not count as skew, and a clock set right again shows within two windows. A broker's offset is
its lead minus the median of its cluster's brokers' leads, so the monitor's clock and the delivery delay they share
cancel, and a backfill of old files (every event long before its file) gives every broker the same lead.

Without arrival times the lead is the broker's newest event time: the offset compares it with the other brokers'
newest. Those times cannot tell a broker whose clock is behind from one that stopped reporting.

What a book holds is the maximum, per broker and arrival window, over a set of samples, pruned to the latest two
windows: merging is commutative, associative and idempotent, so the offsets depend on which events were seen, not
on their order, their micro-batch cuts, the state key that saw them or how often (ticks reach every key).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec
from msgspec import Struct

CLOCK_WINDOW_MS = 30_000  # an arrival window; the lead is taken over the latest two
NO_ARRIVAL = -(2**62)  # the window of an event without an arrival time: below, and never next to, any real one
STATE_VERSION = 1


class ClockSample(Struct, array_like=True, frozen=True):
    """A broker's largest `ts - received` (without arrival: its newest `ts`) in one arrival window."""

    cluster: str
    broker: int
    window: int
    lead: int


# The state a sink keeps: (version, the samples), msgpack.
_decoder = msgspec.msgpack.Decoder(tuple[int, list[ClockSample]])


def median(values: list[int]) -> int:
    """The median (of an even count, the mean of the middle two, rounded down): the cluster's common clock, which one
    wrong clock cannot move however far off it is."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) // 2


def outvoted(leads: Mapping[int, int], max_future_ms: int) -> set[int]:
    """One clock cannot outvote the others (SPEC §6): of a cluster's brokers (`leads`: broker -> its lead), those more
    than `max_future_ms` from the cluster's median clock move no frontier and hold nothing back, whatever the source.
    The median is the common clock only when the brokers that far off are fewer than half of at least three: one wrong
    clock of three, two of five (of two clocks that disagree, neither can be told wrong). Kafka has no such rule: each
    leader judges its followers on its own `time.milliseconds()` (Partition.scala isFollowerOutOfSync); this guards
    isrwatch's own event time, which every broker's clock feeds."""
    if len(leads) < 3:
        return set()
    common = median(list(leads.values()))
    off = {broker for broker, lead in leads.items() if abs(lead - common) > max_future_ms}
    return off if 2 * len(off) < len(leads) else set()


class ClockBook:
    """Every reporting broker's leads per arrival window, and the offsets they give."""

    def __init__(self, blob: bytes | None = None) -> None:
        self.windows: dict[tuple[str, int], dict[int, int]] = {}
        if blob is not None:
            version, samples = _decoder.decode(blob)
            if version != STATE_VERSION:
                raise ValueError(f"clock state version {version} is not {STATE_VERSION}")
            self.merge(samples)

    def to_bytes(self) -> bytes:
        return msgspec.msgpack.encode((STATE_VERSION, self.samples()))

    def observe(self, cluster: str, broker: int, ts: int, received: int | None) -> None:
        """One event `broker` stamped `ts` with its own clock, which reached isrwatch at `received`. Called for every
        event a broker reports, so the common case (a window it keeps already) is folded in here, in one call."""
        window, lead = (NO_ARRIVAL, ts) if received is None else (received // CLOCK_WINDOW_MS, ts - received)
        windows = self.windows.get((cluster, broker))
        known = None if windows is None else windows.get(window)
        if known is None:
            self.add(cluster, broker, window, lead)
        elif lead > known:
            windows[window] = lead  # type: ignore[index]  # known is not None: so is windows

    def add(self, cluster: str, broker: int, window: int, lead: int) -> None:
        """Fold one lead in: the largest per window, of the latest two windows only."""
        windows = self.windows.get((cluster, broker))
        if windows is None:
            self.windows[(cluster, broker)] = {window: lead}
            return
        known = windows.get(window)
        if known is not None:
            if lead > known:
                windows[window] = lead
        elif window >= max(windows) - 1:
            windows[window] = lead
            for old in [w for w in windows if w < window - 1]:
                del windows[old]

    def merge(self, samples: Iterable[ClockSample]) -> None:
        for s in samples:
            self.add(s.cluster, s.broker, s.window, s.lead)

    def samples(self) -> list[ClockSample]:
        """The book as samples, in (cluster, broker, window) order: what a report carries and the state keeps."""
        return [
            ClockSample(cluster, broker, window, lead)
            for (cluster, broker), windows in sorted(self.windows.items())
            for window, lead in sorted(windows.items())
        ]

    def _leads(self) -> dict[tuple[str, bool], dict[int, int]]:
        """Each broker's lead, grouped by cluster and by whether it has arrival times: brokers with arrival times are
        compared with each other, brokers without with each other (a lead of one kind means nothing against the
        other's)."""
        groups: dict[tuple[str, bool], dict[int, int]] = {}
        for (cluster, broker), windows in self.windows.items():
            groups.setdefault((cluster, max(windows) == NO_ARRIVAL), {})[broker] = max(windows.values())
        return groups

    def offsets(self) -> dict[tuple[str, int], int]:
        """Each broker's clock offset (ms) from its cluster's median."""
        offsets: dict[tuple[str, int], int] = {}
        for (cluster, _), leads in self._leads().items():
            common = median(list(leads.values()))
            offsets.update(((cluster, broker), lead - common) for broker, lead in leads.items())
        return dict(sorted(offsets.items()))

    def outvoted(self, max_future_ms: int) -> set[tuple[str, int]]:
        """The (cluster, broker)s whose clock the others outvote (`outvoted`)."""
        return {
            (cluster, broker)
            for (cluster, _), leads in self._leads().items()
            for broker in outvoted(leads, max_future_ms)
        }
