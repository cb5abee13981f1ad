"""What every command shares: its parser's shape, progress lines on stderr, the configuration options and how they
load."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from isrwatch.state.config import PROFILES, Config, ConfigError
from isrwatch.store import DEFAULT_STORE, STORE_ENV, default_store

CONFIG_HELP = """configuration keys (SPEC §2; --config FILE.json and/or --set KEY=VALUE, later wins):
  replica_lag_time_max_ms        30000  Kafka replica.lag.time.max.ms (10000 before Kafka 2.5)
  isr_expiration_interval_ms     lag/2  period of the scheduled shrink check; 0 = explicit ticks only
  isr_change_check_interval_ms   2500   period of the propagation check; 0 = explicit ticks only
  isr_change_linger_ms           5000   quiet time before a broker sends its ISR-change batch
  isr_change_max_delay_ms        60000  longest time between two batches of a broker
  schedule_origin_ms             0      scheduled checks run at origin + k*interval
  min_insync_replicas            1      under-min-ISR: |ISR| < it; at-min-ISR: |ISR| = it
  min_insync_replicas_by_topic   {}     per-topic overrides, e.g. --set 'min_insync_replicas_by_topic={"orders":2}'
  allowed_lateness_ms            5000   streaming only: how far behind its cluster's newest event an event may arrive
  broker_rejoin_margin_ms        250    streaming only, brokers sending watermarks: how far the frontier stays behind
                                        their streams while one of the cluster's brokers is away (SPEC §6)
  broker_stall_wait_ms           18000  streaming only, brokers sending watermarks: how long a broker whose stream
                                        stopped holds back the partitions it acts on, waiting for its events (SPEC §6)
  max_future_ms                  60000  an event dated more than this ahead of its arrival is refused (ts_in_future);
                                        streaming always, replay with --now
  audit_window_ms                lag    agent input: how long the model's ISR write or batch and the broker's wait
                                        for each other before either is a divergence
  audit_timing_ms                100    agent input: a shrink that hinges on less than this is a `timing` divergence
  incident_window_ms             10000  a follower's shrinks on many leaders within this are one incident (SPEC §8)
  isr_change_pending_ms          5000   an AlterPartition request in flight this long is an incident
  timeline_retention_ms          86400000  the store keeps the timeline's history this long (event time)

profiles (--profile NAME, applied after --config and before --set):
  agent    input from isrwatch-agent: isr_expiration_interval_ms=0 and isr_change_check_interval_ms=0, so the
           model runs each broker's checks and propagation at that broker's own ticks, never on a schedule
"""


def command(
    sub: argparse._SubParsersAction, name: str, doc: str, func: Callable[[argparse.Namespace], int], epilog: str = ""
) -> argparse.ArgumentParser:
    """The parser of `isrwatch NAME`, written by its module's docstring `doc`: the first line (a sentence there) is
    its phrase in `isrwatch --help`, the rest its description, printed with its line breaks like the epilog."""
    first, _, rest = doc.strip().partition("\n")
    parser = sub.add_parser(
        name,
        help=first[0].lower() + first[1:].removesuffix("."),
        description=rest.strip() or None,
        epilog=epilog or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=func)
    return parser


STORE_URLS = "sqlite:///PATH, a file path or postgresql://user:pw@host:port/db"
STORE_DEFAULT = f"${STORE_ENV} or {DEFAULT_STORE}, the one default of run, serve, replay --store and demo"


def add_store_argument(p: argparse.ArgumentParser, what: str, **options: Any) -> None:
    """--store URL, defaulting to the store every command shares (`default_store`); `what` says what it is for and
    `options` replace add_argument's (replay's optional URL)."""
    help = f"{what}: {STORE_URLS} (default: {STORE_DEFAULT})"
    p.add_argument("--store", **{"default": default_store(), "metavar": "URL", "help": help, **options})


def say(message: str) -> None:
    """A progress or result line, on stderr so stdout stays the command's data."""
    print(f"isrwatch: {message}", file=sys.stderr, flush=True)


def add_config_arguments(
    p: argparse.ArgumentParser,
    config_help: str = "a JSON object of configuration keys (see below)",
    set_help: str = "override one configuration key; VALUE is JSON (repeatable)",
) -> None:
    """--config FILE.json and --set KEY=VALUE, read by `load_config`."""
    p.add_argument("--config", metavar="FILE.json", help=config_help)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=set_help)
    p.add_argument("--profile", choices=sorted(PROFILES), help="a named set of configuration keys (see profiles below)")


def read_json_file(path: str, option: str) -> Any:
    """A JSON file an option names; whatever is wrong with it is a ConfigError naming the option and the file."""
    where = f"{option} {path}"
    try:
        return json.loads(Path(path).read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deeply") from None


def load_config(path: str | None, overrides: list[str], profile: str | None = None) -> Config:
    """The configuration from an optional JSON file, a profile, then --set overrides."""
    raw = read_json_file(path, "--config") if path else {}
    return Config.from_dict(raw).with_profile(profile).with_overrides(overrides)
