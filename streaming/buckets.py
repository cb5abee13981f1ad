"""State keys: N buckets (partitions hash into them in `framing`) whose ids spread evenly over shuffle partitions.

Spark routes a group key k to shuffle partition pmod(murmur3_32(k, seed 42), S). Bucket ids are
chosen so that the N buckets fill the S partitions round-robin (4 consecutive ints over 2
partitions can split 3/1, which halves throughput on 2 cores).
"""

from __future__ import annotations

CONTROL_KEY = -1  # the group for lines without a usable time or key: dead letters (and lines after --until)
_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's `hash()` of an INT column (Murmur3_x86_32.hashInt), as a signed 32-bit int."""
    k1 = _rotl((value & _MASK) * 0xCC9E2D51 & _MASK, 15) * 0x1B873593 & _MASK
    h1 = _rotl(seed ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 = (h1 ^ (h1 >> 16)) * 0x85EBCA6B & _MASK
    h1 = (h1 ^ (h1 >> 13)) * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def shuffle_partition(key: int, shuffle_partitions: int) -> int:
    return spark_hash_int(key) % shuffle_partitions  # Python's % is pmod for a positive divisor


def bucket_ids(buckets: int, shuffle_partitions: int) -> list[int]:
    """N non-negative group keys; key i lands on shuffle partition i mod S."""
    if buckets < 1 or shuffle_partitions < 1:
        raise ValueError("buckets and shuffle partitions must be >= 1")
    ids: list[int] = []
    taken: set[int] = set()
    for i in range(buckets):
        want = i % shuffle_partitions
        k = 0
        while k in taken or shuffle_partition(k, shuffle_partitions) != want:
            k += 1
        ids.append(k)
        taken.add(k)
    return ids
