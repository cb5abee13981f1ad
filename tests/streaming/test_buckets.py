"""Bucket ids fill Spark's shuffle partitions evenly: our Murmur3 is Spark's, and the ids are chosen by it."""

from __future__ import annotations

from collections import Counter

import pytest

from isrwatch.streaming.buckets import CONTROL_KEY, bucket_ids, shuffle_partition, spark_hash_int


def test_our_murmur3_is_sparks_hash_of_an_int(spark):
    values = [0, 1, -1, 7, 42, 2**31 - 1, -(2**31), 123_456_789, *range(100, 140)]
    rows = spark.createDataFrame([(v,) for v in values], "v int").selectExpr("v", "hash(v) AS h").collect()
    assert {r.v: r.h for r in rows} == {v: spark_hash_int(v) for v in values}


@pytest.mark.parametrize(("buckets", "shuffle"), [(16, 2), (64, 2), (5, 3), (8, 4), (1, 1)])
def test_bucket_ids_spread_round_robin_over_shuffle_partitions(buckets, shuffle):
    ids = bucket_ids(buckets, shuffle)
    assert len(set(ids)) == buckets and min(ids) >= 0 and CONTROL_KEY not in ids
    assert [shuffle_partition(k, shuffle) for k in ids] == [i % shuffle for i in range(buckets)]
    loads = Counter(shuffle_partition(k, shuffle) for k in ids)
    assert max(loads.values()) - min(loads.values()) <= 1
