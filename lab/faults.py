"""`isrwatch lab fault KIND`: real faults on the lab's brokers, in either mode. Each returns at once and says what
it did.

A fault that ends by itself (`--seconds`) or finishes later (in ZooKeeper mode a restart waits for ZooKeeper to
drop the killed broker's registration) leaves a detached helper, `python -m isrwatch.lab.faults`, recorded in
lab.json so that `isrwatch lab down` stops it too.

`stall` and `fence` both pause a broker (SIGSTOP, then SIGCONT); they differ in length. A stall stays within the
broker's session (ZooKeeper's, or its KRaft session with the controller): only the leaders it follows act, each
dropping it from the ISR once it is replica.lag.time.max.ms behind. A fence outlasts the session: the controller
fences the broker (KRaft) or sees its ZooKeeper session expire, moves its leaderships and removes it from every ISR.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from isrwatch.processes.detached import Process, alive, launch, paused, send, wait_gone

from . import kraft
from .record import CHROOT, KRAFT, ZOOKEEPER, Broker, Fault, Lab, LabError, editing, load
from .truth import active_controller, partitions, registered_brokers, wait_until, zookeeper

KINDS = ("stall", "fence", "slow", "kill", "restart", "elect", "controller-failover")
# A fence outlasts the session by this much: in KRaft one heartbeat interval (the controller fences at the last
# heartbeat plus the session, and checks for expired sessions as time goes), in ZooKeeper mode the controller's
# reaction to the expired session.
FENCE_MARGIN_S = kraft.BROKER_HEARTBEAT_INTERVAL_MS / 1000
SLOW_RATE = 1024  # bytes/s: far below what a follower of the lab's producer load must fetch
THROTTLED_RATE = "follower.replication.throttled.rate"
THROTTLED_REPLICAS = "follower.replication.throttled.replicas"


@contextlib.contextmanager
def admin(bootstrap: str) -> Iterator[Any]:
    """An admin client on the lab; a request that fails (a broker that does not answer) is a LabError that says so."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        client = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="isrwatch-lab", request_timeout_ms=20_000)
        try:
            yield client
        finally:
            client.close()
    except KafkaError as exc:
        raise LabError(
            f"an admin request to the lab's brokers ({bootstrap}) failed: {type(exc).__name__}: {exc}"
        ) from None


def _clock(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000))


def _up(lab: Lab) -> Lab:
    if not lab.running():
        raise LabError(f"the lab in {lab.dir} is not running: start it with isrwatch lab up --dir {lab.dir}")
    return lab


def _running(lab: Lab, broker_id: int) -> Broker:
    broker = _up(lab).broker(broker_id)
    if not alive(broker):
        raise LabError(
            f"broker {broker_id} is not running (start it with: isrwatch lab fault restart "
            f"--broker {broker_id} --dir {lab.dir})"
        )
    return broker


def _answering(lab: Lab, broker_id: int, fault: str) -> Broker:
    """A running broker that is not paused: a stopped one answers no request (an admin call would only time out),
    and a second SIGSTOP would overlap the stall that paused it."""
    broker = _running(lab, broker_id)
    if paused(broker):
        stall = next(
            (f for f in lab.faults if f.kind in ("stall", "fence") and f.broker == broker_id and f.ends_ms), None
        )
        why = (
            f"paused by a {stall.kind} until {_clock(stall.ends_ms)}"
            if stall
            else f"stopped (SIGSTOP, not by a lab stall: kill -CONT {broker.pid} resumes it)"
        )
        raise LabError(f"broker {broker_id} is {why}; {fault} it after it resumes")
    return broker


def _helper(lab: Lab, kind: str, broker: int | None, ends_ms: int | None, *argv: str) -> Fault:
    """Start the detached helper that finishes a fault, and record the fault in `lab`."""
    fault_id = f"{kind}-{broker if broker is not None else 'cluster'}-{int(time.time() * 1000)}"
    helper = Process(
        log=str(Path(lab.dir) / "faults" / f"{fault_id}.log"),
        argv=[sys.executable, "-m", "isrwatch.lab.faults", *argv, "--dir", lab.dir, "--id", fault_id],
    )
    launch(helper)
    fault = Fault(fault_id, kind, broker, ends_ms, helper)
    lab.faults.append(fault)
    return fault


def _pause(directory: Path, kind: str, broker_id: int, seconds: float) -> tuple[Lab, Broker, int]:
    """SIGSTOP the broker now and leave a helper that sends SIGCONT after `seconds` (a stall or a fence)."""
    if seconds <= 0:
        raise LabError(f"--seconds {seconds:g}: must be > 0")
    with editing(directory) as lab:
        if kind == "fence" and seconds < fence_minimum_s(lab):
            raise LabError(
                f"--seconds {seconds:g}: a fence must outlast the broker's session, {_session(lab)}, by "
                f"{FENCE_MARGIN_S:g} s: give at least {fence_minimum_s(lab):g} (a shorter pause is a stall)"
            )
        broker = _answering(lab, broker_id, kind)
        send(broker, signal.SIGSTOP)
        # The kernel stops a JVM's threads one by one after the signal: the fault holds once the process shows
        # stopped, so the next command finds it paused (a `lab fault slow` a ms later saw it running, and its admin
        # request to the broker timed out).
        wait_until(f"broker {broker_id} stopped by SIGSTOP", lambda: paused(broker), timeout=10, interval=0.01)
        ends = int((time.time() + seconds) * 1000)
        _helper(lab, kind, broker_id, ends, "end-stall", "--broker", str(broker_id), "--seconds", str(seconds))
    return lab, broker, ends


def _session(lab: Lab) -> str:
    name = "zookeeper.session.timeout.ms" if lab.mode == ZOOKEEPER else "broker.session.timeout.ms"
    return f"{name} ({lab.session_timeout_ms()} ms)"


def stall(directory: Path, broker_id: int, seconds: float) -> str:
    """SIGSTOP the broker now, SIGCONT after `seconds`: its replica fetchers (and everything else) stop."""
    lab, broker, ends = _pause(directory, "stall", broker_id, seconds)
    said = (
        f"broker {broker_id} (pid {broker.pid}) stopped with SIGSTOP; SIGCONT at {_clock(ends)} "
        f"(in {seconds:g} s). Its followers stop fetching: each leader drops it from the ISR once it is "
        f"replica.lag.time.max.ms ({lab.replica_lag_time_max_ms} ms) behind, at its next isr-expiration run."
    )
    warning = stall_warning(seconds, lab.session_timeout_ms(), lab.mode)
    return said + (f"\n{warning}" if warning else "")


def fence(directory: Path, broker_id: int, seconds: float) -> str:
    """SIGSTOP the broker past its session, SIGCONT after `seconds`: the controller fences it (KRaft) or its
    ZooKeeper session expires, its leaderships move and it leaves every ISR; then it comes back and catches up."""
    lab, broker, ends = _pause(directory, "fence", broker_id, seconds)
    if lab.mode == KRAFT:
        acts = (
            f"the controller fences it once its last heartbeat is {_session(lab)} old, moves its leaderships and "
            "removes it from every ISR; on SIGCONT it heartbeats again, is unfenced and the leaders add it back"
        )
    else:
        acts = (
            f"its ZooKeeper session expires ({_session(lab)}), the controller moves its leaderships and removes "
            "it from every ISR; on SIGCONT it registers again and the leaders add it back"
        )
    return (
        f"broker {broker_id} (pid {broker.pid}) stopped with SIGSTOP; SIGCONT at {_clock(ends)} (in {seconds:g} s). "
        f"Before that the leaders it follows drop it after replica.lag.time.max.ms "
        f"({lab.replica_lag_time_max_ms} ms); {acts}."
    )


def fence_minimum_s(lab: Lab) -> float:
    """The shortest fence: the broker's session plus FENCE_MARGIN_S."""
    return lab.session_timeout_ms() / 1000 + FENCE_MARGIN_S


def stall_limit_s(session_timeout_ms: int, mode: str) -> float:
    """The longest pause that surely stays a stall, not a crash (the session expiring, the controller acting).

    ZooKeeper mode: the broker's ZooKeeper client pings every third of the session timeout when idle, so the
    server may have heard nothing for a third of it already when the stall starts: two thirds of the timeout
    (12 s of Kafka's default 18 s). KRaft: the session less two heartbeat intervals (the last heartbeat may be one
    interval old when the stall starts, and the controller may see it one more interval late): 14 s in the lab.
    """
    if mode == ZOOKEEPER:
        return session_timeout_ms * 2 / 3000
    return (session_timeout_ms - 2 * kraft.BROKER_HEARTBEAT_INTERVAL_MS) / 1000


def stall_warning(seconds: float, session_timeout_ms: int, mode: str = ZOOKEEPER) -> str | None:
    """A stall that may outlast the broker's session is a crash (or a fence), not a stall: say so."""
    limit = stall_limit_s(session_timeout_ms, mode)
    if seconds <= limit:
        return None
    if mode == ZOOKEEPER:
        return (
            f"warning: {seconds:g} s is more than 2/3 of zookeeper.session.timeout.ms ({session_timeout_ms} ms): "
            "the broker's ZooKeeper session may expire (its client pings every third of the timeout), and then "
            "the controller treats it as failed: a crash, not a stall"
        )
    return (
        f"warning: {seconds:g} s is more than {limit:g} s, broker.session.timeout.ms ({session_timeout_ms} ms) less "
        "two heartbeat intervals: the controller may fence the broker, and then it moves its leaderships and "
        "removes it from every ISR: a fence (isrwatch lab fault fence), not a stall"
    )


def _throttle(lab: Lab, broker_id: int, rate: int) -> None:
    """Write the throttle: the topics' first. A broker applies dynamic configs as ZooKeeper's change notifications
    reach it, in the order they were written, so once it shows its rate (`_applied`) it throttles the topics too."""
    from kafka.admin import ConfigResource, ConfigResourceType

    with admin(lab.answering_bootstrap()) as client:
        client.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t, {THROTTLED_REPLICAS: "*"}) for t in lab.topics],
            raise_on_unknown=False,
        )
        client.alter_configs(
            [ConfigResource(ConfigResourceType.BROKER, str(broker_id), {THROTTLED_RATE: str(rate)})],
            raise_on_unknown=False,
        )


def _applied(lab: Lab, broker_id: int, rate: int, ends_ms: int) -> None:
    """Wait until the broker applies its throttle, or the throttle's end: a stall right after could otherwise pause
    the broker before it read the notifications, and it would come back unthrottled."""
    applied = {THROTTLED_RATE: str(rate)}
    with admin(lab.answering_bootstrap()) as client:
        wait_until(
            f"broker {broker_id} applying {THROTTLED_RATE}={rate}",
            lambda: time.time() * 1000 >= ends_ms or _broker_configs(client, broker_id, [THROTTLED_RATE]) == applied,
            30,
            0.2,
        )


def broker_configs(lab: Lab, broker_id: int, names: list[str]) -> dict[str, str | None]:
    """The broker's values of its dynamic configs as it applies them (None: not set)."""
    with admin(lab.answering_bootstrap()) as client:
        return _broker_configs(client, broker_id, names)


def _broker_configs(client: Any, broker_id: int, names: list[str]) -> dict[str, str | None]:
    from kafka.admin import ConfigResource, ConfigResourceType

    resource = ConfigResource(ConfigResourceType.BROKER, str(broker_id), names)
    got = client.describe_configs([resource], config_filter="all")["broker"][str(broker_id)]
    return {name: got[name]["value"] if name in got else None for name in names}


def _unthrottle(lab: Lab, broker_id: int, topics_too: bool) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    resources = [ConfigResource(ConfigResourceType.BROKER, str(broker_id), [THROTTLED_RATE])]
    if topics_too:
        resources += [ConfigResource(ConfigResourceType.TOPIC, t, [THROTTLED_REPLICAS]) for t in lab.topics]
    with admin(lab.answering_bootstrap()) as client:
        client.reset_configs(resources, raise_on_unknown=False)


def slow(directory: Path, broker_id: int, seconds: float, rate: int = SLOW_RATE) -> str:
    """Throttle the broker's replication as a follower to `rate` bytes/s for `seconds` (Kafka's replication quotas)."""
    if seconds <= 0:
        raise LabError(f"--seconds {seconds:g}: must be > 0")
    if rate < 1:
        raise LabError(f"--rate {rate}: must be >= 1 byte/s")
    with editing(directory) as lab:
        _answering(lab, broker_id, "slow")
        _throttle(lab, broker_id, rate)
        ends = int((time.time() + seconds) * 1000)
        _helper(lab, "slow", broker_id, ends, "end-slow", "--broker", str(broker_id), "--seconds", str(seconds))
    _applied(lab, broker_id, rate, ends)
    return (
        f"broker {broker_id}'s replication as a follower throttled to {rate} B/s until {_clock(ends)} "
        f"(in {seconds:g} s): {THROTTLED_RATE}={rate} on broker {broker_id}, {THROTTLED_REPLICAS}=* on "
        f"{', '.join(lab.topics)}. Kafka applies the throttle only to a follower that is behind (outside the "
        "ISR): one that falls out of the ISR (a stall, a restart) keeps fetching at this rate and stays "
        "behind until the throttle ends. An in-sync follower is not held back by a quota."
    )


def kill(directory: Path, broker_id: int) -> str:
    """SIGKILL the broker; its session expires later, and then the controller acts."""
    with editing(directory) as lab:
        broker = _running(lab, broker_id)
        try:
            active, epoch = active_controller(lab)
        except LabError:  # KRaft, the active controller paused: the brokers forward DescribeMetadataQuorum to it
            active, epoch = None, -1
        send(broker, signal.SIGKILL)
        wait_gone([broker], 10)
    role = f" (the active controller, epoch {epoch})" if active == broker_id else ""
    expires = (
        f"ZooKeeper expires its session within {_session(lab)}"
        if lab.mode == ZOOKEEPER
        else f"The controller fences it once its last heartbeat is {_session(lab)} old"
    )
    return (
        f"broker {broker_id}{role} (pid {broker.pid}) killed with SIGKILL. {expires}; then the controller "
        f"moves its leaderships and removes it from every ISR. Start it again: isrwatch lab fault restart "
        f"--broker {broker_id} --dir {lab.dir}"
    )


def _start_when_unregistered(directory: Path, broker_id: int, fault_id: str | None, timeout: float) -> Broker:
    """Start the broker again on its log directory once ZooKeeper no longer holds its old registration.

    A broker that registers while its killed predecessor's ephemeral znode still exists fails to start
    (NODEEXISTS), so the start waits for the old session to expire.
    """
    lab = load(directory)
    try:

        def gone_or_restarted() -> bool:  # another restart may have started it already
            return broker_id not in registered_brokers(zk, CHROOT) or alive(load(directory).broker(broker_id))

        with zookeeper(str(lab.zookeeper)) as zk:
            wait_until(f"ZooKeeper dropping broker {broker_id}'s registration", gone_or_restarted, timeout, 0.2)
        broker = _start(directory, broker_id)
    finally:
        with editing(directory) as lab:
            lab.faults = [f for f in lab.faults if f.id != fault_id]
    return broker


def restart(directory: Path, broker_id: int) -> str:
    """SIGKILL the broker if it runs, then start it afresh on the same log directory: at once in KRaft (it registers
    a new incarnation), after its ZooKeeper session expired in ZooKeeper mode."""
    with editing(directory) as lab:
        broker = _up(lab).broker(broker_id)
        was = f"killed (pid {broker.pid}) with SIGKILL" if send(broker, signal.SIGKILL) else "was not running"
        wait_gone([broker], 10)
        registered = False
        if lab.mode == ZOOKEEPER:
            with zookeeper(str(lab.zookeeper)) as zk:
                registered = broker_id in registered_brokers(zk, CHROOT)
        if registered:
            _helper(lab, "restart", broker_id, None, "start-broker", "--broker", str(broker_id))
    if registered:
        return (
            f"broker {broker_id} {was}; it starts again on {broker.log_dir} as soon as ZooKeeper expires "
            f"its old session (within {lab.zookeeper_session_timeout_ms} ms): until then its registration "
            "stands and a new broker with its id cannot register"
        )
    broker = (
        _start_when_unregistered(directory, broker_id, None, 0)
        if lab.mode == ZOOKEEPER
        else _start(directory, broker_id)
    )
    return f"broker {broker_id} {was}; started again (pid {broker.pid}) on {broker.log_dir}"


def _start(directory: Path, broker_id: int) -> Broker:
    """Start the broker on its log directory unless it runs (KRaft: its new incarnation replaces the old one's
    registration at once, so nothing has to expire first)."""
    with editing(directory) as lab:
        broker = lab.broker(broker_id)
        if not alive(broker):
            launch(broker)
    return broker


ELECTION_PROPAGATION_S = 15  # how long the brokers may take to show a leader the controller elected


def elect(directory: Path) -> str:
    """Run a preferred leader election over every partition and say which leaders moved."""
    from kafka.errors import for_code

    lab = _up(load(directory))
    before = partitions(lab)
    response = _elect_leaders(lab)
    failed = []
    elected = set()
    for result in response.replica_election_results:
        for p in result.partition_result:
            error = for_code(p.error_code)
            if not p.error_code:
                elected.add((result.topic, p.partition_id))
            elif error.__name__ != "ElectionNotNeededError":
                failed.append(f"{result.topic}-{p.partition_id}: {error.__name__}")
    # The controller answers once the election is decided; the brokers learn of it a moment later (KRaft: when they
    # apply the metadata record), so the truth is read until every elected partition shows its preferred leader.
    after = partitions(lab)
    deadline = time.monotonic() + ELECTION_PROPAGATION_S
    while time.monotonic() < deadline and any(
        after[k].leader != after[k].preferred_leader for k in elected if k in after
    ):
        time.sleep(0.2)
        after = partitions(lab)
    moved = [
        f"{t}-{p} {before[(t, p)].leader}->{s.leader}"
        for (t, p), s in sorted(after.items())
        if (t, p) in before and before[(t, p)].leader != s.leader
    ]
    said = f"preferred leader election: {len(moved)} lab partitions moved to their preferred leader" + (
        f" ({', '.join(moved)})" if moved else " (every leader already was the preferred one)"
    )
    return said + (f"; not elected: {', '.join(failed)}" if failed else "")


def _elect_leaders(lab: Lab) -> Any:
    """ElectLeaders (preferred, every partition), sent to a broker that answers and named when it fails.

    kafka-python sends it to the controller its Metadata response names. In ZooKeeper mode that is the real
    controller (the /controller znode's). A KRaft broker names a random broker it holds registered and unfenced
    (KRaftMetadataCache.getRandomAliveBrokerId), which may be a killed node whose registration the controller
    keeps until its new incarnation registers: the request then fails with ECONNREFUSED. Any KRaft broker forwards
    ElectLeaders to the active controller, so the request goes to one that answers.
    """
    from kafka.errors import KafkaError

    if lab.mode == ZOOKEEPER:
        node, _ = active_controller(lab)
        role, none = "the active controller", "there is no active controller right now (an election is under way)"
    else:
        node = lab.answering()[1]
        role, none = "which forwards it to the active controller", "no broker answers requests now"
    if node is None:
        raise LabError(f"preferred leader election: {none}: try again")
    with admin(lab.answering_bootstrap()) as client:
        client._controller_id = node  # kafka-python's routing of controller requests: see above
        try:
            return client.elect_leaders(0, None, raise_errors=False)
        except KafkaError as exc:
            raise LabError(
                f"preferred leader election: ElectLeaders to broker {node} ({lab.broker(node).address}), {role}, "
                f"failed: {type(exc).__name__}: {exc}"
            ) from None


def controller_failover(directory: Path) -> str:
    """Kill the active controller (SIGKILL) and start it again: another node takes over with a new epoch. In KRaft
    the active controller is the metadata quorum's leader (DescribeMetadataQuorum)."""
    lab = _up(load(directory))
    active, epoch = active_controller(lab)
    if active is None:
        raise LabError("there is no active controller right now (an election is under way): try again")
    said = restart(directory, active)
    if lab.mode == KRAFT:
        return (
            f"the active controller was node {active} (the metadata quorum's leader, leader epoch {epoch}). {said}. "
            f"The other voters elect a new quorum leader (a higher epoch) within seconds; it restarts every "
            f"broker's session, and the partitions node {active} led wait for its new incarnation or for its "
            f"fencing ({_session(lab)} after the new controller's activation) to get a leader."
        )
    return (
        f"the active controller was broker {active} (controller epoch {epoch}). {said}. Once its session "
        f"expires another broker becomes controller (epoch {epoch + 1}), moves broker {active}'s leaderships "
        f"and sends LeaderAndIsr with the new epoch."
    )


# -- the detached helper ---------------------------------------------------------------------------


def _finish(directory: Path, fault_id: str, action: Any) -> None:
    """Do what ends a fault under the lab's lock and forget the fault."""
    with editing(directory) as lab:
        action(lab)
        lab.faults = [f for f in lab.faults if f.id != fault_id]


def helper_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m isrwatch.lab.faults", description="The lab's fault helper (started by isrwatch lab fault)."
    )
    parser.add_argument("action", choices=["end-stall", "end-slow", "start-broker"])
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--id", required=True)
    parser.add_argument("--broker", required=True, type=int)
    parser.add_argument("--seconds", type=float, default=0.0)
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.action == "start-broker":
        lab = load(args.dir)
        broker = _start_when_unregistered(args.dir, args.broker, args.id, lab.session_timeout_ms() / 1000 + 30)
        print(
            f"broker {args.broker} started again (pid {broker.pid}) after {time.monotonic() - started:.1f} s",
            flush=True,
        )
        return 0
    time.sleep(args.seconds)
    if args.action == "end-stall":
        _finish(args.dir, args.id, lambda lab: send(lab.broker(args.broker), signal.SIGCONT))
        print(f"broker {args.broker} continued (SIGCONT)", flush=True)
    else:
        # A stall may have paused the broker meanwhile, a kill stopped it: its throttle can only be removed once it
        # answers again, and a reset given up would hold it back for good (the config lives in ZooKeeper).
        wait_until(f"broker {args.broker} resuming", lambda: not paused(load(args.dir).broker(args.broker)), 600, 0.2)

        def end(lab: Lab) -> None:
            others = [f for f in lab.faults if f.kind == "slow" and f.id != args.id and alive(f.helper)]
            _unthrottle(lab, args.broker, topics_too=not others)

        def ended() -> bool:
            try:
                _finish(args.dir, args.id, end)
            except LabError as exc:
                print(f"broker {args.broker}'s replication throttle not removed yet, retrying: {exc}", flush=True)
                return False
            return True

        wait_until(f"broker {args.broker}'s replication throttle removed", ended, 600, 2)
        print(f"broker {args.broker}'s replication throttle removed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(helper_main())
