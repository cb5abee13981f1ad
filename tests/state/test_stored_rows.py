"""When the stream writes a partition's row again (SPEC §5, stored rows), and what the audit keeps per partition.

Records come from the real engine over SPEC §3 events; `records.row_due` judges them as the state key does.
"""

from __future__ import annotations

from isrwatch.state.audit import Audit
from isrwatch.state.config import Config
from isrwatch.state.engine import PartitionEngine
from isrwatch.state.propagation import PropagationBook
from isrwatch.state.records import PartitionRecord, Shown, row_due, shown
from isrwatch.state.step import settle
from tests.support.state import append, fetch, lai, parse_all

CONFIG = Config(replica_lag_time_max_ms=10_000, isr_expiration_interval_ms=0)
REFRESH = CONFIG.partition_refresh_ms
START = [lai(0, 1, [1, 2, 3], [1, 2, 3], 1), append(0, 100)]


def record_at(events: list[dict], until: int) -> PartitionRecord:
    engine = PartitionEngine(CONFIG)
    engine.add(parse_all(events))
    engine.advance(until)
    return engine.record(engine.partitions[("default", "t", 0)])


def shown_at(record: PartitionRecord, as_of: int) -> Shown:
    return shown(record, as_of, CONFIG.replica_lag_time_max_ms)


def first_shown() -> Shown:
    return shown_at(record_at(START, 1), 0)


def test_a_fetch_that_only_moves_offsets_and_times_waits_for_the_refresh() -> None:
    stored = first_shown()
    later = [*START, append(1000, 200), fetch(1500, 2, 200, 200), fetch(1500, 3, 200, 200)]
    now = shown_at(record_at(later, 1501), 1500)
    assert record_at(later, 1501).hw != record_at(START, 1).hw  # the HW moved: a reader of the row sees the old one
    assert now.digest == stored.digest
    assert not row_due(stored, now, REFRESH)
    assert row_due(stored, shown_at(record_at(later, 1501), REFRESH), REFRESH)  # the row is partition_refresh_ms old
    assert row_due(stored, now, 0)  # 0: every touched partition, every batch


def test_an_isr_change_or_a_new_leader_is_written_at_once() -> None:
    stored = first_shown()
    shrunk = [*START, lai(500, 1, [1, 2], [1, 2, 3], 2, partition_epoch=1)]
    moved = [*START, lai(500, 2, [1, 2, 3], [1, 2, 3], 2, partition_epoch=1)]
    for events in (shrunk, moved):
        now = shown_at(record_at(events, 501), 500)
        assert now.digest != stored.digest
        assert row_due(stored, now, REFRESH)


def test_the_stored_rows_shrink_warning_coming_writes_it_again() -> None:
    """The stored row's follower was caught up at 0: at half the lag it would show a warning the follower has
    fetched its way out of, so the row is due then, not only at the refresh."""
    config_lag = CONFIG.replica_lag_time_max_ms
    stored = first_shown()
    assert stored.until <= config_lag // 2 + 1
    fetching = [*START, *(fetch(t, r, 100, 100) for t in range(500, 6000, 500) for r in (2, 3))]
    before = shown_at(record_at(fetching, stored.until - 1), stored.until - 1)
    after = shown_at(record_at(fetching, stored.until), stored.until)
    assert before.digest == after.digest == stored.digest
    assert not row_due(stored, before, REFRESH)
    assert row_due(stored, after, REFRESH)
    assert after.until > stored.until  # the new row's warning is later: the follower kept fetching


def test_without_agent_input_the_audit_keeps_nothing_per_partition() -> None:
    """LeaderAndIsr decisions reach the audit only for partitions whose leader reports (SPEC §7): the driver's audit
    state does not grow with the cluster."""
    for broker, kept in ((None, 0), (1, 1)):
        events = [lai(0, 1, [1, 2, 3], [1, 2, 3], 1, **({} if broker is None else {"broker": broker})), append(0, 9)]
        engine = PartitionEngine(CONFIG)
        engine.add(parse_all(events))
        out = engine.advance(10)
        audit = Audit(CONFIG)
        settle(PropagationBook(CONFIG), [out], None, audit)
        assert len(out.decisions) == 1
        assert len(audit.partitions) == kept
