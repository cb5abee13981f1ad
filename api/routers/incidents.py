"""/v1/incidents and /v1/timeline: what happened, to whom, for how long (SPEC §8)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from fastapi.responses import Response
from pydantic import BaseModel

from isrwatch.state.events import MAX_MS
from isrwatch.state.incidents import IncidentKind

from ..deps import NowDep, StoreDep, data_router
from ..errors import invalid, not_found
from ..listing import list_route
from ..models import IncidentDetail, IncidentPage, Timeline
from ..params import JSON, NOT_FOUND, BrokerQ, ClusterQ, SinceQ

router = data_router("/v1", "incidents")
INCIDENT_KEY = (int, str)
DEFAULT_SPAN_MS = 15 * 60 * 1000  # the timeline's default: the last 15 minutes of the cluster's settled time
UntilQ = Annotated[int | None, Query(ge=0, le=MAX_MS, description="epoch ms (default: the cluster's settled time)")]


class IncidentFilters(BaseModel):
    cluster: ClusterQ = None
    kind: IncidentKind | None = None
    broker: BrokerQ = None
    open: Annotated[bool | None, Query(description="true: only open ones; false: only closed ones")] = None
    since: SinceQ = None


list_route(
    router,
    "/incidents",
    "incidents",
    IncidentPage,
    IncidentFilters,
    "Incidents, newest first: one cause and everything it did (since: those not closed before it)",
    INCIDENT_KEY,
)


@router.get("/incidents/{incident_id}", response_model=IncidentDetail, responses=NOT_FOUND)
def get_incident(
    store: StoreDep, incident_id: Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[a-z_]+-[0-9a-f]+$")]
) -> Response:
    """One incident with each partition's intervals (under-replicated, under min ISR, offline) and its decisions."""
    found = store.incident(incident_id)
    if found is None:
        raise not_found(f"incident {incident_id} not found")
    return JSON(found)


@router.get("/timeline", response_model=Timeline, responses=NOT_FOUND)
def get_timeline(
    store: StoreDep, now: NowDep, cluster: ClusterQ = None, since: SinceQ = None, until: UntilQ = None
) -> Response:
    """A cluster's partition counts, its brokers' intervals, markers and incidents between `since` and `until`
    (default: the last 15 minutes of its settled time)."""
    if cluster is None:
        clusters = store.timeline_clusters()
        if len(clusters) > 1:
            raise invalid("cluster", f"the store has clusters {', '.join(clusters)}; name one")
        if not clusters:
            raise not_found("no timeline yet")
        cluster = clusters[0]
    end = until if until is not None else now.of(cluster)
    if end is None:
        raise not_found(f"cluster {cluster} has no settled time yet")
    start = since if since is not None else max(end - DEFAULT_SPAN_MS, 0)
    if start > end:
        raise invalid("since", f"{start} is after until {end}")
    return JSON(store.timeline(cluster, start, end))
