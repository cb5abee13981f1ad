"""`isrwatch lab`: a real Kafka cluster on loopback (streaming.lab does the work)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    from streaming.lab import command as lab

    parser = sub.add_parser("lab", help="a real Kafka 3.9 cluster on loopback (ZooKeeper mode) with real faults")
    lab.add_arguments(parser)
    parser.set_defaults(func=lab.main)
