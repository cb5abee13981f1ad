"""Hostile input lines: every kind of bad line a source may carry, beside a scenario's good ones."""

from __future__ import annotations

import random
from pathlib import Path

SCENARIO = Path(__file__).parents[1] / "scenarios" / "02-slow-follower-shrink"


CONFIG = ["--config", f"{SCENARIO}.config.json"]


BIG = 6 * 2**20  # a multi-MB line


def hostile_lines() -> list[bytes]:
    """Every kind of input a recorded file or a topic may hold that is not an event."""
    rng = random.Random(7)
    fetch = b'{"type": "fetch", "ts": 5000, "topic": "orders", "partition": 0, "replica": 2'
    return [
        bytes(rng.randrange(256) for _ in range(200)).replace(b"\n", b" ").replace(b"\r", b" "),  # random bytes
        b'{"type": "fetch", "ts": 5000, "topic": "\xc9\xff", "partition": 0}',  # invalid UTF-8 inside a string
        b'{"type": "tick", "ts": 5000, "task": "isr-\x00expiration"}',  # NUL
        b"\x00\x00\x00",
        b'{"type": "tick", "ts": 5000, "cluster": "a\x01b"}',  # a control character in a name
        b"[" * 20_000 + b"]" * 20_000,  # nesting 20,000 deep
        b'{"type": "tick", "ts": 5000, "x": ' + b"[" * 20_000 + b"]" * 20_000 + b"}",
        fetch + b', "fetch_offset": 1' + b"0" * 400 + b', "leader_leo": 1}',  # a huge number
        fetch + b', "fetch_offset": 1e999, "leader_leo": 1}',  # not finite
        fetch + b', "fetch_offset": NaN, "leader_leo": Infinity}',
        b'{"type": "append", "ts": "5000", "topic": "orders", "partition": 0, "leader_leo": 1}',  # wrong types
        b'{"type": "append", "ts": 5000, "topic": ["orders"], "partition": 0.5, "leader_leo": true}',
        b'"just a string"',
        b"null",
        b"12345",
        fetch + b', "fetch_offset": 1, "leader_leo": 1, "padding": "' + b"x" * BIG + b'"',  # multi-MB, unterminated
        b'{"type": "tick", "ts": 5000, "seq": 10000, "x": "' + b"y" * BIG + b'"}',  # multi-MB, valid: an event
    ]
