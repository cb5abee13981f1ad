"""What crosses the Spark boundary: the bucket state blob refuses another isrwatch's layout."""

from __future__ import annotations

import pytest

from isrwatch.streaming.reports import BUCKET_STATE_VERSION, BucketState, decode_bucket, encode


def test_a_bucket_state_round_trips():
    held = BucketState(BUCKET_STATE_VERSION, newest={"c": 5}, applied={"c": 1})
    assert decode_bucket(encode(held)) == held


def test_a_checkpoint_of_an_earlier_layout_is_refused_with_what_to_do():
    # Version 2 hashed partitions to buckets in Spark SQL: its buckets hold other partitions than this framer's.
    with pytest.raises(ValueError, match=r"bucket state version 2 is not .*new --checkpoint"):
        decode_bucket(encode(BucketState(BUCKET_STATE_VERSION - 1)))
