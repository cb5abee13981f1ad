"""`isrwatch lab fault KIND`: real faults on the lab's brokers. Each returns at once and says what it did.

A fault that ends by itself (`--seconds`) or finishes later (a restart waits for ZooKeeper to drop the
killed broker's registration) leaves a detached helper, `python -m isrwatch.lab.faults`, recorded in
lab.json so that `isrwatch lab down` stops it too.
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

from .cluster import (
    CHROOT,
    Broker,
    Fault,
    Lab,
    LabError,
    Process,
    alive,
    controller,
    editing,
    launch,
    load,
    partition_states,
    paused,
    registered_brokers,
    send,
    wait_gone,
    wait_until,
    zookeeper,
)

KINDS = ("stall", "slow", "kill", "restart", "elect", "controller-failover")
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
    if not alive(lab.zookeeper_process):
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
        stall = next((f for f in lab.faults if f.kind == "stall" and f.broker == broker_id and f.ends_ms), None)
        why = (
            f"paused by a stall until {_clock(stall.ends_ms)}"
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


def stall(directory: Path, broker_id: int, seconds: float) -> str:
    """SIGSTOP the broker now, SIGCONT after `seconds`: its replica fetchers (and everything else) stop."""
    if seconds <= 0:
        raise LabError(f"--seconds {seconds:g}: must be > 0")
    with editing(directory) as lab:
        broker = _answering(lab, broker_id, "stall")
        send(broker, signal.SIGSTOP)
        ends = int((time.time() + seconds) * 1000)
        _helper(lab, "stall", broker_id, ends, "end-stall", "--broker", str(broker_id), "--seconds", str(seconds))
    said = (
        f"broker {broker_id} (pid {broker.pid}) stopped with SIGSTOP; SIGCONT at {_clock(ends)} "
        f"(in {seconds:g} s). Its followers stop fetching: each leader drops it from the ISR once it is "
        f"replica.lag.time.max.ms ({lab.replica_lag_time_max_ms} ms) behind, at its next isr-expiration run."
    )
    warning = stall_warning(seconds, lab.zookeeper_session_timeout_ms)
    return said + (f"\n{warning}" if warning else "")


def stall_warning(seconds: float, session_timeout_ms: int) -> str | None:
    """A stall that outlasts the broker's ZooKeeper session is a crash: the session expires and the controller acts.

    The broker's ZooKeeper client pings every third of the session timeout when idle, so the server may
    have heard nothing for a third of it already when the stall starts: only stalls up to two thirds of
    the timeout (12 s of Kafka's default 18 s) are sure to stay stalls.
    """
    if seconds * 1000 <= session_timeout_ms * 2 / 3:
        return None
    return (
        f"warning: {seconds:g} s is more than 2/3 of zookeeper.session.timeout.ms ({session_timeout_ms} ms): "
        "the broker's ZooKeeper session may expire (its client pings every third of the timeout), and then "
        "the controller treats it as failed: a crash, not a stall"
    )


def _throttle(lab: Lab, broker_id: int, rate: int) -> None:
    """Write the throttle: the topics' first. A broker applies dynamic configs as ZooKeeper's change notifications
    reach it, in the order they were written, so once it shows its rate (`_applied`) it throttles the topics too."""
    from kafka.admin import ConfigResource, ConfigResourceType

    with admin(lab.bootstrap_servers) as client:
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
    with admin(lab.bootstrap_servers) as client:
        wait_until(
            f"broker {broker_id} applying {THROTTLED_RATE}={rate}",
            lambda: time.time() * 1000 >= ends_ms or _broker_configs(client, broker_id, [THROTTLED_RATE]) == applied,
            30,
            0.2,
        )


def broker_configs(lab: Lab, broker_id: int, names: list[str]) -> dict[str, str | None]:
    """The broker's values of its dynamic configs as it applies them (None: not set)."""
    with admin(lab.bootstrap_servers) as client:
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
    with admin(lab.bootstrap_servers) as client:
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
    """SIGKILL the broker; its ZooKeeper session expires later, and then the controller acts."""
    with editing(directory) as lab:
        broker = _running(lab, broker_id)
        with zookeeper(lab.zookeeper) as zk:
            active, epoch = controller(zk)
        send(broker, signal.SIGKILL)
        wait_gone([broker], 10)
    role = f" (the active controller, epoch {epoch})" if active == broker_id else ""
    return (
        f"broker {broker_id}{role} (pid {broker.pid}) killed with SIGKILL. ZooKeeper expires its session "
        f"within zookeeper.session.timeout.ms ({lab.zookeeper_session_timeout_ms} ms); then the controller "
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

        with zookeeper(lab.zookeeper) as zk:
            wait_until(f"ZooKeeper dropping broker {broker_id}'s registration", gone_or_restarted, timeout, 0.2)
        with editing(directory) as lab:
            broker = lab.broker(broker_id)
            if not alive(broker):
                launch(broker)
    finally:
        with editing(directory) as lab:
            lab.faults = [f for f in lab.faults if f.id != fault_id]
    return broker


def restart(directory: Path, broker_id: int) -> str:
    """SIGKILL the broker if it runs, then start it afresh on the same log directory (after its session expired)."""
    with editing(directory) as lab:
        broker = _up(lab).broker(broker_id)
        was = f"killed (pid {broker.pid}) with SIGKILL" if send(broker, signal.SIGKILL) else "was not running"
        wait_gone([broker], 10)
        with zookeeper(lab.zookeeper) as zk:
            registered = broker_id in registered_brokers(zk, CHROOT)
        if registered:
            _helper(lab, "restart", broker_id, None, "start-broker", "--broker", str(broker_id))
    if registered:
        return (
            f"broker {broker_id} {was}; it starts again on {broker.log_dir} as soon as ZooKeeper expires "
            f"its old session (within {lab.zookeeper_session_timeout_ms} ms): until then its registration "
            "stands and a new broker with its id cannot register"
        )
    broker = _start_when_unregistered(directory, broker_id, None, 0)
    return f"broker {broker_id} {was}; started again (pid {broker.pid}) on {broker.log_dir}"


def elect(directory: Path) -> str:
    """Run a preferred leader election over every partition and say which leaders moved."""
    from kafka.errors import for_code

    lab = _up(load(directory))
    with zookeeper(lab.zookeeper) as zk:
        before = partition_states(zk, list(lab.topics))
    with admin(lab.bootstrap_servers) as client:
        response = client.elect_leaders(0, None, raise_errors=False)
    failed = []
    for result in response.replica_election_results:
        for p in result.partition_result:
            error = for_code(p.error_code)
            if p.error_code and error.__name__ != "ElectionNotNeededError":
                failed.append(f"{result.topic}-{p.partition_id}: {error.__name__}")
    with zookeeper(lab.zookeeper) as zk:
        after = partition_states(zk, list(lab.topics))
    moved = [
        f"{t}-{p} {before[(t, p)].leader}->{s.leader}"
        for (t, p), s in sorted(after.items())
        if (t, p) in before and before[(t, p)].leader != s.leader
    ]
    said = f"preferred leader election: {len(moved)} lab partitions moved to their preferred leader" + (
        f" ({', '.join(moved)})" if moved else " (every leader already was the preferred one)"
    )
    return said + (f"; not elected: {', '.join(failed)}" if failed else "")


def controller_failover(directory: Path) -> str:
    """Kill the active controller (SIGKILL) and start it again: another broker takes over with a new epoch."""
    lab = _up(load(directory))
    with zookeeper(lab.zookeeper) as zk:
        active, epoch = controller(zk)
    if active is None:
        raise LabError("there is no active controller right now (an election is under way): try again")
    said = restart(directory, active)
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
        broker = _start_when_unregistered(args.dir, args.broker, args.id, lab.zookeeper_session_timeout_ms / 1000 + 30)
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
