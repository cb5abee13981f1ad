"""The SQL store shared by the streaming sink, `isrwatch replay --store` and the API: the persistence edge.

Unlike the core (`state/`) below it, this room does I/O (sqlite3, psycopg) and reads the wall clock (when
a batch committed, to judge the stream's freshness); the core never imports it. `schema` holds the
DDL and the two dialects, `writer` the job's side, `reader` the API's side.
"""

from __future__ import annotations

import os

from .reader import EventTime, Key, Page, Reader, StreamPosition
from .schema import PROGRESS_FIELDS, StoreError
from .writer import Writer

__all__ = [
    "DEFAULT_STORE",
    "STORE_ENV",
    "EventTime",
    "Key",
    "PROGRESS_FIELDS",
    "Page",
    "Store",
    "StoreError",
    "StreamPosition",
    "default_store",
    "open_store",
]

STORE_ENV = "ISRWATCH_STORE"
# Beside `isrwatch run`'s default checkpoint (./var/checkpoint) and events (./var/events): one place to look.
DEFAULT_STORE = "sqlite:///var/isrwatch.db"


class Store(Writer, Reader):
    """One database: the job writes its batches, the API reads them (docs/CONTRACTS.md)."""


def open_store(url: str) -> Store:
    """Open (creating the schema if needed) the store at `url`: sqlite:///PATH, a file path or postgresql://..."""
    return Store(url)


def default_store() -> str:
    """The store `run` writes and `serve`, `replay --store` and `demo` use when given none: $ISRWATCH_STORE, else
    var/isrwatch.db under the working directory. One default, so that a `serve` never reads another file than the
    `run` beside it wrote."""
    return os.environ.get(STORE_ENV) or DEFAULT_STORE
