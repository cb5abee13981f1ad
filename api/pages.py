"""Opaque page tokens: the key of the row after which the next page starts, checked against its endpoint's shape.

Partitions page in (cluster, topic, partition) order, histories newest first by (ts, batch_id, seq),
dead letters by (batch_id, seq).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Query
from fastapi.responses import Response
from pydantic import BaseModel

from isrwatch.store import Key, Page

from .errors import invalid
from .params import JSON

PARTITION_KEY = (str, str, int)
EVENT_KEY = (int, int, int)
DEAD_LETTER_KEY = (int, int)
MAX_PAGE_SIZE = 1000

PageSizeQ = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)]
PageTokenQ = Annotated[str | None, Query(max_length=2048, description="next_page_token of the previous page")]


class PageRequest(BaseModel):
    """The page a history route is asked for: at most `page_size` items after the row `page_token` names."""

    page_size: PageSizeQ = 100
    page_token: PageTokenQ = None

    def after(self, shape: tuple[type, ...]) -> Key | None:
        """The key the page starts after (None: the first page), checked against the endpoint's shape."""
        return decode_page_token(self.page_token, shape)


PageQ = Annotated[PageRequest, Query()]


def read_page(
    field: str, read: Callable[..., Page[Any]], page: PageRequest, shape: tuple[type, ...] = EVENT_KEY, **filters: Any
) -> Response:
    """The page that `read` gives with `filters`, answered as `{field: [...], next_page_token}`."""
    return page_answer(field, read(after=page.after(shape), limit=page.page_size, **filters))


def page_answer(field: str, page: Page[Any]) -> Response:
    """Every list endpoint's answer: the items under `field` and the token of the page after them (null at the end)."""
    return JSON({field: page.items, "next_page_token": encode_page_token(page.next_key)})


def encode_page_token(key: Key | None) -> str | None:
    """An opaque token for the row after which the next page starts."""
    if key is None:
        return None
    return base64.urlsafe_b64encode(json.dumps(list(key), separators=(",", ":")).encode()).rstrip(b"=").decode()


def decode_page_token(token: str | None, shape: tuple[type, ...]) -> Key | None:
    """The key inside a token, checked against the shape this endpoint issues (422 otherwise)."""
    if token is None:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError):
        raise invalid("page_token", "not a token this API issued") from None
    if not (
        isinstance(key, list) and len(key) == len(shape) and all(_fits(v, t) for v, t in zip(key, shape, strict=True))
    ):
        raise invalid("page_token", "not a token of this endpoint")
    return tuple(key)


def _fits(value: Any, kind: type) -> bool:
    if kind is int:
        return type(value) is int and -(2**63) <= value < 2**63
    return type(value) is str and 0 < len(value) <= 255 and value.isprintable()
