"""Input events (SPEC §3): typed, validated in one pass, and dead-lettered with a named field on error."""

from __future__ import annotations

import functools
import operator
import re
from typing import Annotated, Any, Literal, get_args, get_origin

import msgspec
from msgspec import Meta, Struct

MAX_MS = 2**62  # keeps every time and offset inside a signed 64-bit column with room for + lag
MAX_ID = 2**31 - 1  # broker ids and partition numbers are Java ints
TOPIC_PATTERN = r"^[A-Za-z0-9._-]+$"  # Kafka's legal topic characters (Topic.java), 1-249 of them
TOPIC_MAX_LENGTH = 249
# Any printable name; control characters (NUL above all) would break stores and exposition formats.
CLUSTER_PATTERN = r"^[^\x00-\x1f\x7f]+$"
CLUSTER_MAX_LENGTH = 255
DEFAULT_CLUSTER = "default"
NonNegative = Annotated[int, Meta(ge=0, le=MAX_MS)]
BrokerId = Annotated[int, Meta(ge=0, le=MAX_ID)]
# A name's pattern is checked after decoding, once per distinct name (`_names_match`): msgspec runs a `pattern` through
# Python's re for every value, the costliest part of parse_event (docs/performance.md). The strict types, with it,
# give a refused line msgspec's own first error (`_strict_reason`).
Topic = Annotated[str, Meta(min_length=1, max_length=TOPIC_MAX_LENGTH)]
Cluster = Annotated[str, Meta(min_length=1, max_length=CLUSTER_MAX_LENGTH)]
_STRICT_TOPIC = Annotated[str, Meta(min_length=1, max_length=TOPIC_MAX_LENGTH, pattern=TOPIC_PATTERN)]
_STRICT_CLUSTER = Annotated[str, Meta(min_length=1, max_length=CLUSTER_MAX_LENGTH, pattern=CLUSTER_PATTERN)]


# gc=False: an event holds only scalars and lists of them, never a cycle, so the collector need not track the
# millions a replay holds.
class _Event(Struct, kw_only=True, tag_field="type", omit_defaults=True, gc=False):
    ts: NonNegative
    cluster: Cluster = DEFAULT_CLUSTER
    seq: int | None = None
    # The broker that reported it (the agent's events, SPEC §3.1); None: a cluster-wide source.
    broker: BrokerId | None = None
    # Tie-breaker after (ts, seq): position of the event in its input, assigned by the reader.
    arrival: int = msgspec.field(default=0, name="_arrival")


class PartitionEvent(_Event, kw_only=True):
    """An event about one partition: routed to the state key that holds it."""

    topic: Topic
    partition: Annotated[int, Meta(ge=0, le=MAX_ID)]


class LeaderAndIsr(PartitionEvent, kw_only=True, tag="leader_and_isr"):
    """One partition state of a controller LeaderAndIsr request, or (KRaft) a metadata change the leader applies."""

    # -1: KRaft, which has no controller epoch (the agent's metadata path sends -1 and no `controller_id`).
    controller_epoch: Annotated[int, Meta(ge=-1, le=MAX_MS)]
    leader: Annotated[int, Meta(ge=-1, le=MAX_ID)]
    leader_epoch: NonNegative
    isr: list[BrokerId]
    replicas: Annotated[list[BrokerId], Meta(min_length=1)]
    partition_epoch: NonNegative
    controller_id: BrokerId | None = None
    leader_leo: NonNegative | None = None
    hw: NonNegative | None = None
    min_insync_replicas: Annotated[int, Meta(ge=1, le=MAX_ID)] | None = None  # the topic's, as the leader has it
    new_leader: bool | None = None  # Kafka's own isNewLeader, as the agent saw makeLeader decide
    # KRaft metadata the leader applies (SPEC §3): the Eligible Leader Replicas (KIP-966) and the leader's recovery.
    elr: list[BrokerId] | None = None
    last_known_elr: list[BrokerId] | None = None
    leader_recovery_state: Literal["RECOVERED", "RECOVERING"] | None = None


class Fetch(PartitionEvent, kw_only=True, tag="fetch"):
    """A follower FETCH as the partition leader handles it."""

    replica: BrokerId
    fetch_offset: NonNegative
    leader_leo: NonNegative
    log_start_offset: Annotated[int, Meta(ge=-1, le=MAX_MS)] | None = None
    current_leader_epoch: Annotated[int, Meta(ge=-1, le=MAX_MS)] | None = None
    # KRaft: the follower's broker epoch as its fetch carries it (-1: unknown); KIP-903's eligibility test.
    broker_epoch: Annotated[int, Meta(ge=-1, le=MAX_MS)] | None = None
    # Kafka's fetchTimeMs when the agent stamps `ts` where the leader applied the fetch (absent: `ts` is both):
    # the clock the follower's lastFetchTimeMs and lastCaughtUpTimeMs take (SPEC §4.2).
    fetch_ms: NonNegative | None = None

    @property
    def clock(self) -> int:
        """Kafka's fetchTimeMs: the follower's times and the HW rule's now (`ts` orders the fetch)."""
        return self.ts if self.fetch_ms is None else self.fetch_ms


class Append(PartitionEvent, kw_only=True, tag="append"):
    """The leader appended records; its LEO is now `leader_leo`."""

    leader_leo: NonNegative
    check_ms: NonNegative | None = None  # the agent: the clock of the isr-expiration check that read this LEO


class Tick(_Event, kw_only=True, tag="tick"):
    """An explicit scheduler run; `task` None means both tasks, isr-expiration first. With `broker`, that
    broker's own run (the agent): it acts on what that broker leads and on its pending ISR changes only."""

    task: Literal["isr-expiration", "isr-change-propagation"] | None = None
    kafka_version: Annotated[str, Meta(max_length=64)] | None = None
    isr_protocol: Literal["zookeeper", "alter_partition"] | None = None  # with `broker`: how that broker writes ISRs
    # The agent's propagation run: the broker's throttle after it (both start at the broker's start).
    last_isr_change_ms: NonNegative | None = None
    last_propagation_ms: NonNegative | None = None
    # The agent's isr-expiration run: when it ended. Kafka checks each partition at its own clock during the run,
    # after fetches captured meanwhile, so the tick sorts at its end (SPEC §4.7); `ts` stays the run's start.
    end_ms: NonNegative | None = None


class OutOfSync(Struct, kw_only=True, omit_defaults=True):
    """A replica a leader removed, as Kafka judged it."""

    replica: BrokerId
    leo: Annotated[int, Meta(ge=-1, le=MAX_MS)]
    last_caught_up_ms: NonNegative
    last_fetch_ms: NonNegative | None = None


class IsrUpdated(PartitionEvent, kw_only=True, tag="isr_updated"):
    """Observed: the leader's actual ISR write (the agent). It never changes the model; the audit compares."""

    broker: BrokerId  # the leader that wrote it: required, the audit pairs by it

    leader: BrokerId
    isr: list[BrokerId]
    isr_before: list[BrokerId] | None = None
    partition_epoch: NonNegative
    kind: Literal["shrink", "expand"]
    out_of_sync: list[OutOfSync] = []
    check_ms: NonNegative | None = None
    check_leader_leo: NonNegative | None = None


class PartitionName(Struct, frozen=True):
    topic: Topic
    partition: Annotated[int, Meta(ge=0, le=MAX_ID)]


class IsrChangePropagated(_Event, kw_only=True, tag="isr_change_propagated"):
    """Observed: a broker wrote one `/isr_change_notification` znode with these partitions (the agent)."""

    broker: BrokerId

    partitions: list[PartitionName]


# Kafka's Errors names (org.apache.kafka.common.protocol.Errors): upper case words joined by underscores.
ERROR_NAME_PATTERN = r"^[A-Z][A-Z0-9_]*$"


class AlterPartitionResponse(PartitionEvent, kw_only=True, tag="alter_partition_response"):
    """The controller's answer to the leader's AlterPartition proposal for one partition, as the leader handled it
    at `ts` (Partition.submitAlterPartition's callback). `error` None: committed, with the ISR and epochs."""

    broker: BrokerId  # the leader that sent the request: required, its manager's request is the one answered

    error: Annotated[str, Meta(max_length=64, pattern=ERROR_NAME_PATTERN)] | None = None
    isr: list[BrokerId] | None = None
    leader_epoch: NonNegative | None = None
    partition_epoch: NonNegative | None = None
    # The error is the whole request's (the response's top-level error code, reported for each partition it carried),
    # not this partition's; None: not said (an older agent), told by the error's name (`partition.top_level_error`).
    top_level: bool | None = None


class BrokerRegistration(_Event, kw_only=True, tag="broker_registration"):
    """The leader's KRaft metadata about broker `id` (its registration): what makes it eligible to join an ISR."""

    id: BrokerId
    epoch: NonNegative
    fenced: bool
    in_controlled_shutdown: bool


class ProposedPartition(Struct, kw_only=True, omit_defaults=True, gc=False):
    """One partition of an AlterPartition request as the broker built it: the ISR it proposes and the epochs the
    proposal is based on. `topic` None: the broker did not know the topic id's name."""

    topic: Topic | None = None
    partition: Annotated[int, Meta(ge=0, le=MAX_ID)]
    isr: list[BrokerId]
    leader_epoch: NonNegative
    partition_epoch: NonNegative
    leader_recovery_state: Literal["RECOVERED", "RECOVERING"] | None = None


class AlterPartitionSent(_Event, kw_only=True, tag="alter_partition_sent"):
    """Observed: one AlterPartition request a leader really sent its controller (the agent, at `buildRequest`). The
    audit compares it with the model's requests (SPEC §7); it changes the model only where it is a proposal the leader
    made after metadata dropped the model's (`partition.proposed_after_the_metadata`)."""

    broker: BrokerId  # the leader that sent it: required, the audit pairs by it

    broker_epoch: Annotated[int, Meta(ge=-1, le=MAX_MS)] | None = None
    partitions: Annotated[list[ProposedPartition], Meta(min_length=1)]


class Watermark(_Event, kw_only=True, tag="watermark"):
    """A broker's own stream has come this far (the agent): every event it reports after this one (a higher `seq`)
    has `ts` at or after this `ts`, on the same clock. It changes no state; the stream applies a broker's events
    once that broker's stream has passed them (SPEC §6)."""

    broker: BrokerId  # whose stream: required, the bound holds for that broker's events only


Event = (
    LeaderAndIsr
    | Fetch
    | Append
    | Tick
    | IsrUpdated
    | IsrChangePropagated
    | AlterPartitionResponse
    | BrokerRegistration
    | AlterPartitionSent
    | Watermark
)
# What a broker did about many partitions at once: observed, recorded as it came.
BrokerObserved = IsrChangePropagated | AlterPartitionSent
Observed = IsrUpdated | BrokerObserved

_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)


def _with_patterns(tp: Any) -> Any:
    """`tp` with every topic and cluster name held to its pattern (structs rebuilt alike), for the strict decoder."""
    if tp is Topic:
        return _STRICT_TOPIC
    if tp is Cluster:
        return _STRICT_CLUSTER
    if isinstance(tp, type) and issubclass(tp, Struct):
        return _strict_struct(tp)
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:  # its constraints stay; a name or struct inside it gets its patterns
        return Annotated[(_with_patterns(args[0]), *tp.__metadata__)]
    if origin is list:
        return list[_with_patterns(args[0])]  # type: ignore[misc]
    if args and origin is not Literal:  # a union
        return functools.reduce(operator.or_, map(_with_patterns, args))
    return tp


@functools.cache
def _strict_struct(cls: type[Struct]) -> type[Struct]:
    """`cls` with its names' patterns: the same fields, wire names, tag and defaults."""
    config = cls.__struct_config__
    originals = msgspec.structs.fields(cls)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for f in originals:
        if f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, _with_patterns(f.type), msgspec.field(default_factory=f.default_factory)))
        elif f.default is not msgspec.NODEFAULT:
            fields.append((f.name, _with_patterns(f.type), f.default))
        else:
            fields.append((f.name, _with_patterns(f.type)))
    return msgspec.defstruct(
        cls.__name__,
        fields,
        kw_only=True,
        tag_field=config.tag_field,
        tag=config.tag,
        omit_defaults=config.omit_defaults,
        rename={f.name: f.encode_name for f in originals},
    )


_strict_decoder = msgspec.json.Decoder(_with_patterns(Event))
_TOPIC_RE = re.compile(TOPIC_PATTERN)
_CLUSTER_RE = re.compile(CLUSTER_PATTERN)
_TOPICS: set[str] = set()  # names that matched their pattern
_CLUSTERS: set[str] = set()
_NAMES_KEPT = 65_536  # a bound on each set: emptied when full (hostile input must not grow it)


def _matches(name: str, seen: set[str], pattern: re.Pattern[str]) -> bool:
    if name in seen:
        return True
    if not pattern.search(name):  # msgspec's own test of a `pattern`
        return False
    if len(seen) >= _NAMES_KEPT:
        seen.clear()
    seen.add(name)
    return True


def _names_match(event: Event) -> bool:
    """Whether the event's cluster and topic names match their patterns."""
    if isinstance(event, PartitionEvent):
        topics = [event.topic]
    else:
        topics = (
            [p.topic for p in event.partitions if p.topic is not None]
            if isinstance(event, IsrChangePropagated | AlterPartitionSent)
            else []
        )
    return _matches(event.cluster, _CLUSTERS, _CLUSTER_RE) and all(_matches(t, _TOPICS, _TOPIC_RE) for t in topics)


def _strict_reason(raw: bytes | str) -> str:
    """msgspec's first error for a line the fast decoder refused or whose names do not match: the strict decoder
    checks every constraint in the line's order, so the reason is the one a single strict pass would give."""
    try:
        _decode(raw, _strict_decoder)
    except msgspec.ValidationError as exc:
        return str(exc)
    raise AssertionError("the strict decoder accepted a line the fast one refused")


_any_json = msgspec.json.Decoder()
_FIELD_AT = re.compile(r"at `\$\.([A-Za-z_][A-Za-z0-9_]*)")
_FIELD_MISSING = re.compile(r"missing required field `([^`]+)`")


_CATEGORIES = (
    ("invalid JSON", "invalid_json"),
    ("late", "late"),
    ("ts_in_future", "ts_in_future"),
    ("Object missing required field `type`", "missing_type"),
    ("Object missing required field", "missing_field"),
    ("Invalid value", "unknown_type"),
    ("Expected `object`", "not_an_object"),
    ("Expected `int` >=", "out_of_range"),
    ("Expected `int` <=", "out_of_range"),
    ("Expected `array` of length", "out_of_range"),
    ("Expected `str` of length", "out_of_range"),
    ("Expected `str` matching", "invalid_value"),
    ("Expected", "wrong_type"),
)


class DeadLetter(Struct, kw_only=True):
    """An input that changed nothing: the raw text, why, and which field (None = the whole record)."""

    raw: str
    reason: str
    field: str | None = None
    ts: int | None = None

    @property
    def category(self) -> str:
        """A short, countable name for the reason (metrics and summaries group by it)."""
        text = self.reason
        for prefix, name in _CATEGORIES:
            if text.startswith(prefix):
                return name
        return "invalid_value"

    def to_record(self) -> dict[str, Any]:
        """The SPEC §5 dead-letter record (`ts` only when the input had a usable one)."""
        record: dict[str, Any] = {"raw": self.raw, "reason": self.reason, "field": self.field}
        if self.ts is not None:
            record["ts"] = self.ts
        return record


_BOM = ("\ufeff", b"\xef\xbb\xbf")


def _decode(raw: bytes | str, decoder: Any) -> Any:
    """Decode untrusted text; a leading UTF-8 byte-order mark is allowed. Raises DecodeError for anything that is
    not JSON this reader can hold: invalid UTF-8 inside a string, nesting deeper than the decoder's limit.

    A byte-order mark is no JSON, so a line with one fails first and is decoded again without it: the lines
    without one (all but a few) pay nothing for it."""
    try:
        return _decode_body(raw, decoder)
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError:
        body = raw[len(_BOM[0]) :] if isinstance(raw, str) and raw.startswith(_BOM[0]) else raw
        if isinstance(body, bytes | bytearray) and body.startswith(_BOM[1]):
            body = body[len(_BOM[1]) :]
        if body is raw:
            raise
        return _decode_body(body, decoder)


def _decode_body(body: bytes | str, decoder: Any) -> Any:
    try:
        return decoder.decode(body)
    except UnicodeDecodeError:  # msgspec < 0.23 raises it for invalid UTF-8 inside a string
        raise _invalid_utf8(body) from None
    except msgspec.DecodeError as exc:
        if str(exc).startswith("Invalid UTF-8"):  # msgspec >= 0.23's message for the same, without a position
            raise _invalid_utf8(body) from None
        raise
    except RecursionError:
        raise msgspec.DecodeError("nested too deeply") from None


def _invalid_utf8(body: bytes | str) -> msgspec.DecodeError:
    """One reason for invalid UTF-8 whichever msgspec found it: the offset of the first bad byte in the line."""
    if not isinstance(body, str):
        try:
            bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            return msgspec.DecodeError(f"invalid UTF-8 at byte {exc.start}")
    return msgspec.DecodeError("invalid UTF-8")


def parse_event(raw: bytes | str, seq: int, arrival: int = 0) -> Event | DeadLetter:
    """Decode and validate one JSON line; `seq` is used when the event carries none (its line number).

    Never raises: whatever the bytes, the result is an event or a dead letter with the reason.
    """
    try:
        event: Event = _decode(raw, _decoder)
    except msgspec.ValidationError:
        return _dead(raw, _strict_reason(raw))
    except msgspec.DecodeError as exc:
        return DeadLetter(raw=_text(raw), reason=f"invalid JSON: {exc}", field=None)
    if not (event.cluster in _CLUSTERS and getattr(event, "topic", None) in _TOPICS) and not _names_match(event):
        return _dead(raw, _strict_reason(raw))
    if type(event) in _CROSS_CHECKED:  # most events (fetches) have no rule across their fields: one test per line
        dead = _cross_checked(event, raw)
        if dead is not None:
            return dead
    if event.seq is None:
        event.seq = seq
    event.arrival = arrival
    return event


def _cross_checked(event: Event, raw: bytes | str) -> DeadLetter | None:
    """The dead letter of an event whose fields contradict each other (a rule no schema constraint states)."""
    if type(event) is LeaderAndIsr and len(set(event.replicas)) != len(event.replicas):
        return DeadLetter(raw=_text(raw), reason="replicas must be distinct broker ids", field="replicas", ts=event.ts)
    if type(event) is Append and event.check_ms is not None and event.check_ms < event.ts:
        reason = f"check_ms: a run cannot check a partition ({event.check_ms}) before it starts (ts {event.ts})"
        return DeadLetter(raw=_text(raw), reason=reason, field="check_ms", ts=event.ts)
    if type(event) is AlterPartitionResponse and event.error is None and event.top_level:
        reason = "top_level: a response without an error has no top-level error"
        return DeadLetter(raw=_text(raw), reason=reason, field="top_level", ts=event.ts)
    if type(event) is AlterPartitionResponse and event.error is None:
        for name in ("isr", "leader_epoch", "partition_epoch"):
            if getattr(event, name) is None:
                reason = f"{name}: a response without an error carries the committed isr and both epochs"
                return DeadLetter(raw=_text(raw), reason=reason, field=name, ts=event.ts)
    if type(event) is Tick and event.end_ms is not None:
        if event.task != "isr-expiration":
            reason = "end_ms: only an isr-expiration tick reports the end of its run"
            return DeadLetter(raw=_text(raw), reason=reason, field="end_ms", ts=event.ts)
        if event.end_ms < event.ts:
            reason = f"end_ms: the run cannot end ({event.end_ms}) before it starts (ts {event.ts})"
            return DeadLetter(raw=_text(raw), reason=reason, field="end_ms", ts=event.ts)
    return None


_CROSS_CHECKED = frozenset((LeaderAndIsr, Append, AlterPartitionResponse, Tick))


def sorts_at(event: Event) -> int:
    """The event time an event sorts at: its ts, but an agent's isr-expiration tick at the end of its run and an
    append its run reported at the clock of the partition's check (SPEC §4.7)."""
    if type(event) is Tick and event.end_ms is not None:
        return event.end_ms
    if type(event) is Append and event.check_ms is not None:
        return event.check_ms
    return event.ts


def in_future(event: Event, raw: bytes | str, received_ms: int, max_future_ms: int) -> DeadLetter | None:
    """The dead letter of an event dated more than `max_future_ms` ahead of when it arrived, else None.

    A broker with a wrong clock must not move event time: such an event changes nothing (SPEC §6).
    """
    if event.ts <= received_ms + max_future_ms:
        return None
    return DeadLetter(
        raw=_text(raw),
        field="ts",
        ts=event.ts,
        reason=f"ts_in_future: {event.ts} is more than max_future_ms {max_future_ms} ahead of its "
        f"arrival at {received_ms}",
    )


def jumps(ts: int, cluster_time: int | None, max_future_ms: int) -> bool:
    """Whether an event at `ts` jumps more than `max_future_ms` ahead of its cluster's time (SPEC §6): it cannot move
    that time by itself, since one wrong clock or one mistyped line would make every later event late."""
    return cluster_time is not None and ts > cluster_time + max_future_ms


def witnesses(broker: int | None, other: int | None, lone_broker: bool) -> bool:
    """Whether an event reported by `other` is another witness of a jump reported by `broker` (None: no broker), when
    it lies within `max_future_ms` of it (SPEC §6). Input without a broker has no clock of its own to blame: any other
    event is one (other replicas, partitions, a later line of the same file). A broker's clock is witnessed only by
    another broker's, since its own later events carry the same wrong clock, unless it is the only broker its
    cluster has shown (`lone_broker`)."""
    return broker is None or other is None or broker != other or lone_broker


def uncorroborated(raw: bytes | str, ts: int, base: int, max_future_ms: int) -> DeadLetter:
    """The dead letter of a jump nothing corroborated while its cluster's time moved `max_future_ms` past `base`,
    where it stood when the jump came (SPEC §6)."""
    return DeadLetter(
        raw=_text(raw),
        field="ts",
        ts=ts,
        reason=f"ts_in_future: {ts} jumped more than max_future_ms {max_future_ms} ahead of its cluster's time "
        f"{base}, and no other event came within max_future_ms of it while that time moved max_future_ms on",
    )


def _dead(raw: bytes | str, message: str) -> DeadLetter:
    match = _FIELD_AT.search(message) or _FIELD_MISSING.search(message)
    field = match.group(1) if match else None
    if field == "_arrival":  # an internal name: never let input address it
        field = None
    return DeadLetter(raw=_text(raw), reason=message, field=field, ts=_salvage_ts(raw))


def _salvage_ts(raw: bytes | str) -> int | None:
    """Best-effort event time of a rejected record, so dead letters can be placed in time."""
    try:
        obj = _decode(raw, _any_json)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    ts = obj.get("ts") if isinstance(obj, dict) else None
    return ts if isinstance(ts, int) and not isinstance(ts, bool) and 0 <= ts <= MAX_MS else None


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes | bytearray) else raw


def event_to_dict(event: Event) -> dict[str, Any]:
    """The event as SPEC §3 JSON (without the internal arrival position)."""
    record: dict[str, Any] = msgspec.to_builtins(event)
    record.pop("_arrival", None)
    return record
