"""Drop accounting: lost on the wire vs. not sent vs. given up, and the counters' invariants."""

from __future__ import annotations

import copy
import math
import random

import pytest

from fedstrata.mqtt import Will
from fedstrata.nodes.events import Compute, Event, Publish, SetTimer, Subscribe, TimerFired
from fedstrata.sim.kernel import Connection, Simulation
from fedstrata.sim.links import Constant, Link, LogNormal
from fedstrata.sim.log import check_invariants
from tests.sim.toys import Toy, publish_at, sink, source


def ok(sim: Simulation) -> dict:
    st = sim.stats()
    assert check_invariants(st) == []
    return st


def test_offline_sender_is_not_sent_not_lost() -> None:
    # The old counters put these with the wire losses: 11 drops for 0 messages sent.
    sim = Simulation(0, links="message-retry", retry_interval=1.0, max_retries=10)
    sim.add_broker("b")
    dst = sink("dst", "t")
    sim.add_node(dst, connections=[Connection("b", Link(0.1))])
    sim.add_node(
        Toy("src", start=[Compute(flops=1e9), Publish(topic="t", payload=b"x")]),
        connections=[Connection("b", Link(0.1))],
    )
    sim.faults.availability_markov("src", 1.0, 0.0, 0.5)  # offline from t = 0.5 for good
    sim.run()
    st = ok(sim)
    assert dst.deliveries() == []
    assert st["messages"]["up"] == 0
    assert st["not_sent"] == 11 and st["not_sent_by_reason"] == {"offline": 11}
    assert st["lost"] == 0 and st["gave_up"] == 1
    assert st["dropped"] == 12 and st["dropped_by_reason"] == {"max_retries": 1, "offline": 11}


def test_total_loss_counts_every_transmission_and_gives_up() -> None:
    sim = Simulation(0, links="message-retry", retry_interval=1.0, max_retries=4)
    sim.add_broker("b")
    sim.add_node(sink("dst", "t"), connections=[Connection("b")])
    sim.add_node(
        source("src", "t", [b"a", b"b"]), connections=[Connection("b", Link(0.1, loss=1.0))]
    )
    sim.run()
    st = ok(sim)
    assert st["messages"]["up"] == 10  # 2 publishes x (1 + 4 retries), all sent, all lost
    assert st["lost"] == 10 and st["lost_by_direction"] == {"up": 10, "down": 0}
    assert st["lost_by_reason"] == {"loss": 10}
    assert st["gave_up"] == 2 and st["not_sent"] == 0
    edge = st["by_tier"]["node"]
    assert edge["lost_up"] == 10 and edge["gave_up"] == 2 and edge["dropped"] == 12


def test_receiver_side_losses_are_down_losses() -> None:
    sim = Simulation(0, links="message-retry", retry_interval=1.0, max_retries=3)
    sim.add_broker("b")
    sim.add_node(sink("dst", "t"), connections=[Connection("b", Link(0.5))], tier="edge")
    sim.faults.availability_trace("dst", [(0.2, math.inf)], online=False)  # gone after 0.2
    sim.add_node(publish_at("src", [(1.0, "t", b"x", 1)]), connections=[Connection("b")])
    sim.run()
    st = ok(sim)
    # The broker sends 1 + 3 copies down; each arrives at an offline node.
    assert st["messages"]["down"] == 4
    assert st["lost_by_direction"] == {"up": 0, "down": 4}
    assert st["lost_by_reason"] == {"offline": 4}
    assert st["by_tier"]["edge"]["lost_down"] == 4
    assert st["gave_up"] == 1


def test_colocated_losses_are_local() -> None:
    sim = Simulation(1)
    sim.add_broker("b")
    c0 = sink("c0", "x/down")
    sim.add_node(c0, connections=[Connection("b")])
    sim.add_node(source("a", "x/down", [b"1", b"2"]), connections=[Connection("b")], start_at=1)
    sim.faults.round_dropout("c0", 1.0)
    sim.run()
    st = ok(sim)
    assert st["dropped_by_reason"] == {"dropout": 2}
    assert st["lost_local"] == 2 and st["lost"] == 0 and st["messages"] == {"up": 0, "down": 0}


def test_suppressed_start_and_timer() -> None:
    sim = Simulation(0)
    sim.add_broker("b")
    sim.add_node(Toy("never"), connections=[Connection("b")])
    sim.faults.availability_trace("never", [(0.0, math.inf)], online=False)
    late = Toy("late", start=[SetTimer(name="t", delay_s=5.0)])
    sim.add_node(late, connections=[Connection("b")])
    sim.faults.availability_trace("late", [(0.0, 1.0)])  # online on [0, 1) only
    sim.run()
    st = ok(sim)
    assert st["suppressed"] == 2 and st["dropped_by_reason"] == {"offline": 2}
    assert [g[0] for g in late.got] == ["start"]


def test_crash_after_a_start_given_up_does_not_end_the_run_early() -> None:
    # "ghost" is offline for good when due to start (its start is given up), then
    # crashes: it must not be counted out twice, or the run would stop at t = 5 and
    # the keeper's timer at t = 10 would never fire.
    keeper = Toy("keeper", start=[SetTimer(name="t", delay_s=10.0)])
    sim = Simulation(0)
    sim.add_broker("b")
    sim.add_node(keeper, connections=[Connection("b")])
    sim.add_node(Toy("ghost"), connections=[Connection("b")])
    sim.faults.availability_markov("ghost", 1.0, 0.0, 1.0, start_online=False)
    sim.faults.crash("ghost", at=5.0)
    assert sim.run() == 10.0
    assert ("timer", 10.0, "t") in keeper.got
    assert sim.node_state("ghost").status.value == "offline"
    ok(sim)


def test_wills_count_as_their_nodes_publishes() -> None:
    sim = Simulation(0)
    sim.add_broker("b")
    watcher = sink("watcher", "wills/#")
    sim.add_node(watcher, connections=[Connection("b", Link(0.1))], tier="cloud")
    sim.add_node(
        Toy("n"),
        connections=[Connection("b", Link(0.1))],
        tier="edge",
        will=Will(topic="wills/n", payload=b"gone", qos=1),
    )
    sim.faults.crash("n", at=1.0)
    sim.run()
    st = ok(sim)
    assert watcher.deliveries() == [(1.1, "wills/n", b"gone")]
    assert st["publishes"] == 1 and st["by_tier"]["edge"]["publishes"] == 1


def test_check_invariants_reports_each_violation() -> None:
    sim = Simulation(0, links="message-retry", retry_interval=1.0, max_retries=2)
    sim.add_broker("b")
    sim.add_node(sink("dst", "t"), connections=[Connection("b", Link(0.1, loss=0.5))])
    sim.add_node(source("src", "t", [b"x"] * 20), connections=[Connection("b", Link(0.1))])
    sim.run()
    good = ok(sim)
    assert good["lost"] > 0

    def broken(**changes: object) -> list[str]:
        st = copy.deepcopy(good)
        for path, value in changes.items():
            node = st
            *head, last = path.split("__")
            for key in head:
                node = node[key]
            node[last] = value
        return check_invariants(st)

    assert any("lost_by_direction.down" in v for v in broken(lost_by_direction__down=10**6))
    assert any("bytes.total" in v for v in broken(bytes__total=good["bytes"]["total"] + 1))
    assert any("messages_up" in v for v in broken(messages__up=good["messages"]["up"] + 1))
    assert any("dropped" in v for v in broken(dropped=good["dropped"] + 1))
    assert any("not_sent_by_reason" in v for v in broken(not_sent_by_reason={"offline": 3}))
    assert any("non-negative int" in v for v in broken(gave_up=-1))
    assert any("non-negative int" in v for v in broken(lost=1.5))
    assert any("virtual_time" in v for v in broken(virtual_time=math.inf))
    assert any("malformed" in v for v in check_invariants({"bytes": {}}))


def _random_run(seed: int) -> Simulation:
    """A random small federation of toys with every fault the kernel has."""
    rnd = random.Random(seed)
    sim = Simulation(
        seed,
        links="message-retry",
        retry_interval=rnd.choice([0.5, 2.0]),
        max_retries=rnd.randint(0, 4),
    )
    sim.add_broker("hub", ["up/"])
    sim.add_broker("edge", ["down/"])
    ids = [f"n{i}" for i in range(rnd.randint(2, 7))]

    def react(node: Toy, ev: Event) -> list:
        if isinstance(ev, TimerFired):
            return [Publish(topic=f"up/{node.node_id}", payload=b"p" * rnd.randint(1, 300))]
        return []

    for i, nid in enumerate(ids):
        qos = rnd.choice([0, 1])
        start = [
            Subscribe(pattern="up/#", qos=qos),
            Subscribe(pattern="down/#", qos=1),
            Publish(topic=f"down/{nid}", payload=b"r", qos=1, retain=rnd.random() < 0.5),
            *[SetTimer(name=f"t{j}", delay_s=rnd.uniform(0, 20)) for j in range(3)],
        ]
        link = Link(
            LogNormal(0.05, 0.5) if rnd.random() < 0.5 else Constant(rnd.choice([0.0, 0.3])),
            loss=rnd.choice([0.0, 0.3, 1.0]),
            bandwidth_bps=rnd.choice([None, 8.0, 1e6]),
        )
        conns = [Connection("hub", link if rnd.random() < 0.8 else None)]
        if rnd.random() < 0.5:
            conns.append(Connection("edge", link))
        sim.add_node(
            Toy(nid, start=start, react=react),
            connections=conns,
            tier=rnd.choice(["edge", "fog"]),
            start_at=rnd.uniform(0, 3),
            will=Will(topic=f"up/will/{nid}", payload=b"w", qos=rnd.choice([0, 1]))
            if rnd.random() < 0.4
            else None,
        )
        wired = any(c.link is not None for c in conns)
        if wired and rnd.random() < 0.3:
            sim.faults.partition(nid, rnd.uniform(0, 5), rnd.choice([6.0, 1e9]))
        if rnd.random() < 0.3:
            sim.faults.crash(nid, rnd.uniform(0, 10), rnd.choice([None, 2.0]))
        if rnd.random() < 0.4:
            sim.faults.availability_markov(
                nid,
                rnd.choice([0.0, 0.5, 1.0]),
                rnd.choice([0.0, 0.5, 1.0]),
                rnd.choice([1e-9, 1.0]),
                start_online=rnd.random() < 0.5,
            )
        if rnd.random() < 0.3:
            sim.faults.round_dropout(nid, rnd.choice([0.5, 1.0]), topic_suffix=f"/n{i}")
    return sim


@pytest.mark.parametrize("seed", range(40))
def test_invariants_hold_under_random_faults(seed: int) -> None:
    sim = _random_run(seed)
    sim.run()
    st = ok(sim)
    assert st["lost"] <= st["messages"]["up"] + st["messages"]["down"]
    again = _random_run(seed)
    again.run()
    assert again.stats() == st  # deterministic
