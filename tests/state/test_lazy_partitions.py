"""A state key decodes only the pages of partitions a call touches (SPEC §6, "State"): the rest stay encoded, and the
outputs are those of one pass whatever was decoded."""

from __future__ import annotations

import msgspec
import pytest

from isrwatch.state.config import Config
from isrwatch.state.engine import _PAGED, _WHOLE, STATE_VERSION, PartitionEngine, _GroupState
from isrwatch.state.partition import Outputs, Partition
from tests.support.state import append, fetch, lai, parse_all

CONFIG = Config(replica_lag_time_max_ms=10_000)  # scheduled checks every 5 s
PARTITIONS = 400  # 7 pages


def _start() -> list[dict]:
    """400 partitions led by broker 1, followers 2 and 3 caught up at 1,000."""
    events = [lai(100, 1, [1, 2, 3], [1, 2, 3], 1, partition=n) for n in range(PARTITIONS)]
    for n in range(PARTITIONS):
        events += [fetch(1_000, r, 0, 0, partition=n) for r in (2, 3)]
    return events


def _split(events: list[dict], cut: int, until: int) -> tuple[PartitionEngine, Outputs, Outputs]:
    """The events applied up to `cut` by one engine, the rest up to `until` by another from its bytes."""
    parsed = parse_all(events)
    first = PartitionEngine(CONFIG)
    first.add([ev for ev in parsed if ev.ts < cut])
    before = first.advance(cut)
    second = PartitionEngine(CONFIG, first.to_bytes())
    second.add([ev for ev in parsed if ev.ts >= cut])
    return second, before, second.advance(until)


def _one_pass(events: list[dict], until: int) -> tuple[PartitionEngine, Outputs]:
    engine = PartitionEngine(CONFIG)
    engine.add(parse_all(events))
    return engine, engine.advance(until)


def _records(engine: PartitionEngine) -> list:
    return [engine.record(p) for p in sorted(engine.partitions.values(), key=lambda p: p.key)]


def test_a_call_decodes_only_the_partitions_its_events_touch() -> None:
    """One partition's fetch, and three scheduled checks that cannot remove anyone: its page alone decoded."""
    events = [*_start(), fetch(6_000, 2, 0, 0, partition=7)]
    engine, _, out = _split(events, 2_000, 11_000)
    assert engine.partitions.decoded() == 1
    whole, _ = _one_pass(events, 11_000)
    assert _records(engine) == _records(whole)
    assert out.decisions == []


def test_a_due_check_decodes_the_partitions_it_can_shrink_and_decides_as_one_pass() -> None:
    """Every follower but partition 3's broker 2 fetches the leaders' appends; of the checks after that, the one
    past its lag decodes partition 3's page alone and shrinks it exactly as one pass does."""
    events = _start()
    for n in range(PARTITIONS):
        events.append(append(7_000, 10, partition=n))
        events += [fetch(8_000, r, 10, 10, partition=n) for r in (2, 3) if (n, r) != (3, 2)]
    engine, before, out = _split(events, 9_000, 16_000)
    whole, want = _one_pass(events, 16_000)
    assert [d.replicas_changed for d in out.decisions] == [[2]]
    assert engine.partitions.decoded() == 1
    assert before.decisions + out.decisions == want.decisions
    assert _records(engine) == _records(whole)


def _legacy(p: Partition, deposed: tuple[int, ...], checked: tuple[int, ...]) -> list:
    """`p` as versions 3 and 4 encoded it: its deposed leaders and runs checked ahead just before `shown`."""
    row = msgspec.to_builtins(p)
    at = Partition.__struct_fields__.index("shown")
    return [*row[:at], list(deposed), list(checked), *row[at:]]


def _legacy_state(version: int, engine: PartitionEngine, kept: dict) -> bytes:
    """The engine's state as `version` (3: partitions one by one; 4: in pages with a flag) wrote it, with `kept`
    (key: (deposed, checked ahead)) inside the partitions."""
    state = msgspec.msgpack.decode(engine.to_bytes(), type=_GroupState)
    rows = [_legacy(p, *kept.get(p.key, ((), ()))) for p in engine.partitions.values()]
    if version == _WHOLE:
        partitions = [msgspec.Raw(msgspec.msgpack.encode(row)) for row in rows]
    else:
        page = [len(rows), 0, any(c for _, c in kept.values()), msgspec.Raw(msgspec.msgpack.encode(rows))]
        partitions = [msgspec.Raw(msgspec.msgpack.encode(page))]
    return msgspec.msgpack.encode(msgspec.structs.replace(state, version=version, partitions=partitions))


@pytest.mark.parametrize("version", [_WHOLE, _PAGED])
def test_an_older_state_is_read_with_what_its_partitions_kept_for_the_engine(version: int) -> None:
    """A checkpoint written before pages (3), or before the engine kept the deposed leaders and the runs checked ahead
    (4, in each partition), goes on without a new --checkpoint: those move to the engine."""
    engine, _ = _one_pass(_start(), 2_000)
    kept = {("default", "t", 1): ((2,), ()), ("default", "t", 5): ((), (1500, 1900))}
    again = PartitionEngine(CONFIG, _legacy_state(version, engine, kept))
    assert _records(again) == _records(engine)
    assert again.deposed == {("default", "t", 1): (2,)}
    assert again.checked_ahead == {("default", "t", 5): (1500, 1900)}
    assert STATE_VERSION == 5 and PartitionEngine(CONFIG, again.to_bytes()).partitions.decoded() == 0
    assert PartitionEngine(CONFIG, again.to_bytes()).deposed == again.deposed
