"""The route table: every endpoint, its parameters (validated, documented) and the store read behind it.

Routes that make a few indexed point reads (one partition, its ISR, the probes) run on the event
loop: a thread hop would cost more than the query. Routes that scan (lists, brokers, /metrics) run
in the thread pool so a scrape never stalls the cheap polls.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import time
from enum import StrEnum
from typing import Annotated, Any, TypeVar

import msgspec
from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from state.events import MAX_MS
from state.store import PARTITION_STATES, Key, Store

from . import views
from .errors import ApiError, invalid, not_found
from .models import (
    BrokerDetail,
    BrokerList,
    DeadLetterPage,
    DecisionPage,
    ErrorBody,
    Health,
    PartitionDetail,
    PartitionIsr,
    PartitionPage,
    PropagationPage,
    Readiness,
)
from .settings import Settings

TOPIC_PATTERN = r"^[A-Za-z0-9._-]+$"
CLUSTER_PATTERN = r"^[^\x00-\x1f\x7f]+$"  # any printable name: control characters cannot be stored in PostgreSQL
MAX_ID = 2**31 - 1
MAX_PAGE_SIZE = 1000
RECENT_BATCHES = 10
OUT_OF_SYNC_SHOWN = 100
T = TypeVar("T")


class JSON(JSONResponse):
    """JSON rendered by msgspec: several times faster than the stdlib for the large list pages."""

    def render(self, content: Any) -> bytes:
        return msgspec.json.encode(content)


PartitionState = StrEnum("PartitionState", [(state, state) for state in PARTITION_STATES])


class DecisionKind(StrEnum):
    shrink = "shrink"
    expand = "expand"
    leader_and_isr = "leader_and_isr"
    rejected = "rejected"


class Trigger(StrEnum):
    linger = "linger"
    max_delay = "max_delay"


ClusterQ = Annotated[str | None, Query(min_length=1, max_length=255, pattern=CLUSTER_PATTERN,
                                       description="cluster name; optional when only one cluster has the object")]
TopicQ = Annotated[str | None, Query(min_length=1, max_length=249, pattern=TOPIC_PATTERN)]
BrokerQ = Annotated[int | None, Query(ge=0, le=MAX_ID, description="broker id")]
SinceQ = Annotated[int | None, Query(ge=0, le=MAX_MS, description="only records with ts >= since (epoch ms)")]
PageSizeQ = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)]
PageTokenQ = Annotated[str | None, Query(max_length=2048, description="next_page_token of the previous page")]
TopicP = Annotated[str, Path(min_length=1, max_length=249, pattern=TOPIC_PATTERN)]
PartitionP = Annotated[int, Path(ge=0, le=MAX_ID)]
BrokerP = Annotated[int, Path(ge=0, le=MAX_ID)]

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in ((401, "missing or wrong bearer token"), (422, "a parameter is invalid; the detail names it"),
                         (503, "the store did not answer"))}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {**_ERRORS, 404: {"model": ErrorBody, "description": "no such object"}}

# Page keys: partitions page in (cluster, topic, partition) order, histories newest first by
# (ts, batch_id, seq), dead letters by (batch_id, seq).
_PARTITION_KEY = (str, str, int)
_EVENT_KEY = (int, int, int)
_DEAD_LETTER_KEY = (int, int)


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
    if not (isinstance(key, list) and len(key) == len(shape)
            and all(_fits(v, t) for v, t in zip(key, shape, strict=True))):
        raise invalid("page_token", "not a token of this endpoint")
    return tuple(key)


def _fits(value: Any, kind: type) -> bool:
    if kind is int:
        return type(value) is int and -(2**63) <= value < 2**63
    return type(value) is str and 0 < len(value) <= 255 and value.isprintable()


def _store(request: Request) -> Store:
    return request.app.state.store


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def _now(store: Store) -> int | None:
    """Event-time "now": the settled watermark of the last batch (None before the first batch)."""
    position = store.stream_position()
    return None if position is None else position.watermark_ms


def _only(found: list[T], clusters: list[str], cluster: str | None, what: str) -> T:
    """The one match a request means: `cluster` narrowed the search, or only one cluster has `what`."""
    if not found:
        raise not_found(f"{what} not found" + (f" in cluster {cluster}" if cluster is not None else ""))
    if len(found) > 1:
        raise invalid("cluster", f"{what} exists in clusters {', '.join(clusters)}; name one")
    return found[0]


_bearer = HTTPBearer(auto_error=False, description="set when the API runs with --token / ISRWATCH_API_TOKEN")


async def require_token(request: Request,
                        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    """Bearer-token check for every data route (health probes and the status page stay open)."""
    expected = _settings(request).token
    if expected is None:
        return
    if credentials is None or not secrets.compare_digest(credentials.credentials.encode(), expected.encode()):
        raise ApiError(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})


data = APIRouter(dependencies=[Depends(require_token)])
health = APIRouter(tags=["health"])


@data.get("/v1/partitions", response_model=PartitionPage, responses=_ERRORS, tags=["partitions"],
          summary="Partitions, filtered, in (cluster, topic, partition) order")
def list_partitions(request: Request, cluster: ClusterQ = None, topic: TopicQ = None,
                    broker: Annotated[int | None, Query(ge=0, le=MAX_ID, description="leader or replica")] = None,
                    state: Annotated[PartitionState | None, Query(
                        description="shrink_predicted: an ISR follower past or near its lag limit")] = None,
                    page_size: PageSizeQ = 100, page_token: PageTokenQ = None) -> Response:
    store, settings = _store(request), _settings(request)
    after = decode_page_token(page_token, _PARTITION_KEY)
    now = _now(store)
    window = settings.shrink_window_ms
    page = store.partitions(cluster=cluster, topic=topic, broker=broker, state=state, now_ms=now, window_ms=window,
                            after=after, limit=page_size)
    return JSON({"partitions": [views.partition_summary(r, now, window) for r in page.items],
                 "next_page_token": encode_page_token(page.next_key), "as_of_ms": now})


@data.get("/v1/partitions/{topic}/{partition}", response_model=PartitionDetail, responses=_NOT_FOUND,
          tags=["partitions"], summary="A partition's full state: leader, epochs, ISR, HW and every follower")
async def get_partition(request: Request, topic: TopicP, partition: PartitionP,
                        cluster: ClusterQ = None) -> Response:
    store, settings = _store(request), _settings(request)
    found = store.partition(topic, partition, cluster)
    record = _only(found, [r["cluster"] for r in found], cluster, f"partition {topic}-{partition}")
    return JSON(views.partition_detail(record, _now(store), settings.shrink_window_ms))


@data.get("/v1/partitions/{topic}/{partition}/isr", response_model=PartitionIsr, responses=_NOT_FOUND,
          tags=["partitions"], summary="Leader, leader epoch and ISR only: the cheap query to poll")
async def get_partition_isr(request: Request, topic: TopicP, partition: PartitionP,
                            cluster: ClusterQ = None) -> Response:
    found = _store(request).partition_isr(topic, partition, cluster)
    cluster, leader, leader_epoch, isr = _only(found, [r[0] for r in found], cluster, f"partition {topic}-{partition}")
    return JSON({"cluster": cluster, "topic": topic, "partition": partition, "leader": leader,
                 "leader_epoch": leader_epoch, "isr": isr})


@data.get("/v1/partitions/{topic}/{partition}/history", response_model=DecisionPage, responses=_NOT_FOUND,
          tags=["partitions"], summary="A partition's decisions, newest first")
def get_partition_history(request: Request, topic: TopicP, partition: PartitionP, cluster: ClusterQ = None,
                          page_size: PageSizeQ = 100, page_token: PageTokenQ = None) -> Response:
    store = _store(request)
    after = decode_page_token(page_token, _EVENT_KEY)
    found = store.partition_isr(topic, partition, cluster)
    cluster = _only(found, [r[0] for r in found], cluster, f"partition {topic}-{partition}")[0]
    page = store.decisions(cluster=cluster, topic=topic, partition=partition, after=after, limit=page_size)
    return JSON({"decisions": page.items, "next_page_token": encode_page_token(page.next_key)})


@data.get("/v1/brokers", response_model=BrokerList, responses=_ERRORS, tags=["brokers"],
          summary="Every broker: partitions led, replicas out of sync, pending ISR changes, last propagation")
def list_brokers(request: Request, cluster: ClusterQ = None) -> Response:
    store = _store(request)
    now = _now(store)
    return JSON({"brokers": [views.broker_summary(b, now) for b in store.brokers(cluster=cluster)], "as_of_ms": now})


@data.get("/v1/brokers/{broker}", response_model=BrokerDetail, responses=_NOT_FOUND, tags=["brokers"],
          summary="One broker: its out-of-sync followers, pending ISR-change set and recent batches")
def get_broker(request: Request, broker: BrokerP, cluster: ClusterQ = None) -> Response:
    store = _store(request)
    found = store.brokers(cluster=cluster, broker=broker)
    entry = _only(found, [b["cluster"] for b in found], cluster, f"broker {broker}")
    cluster = entry["cluster"]
    batches = store.propagations(cluster=cluster, broker=broker, limit=RECENT_BATCHES).items
    return JSON(views.broker_detail(entry, store.out_of_sync_replicas(cluster, broker, OUT_OF_SYNC_SHOWN),
                                    batches, _now(store)))


@data.get("/v1/decisions", response_model=DecisionPage, responses=_ERRORS, tags=["history"],
          summary="ISR decisions, newest first")
def list_decisions(request: Request, cluster: ClusterQ = None, topic: TopicQ = None,
                   broker: Annotated[int | None, Query(
                       ge=0, le=MAX_ID, description="the deciding leader or a replica added or removed")] = None,
                   kind: DecisionKind | None = None, since: SinceQ = None, page_size: PageSizeQ = 100,
                   page_token: PageTokenQ = None) -> Response:
    after = decode_page_token(page_token, _EVENT_KEY)
    page = _store(request).decisions(cluster=cluster, topic=topic, kind=kind, broker=broker, since=since,
                                     after=after, limit=page_size)
    return JSON({"decisions": page.items, "next_page_token": encode_page_token(page.next_key)})


@data.get("/v1/propagations", response_model=PropagationPage, responses=_ERRORS, tags=["history"],
          summary="ISR-change batches sent by leader brokers, newest first")
def list_propagations(request: Request, cluster: ClusterQ = None,
                      topic: Annotated[str | None, Query(min_length=1, max_length=249, pattern=TOPIC_PATTERN,
                                                         description="batches carrying a partition of it")] = None,
                      broker: BrokerQ = None, trigger: Trigger | None = None, since: SinceQ = None,
                      page_size: PageSizeQ = 100, page_token: PageTokenQ = None) -> Response:
    after = decode_page_token(page_token, _EVENT_KEY)
    page = _store(request).propagations(cluster=cluster, topic=topic, broker=broker, trigger=trigger, since=since,
                                        after=after, limit=page_size)
    return JSON({"propagations": page.items, "next_page_token": encode_page_token(page.next_key)})


@data.get("/v1/dead-letters", response_model=DeadLetterPage, responses=_ERRORS, tags=["history"],
          summary="Inputs that changed nothing, with the reason and field, newest first")
def list_dead_letters(request: Request, since: SinceQ = None, page_size: PageSizeQ = 100,
                      page_token: PageTokenQ = None) -> Response:
    after = decode_page_token(page_token, _DEAD_LETTER_KEY)
    page = _store(request).dead_letters(since=since, after=after, limit=page_size)
    return JSON({"dead_letters": page.items, "next_page_token": encode_page_token(page.next_key)})


@data.get("/metrics", tags=["metrics"], summary="Prometheus exposition, read from the store at scrape time",
          response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}, **_ERRORS})
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)


@health.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Response:
    return JSON({"status": "ok"})


@health.get("/readyz", response_model=Readiness, summary="The store answers and the stream is fresh",
            responses={503: {"model": ErrorBody, "description": "not ready; the detail says why"}})
async def readyz(request: Request) -> Response:
    store, settings = _store(request), _settings(request)
    position = store.stream_position()
    if position is None:
        raise ApiError(503, "no batch committed to the store yet", code="not_ready")
    wall_ms = time.time() * 1000
    age_s = (wall_ms - position.committed_wall_ms) / 1000
    lag_s = None if position.watermark_ms is None else (wall_ms - position.watermark_ms) / 1000
    problems = []
    if settings.ready_max_batch_age_s and age_s > settings.ready_max_batch_age_s:
        problems.append(f"last batch {position.batch_id} committed {age_s:.1f} s ago "
                        f"(limit {settings.ready_max_batch_age_s:g} s)")
    if settings.ready_max_watermark_lag_s:
        if lag_s is None:
            problems.append("no watermark committed yet")
        elif lag_s > settings.ready_max_watermark_lag_s:
            problems.append(f"watermark lags the wall clock by {lag_s:.1f} s "
                            f"(limit {settings.ready_max_watermark_lag_s:g} s)")
    if problems:
        raise ApiError(503, "; ".join(problems), code="not_ready")
    return JSON({"status": "ready", "last_batch_id": position.batch_id, "last_batch_age_seconds": round(age_s, 3),
                 "watermark_ms": position.watermark_ms,
                 "watermark_lag_seconds": None if lag_s is None else round(lag_s, 3)})


@health.get("/", include_in_schema=False)
def status_page(request: Request) -> Response:
    """The status page when one is installed under api/static (no token: it asks the data routes itself)."""
    index = _settings(request).static_dir / "index.html"
    if not index.is_file():
        raise not_found("no status page installed; the API is under /v1 (see /docs)")
    return FileResponse(index)
