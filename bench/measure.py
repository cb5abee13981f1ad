"""What the benchmarks share to measure: a percentile, a free local port, and an HTTP
client of the standard library (an installed isrwatch has no other: httpx is a dev-only dependency)."""

from __future__ import annotations

import http.client
import json
import math
import socket
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value with at least q % of the values at or below it."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q}: must be in (0, 100]")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Http:
    """One keep-alive HTTP/1.1 connection to a local API (`http.client`), opened again after any failure.

    `get` raises OSError (connection trouble, http.client's errors included) or ValueError (a body not JSON);
    a status other than 200 is an OSError naming it."""

    def __init__(self, base: str, timeout: float = 10.0) -> None:
        url = urllib.parse.urlsplit(base)
        self.host, self.port, self.timeout = url.hostname or "127.0.0.1", url.port or 80, timeout
        self._conn: http.client.HTTPConnection | None = None

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> bytes:
        """The body of GET `path` with `params`."""
        if params:
            path += "?" + urllib.parse.urlencode(params)
        conn = self._conn or http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self._conn = None
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise OSError(f"GET {path}: {exc!r}") from exc
        self._conn = conn
        if response.status != 200:
            raise OSError(f"GET {path}: HTTP {response.status}")
        return body

    def json(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return json.loads(self.get(path, params))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Http:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
