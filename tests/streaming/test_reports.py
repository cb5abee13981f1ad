"""What crosses the Spark boundary: the bucket state blob refuses another isrwatch's layout."""

from __future__ import annotations

import pytest
from msgspec.structs import astuple

from isrwatch.state.events import parse_event
from isrwatch.state.eventtime import Jump
from isrwatch.streaming.reports import BUCKET_STATE_VERSION, BucketState, decode_bucket, encode


def test_a_bucket_state_round_trips():
    raw = b'{"type": "tick", "ts": 900000, "broker": 2}'
    jump = Jump(base=5, role=1, raw=raw, event=parse_event(raw, 7, 3))
    held = BucketState(
        BUCKET_STATE_VERSION,
        newest={"c": 5},
        applied={"c": 1},
        jumps=[jump],
        brokers={"c": {1, 2}},
        watermarks={"c": {1: 4, 2: 3}},
        named={"c": {1, 2, 3}},
        unbounded={"d"},
    )
    assert decode_bucket(encode(held)) == held


def test_a_version_6_state_is_read_with_no_audit_of_its_own():
    # Version 6 had no `audit` field: its partitions' pending sides are in the sink's audit, which still judges them.
    v7 = BucketState(BUCKET_STATE_VERSION, newest={"c": 5}, applied={"c": 1}, holding={"c"})
    v6 = encode([6, *astuple(v7)[1:-1]])
    assert decode_bucket(v6) == v7
    assert v7.audit is None


def test_a_checkpoint_of_an_earlier_layout_is_refused_with_what_to_do():
    # Version 5 kept no partitions applied past their cluster's frontier (a late event of one would be applied out of
    # order); 4 kept no brokers' watermarks; 3 had no jumps waiting for corroboration; 2 hashed partitions to buckets
    # in Spark SQL.
    with pytest.raises(ValueError, match=r"bucket state version 5 is not .*new --checkpoint"):
        decode_bucket(encode(BucketState(BUCKET_STATE_VERSION - 2)))
