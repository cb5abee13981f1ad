"""The SQL store shared by the streaming sink, `isrwatch replay --store` and the API: the persistence edge.

Unlike the core (`state/`) below it, this room does I/O (sqlite3, psycopg) and reads the wall clock (when
a batch committed, to judge the stream's freshness); the core never imports it. `schema` holds the
DDL and the two dialects, `writer` the job's side, `reader` the API's side.
"""

from __future__ import annotations

from .reader import EventTime, Key, Page, Reader, StreamPosition
from .schema import PROGRESS_FIELDS, StoreError
from .writer import Writer

__all__ = ["EventTime", "Key", "PROGRESS_FIELDS", "Page", "Store", "StoreError", "StreamPosition", "open_store"]


class Store(Writer, Reader):
    """One database: the job writes its batches, the API reads them (docs/CONTRACTS.md)."""


def open_store(url: str) -> Store:
    """Open (creating the schema if needed) the store at `url`: sqlite:///PATH, a file path or postgresql://..."""
    return Store(url)
