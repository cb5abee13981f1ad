"""Input validation (SPEC §3): every bad line lands in the dead letter with a named field; nothing raises."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isrwatch.state import events
from isrwatch.state.config import Config, ConfigError
from isrwatch.state.events import Append, DeadLetter, Fetch, LeaderAndIsr, Tick, parse_event
from isrwatch.state.replay import replay
from tests.support.state import append, fetch, lai, tick

VALID = [lai(1000, 1, [1, 2], [1, 2], 0), fetch(1000, 2, 0, 0), append(1000, 5), tick(1000)]


@pytest.mark.parametrize("raw", VALID, ids=lambda r: r["type"])
def test_valid_events_parse_with_defaults(raw: dict) -> None:
    ev = parse_event(json.dumps(raw | {"unknown_extra": [1, {"x": None}]}), seq=42, arrival=3)
    assert isinstance(ev, LeaderAndIsr | Fetch | Append | Tick)
    assert (ev.cluster, ev.seq, ev.arrival) == ("default", 42, 3)
    assert parse_event(json.dumps(raw | {"seq": 7, "cluster": "east"}), seq=42).seq == 7


@pytest.mark.parametrize(
    ("raw", "field", "category"),
    [
        (lai(1, 1, [1], [1], 0) | {"replicas": []}, "replicas", "out_of_range"),
        (lai(1, 1, [1], [1, 1], 0), "replicas", "invalid_value"),
        (lai(1, -2, [1], [1], 0), "leader", "out_of_range"),
        (lai(1, 1, [1], [1], 0) | {"isr": [-1]}, "isr", "out_of_range"),
        (lai(1, 1, [1], [1], 0) | {"controller_epoch": "1"}, "controller_epoch", "wrong_type"),
        (fetch(1, 2, -1, 0), "fetch_offset", "out_of_range"),
        (fetch(1, 2, 0, 0) | {"partition": -1}, "partition", "out_of_range"),
        (fetch(1, 2, 0, 0) | {"topic": "bad topic!"}, "topic", "invalid_value"),
        # Two errors: the first in the line's order is named, as one strict decode names it (the topic's pattern
        # is checked after a fast decode that stops at the offset: the reason must not change with that).
        (fetch(1, 2, -1, 0) | {"topic": "bad topic!"}, "topic", "invalid_value"),
        ({"cluster": "east\u0000"} | fetch(1, 2, 0, 0) | {"topic": ""}, "cluster", "invalid_value"),
        (fetch(1, 2, 0, 0) | {"topic": "x" * 250}, "topic", "out_of_range"),
        (fetch(1, 2, 0, 0) | {"ts": True}, "ts", "wrong_type"),
        (fetch(1, 2, 0, 0) | {"ts": 1.5}, "ts", "wrong_type"),
        (fetch(1, 2, 0, 0) | {"seq": "3"}, "seq", "wrong_type"),
        (fetch(1, 2, 0, 0) | {"cluster": 5}, "cluster", "wrong_type"),
        (fetch(1, 2, 0, 0) | {"cluster": "east\u0000"}, "cluster", "invalid_value"),
        ({k: v for k, v in fetch(1, 2, 0, 0).items() if k != "replica"}, "replica", "missing_field"),
        ({k: v for k, v in append(1, 0).items() if k != "ts"}, "ts", "missing_field"),
        (tick(1, "compaction"), "task", "invalid_value"),
        ({"type": "produce", "ts": 1}, "type", "unknown_type"),
        ({"ts": 1}, "type", "missing_type"),
    ],
)
def test_invalid_events_name_the_field(raw: dict, field: str, category: str) -> None:
    dead = parse_event(json.dumps(raw), seq=1)
    assert isinstance(dead, DeadLetter)
    assert (dead.field, dead.category) == (field, category), dead.reason
    assert dead.raw == json.dumps(raw)
    assert field in dead.reason or dead.category == "invalid_value"
    assert dead.to_record()["reason"] == dead.reason


@pytest.mark.parametrize("raw", [b"", b"{", b"[1, 2]", b"null", b'"fetch"', b"\xff\xfe{}", b'{"type": "fetch"'])
def test_non_objects_and_broken_json_are_dead_letters(raw: bytes) -> None:
    dead = parse_event(raw, seq=1)
    assert isinstance(dead, DeadLetter) and dead.field is None
    assert dead.category in ("invalid_json", "not_an_object")
    assert isinstance(dead.raw, str)


@settings(max_examples=400, deadline=None)
@given(raw=st.binary(max_size=200))
def test_random_bytes_never_raise(raw: bytes) -> None:
    parsed = parse_event(raw, seq=1)
    assert isinstance(parsed, DeadLetter | LeaderAndIsr | Fetch | Append | Tick)


@settings(max_examples=300, deadline=None)
@given(base=st.sampled_from(VALID), cut=st.integers(0, 200))
def test_truncated_json_is_a_dead_letter(base: dict, cut: int) -> None:
    text = json.dumps(base)
    cut = min(cut, len(text) - 1)
    assert isinstance(parse_event(text[:cut], seq=1), DeadLetter)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=5,
)


@settings(max_examples=400, deadline=None)
@given(base=st.sampled_from(VALID), data=st.data())
def test_any_field_with_a_wrong_value_is_dead_or_valid_never_raises(base: dict, data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(base)))
    raw = json.dumps(base | {key: data.draw(json_values)})
    parsed = parse_event(raw, seq=1)
    if isinstance(parsed, DeadLetter):
        assert parsed.field in (key, None) or parsed.category == "invalid_value"
        assert parsed.reason


PROPAGATED = {"type": "isr_change_propagated", "ts": 1, "broker": 1, "partitions": [{"topic": "t", "partition": 0}]}
NAMES = st.sampled_from(["t", "orders.v2_x-1", "bad topic!", "", "x" * 250, "east\u0000", "\u00fcber", "a\u007f", 5])


@settings(max_examples=400, deadline=None)
@given(base=st.sampled_from([*VALID, PROPAGATED]), cluster=NAMES, topic=NAMES, bad_ts=st.booleans(), data=st.data())
def test_names_are_held_to_their_patterns_as_one_strict_decode_would(
    base: dict, cluster: object, topic: object, bad_ts: bool, data: st.DataObject
) -> None:
    """Topic and cluster patterns are checked after decoding, once per distinct name; whatever the names and the
    order of the keys, the outcome is the one decode with the patterns gives: the same event or the same reason."""
    raw = base | {"cluster": cluster} | ({"ts": -1} if bad_ts else {})
    if "topic" in raw:
        raw["topic"] = topic
    else:
        raw["partitions"] = [{"topic": "t", "partition": 0}, {"topic": topic, "partition": 1}]
    keys = data.draw(st.permutations(sorted(raw)))
    line = json.dumps({k: raw[k] for k in keys})
    for _ in range(2):  # the second time, every valid name is known
        got = parse_event(line, seq=1)
        try:
            want = events._strict_decoder.decode(line)
        except msgspec.ValidationError as exc:
            assert isinstance(got, DeadLetter) and got.reason == str(exc)
        else:
            assert not isinstance(got, DeadLetter), got
            assert msgspec.json.encode(got) == msgspec.json.encode(msgspec.structs.replace(want, seq=1))


def test_the_known_names_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "_TOPICS", set())
    monkeypatch.setattr(events, "_NAMES_KEPT", 2)
    for name in ("a", "b", "c", "bad topic!"):
        parse_event(json.dumps(fetch(1, 2, 0, 0) | {"topic": name}), seq=1)
    assert {"a", "b", "c"} >= events._TOPICS and len(events._TOPICS) <= 2
    assert isinstance(parse_event(json.dumps(fetch(1, 2, 0, 0) | {"topic": "bad topic!"}), seq=1), DeadLetter)


def test_replay_routes_bad_lines_to_the_dead_letter_and_keeps_the_rest() -> None:
    lines = [
        json.dumps(lai(1000, 1, [1], [1, 2], 0)),
        "not json",
        "",
        json.dumps(fetch(2000, 2, 0, 0)),
        json.dumps({"type": "fetch"}),
        b"\xff\x00garbage",
    ]
    result = replay([lines], Config())
    assert len(result.dead_letters) == 3
    assert result.summary["dead_letters_by_reason"] == {"invalid_json": 2, "missing_field": 1}
    assert [d.kind for d in result.decisions] == ["leader_and_isr", "expand"]
    assert result.summary["lines"] == 5  # the blank line is skipped, but counted in line numbers


# AlterPartition and KRaft input (SPEC §3): the same strict validation, each fault naming its field.
RESPONSE = {"type": "alter_partition_response", "ts": 5, "topic": "t", "partition": 0, "broker": 1}
COMMITTED = RESPONSE | {"error": None, "isr": [1, 2], "leader_epoch": 3, "partition_epoch": 7}
REGISTRATION = {"type": "broker_registration", "ts": 5, "id": 2, "epoch": 40, "fenced": False}
# The agent's own lines (agent/src/test/.../JsonTest.java): a KRaft metadata change and a request it sent.
KRAFT_LEADER_AND_ISR = (
    '{"type":"leader_and_isr","ts":5,"cluster":"prod-eu","broker":1,"seq":7,"topic":"t","partition":0,'
    '"controller_epoch":-1,"leader":1,"leader_epoch":4,"isr":[1],"replicas":[2,1,3],"partition_epoch":9,'
    '"leader_leo":100,"hw":90,"min_insync_replicas":2,"new_leader":false,"elr":[2,3],"last_known_elr":[],'
    '"leader_recovery_state":"RECOVERED"}'
)
SENT = (
    '{"type":"alter_partition_sent","ts":5,"cluster":"prod-eu","broker":1,"seq":7,"broker_epoch":20,'
    '"partitions":[{"topic":"orders","topic_id":"ClAYvCKeSb2Vq2bCUlVMKw","partition":1,"isr":[2,1],'
    '"isr_broker_epochs":[11,20],"leader_epoch":0,"partition_epoch":0,"leader_recovery_state":"RECOVERED"},'
    '{"partition":2,"isr":[3],"leader_epoch":4,"partition_epoch":7}]}'
)


def test_the_agents_kraft_lines_parse_with_their_extra_fields_ignored() -> None:
    """controller_epoch -1 without controller_id (KRaft has no controller epoch); `topic_id` and
    `isr_broker_epochs` are extra fields, ignored (SPEC §3); a partition without `topic` (an id the broker could not
    name) is kept."""
    lai_ev = parse_event(KRAFT_LEADER_AND_ISR, seq=1)
    assert isinstance(lai_ev, events.LeaderAndIsr), lai_ev
    assert (lai_ev.controller_epoch, lai_ev.controller_id, lai_ev.elr) == (-1, None, [2, 3])
    sent = parse_event(SENT, seq=1)
    assert isinstance(sent, events.AlterPartitionSent), sent
    assert events.event_to_dict(sent)["partitions"] == [
        {"topic": "orders", "partition": 1, "isr": [2, 1], "leader_epoch": 0, "partition_epoch": 0,
         "leader_recovery_state": "RECOVERED"},
        {"partition": 2, "isr": [3], "leader_epoch": 4, "partition_epoch": 7},
    ]  # fmt: skip


@pytest.mark.parametrize(
    "raw",
    [
        COMMITTED,
        RESPONSE | {"error": "INELIGIBLE_REPLICA"},
        RESPONSE | {"error": "INELIGIBLE_REPLICA", "top_level": False},
        RESPONSE | {"error": "STALE_BROKER_EPOCH", "top_level": True},
        REGISTRATION | {"in_controlled_shutdown": True, "broker": 1},
        lai(1, 1, [1], [1, 2], 0) | {"elr": [2], "last_known_elr": [], "leader_recovery_state": "RECOVERED"},
        fetch(1, 2, 0, 0) | {"broker_epoch": -1},
        tick(1, broker=1, kafka_version="4.1.0", isr_protocol="alter_partition"),
    ],
    ids=lambda r: r["type"],
)
def test_alter_partition_input_parses(raw: dict) -> None:
    ev = parse_event(json.dumps(raw), seq=1)
    assert not isinstance(ev, DeadLetter), ev.reason
    assert {k: v for k, v in events.event_to_dict(ev).items() if k in raw} == {
        k: v for k, v in raw.items() if v is not None
    }


@pytest.mark.parametrize(
    ("raw", "field", "category"),
    [
        ({k: v for k, v in COMMITTED.items() if k != "broker"}, "broker", "missing_field"),
        (COMMITTED | {"error": "not an error"}, "error", "invalid_value"),
        (COMMITTED | {"error": "E" * 65}, "error", "out_of_range"),
        ({k: v for k, v in COMMITTED.items() if k != "isr"}, "isr", "invalid_value"),
        ({k: v for k, v in COMMITTED.items() if k != "partition_epoch"}, "partition_epoch", "invalid_value"),
        (COMMITTED | {"leader_epoch": -1}, "leader_epoch", "out_of_range"),
        (COMMITTED | {"top_level": True}, "top_level", "invalid_value"),
        (RESPONSE | {"error": "NOT_CONTROLLER", "top_level": "yes"}, "top_level", "wrong_type"),
        (REGISTRATION | {"in_controlled_shutdown": False, "fenced": "no"}, "fenced", "wrong_type"),
        (REGISTRATION, "in_controlled_shutdown", "missing_field"),
        (REGISTRATION | {"in_controlled_shutdown": False, "id": -1}, "id", "out_of_range"),
        (lai(1, 1, [1], [1], 0) | {"elr": [-2]}, "elr", "out_of_range"),
        (lai(1, 1, [1], [1], 0) | {"leader_recovery_state": "LOST"}, "leader_recovery_state", "invalid_value"),
        (fetch(1, 2, 0, 0) | {"broker_epoch": -2}, "broker_epoch", "out_of_range"),
        (tick(1, broker=1, isr_protocol="kraft"), "isr_protocol", "invalid_value"),
        (lai(1, 1, [1], [1], 0) | {"controller_epoch": -2}, "controller_epoch", "out_of_range"),
        ({k: v for k, v in json.loads(SENT).items() if k != "broker"}, "broker", "missing_field"),
        (json.loads(SENT) | {"partitions": []}, "partitions", "out_of_range"),
        (
            json.loads(SENT) | {"partitions": [{"partition": 0, "isr": [1], "leader_epoch": 0}]},
            "partitions",
            "missing_field",
        ),
        (
            json.loads(SENT)
            | {
                "partitions": [
                    {"topic": "bad topic!", "partition": 0, "isr": [1], "leader_epoch": 0, "partition_epoch": 0}
                ]
            },
            "partitions",
            "invalid_value",
        ),
    ],
)
def test_alter_partition_input_faults_name_the_field(raw: dict, field: str, category: str) -> None:
    dead = parse_event(json.dumps(raw), seq=1)
    assert isinstance(dead, DeadLetter)
    assert (dead.field, dead.category) == (field, category), dead.reason


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({"isr_protocol": "raft"}, "isr_protocol: must be one of zookeeper, alter_partition"),
        ({"isr_protocol": "alter_partition", "kafka_version": "2.6"}, "isr_protocol: Kafka 2.6 has no AlterPartition"),
    ],
)
def test_isr_protocol_is_checked_by_name(raw: dict, reason: str) -> None:
    with pytest.raises(ConfigError, match=f"^{reason}"):
        Config.from_dict(raw)
    assert Config.from_dict({"kafka_version": "4.0.0"}).alter_partition  # 4.0 removed ZooKeeper
    assert not Config().alter_partition
