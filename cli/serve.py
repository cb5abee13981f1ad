"""Serve the store over HTTP: REST API under /v1, /metrics, /healthz, /readyz.

A read-only FastAPI service (one uvicorn worker) over the store the streaming job or `isrwatch replay --store`
writes. OpenAPI at /docs.
"""

from __future__ import annotations

import argparse
import os

from .common import add_store_argument, command, say


def add_parser(sub: argparse._SubParsersAction) -> None:
    sp = command(sub, "serve", __doc__, main)
    add_store_argument(sp, "the store to serve, as `isrwatch run` or `isrwatch replay --store` wrote it")
    sp.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    sp.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    sp.add_argument(
        "--token",
        help="require `Authorization: Bearer TOKEN` on every route but the health probes "
        "(default: $ISRWATCH_API_TOKEN; none = open)",
    )
    sp.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser requests from this origin (repeatable; default: CORS off)",
    )
    sp.add_argument(
        "--shrink-window-ms",
        type=int,
        metavar="MS",
        help="a follower is predicted to shrink when eligible for removal within MS of event time "
        "(default: half its replica.lag.time.max.ms)",
    )
    sp.add_argument(
        "--top-followers",
        type=int,
        default=10,
        metavar="N",
        help="per-follower metrics for the N slowest and N most lagging followers (default 10)",
    )
    sp.add_argument(
        "--partition-metrics-topics",
        default="",
        metavar="T1,T2",
        help="topics whose every partition and follower get their own metric series (default none)",
    )
    sp.add_argument(
        "--ready-max-batch-age",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="/readyz fails when the last batch is older (wall clock; 0 = unchecked; default 300)",
    )
    sp.add_argument(
        "--ready-max-watermark-lag",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="/readyz fails when the watermark lags the wall clock more (0 = unchecked; default 600)",
    )
    sp.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    sp.add_argument("--access-log", action="store_true", help="log every request")


def main(args: argparse.Namespace) -> int:
    # The only command that imports `api`.
    import uvicorn

    from isrwatch.api.app import create_app
    from isrwatch.api.settings import TOKEN_ENV, Settings

    settings = Settings(
        token=args.token or os.environ.get(TOKEN_ENV) or None,
        cors_origins=tuple(args.cors_origin),
        shrink_window_ms=args.shrink_window_ms,
        top_followers=args.top_followers,
        partition_metrics_topics=tuple(t for t in args.partition_metrics_topics.split(",") if t),
        ready_max_batch_age_s=args.ready_max_batch_age,
        ready_max_watermark_lag_s=args.ready_max_watermark_lag,
    )
    app = create_app(args.store, settings)
    say(
        f"serving {args.store} on http://{args.host}:{args.port} "
        f"({'bearer token required' if settings.token else 'no token'})"
    )
    if app.state.store.stream_position() is None:
        say(
            f"warning: store {args.store} holds no batch: no `isrwatch run` or `isrwatch replay --store` has written "
            "it yet, so every list is empty and /readyz answers 503 until one does (a job writing another store? "
            "give serve its --store)"
        )
    # One worker: the metrics collector reads the store itself, so no multiprocess mode is needed.
    uvicorn.run(app, host=args.host, port=args.port, workers=1, log_level=args.log_level, access_log=args.access_log)
    return 0
