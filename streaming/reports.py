"""What crosses the Spark boundary: one msgpack report per state-key call, and the bucket state blob."""

from __future__ import annotations

import msgspec
import pyarrow as pa
from msgspec import Struct

from isrwatch.state.audit import Marks
from isrwatch.state.clock import ClockSample
from isrwatch.state.events import BrokerObserved, BrokerRegistration, DeadLetter, Event, IsrUpdated
from isrwatch.state.eventtime import Jump
from isrwatch.state.records import (
    AlterPartitionAnswer,
    AlterPartitionSendSeen,
    AlterPartitionSubmit,
    Cause,
    Decision,
    Divergence,
    DivergenceKind,
    IsrChange,
    IsrWrite,
    Observation,
    PartitionHealth,
    PartitionRecord,
    PropagationTick,
    ProposedIsr,
    ReplicaView,
)
from isrwatch.state.schedule import INF

REPORT_SCHEMA = "bucket int, report binary"
STATE_SCHEMA = "blob binary"  # one msgpack blob (version inside): array fields crash PySpark's state schema
# 4: jumps wait for corroboration (`Jump`, `BucketState.jumps`, `BucketState.brokers`); 5: brokers' own streams
# (`BucketState.watermarks`, `BucketState.unbounded`); 6: partitions applied past their cluster's frontier
# (`BucketState.ahead`); 7: the audit of the key's own partitions (`BucketState.audit`; version 6 is read: its
# partitions' pending sides stay in the driver's audit, which still judges them)
BUCKET_STATE_VERSION = 7
READ_VERSIONS = (6, BUCKET_STATE_VERSION)


_CODEC = "zstd"  # pyarrow's: fast, and the JVM moves a fraction of the bytes (docs/performance.md)


SLICES_PER_LATENESS = 16  # held events are cut into time slices this much narrower than allowed_lateness_ms


class Chunk(Struct, array_like=True):
    """Validated events of one cluster held until the cluster's time passes them, compressed, one slice of event
    time each (`slices`): a call whose frontier moves less than the lateness decompresses only the slice it cuts."""

    cluster: str
    first: int  # the earliest event time: nothing in the chunk is due before it
    size: int
    data: bytes
    last: int = INF  # the latest event time: all of it is due past it (INF: not known, a chunk of version 6)

    @classmethod
    def of(cls, cluster: str, events: list[Event]) -> Chunk:
        raw = _encoder.encode(events)
        times = [ev.ts for ev in events]
        return cls(cluster, min(times), len(raw), pa.compress(raw, codec=_CODEC, asbytes=True), max(times))

    @classmethod
    def slices(cls, cluster: str, events: list[Event], width: int) -> list[Chunk]:
        """`events` as one chunk per `width` ms of event time (on a grid from 0): the frontier, moving through them,
        cuts at most one; the others are wholly due or wholly held and pass without re-encoding."""
        cells: dict[int, list[Event]] = {}
        for ev in events:
            cell = cells.get(ev.ts // width)
            if cell is None:
                cells[ev.ts // width] = [ev]
            else:
                cell.append(ev)
        return [cls.of(cluster, cell) for _, cell in sorted(cells.items())]

    def events(self) -> list[Event]:
        return _events_decoder.decode(pa.decompress(self.data, decompressed_size=self.size, codec=_CODEC, asbytes=True))


class BucketState(Struct, array_like=True):
    """A state key's value: per cluster, the engine (applied state), the newest event time known, and the
    validated events still ahead of that cluster's frontier.

    Events are parsed once, on arrival (so no invalid line can move a cluster's time), and wait in compressed
    chunks, one per slice of event time (`Chunk.slices`): most calls pass most chunks through untouched.
    """

    version: int
    engines: dict[str, bytes] = {}
    newest: dict[str, int] = {}  # cluster -> its time: the newest valid, corroborated event time this key has seen
    applied: dict[str, int] = {}  # cluster -> how far its engine has applied (exclusive)
    ticked: set[str] = set()  # clusters whose ticks the first bucket has seen: it may still send their ticks on
    holding: set[str] = set()  # clusters this key holds partitions of
    pending: list[Chunk] = []
    jumps: list[Jump] = []  # lines waiting for corroboration, in arrival order
    brokers: dict[str, set[int]] = {}  # cluster -> the reporting brokers whose events this key has taken
    watermarks: dict[str, dict[int, int]] = {}  # cluster -> broker -> its newest watermark this key has taken
    named: dict[str, set[int]] = {}  # cluster -> the brokers its partition states and registrations here name
    unbounded: set[str] = set()  # clusters this key has taken an event without a broker of (SPEC §6)
    # cluster -> (topic, partition, sort time of its last event applied past the cluster's frontier): at or behind
    # it, a later event of that partition is late (`frontier.behind_partition`)
    ahead: dict[str, list[tuple[str, int, int]]] = {}
    audit: bytes | None = None  # the audit of this key's partitions (`Audit.pair`), None while it holds nothing
    clocks: list[ClockSample] = []  # the reporting brokers' clocks as this key saw them: whose the others outvote


class IsrDivergence(Struct, array_like=True):
    """An ISR write's `Divergence` as a state key reports it (`Audit.pair`): its model side can only be an ISR write,
    which msgspec needs to know to decode it."""

    ts: int
    cluster: str
    broker: int
    kind: DivergenceKind
    cause: Cause | None
    topic: str | None
    partition: int | None
    partition_epoch: int | None
    model: IsrWrite | None
    observed: IsrUpdated | ProposedIsr | None
    evidence: list[ReplicaView]
    margin_ms: int | None

    @classmethod
    def of(cls, d: Divergence) -> IsrDivergence:
        fields = msgspec.structs.asdict(d)
        del fields["subject"]
        return cls(**fields)

    def divergence(self) -> Divergence:
        return Divergence(subject="isr", **msgspec.structs.asdict(self))


class Report(Struct, array_like=True):
    """One call of the stateful function: what the key decided, and how far it has applied each cluster."""

    bucket: int
    frontiers: dict[str, int] = {}  # cluster -> applied up to (exclusive), for clusters the key can still change
    events: int = 0  # valid events received (a tick counted by the first bucket only)
    max_ts: int = -1  # the latest time among them
    after_until: int = 0  # valid events after a replay's --until (control key)
    decisions: list[Decision] = []
    changes: list[IsrChange] = []
    ticks: list[PropagationTick] = []
    records: list[PartitionRecord] = []
    as_of: list[int] = []  # the event time each record is exact at (its cluster's frontier here)
    counters: dict[str, int] = {}  # the engines' `Outputs.counters`: what changed nothing, as `kind.reason`
    writes: list[IsrWrite] = []  # the model's audited ISR writes: none from a key, which pairs them (`divergences`)
    observed: list[Observation | BrokerObserved] = []  # what brokers did (agent input)
    dead: list[DeadLetter] = []
    blob: bytes | None = None  # the bucket's state, only when replaying (to finish at --until)
    alter_partition: list[AlterPartitionSubmit | AlterPartitionAnswer | AlterPartitionSendSeen] = []  # for the managers
    clocks: list[ClockSample] = []  # the reporting brokers' clocks as this call's lines showed them (SPEC §6)
    states: list[PartitionHealth] = []  # partitions' health where it may have changed, for the incident book
    registrations: list[BrokerRegistration] = []  # the KRaft registrations brokers reported, for the incident book
    resyncs: list[tuple[str, str, int, int]] = []  # likewise the audited partitions' LeaderAndIsr decisions
    # The key's audit of its own partitions (`Audit.pair`): its ISR divergences, what the driver's batch verdicts
    # look back on, and the brokers it first audited (their batches are audited).
    divergences: list[IsrDivergence] = []
    marks: list[Marks] = []
    audited: list[tuple[str, int]] = []


# Module-level functions (not bound methods) so that Spark's closure pickling refers to them by name.
_encoder = msgspec.msgpack.Encoder()
_events_decoder = msgspec.msgpack.Decoder(list[Event])
_report_decoder = msgspec.msgpack.Decoder(Report)
_bucket_decoder = msgspec.msgpack.Decoder(BucketState)


def encode(obj: object) -> bytes:
    return _encoder.encode(obj)


def decode_report(data: bytes) -> Report:
    return _report_decoder.decode(data)


def decode_bucket(data: bytes) -> BucketState:
    state = _bucket_decoder.decode(data)
    if state.version in READ_VERSIONS:
        state.version = BUCKET_STATE_VERSION
    else:
        raise ValueError(
            f"bucket state version {state.version} is not {BUCKET_STATE_VERSION}: this checkpoint was written by "
            "another isrwatch; start the new version with a new --checkpoint (and a new store)"
        )
    return state
