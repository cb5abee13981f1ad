"""A real Kafka cluster on loopback (KRaft 4.4 by default, ZooKeeper mode with --kafka 3.9) with real faults."""

from __future__ import annotations

import argparse

from .common import command


def add_parser(sub: argparse._SubParsersAction) -> None:
    from isrwatch.lab import command as lab  # isrwatch.lab does the work

    lab.add_arguments(command(sub, "lab", __doc__, lab.main))
