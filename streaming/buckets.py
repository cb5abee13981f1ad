"""State keys: N buckets (partitions hash into them in `framing`) whose ids spread evenly over shuffle partitions.

Spark routes a group key k to shuffle partition pmod(murmur3_32(k, seed 42), S). Bucket ids are
chosen so that the N buckets fill the S partitions round-robin (4 consecutive ints over 2
partitions can split 3/1, which halves throughput on 2 cores).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from isrwatch.state.config import ConfigError

if TYPE_CHECKING:
    from .checkpoint import Checkpoint

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


DEFAULT_BUCKETS = 16
LAYOUT_FILE = "isrwatch-layout.json"


@dataclass(frozen=True)
class Layout:
    """How partitions map to state keys; fixed by the checkpoint like Spark's shuffle partitions."""

    buckets: int
    shuffle_partitions: int
    ids: tuple[int, ...]

    @classmethod
    def create(cls, buckets: int, shuffle_partitions: int) -> Layout:
        return cls(buckets, shuffle_partitions, tuple(bucket_ids(buckets, shuffle_partitions)))

    @classmethod
    def for_checkpoint(cls, checkpoint: Checkpoint, buckets: int | None, shuffle_partitions: int) -> Layout:
        """The checkpoint's layout, or a new one saved there; a different explicit --buckets is an error."""
        text = checkpoint.read_text(LAYOUT_FILE)
        if text is not None:
            saved = json.loads(text)
            layout = cls(saved["buckets"], saved["shuffle_partitions"], tuple(saved["ids"]))
            if buckets is not None and buckets != layout.buckets:
                raise ConfigError(
                    f"checkpoint {checkpoint.uri} keeps its state in {layout.buckets} buckets; "
                    f"use --buckets {layout.buckets}, or for {buckets} start with a new --checkpoint and a new "
                    "--store (the source is read again from its start)"
                )
            return layout
        layout = cls.create(buckets or DEFAULT_BUCKETS, shuffle_partitions)
        checkpoint.write_text(LAYOUT_FILE, json.dumps(asdict(layout)) + "\n")
        return layout
