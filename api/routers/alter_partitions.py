"""/v1/alter-partitions: the AlterPartition requests leader brokers sent and what each partition got back."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from pydantic import BaseModel

from isrwatch.state.events import MAX_ID

from ..deps import data_router
from ..listing import list_route
from ..models import AlterPartitionPage
from ..params import CarryingTopicQ, ClusterQ, SinceQ

router = data_router("/v1", "alter-partitions")


class AlterPartitionFilters(BaseModel):
    """Which requests: where, from which leader, carrying which partition, answered since when."""

    cluster: ClusterQ = None
    broker: Annotated[int | None, Query(ge=0, le=MAX_ID, description="the leader broker that sent the request")] = None
    topic: CarryingTopicQ = None
    partition: Annotated[int | None, Query(ge=0, le=MAX_ID, description="requests carrying this partition")] = None
    since: SinceQ = None


list_route(
    router,
    "/alter-partitions",
    "alter_partitions",
    AlterPartitionPage,
    AlterPartitionFilters,
    "AlterPartition requests leader brokers sent, each partition's outcome, newest answer first",
)
