"""Response schemas: they document the API (OpenAPI, with examples) and schemathesis checks replies against them.

The routes build plain dicts and render them directly; these models are the contract those dicts
must meet, not a conversion step on the hot path. The SPEC §5 records are not retyped here: their
models are built from the core's structs (`isrwatch.state.records`), field for field.
"""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

import msgspec
from pydantic import BaseModel, ConfigDict, Field, create_model

from isrwatch.state import audit, events, records


def _example(example: dict) -> ConfigDict:
    return ConfigDict(populate_by_name=True, json_schema_extra={"examples": [example]})


_DECISION = {
    "ts": 15000,
    "cluster": "default",
    "topic": "orders",
    "partition": 0,
    "kind": "shrink",
    "leader": 1,
    "leader_epoch": 0,
    "isr_before": [1, 2, 3],
    "isr_after": [1, 2],
    "replicas_changed": [3],
    "reasons": {"3": "stuck"},
    "error": None,
    "hw": 150,
    "leader_leo": 150,
}
_PROPAGATION = {
    "ts": 22500,
    "cluster": "default",
    "broker": 1,
    "partitions": [{"topic": "orders", "partition": 0}],
    "trigger": "linger",
    "first_change_ts": 15000,
    "last_change_ts": 15000,
}
_FOLLOWER = {
    "replica": 2,
    "leo": 140,
    "log_start_offset": 0,
    "last_caught_up_ms": 21000,
    "last_fetch_leader_leo": 150,
    "last_fetch_ms": 22000,
    "in_sync": True,
    "lag_offsets": 10,
    "shrink_eligible_at_ms": 31001,
    "predicted_shrink_at_ms": 35000,
    "time_since_caught_up_ms": 4000,
    "shrink_predicted": False,
}
_SUMMARY = {
    "cluster": "default",
    "topic": "orders",
    "partition": 0,
    "leader": 1,
    "leader_epoch": 0,
    "replicas": [1, 2, 3],
    "in-sync": [1, 2],
    "out-of-sync": [3],
    "hw": 140,
    "leader_leo": 150,
    "offline": False,
    "under_replicated": True,
    "under_min_isr": False,
    "at_min_isr": False,
    "shrink_predicted": False,
}
_BROKER = {
    "cluster": "default",
    "broker": 1,
    "partitions_led": 12,
    "replicas": 30,
    "out_of_sync_replicas": 1,
    "pending_isr_change_count": 1,
    "last_isr_change_ms": 15000,
    "last_propagation_ms": 10000,
    "time_since_last_propagation_ms": 15000,
}


class ErrorBody(BaseModel):
    model_config = _example({"error": "not_found", "detail": "partition orders-7 not found in cluster default"})
    error: str = Field(description="machine-readable code: not_found, invalid_parameter, unauthorized, ...")
    detail: str = Field(description="what went wrong; for invalid_parameter it starts with the parameter")


_MODELS: dict[type, type[BaseModel]] = {}


def _pydantic(annotation: Any) -> Any:
    """A struct's field type with every nested struct replaced by its model."""
    if annotation in _MODELS:
        return _MODELS[annotation]
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return Union[tuple(_pydantic(a) for a in args)]  # noqa: UP007 - built from a runtime tuple
    if origin is not None and args:
        return origin[tuple(_pydantic(a) for a in args)]
    return annotation


def _from_struct(
    struct: type[msgspec.Struct],
    example: dict | None = None,
    doc: str | None = None,
    described: dict[str, str] | None = None,
    **extra: Any,
) -> type[BaseModel]:
    """The model of a core record: its fields in order, with descriptions, plus `extra` (name: (type, Field)).
    An input event's model has its `type` tag and not the reader's internal input position."""
    described = described or {}
    config = struct.__struct_config__
    fields: dict[str, Any] = {}
    if config.tag_field is not None and config.tag is not None:
        fields[config.tag_field] = (Literal[config.tag], Field(description="the event type"))
    for f in msgspec.structs.fields(struct):
        if f.encode_name.startswith("_"):
            continue
        if f.required:
            field = Field(description=described.get(f.name))
        elif f.default_factory is not msgspec.NODEFAULT:
            field = Field(default_factory=f.default_factory, description=described.get(f.name))
        else:
            field = Field(f.default, description=described.get(f.name))
        fields[f.name] = (_pydantic(f.type), field)
    model = create_model(
        struct.__name__.removesuffix("Record"),
        __config__=_example(example) if example else None,
        __doc__=doc or struct.__doc__,
        **fields,
        **extra,
    )
    _MODELS[struct] = model
    return model


TopicPartition = _from_struct(records.TopicPartition)
Follower = _from_struct(
    records.FollowerRecord,
    _FOLLOWER,
    "The leader's record of one follower (SPEC §5) plus how it looks as of the watermark.",
    {
        "leo": "the follower's log end offset as last fetched (-1 = unknown)",
        "last_caught_up_ms": "event time the follower was last caught up with the leader's LEO",
        "lag_offsets": "leader LEO minus follower LEO (null while the LEO is unknown)",
        "shrink_eligible_at_ms": "when an isr-expiration check may remove it",
        "predicted_shrink_at_ms": "the first scheduled isr-expiration check from then",
    },
    time_since_caught_up_ms=(int | None, Field(description="watermark minus last_caught_up_ms")),
    shrink_predicted=(bool, Field(description="in the ISR and past or within the window of its lag limit")),
)


class PartitionSummary(BaseModel):
    """Cruise Control's partition state (`in-sync`, `out-of-sync`) plus isrwatch's health flags."""

    model_config = _example(_SUMMARY)
    cluster: str
    topic: str
    partition: int
    leader: int | None = Field(description="-1 = offline; null before any accepted LeaderAndIsr")
    leader_epoch: int
    replicas: list[int]
    in_sync: list[int] = Field(alias="in-sync")
    out_of_sync: list[int] = Field(alias="out-of-sync")
    hw: int
    leader_leo: int
    offline: bool
    under_replicated: bool
    under_min_isr: bool
    at_min_isr: bool
    shrink_predicted: bool
    # With AlterPartition (or a 3.x ZooKeeper write in flight) and KRaft's ELR only: absent otherwise.
    isr_state: records.IsrState | None = Field(
        None, description="committed, pending_expand or pending_shrink (leaders that propose with AlterPartition)"
    )
    maximal_isr: list[int] | None = Field(None, description="the ISR the HW advances over: + a pending expand's")
    pending_since_ms: int | None = Field(None, description="when the pending ISR change was decided")
    time_pending_ms: int | None = Field(None, description="watermark minus pending_since_ms")
    elr: list[int] | None = Field(None, description="Eligible Leader Replicas (KIP-966), as the leader has them")
    last_known_elr: list[int] | None = None


class PartitionDetail(PartitionSummary):
    model_config = _example(
        {
            **_SUMMARY,
            "controller_epoch": 1,
            "partition_epoch": 1,
            "isr": [1, 2],
            "leader_epoch_start_offset": 100,
            "followers": [_FOLLOWER],
            "as_of_ms": 25001,
        }
    )
    controller_epoch: int
    partition_epoch: int
    isr: list[int]
    leader_epoch_start_offset: int | None
    followers: list[Follower]
    as_of_ms: int | None = Field(description="the settled watermark (event time) this view is computed at")


class PartitionPage(BaseModel):
    model_config = _example({"partitions": [_SUMMARY], "next_page_token": None, "as_of_ms": 25001})
    partitions: list[PartitionSummary]
    next_page_token: str | None
    as_of_ms: int | None


class PartitionIsr(BaseModel):
    model_config = _example(
        {"cluster": "default", "topic": "orders", "partition": 0, "leader": 1, "leader_epoch": 0, "isr": [1, 2]}
    )
    cluster: str
    topic: str
    partition: int
    leader: int | None
    leader_epoch: int
    isr: list[int]
    elr: list[int] | None = Field(
        None, description="KRaft: the Eligible Leader Replicas (KIP-966) the leader last applied; absent: none reported"
    )


class Proposal(BaseModel):
    """What became of a leader's proposed ISR change (AlterPartition, SPEC §4.9)."""

    state: Literal["pending", "committed", "refused"] = Field(
        description="pending: not answered yet, the committed ISR stands; committed: the controller took it; "
        "refused: the controller answered an error, the committed ISR stands"
    )
    answered_ms: int | None
    error: str | None = Field(description="Kafka's error (refused)")
    committed_isr: list[int] | None
    committed_partition_epoch: int | None


Decision = _from_struct(
    records.Decision,
    _DECISION,
    "A SPEC §5 decision record.",
    {"reasons": "why each removed replica left the ISR (shrinks)"},
    proposal=(
        Proposal | None,
        Field(
            None,
            description="a shrink or expand of a leader that proposes with AlterPartition: only proposed, and what "
            "became of it; null: the leader wrote its ISR itself (ZooKeeper mode), or a controller's decision",
        ),
    ),
)


class DecisionPage(BaseModel):
    model_config = _example({"decisions": [_DECISION], "next_page_token": "WzE1MDAwLDEsMF0"})
    decisions: list[Decision]
    next_page_token: str | None


Propagation = _from_struct(
    records.Propagation,
    _PROPAGATION,
    "A SPEC §5 propagation record: one ISR-change batch a leader broker sent.",
    {"trigger": "linger: changes were quiet; max_delay: the last batch was too long ago"},
)


class PropagationPage(BaseModel):
    model_config = _example({"propagations": [_PROPAGATION], "next_page_token": None})
    propagations: list[Propagation]
    next_page_token: str | None


_ALTER_PARTITION_ITEM = {
    "topic": "orders",
    "partition": 0,
    "kind": "expand",
    "proposed_isr": [1, 2, 3],
    "leader_epoch": 0,
    "partition_epoch": 4,
    "submitted_ms": 15000,
    "answered_ms": 15012,
    "error": None,
    "committed_isr": [1, 2, 3],
    "committed_partition_epoch": 5,
}
_ALTER_PARTITION_REQUEST = {
    "cluster": "default",
    "broker": 1,
    "sent_ms": 15000,
    "response_ms": 15012,
    "partitions": [_ALTER_PARTITION_ITEM],
}
AlterPartitionItem = _from_struct(
    records.AlterPartitionItem,
    _ALTER_PARTITION_ITEM,
    described={
        "proposed_isr": "the ISR the leader proposed",
        "partition_epoch": "the partition epoch the proposal is based on",
        "submitted_ms": "when the leader decided and queued it",
        "answered_ms": "when the leader handled its answer (null: not answered yet)",
        "error": "Kafka's Errors name, or null when committed",
        "committed_isr": "the ISR the controller committed (null on an error)",
    },
)
AlterPartitionRequest = _from_struct(
    records.AlterPartitionRequest,
    _ALTER_PARTITION_REQUEST,
    "A SPEC §5 alter_partitions record: one AlterPartition request a leader broker sent, each partition's outcome.",
    {"response_ms": "when its last partition's answer came (null: in flight)"},
)


class AlterPartitionPage(BaseModel):
    model_config = _example({"alter_partitions": [_ALTER_PARTITION_REQUEST], "next_page_token": None})
    alter_partitions: list[AlterPartitionRequest]
    next_page_token: str | None


class DeadLetter(BaseModel):
    raw: str
    reason: str
    field: str | None
    ts: int | None


class DeadLetterPage(BaseModel):
    model_config = _example(
        {
            "dead_letters": [{"raw": '{"type": "fetch"', "reason": "invalid JSON: ...", "field": None, "ts": None}],
            "next_page_token": None,
        }
    )
    dead_letters: list[DeadLetter]
    next_page_token: str | None


class BrokerSummary(BaseModel):
    model_config = _example(_BROKER)
    cluster: str
    broker: int
    partitions_led: int
    replicas: int = Field(description="replicas hosted, led or following")
    out_of_sync_replicas: int
    pending_isr_change_count: int
    last_isr_change_ms: int | None
    last_propagation_ms: int | None
    time_since_last_propagation_ms: int | None = Field(description="watermark minus last_propagation_ms")
    clock_offset_ms: int | None = Field(
        None,
        description="its clock minus its cluster's median clock, from the events it reports (SPEC §6, clock offsets; "
        "null: it reports none)",
    )
    # A broker that proposes with AlterPartition only: absent otherwise.
    queue_size: int | None = Field(None, description="proposals in its AlterPartition queue, not yet sent")
    in_flight_partitions: int | None = Field(None, description="partitions of its request in flight (null: none)")
    in_flight_age_ms: int | None = Field(None, description="watermark minus the in-flight request's sent_ms")


class BrokerList(BaseModel):
    model_config = _example({"brokers": [_BROKER], "as_of_ms": 25001})
    brokers: list[BrokerSummary]
    as_of_ms: int | None


class OutOfSyncReplica(BaseModel):
    topic: str
    partition: int
    leo: int | None
    lag_offsets: int | None
    last_caught_up_ms: int | None
    time_since_caught_up_ms: int | None


class BrokerDetail(BrokerSummary):
    model_config = _example(
        {
            **_BROKER,
            "pending_isr_changes": [{"topic": "orders", "partition": 0}],
            "first_change_ts": 15000,
            "out_of_sync_followers": [
                {
                    "topic": "orders",
                    "partition": 0,
                    "leo": 100,
                    "lag_offsets": 50,
                    "last_caught_up_ms": 1600,
                    "time_since_caught_up_ms": 23401,
                }
            ],
            "recent_batches": [_PROPAGATION],
            "as_of_ms": 25001,
        }
    )
    queue: list[AlterPartitionItem] | None = Field(None, description="its AlterPartition queue, oldest first")
    in_flight: AlterPartitionRequest | None = Field(None, description="its AlterPartition request in flight")
    pending_isr_changes: list[TopicPartition]
    first_change_ts: int | None
    out_of_sync_followers: list[OutOfSyncReplica] = Field(description="the first 100, by topic and partition")
    recent_batches: list[Propagation] = Field(description="its last ISR-change batches, newest first")
    as_of_ms: int | None


class Health(BaseModel):
    status: str


class LostRecords(BaseModel):
    topic: str
    partition: int
    records: int


class Readiness(BaseModel):
    model_config = _example(
        {
            "status": "ready",
            "last_batch_id": 42,
            "last_batch_age_seconds": 3.2,
            "watermark_ms": 1700000000000,
            "watermark_lag_seconds": 8.1,
            "source_lost_records": [{"topic": "isrwatch.events", "partition": 0, "records": 1200}],
        }
    )
    status: str
    last_batch_id: int
    last_batch_age_seconds: float
    watermark_ms: int | None
    watermark_lag_seconds: float | None
    source_lost_records: list[LostRecords] = Field(
        description="Kafka records the stream never read (deleted before it got to them), by partition; "
        "any here means the monitor missed events"
    )


# What brokers did (agent input) and where the model disagreed: the core's structs, field for field.
_ISR_UPDATED = {
    "type": "isr_updated",
    "ts": 1795473407732,
    "cluster": "lab",
    "broker": 1,
    "seq": 1795473363312049,
    "topic": "orders",
    "partition": 2,
    "leader": 1,
    "isr": [1, 2],
    "isr_before": [1, 2, 3],
    "partition_epoch": 1,
    "kind": "shrink",
    "out_of_sync": [{"replica": 3, "leo": 5, "last_caught_up_ms": 1795473401334, "last_fetch_ms": 1795473401334}],
    "check_ms": 1795473407709,
    "check_leader_leo": 8,
}
_OutOfSync = _from_struct(events.OutOfSync)
_PartitionName = _from_struct(events.PartitionName)
IsrUpdated = _from_struct(events.IsrUpdated, _ISR_UPDATED)
IsrChangePropagated = _from_struct(events.IsrChangePropagated)
_ProposedPartition = _from_struct(events.ProposedPartition)
AlterPartitionSent = _from_struct(events.AlterPartitionSent)
ReplicaView = _from_struct(audit.ReplicaView)
IsrWrite = _from_struct(audit.IsrWrite)
ProposedIsr = _from_struct(records.ProposedIsr)
Divergence = _from_struct(
    audit.Divergence,
    {
        "ts": 1795473407709,
        "cluster": "lab",
        "broker": 1,
        "kind": "timing",
        "cause": "margin",
        "subject": "isr",
        "topic": "orders",
        "partition": 2,
        "partition_epoch": 1,
        "model": None,
        "observed": _ISR_UPDATED,
        "evidence": [{"replica": 3, "leo": 5, "last_caught_up_ms": 1795473401334, "last_fetch_ms": 1795473401334}],
        "margin_ms": 3,
    },
    described={
        "kind": "missed_by_model: the broker wrote an ISR or sent a batch the model did not decide; "
        "unexplained_by_model: the model decided one no broker act explains; different_isr / different_batch: "
        "both acted, differently; timing: it hinges on the broker's clock reads or its ZooKeeper write's latency, "
        "not on the rules (see cause)",
        "cause": "timing: the rule that called it so (SPEC §7): in_flight, both_expand, margin, shifted, displaced, "
        "deposed, applying, fetch_order, reproposed, split; null for every other kind",
        "subject": "isr: a partition's ISR write; propagation: a batch (/isr_change_notification)",
        "model": "the model's side: its ISR write with evidence, or its propagation batch (null: none)",
        "observed": "the broker's side: its isr_updated or isr_change_propagated event, or in AlterPartition mode "
        "its proposal (alter_partition_proposal: one partition of its alter_partition_sent) (null: none)",
        "evidence": "the model's record of the followers concerned: LEO, lastCaughtUpTimeMs, last fetch",
        "margin_ms": "a shrink: how far past (+) or short of (-) replica.lag.time.max.ms the deciding follower was; "
        "timing: the margin of the rule named by cause (SPEC §7)",
    },
)


class ObservedPage(BaseModel):
    model_config = _example({"observed": [_ISR_UPDATED], "next_page_token": None})
    observed: list[Union[IsrUpdated, IsrChangePropagated, AlterPartitionSent]]  # noqa: UP007 - models built at runtime
    next_page_token: str | None


class DivergencePage(BaseModel):
    divergences: list[Divergence]
    next_page_token: str | None


# Incidents and the timeline (SPEC §8)
_HEALTH = Literal["under_replicated", "under_min_isr", "offline"]
_INCIDENT = {
    "id": "stuck-5d1c0f7e2a9b4c31",
    "cluster": "default",
    "kind": "stuck",
    "brokers": [2],
    "opened_ms": 1700000030001,
    "closed_ms": 1700000055001,
    "summary": "broker 2 stopped fetching: removed as stuck from 7 partitions by leaders 1, 3, 4; none under min ISR; "
    "back after 25 s",
    "partition_count": 7,
    "worst": "under_replicated",
    "under_min_isr_ms": 0,
    "leaders": [1, 3, 4],
    "counts": {"stuck": 7},
    "controller_epoch": None,
    "offline_ms": None,
    "decision_count": 14,
}


class Incident(BaseModel):
    model_config = _example(_INCIDENT)
    id: str = Field(description="stable: the same events give the same id in replay and in the stream")
    cluster: str
    kind: Literal["stuck", "slow", "offline", "controller", "isr_change_pending", "divergence"]
    brokers: list[int] = Field(description="the broker(s) it is about")
    opened_ms: int
    closed_ms: int | None = Field(description="null while open")
    summary: str = Field(description="one line a person reads")
    partition_count: int
    worst: _HEALTH | None = Field(description="the worst state a partition reached (null: all kept their full ISR)")
    under_min_isr_ms: int = Field(
        description="how long some partition was under min ISR (producers with acks=all got NOT_ENOUGH_REPLICAS)"
    )
    leaders: list[int] = Field(description="the leaders that removed its brokers, or that sent its requests")
    counts: dict[str, int] = Field(description="shrinks by reason, or divergences by kind")
    controller_epoch: int | None
    offline_ms: int | None = Field(description="when the controller removed its broker (offline incidents)")
    decision_count: int


class StateInterval(BaseModel):
    state: _HEALTH
    start_ms: int
    end_ms: int | None


class IncidentPartition(BaseModel):
    topic: str
    partition: int
    worst: _HEALTH | None
    intervals: list[StateInterval]


class IncidentDetail(Incident):
    partitions: list[IncidentPartition]
    decisions: list[Decision]  # type: ignore[valid-type]


class IncidentPage(BaseModel):
    model_config = _example({"incidents": [_INCIDENT], "next_page_token": None})
    incidents: list[Incident]
    next_page_token: str | None


class CountPoint(BaseModel):
    ts: int
    under_replicated: int
    under_min_isr: int
    offline: int


class BrokerInterval(BaseModel):
    kind: Literal[
        "out_of_sync", "offline", "fenced", "leading_fewer", "alter_partition_in_flight", "alter_partition_queue"
    ]
    start_ms: int
    end_ms: int | None
    partitions: int


class BrokerLane(BaseModel):
    broker: int
    intervals: list[BrokerInterval]


class Marker(BaseModel):
    ts: int
    kind: Literal["shrink", "expand", "controller", "propagation", "divergence"]
    broker: int | None
    topic: str | None
    partition: int | None
    text: str


class Timeline(BaseModel):
    cluster: str
    since: int
    until: int
    counts: list[CountPoint] = Field(description="the partition counts from each ts on; the first is the one at since")
    brokers: list[BrokerLane]
    markers: list[Marker]
    incidents: list[Incident]
