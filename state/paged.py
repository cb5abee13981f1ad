"""A state key's partitions in pages: a call decodes and re-encodes only the pages its events and due checks touch.

The engine's state is one blob per state key; decoding and re-encoding every partition in it on every call made a
key's cost grow with the partitions it holds, not with what happened to them. Each page is a msgpack list of a few
dozen partitions (one C call to decode or encode, as the whole list was), with what an isr-expiration check reads of
them before it can change anything: the earliest time any of them has a follower it could remove.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator

import msgspec
from msgspec import Struct

from .partition import Partition, PartitionKey, next_shrink_eligible_at
from .schedule import INF

PAGE_SIZE = 32  # partitions per page when pages are cut (`Partitions.pages`); re-cut when they average twice that


class Page(Struct, array_like=True, gc=False):
    """Some partitions, encoded, and what says whether a check must decode them."""

    count: int
    eligible: int  # the earliest time a check could remove a follower of a hosted one (`next_shrink_eligible_at`)
    partitions: msgspec.Raw  # list[Partition]

    @classmethod
    def of(cls, partitions: list[Partition], lag: int) -> Page:
        eligible = min((next_shrink_eligible_at(p, lag) for p in partitions if p.hosted and p.has_leader), default=INF)
        return cls(len(partitions), eligible, msgspec.Raw(_encoder.encode(partitions)))

    def skips(self, now: int) -> bool:
        """Whether an isr-expiration check at `now` cannot change any partition here (`maybe_shrink_isr` removes only
        followers eligible by `now`): it need not decode them."""
        return self.eligible > now


def _index(key: PartitionKey, pages: int) -> int:
    """The page of `key` among `pages`: a stable hash (CRC-32), the same in every Python worker."""
    cluster, topic, partition = key
    return zlib.crc32(f"{cluster}\0{topic}\0{partition}".encode()) % pages if pages > 1 else 0


class Partitions:
    """The partitions by key, decoded a page at a time when first read. Iterating over all decodes them all."""

    def __init__(self, pages: list[Page] | None = None, whole: Iterable[Partition] = ()) -> None:
        self._pages: list[Page | dict[PartitionKey, Partition]] = list(pages) if pages else [{}]
        self._live: dict[PartitionKey, Partition] = {}  # every decoded page's partitions: one lookup per event
        for p in whole:
            self[p.key] = p

    def _page(self, key: PartitionKey) -> dict[PartitionKey, Partition]:
        return self._decoded(_index(key, len(self._pages)))

    def _decoded(self, at: int) -> dict[PartitionKey, Partition]:
        page = self._pages[at]
        if isinstance(page, Page):
            page = self._pages[at] = {p.key: p for p in _page_decoder.decode(page.partitions)}
            self._live.update(page)
        return page

    def get(self, key: PartitionKey) -> Partition | None:
        p = self._live.get(key)
        return p if p is not None else self._page(key).get(key)

    def __getitem__(self, key: PartitionKey) -> Partition:
        p = self.get(key)
        if p is None:
            raise KeyError(key)
        return p

    def __setitem__(self, key: PartitionKey, p: Partition) -> None:
        self._page(key)[key] = self._live[key] = p

    def __contains__(self, key: PartitionKey) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        return sum(page.count if isinstance(page, Page) else len(page) for page in self._pages)

    def values(self) -> Iterator[Partition]:
        for at in range(len(self._pages)):
            yield from self._decoded(at).values()

    def items(self) -> Iterator[tuple[PartitionKey, Partition]]:
        for at in range(len(self._pages)):
            yield from self._decoded(at).items()

    def __iter__(self) -> Iterator[PartitionKey]:
        return (key for key, _ in self.items())

    def led_by(self, cluster: str, leader: int | None) -> list[Partition]:
        """The partitions of `cluster` that `leader` leads."""
        return [p for p in self.values() if p.cluster == cluster and p.leader == leader]

    def checked_at(self, now: int) -> tuple[list[Partition], int]:
        """The partitions an isr-expiration check at `now` must read (the check filters them), and the earliest
        eligible time of the pages it need not decode (`Page.skips`)."""
        read: list[Partition] = []
        skipped = INF
        for at, page in enumerate(self._pages):
            if isinstance(page, Page) and page.skips(now):
                skipped = min(skipped, page.eligible)
            else:
                read.extend(self._decoded(at).values())
        return read, skipped

    def pages(self, lag: int) -> list[Page]:
        """The pages as a state keeps them: those decoded re-encoded, the others as they came. Pages that average
        more than twice `PAGE_SIZE` are cut anew (every partition decoded once) for the count they hold."""
        count = len(self)
        if count > 2 * PAGE_SIZE * len(self._pages):
            every = list(self.values())
            self._pages = [{} for _ in range(-(-count // PAGE_SIZE))]
            for p in every:
                self[p.key] = p
        return [page if isinstance(page, Page) else Page.of(list(page.values()), lag) for page in self._pages]

    def decoded(self) -> int:
        """How many pages this call decoded (or created)."""
        return sum(1 for page in self._pages if not isinstance(page, Page))


_encoder = msgspec.msgpack.Encoder()
_page_decoder = msgspec.msgpack.Decoder(list[Partition])
