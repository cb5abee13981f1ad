"""Loopback ports: free ones for a new lab's nodes, whether one is free again after `down`, whether one listens."""

from __future__ import annotations

import contextlib
import socket


def free_ports(count: int) -> list[int]:
    """Distinct loopback ports nothing listens on now (held together so no two are the same)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def port_free(port: int) -> bool:
    """Nothing listens on the port (connections left in TIME_WAIT do not count: servers reuse the address)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True
