"""/v1/brokers: what each broker leads and hosts, its pending ISR-change set and its last batches."""

from __future__ import annotations

from fastapi.responses import Response

from .. import views
from ..deps import NowDep, StoreDep, data_router
from ..models import BrokerDetail, BrokerList
from ..params import JSON, NOT_FOUND, BrokerP, ClusterQ, only

RECENT_BATCHES = 10
OUT_OF_SYNC_SHOWN = 100

router = data_router("/v1/brokers", "brokers")


@router.get(
    "",
    response_model=BrokerList,
    summary="Every broker: partitions led, replicas out of sync, pending ISR changes, last propagation",
)
def list_brokers(store: StoreDep, now: NowDep, cluster: ClusterQ = None) -> Response:
    brokers = [views.broker_summary(b, now) for b in store.brokers(cluster=cluster)]
    return JSON({"brokers": brokers, "as_of_ms": now.latest if cluster is None else now.of(cluster)})


@router.get(
    "/{broker}",
    response_model=BrokerDetail,
    responses=NOT_FOUND,
    summary="One broker: its out-of-sync followers, pending ISR-change set and recent batches",
)
def get_broker(store: StoreDep, now: NowDep, broker: BrokerP, cluster: ClusterQ = None) -> Response:
    found = store.brokers(cluster=cluster, broker=broker)
    entry = only(found, [b["cluster"] for b in found], cluster, f"broker {broker}")
    cluster = entry["cluster"]
    batches = store.propagations(cluster=cluster, broker=broker, limit=RECENT_BATCHES).items
    return JSON(
        views.broker_detail(entry, store.out_of_sync_replicas(cluster, broker, OUT_OF_SYNC_SHOWN), batches, now)
    )
