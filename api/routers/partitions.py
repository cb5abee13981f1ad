"""/v1/partitions: every partition's leader, ISR, HW and followers as its leader sees them."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from fastapi.responses import Response

from isrwatch.state.events import MAX_ID
from isrwatch.state.records import PartitionState

from .. import views
from ..deps import NowDep, SettingsDep, StoreDep, data_router
from ..models import DecisionPage, PartitionDetail, PartitionIsr, PartitionPage
from ..pages import EVENT_KEY, PARTITION_KEY, PageSizeQ, PageTokenQ, decode_page_token, encode_page_token, page_answer
from ..params import JSON, NOT_FOUND, ClusterQ, PartitionP, TopicP, TopicQ, only

router = data_router("/v1/partitions", "partitions")


@router.get("", response_model=PartitionPage, summary="Partitions, filtered, in (cluster, topic, partition) order")
def list_partitions(
    store: StoreDep,
    settings: SettingsDep,
    now: NowDep,
    cluster: ClusterQ = None,
    topic: TopicQ = None,
    broker: Annotated[int | None, Query(ge=0, le=MAX_ID, description="leader or replica")] = None,
    state: Annotated[
        PartitionState | None,
        Query(
            description="shrink_predicted: an ISR follower past or near its lag limit; "
            "isr_pending: an ISR change proposed (AlterPartition) or written and not committed yet"
        ),
    ] = None,
    page_size: PageSizeQ = 100,
    page_token: PageTokenQ = None,
) -> Response:
    after = decode_page_token(page_token, PARTITION_KEY)
    window = settings.shrink_window_ms
    page = store.partitions(
        cluster=cluster,
        topic=topic,
        broker=broker,
        state=state,
        now=now,
        window_ms=window,
        after=after,
        limit=page_size,
    )
    return JSON(
        {
            "partitions": [views.partition_summary(r, now, window) for r in page.items],
            "next_page_token": encode_page_token(page.next_key),
            "as_of_ms": now.latest if cluster is None else now.of(cluster),
        }
    )


@router.get(
    "/{topic}/{partition}",
    response_model=PartitionDetail,
    responses=NOT_FOUND,
    summary="A partition's full state: leader, epochs, ISR, HW and every follower",
)
async def get_partition(
    store: StoreDep, settings: SettingsDep, now: NowDep, topic: TopicP, partition: PartitionP, cluster: ClusterQ = None
) -> Response:
    found = store.partition(topic, partition, cluster)
    record = only(found, [r.cluster for r in found], cluster, f"partition {topic}-{partition}")
    return JSON(views.partition_detail(record, now, settings.shrink_window_ms))


@router.get(
    "/{topic}/{partition}/isr",
    response_model=PartitionIsr,
    responses=NOT_FOUND,
    summary="Leader, leader epoch, ISR and (KRaft) ELR only: the cheap query to poll",
)
async def get_partition_isr(
    store: StoreDep, topic: TopicP, partition: PartitionP, cluster: ClusterQ = None
) -> Response:
    found = store.partition_isr(topic, partition, cluster)
    cluster, leader, leader_epoch, isr, elr = only(
        found, [r[0] for r in found], cluster, f"partition {topic}-{partition}"
    )
    return JSON(
        {
            "cluster": cluster,
            "topic": topic,
            "partition": partition,
            "leader": leader,
            "leader_epoch": leader_epoch,
            "isr": isr,
            **({} if elr is None else {"elr": elr}),  # KRaft's only: a ZooKeeper-mode answer keeps its keys
        }
    )


@router.get(
    "/{topic}/{partition}/history",
    response_model=DecisionPage,
    responses=NOT_FOUND,
    summary="A partition's decisions, newest first",
)
def get_partition_history(
    store: StoreDep,
    topic: TopicP,
    partition: PartitionP,
    cluster: ClusterQ = None,
    page_size: PageSizeQ = 100,
    page_token: PageTokenQ = None,
) -> Response:
    after = decode_page_token(page_token, EVENT_KEY)  # a forged token is a 422 before an unknown partition's 404
    found = store.partition_isr(topic, partition, cluster)
    cluster = only(found, [r[0] for r in found], cluster, f"partition {topic}-{partition}")[0]
    return page_answer(
        "decisions", store.decisions(cluster=cluster, topic=topic, partition=partition, after=after, limit=page_size)
    )
