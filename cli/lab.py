"""A real Kafka 3.9 cluster on loopback (ZooKeeper mode) with real faults."""

from __future__ import annotations

import argparse

from .common import command


def add_parser(sub: argparse._SubParsersAction) -> None:
    from isrwatch.lab import command as lab  # isrwatch.lab does the work

    lab.add_arguments(command(sub, "lab", __doc__, lab.main))
