"""A fleet's story for the incident tests: a stalled follower, a removed broker, a new controller."""

from __future__ import annotations

from tests.support.state import append, fetch, lai

# (topic, partition) -> replicas, the first its leader. v-0 has two replicas: without one it is under min ISR.
PARTS = {("t", 0): [1, 2, 3], ("t", 1): [3, 2, 4], ("t", 2): [4, 2, 1], ("u", 0): [1, 3, 4], ("v", 0): [1, 2]}


END = 112_000


CONFIG = {"replica_lag_time_max_ms": 10_000, "min_insync_replicas": 2}


STALL = (20_000, 45_000)  # broker 2 does not fetch (its last fetch at 20 s, caught up: stuck from 30 s)


DOWN = (60_000, 80_000)  # broker 4 is down: the controller removes it at 60 s; it fetches again at 80 s


def story() -> list[dict]:
    """Every leader appends and every follower fetches, caught up, every 2 s, but broker 2 during STALL and broker 4
    during DOWN; the controller moves broker 4 out at 60 s, and a new controller (epoch 2) moves t-0's leadership to
    broker 2."""
    leaders = {k: r[0] for k, r in PARTS.items()}
    events = [lai(1000, r[0], r, r, 0, topic=t, partition=p, leader_leo=100) for (t, p), r in PARTS.items()]
    for ts in range(2000, END, 2000):
        if ts == DOWN[0]:
            for (t, p), leader, isr in ((("t", 1), 3, [2, 3]), (("t", 2), 1, [1, 2]), (("u", 0), 1, [1, 3])):
                events.append(
                    lai(
                        ts,
                        leader,
                        isr,
                        PARTS[(t, p)],
                        1,
                        topic=t,
                        partition=p,
                        partition_epoch=10,
                        leader_leo=ts // 100,
                    )
                )
                leaders[(t, p)] = leader
        if ts == 100_000:
            events.append(
                lai(
                    ts,
                    2,
                    [1, 2, 3],
                    [1, 2, 3],
                    1,
                    controller_epoch=2,
                    topic="t",
                    partition=0,
                    partition_epoch=10,
                    leader_leo=ts // 100,
                )
            )
            leaders[("t", 0)] = 2
        for (t, p), replicas in PARTS.items():
            events.append(append(ts, ts // 100, topic=t, partition=p))
            for r in replicas:
                if (
                    r == leaders[(t, p)]
                    or (r == 2 and STALL[0] < ts < STALL[1])
                    or (r == 4 and DOWN[0] <= ts < DOWN[1])
                ):
                    continue
                events.append(fetch(ts, r, ts // 100, ts // 100, topic=t, partition=p))
    return events
