"""The demo's fault story on the lab's real brokers (`isrwatch demo --real`): a stall, a restart and a preferred
election, each told as it is done, and the cluster's truth (every leader and ISR change: ZooKeeper's, or in KRaft
mode Kafka's admin API's) as it happens.

The story runs in a thread next to the demo's live summary (what isrwatch made of the agents' events), so the
audience sees Kafka's own ISR writes and isrwatch's decisions side by side: its first fault waits until isrwatch
committed its first micro-batch, and each step waits for what Kafka really did (a KRaft restart: the new
incarnation registered, with a new broker epoch, and back in every ISR; ZooKeeper mode: the old session expired, the
broker registered again and back in every ISR) before the next begins.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from isrwatch.processes.detached import alive

from . import faults, kraft
from .record import ZOOKEEPER, Lab, LabError, load
from .truth import PartitionState, partitions, registrations, serving

Say = Callable[[str], None]
STALLED, RESTARTED = 2, 3  # as in the simulated story: broker 2 stalls; broker 3 is restarted
MAX_LAG_MS = 6000  # a stall must outlast 1.5 x the lag (isr-expiration runs every lag / 2) and stay <= 12 s
PAUSE_S = 5.0  # between the story's steps, once the cluster is healthy again
RECOVERY_TIMEOUT_S = 120.0
WATCH_TIMEOUT_S = 300.0  # for isrwatch's first micro-batch (26-29 s measured; 2 cores), again to catch up


def stall_seconds(lag_ms: int) -> float:
    """Long enough for every leader of the stalled broker to find it lag_ms behind at one of its isr-expiration
    runs (every lag_ms / 2, at its own phase), plus 3 s; never longer than 2/3 of the ZooKeeper session."""
    return min(12.0, 1.5 * lag_ms / 1000 + 3)


def plan(lag_ms: int, session_timeout_ms: int, mode: str = ZOOKEEPER) -> list[str]:
    """What the audience will see, step by step (`mode`: the lab's, zookeeper or kraft)."""
    lag, stall = lag_ms / 1000, stall_seconds(lag_ms)
    restart = (
        f"broker {RESTARTED} is killed and restarted: {session_timeout_ms / 1000:g} s later ZooKeeper expires its "
        "session, the controller moves its leaderships (LeaderAndIsr) and drops it from every ISR; it starts "
        "again, catches up -> expand"
        if mode == ZOOKEEPER
        else f"broker {RESTARTED} is killed and started again at once: its new incarnation registers with the "
        "controller, which moves its leaderships and drops the old one from every ISR (metadata); it catches up -> "
        "expand (AlterPartition)"
    )
    return [
        f"broker {STALLED} stalls for {stall:g} s (SIGSTOP): its followers stop fetching -> each leader shrinks it "
        f"(stuck) {lag:g}-{lag * 1.5:g} s later; it resumes, catches up -> expand",
        restart,
        "preferred leader election: leadership goes back to the first replica (LeaderAndIsr)",
    ]


def _names(isr: tuple[int, ...]) -> str:
    return f"[{','.join(map(str, isr))}]"


class Story:
    """Plays the story on the lab in `directory` once isrwatch watches: `watching` is two events, isrwatch committed
    its first micro-batch and it caught up with the lab's events since their start. `stop` ends it at the next
    poll."""

    def __init__(
        self,
        directory: Path,
        lag_ms: int,
        say: Say,
        stop: threading.Event,
        watching: tuple[threading.Event, threading.Event],
    ) -> None:
        self.directory = Path(directory)
        self.lag_ms = lag_ms
        self.say = say
        self.stop = stop
        self.first_batch, self.caught_up = watching
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.topics: list[str] = []

    def run(self) -> None:
        """The whole story, then the cluster's changes until stopped. A fault that fails ends the story (said)."""
        try:
            lab = load(self.directory)
            self.topics = list(lab.topics)
            self.states = partitions(lab, self.topics)
            if self._steps():
                self.say("the story is over; the lab runs on under its producer load (Ctrl-C stops everything)")
                self._watch(lambda: False, None)
        except LabError as exc:
            if not self.stop.is_set():
                self.say(f"the story stopped: {exc}")

    def _steps(self) -> bool:
        stall = stall_seconds(self.lag_ms)
        if not self._isrwatch_watching():
            return False
        if not self._pause(PAUSE_S):
            return False
        self.say(f"FAULT   broker {STALLED} stalls for {stall:g} s (SIGSTOP, then SIGCONT)")
        faults.stall(self.directory, STALLED, stall)
        if not self._healthy(f"broker {STALLED} back in every ISR"):
            return False
        if not self._pause(PAUSE_S):
            return False
        lab = load(self.directory)
        once = "once ZooKeeper expires its session" if lab.mode == ZOOKEEPER else "at once"
        self.say(f"FAULT   broker {RESTARTED} killed (SIGKILL); it starts again {once}")
        if not self._restarted(lab):
            return False
        if not self._pause(PAUSE_S):
            return False
        self.say("FAULT   preferred leader election over every partition")
        self.say(f"        {faults.elect(self.directory)}")
        return self._pause(2 * PAUSE_S)

    def _isrwatch_watching(self) -> bool:
        """Wait for isrwatch's first micro-batch, then for it to catch up with the events the lab sent before the
        job started (a backlog of a minute on a loaded machine), so that its lines about a fault come seconds after
        Kafka's, not as a backlog. A backlog longer than WATCH_TIMEOUT_S (an attached lab that ran for hours) is
        said, and the story goes on."""
        started = time.monotonic()
        first = self._watch(self.first_batch.is_set, WATCH_TIMEOUT_S)
        if first is None:
            raise LabError(f"isrwatch's first micro-batch: not within {WATCH_TIMEOUT_S:g} s (see job.log)")
        if not first:
            return False
        batch = time.monotonic()
        said = f"isrwatch is watching: first batch after {batch - started:.1f} s"
        caught_up = self._watch(self.caught_up.is_set, WATCH_TIMEOUT_S)
        if caught_up is None:
            said += f"; still behind the lab's events {WATCH_TIMEOUT_S:g} s later: its lines will come late"
        elif caught_up and time.monotonic() - batch >= 2:  # a backlog of the lab's events before the job started
            said += f", caught up with the lab's events after {time.monotonic() - started:.1f} s"
        self.say(said)
        return caught_up is not False

    def _restarted(self, lab: Lab) -> bool:
        """Restart broker RESTARTED and wait for what Kafka did. ZooKeeper mode: the restart waits for the old
        session to expire (its helper is a fault until then). KRaft: the node starts at once, and until its new
        incarnation registers the controller keeps the old registration, unfenced, with every ISR full: only a new
        broker epoch tells the restart done."""
        if lab.mode == ZOOKEEPER:
            faults.restart(self.directory, RESTARTED)
            return self._healthy(f"broker {RESTARTED} registered again and back in every ISR")
        log = Path(lab.broker(RESTARTED).kafka_logs_dir) / "server.log"
        epochs, read = kraft.broker_epochs(log, RESTARTED)
        before = epochs[-1] if epochs else None
        faults.restart(self.directory, RESTARTED)
        registered: list[int] = []

        def new_epoch() -> bool:
            nonlocal read
            found, read = kraft.broker_epochs(log, RESTARTED, read)
            registered.extend(found)
            return bool(registered)

        what = f"broker {RESTARTED}'s new incarnation registered (broker epoch {before} -> {{}}) and back in every ISR"
        return self._healthy(what, new_epoch, lambda: registered[-1])

    def _healthy(
        self, what: str, also: Callable[[], bool] = lambda: True, detail: Callable[[], object] = lambda: ""
    ) -> bool:
        """Watch until no fault is under way, every broker runs, is registered unfenced and answers requests itself,
        every ISR is full and `also()` holds; then say `what` (its `{}` filled with `detail()`)."""

        def done() -> bool:
            lab = load(self.directory)
            return (  # the admin requests last: only once the rest holds
                also()
                and not lab.faults
                and all(alive(b) for b in lab.brokers)
                and bool(self.states)
                and all(s.leader >= 0 and set(s.isr) == set(s.replicas) for s in self.states.values())
                and registrations(lab) == dict.fromkeys((b.id for b in lab.brokers), False)
                and serving(lab)
            )

        started = time.monotonic()
        result = self._watch(done, RECOVERY_TIMEOUT_S)
        if result is None:
            raise LabError(f"{what.format('?')}: not within {RECOVERY_TIMEOUT_S:g} s")
        if not result:
            return False
        self.say(f"KAFKA   {what.format(detail())} after {time.monotonic() - started:.1f} s")
        return True

    def _watch(self, done: Callable[[], bool], timeout: float | None) -> bool | None:
        """Tell every leader and ISR change in the cluster until `done()` (True), `timeout` s passed (None) or the
        demo stops (False). A poll no broker answered (a node restarting, the others slow for a moment on a loaded
        machine) is tried again; one still failing at the timeout ends the story with its cause."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.stop.is_set():
            try:
                self._changes(partitions(load(self.directory), self.topics))
                if done():
                    return True
            except LabError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
            if deadline is not None and time.monotonic() >= deadline:
                return None
            self.stop.wait(0.5)
        return False

    def _pause(self, seconds: float) -> bool:
        """Watch for `seconds`; False when the demo stops."""
        return self._watch(lambda: False, seconds) is None

    def _changes(self, now: dict[tuple[str, int], PartitionState]) -> None:
        for key, s in sorted(now.items()):
            before = self.states.get(key)
            if before is None or (before.leader, before.isr) == (s.leader, s.isr):
                continue
            name = f"{s.topic}-{s.partition}"
            if before.leader != s.leader:
                what = f"leader {before.leader} -> {s.leader} (epoch {s.leader_epoch}), ISR {_names(s.isr)}"
            else:
                what = f"ISR {_names(before.isr)} -> {_names(s.isr)} (leader {s.leader})"
            version = f", zkVersion {s.partition_epoch}" if s.partition_epoch >= 0 else ""  # KRaft: not reported
            self.say(f"  KAFKA   {name:<12} {what}{version}")
        self.states = now
