"""Fault injection: partitions, degradations, availability, dropout, crash and restart."""

from __future__ import annotations

import math

import pytest

from fedstrata.errors import ValidationError
from fedstrata.nodes.events import Compute, Event, Publish, SetTimer, Subscribe
from fedstrata.sim.faults import TraceAvailability
from fedstrata.sim.kernel import Connection, Simulation
from fedstrata.sim.links import Constant, Link
from tests.sim.toys import Toy, publish_at, sink, source


def evs(sim: Simulation, ev: str, **match: object) -> list[dict]:
    return [e for e in sim.events if e["ev"] == ev and all(e.get(k) == v for k, v in match.items())]


def test_partition_delays_qos1_to_just_after_the_window() -> None:
    sim = Simulation(0, links="message-retry", record_events=True, retry_interval=1.0)
    sim.add_broker("b")
    dst = sink("dst", "t", "t0")
    sim.add_node(dst, connections=[Connection("b")])
    sim.add_node(
        publish_at("c", [(2.0, "t", b"q1", 1), (2.0, "t0", b"q0", 0)]),
        connections=[Connection("b", Link(Constant(0.1)))],
    )
    sim.faults.partition("c", 1.0, 4.0)
    sim.run()
    # QoS 1: sent at 2 and 3 inside the window (lost), at 4 the window is over.
    assert dst.deliveries() == [(4.1, "t", b"q1")]
    assert [(e["t"], e["reason"], e["qos"]) for e in evs(sim, "drop")] == [
        (2.0, "outage", 1),
        (2.0, "outage", 0),  # QoS 0: gone for good
        (3.0, "outage", 1),
    ]
    assert [(e["t"], e["dup"]) for e in evs(sim, "send", src="c")] == [
        (2.0, False),
        (2.0, False),
        (3.0, True),
        (4.0, True),
    ]


def test_partition_also_cuts_the_downlink() -> None:
    sim = Simulation(0, links="message-retry", record_events=True, retry_interval=1.5)
    sim.add_broker("b")
    dst = sink("dst", "t")
    sim.add_node(dst, connections=[Connection("b", Link(0.2))])
    sim.add_node(source("src", "t", [b"x"]), connections=[Connection("b")], start_at=1.0)
    sim.faults.partition(["dst"], 0.5, 2.0)
    sim.run()
    assert dst.deliveries() == [(2.7, "t", b"x")]  # broker retries at 1.0 + 1.5


def test_degradation_window_exact() -> None:
    sim = Simulation(0, links="message-retry")
    sim.add_broker("b")
    dst = sink("dst", "t", qos=0)
    sim.add_node(dst, connections=[Connection("b")])
    kb = bytes(994)  # a 1000-byte QoS 0 PUBLISH on "t": 1.0 s at 8000 bit/s
    sim.add_node(
        publish_at("c", [(1.0, "t", kb, 0), (5.0, "t", kb, 0)]),
        connections=[Connection("b", Link(Constant(0.25), bandwidth_bps=8000))],
    )
    sim.faults.degrade("c", 0.5, 2.0, latency_factor=2.0, extra_latency=0.5, bandwidth_factor=0.5)
    sim.run()
    # In the window: 0.25 * 2 + 0.5 + 1000 * 8 / 4000; after it: 0.25 + 1.0.
    assert dst.deliveries() == [(1.0 + 1.0 + 2.0, "t", kb), (6.25, "t", kb)]


def test_offline_receiver_drops_and_qos1_retries_after() -> None:
    sim = Simulation(0, links="message-retry", record_events=True, retry_interval=1.0)
    sim.add_broker("b")
    dst = Toy("dst", start=[Subscribe(pattern="t"), SetTimer(name="tick", delay_s=3.2)])
    sim.add_node(dst, connections=[Connection("b", Link(Constant(0.5)))])
    sim.faults.availability_trace("dst", [(2.0, 5.0)], online=False)
    sim.add_node(publish_at("src", [(3.0, "t", b"x", 1)]), connections=[Connection("b")])
    sim.run()
    assert [(e["t"], e["reason"]) for e in evs(sim, "drop")] == [
        (3.5, "offline"),
        (4.5, "offline"),
    ]
    assert dst.deliveries() == [(5.5, "t", b"x")]
    assert ("timer", 5.0, "tick") in dst.got  # due at 3.2, held until the node is back


def test_offline_sender_publishes_are_dropped() -> None:
    sim = Simulation(0, links="message-retry", record_events=True, retry_interval=1.0)
    sim.add_broker("b")
    dst = sink("dst", "t", qos=0)
    sim.add_node(dst, connections=[Connection("b")])
    sim.add_node(
        Toy(
            "src", start=[Publish(topic="t", payload=b"0", qos=0), Publish(topic="t", payload=b"1")]
        ),
        connections=[Connection("b")],
        start_at=1.0,
    )
    sim.faults.availability_trace("src", [(0.0, 0.5), (2.5, math.inf)])
    sim.run()
    # Started waited for the node to come back at 2.5.
    assert dst.deliveries() == [(2.5, "t", b"0"), (2.5, "t", b"1")]
    # A publish made while offline (after a Compute) is dropped at the source;
    # QoS 1 retries continue and get through once the node is back.
    sim2 = Simulation(0, links="message-retry", record_events=True, retry_interval=1.0)
    sim2.add_broker("b")
    dst2 = sink("dst", "t")
    sim2.add_node(dst2, connections=[Connection("b")])
    sim2.add_node(
        Toy("src", start=[Compute(flops=1e9), Publish(topic="t", payload=b"1")]),
        connections=[Connection("b", Link(0.25))],
        speed_flops=1e9,
    )
    sim2.faults.availability_trace("src", [(0.5, 2.5)], online=False)
    sim2.run()
    assert [(e["t"], e["reason"], e["dup"]) for e in evs(sim2, "drop")] == [
        (1.0, "offline", False),
        (2.0, "offline", True),
    ]
    assert dst2.deliveries() == [(3.25, "t", b"1")]
    assert sim2.stats()["bytes"]["up"] == evs(sim2, "send", src="src")[0]["bytes"]  # one sent


def test_round_dropout_suppresses_down_deliveries_only() -> None:
    sim = Simulation(1, record_events=True)
    sim.add_broker("b")
    clients = [sink(f"c{i}", "fs/r/fog/g/down", "fs/r/fog/g/other") for i in range(200)]
    for c in clients:
        sim.add_node(c, connections=[Connection("b", Link(0.01))])
    sim.add_node(
        source("agg", "fs/r/fog/g/down", [b"round-1"]), connections=[Connection("b")], start_at=1.0
    )
    sim.add_node(
        source("oth", "fs/r/fog/g/other", [b"x"]), connections=[Connection("b")], start_at=1.0
    )
    sim.faults.round_dropout([c.node_id for c in clients], 0.25)
    sim.run()
    got_down = sum(1 for c in clients if any(d[1].endswith("/down") for d in c.deliveries()))
    got_other = sum(1 for c in clients if any(d[1].endswith("/other") for d in c.deliveries()))
    dropped = evs(sim, "drop", reason="dropout")
    assert got_other == 200
    assert got_down + len(dropped) == 200
    assert 25 < len(dropped) < 80
    assert {e["topic"] for e in dropped} == {"fs/r/fog/g/down"}
    all_drop = Simulation(1)
    all_drop.add_broker("b")
    c0 = sink("c0", "x/down")
    all_drop.add_node(c0, connections=[Connection("b")])
    all_drop.add_node(
        source("a", "x/down", [b"1", b"2"]), connections=[Connection("b")], start_at=1
    )
    all_drop.faults.round_dropout("c0", 1.0)
    all_drop.run()
    assert c0.deliveries() == []
    assert all_drop.stats()["dropped_by_reason"] == {"dropout": 2}


def test_crash_restart_with_factory() -> None:
    made: list[Toy] = []

    def factory() -> Toy:
        node = sink("n", "t")
        made.append(node)
        return node

    first = sink("n", "t")
    sim = Simulation(0, record_events=True)
    sim.add_broker("b")
    sim.add_node(first, connections=[Connection("b", Link(0.5))])
    sim.add_node(
        publish_at("src", [(1.0, "t", b"a", 1), (4.0, "t", b"b", 1)]), connections=[Connection("b")]
    )
    sim.faults.crash("n", at=1.2, restart_after=2.0, factory=factory)
    sim.run()
    assert first.deliveries() == []  # "a" was in flight when it crashed
    assert len(made) == 1
    assert made[0].got[0] == ("start", 3.2, None)
    assert made[0].deliveries() == [(4.5, "t", b"b")]
    assert [e["ev"] for e in sim.events if e["ev"] in ("crash", "restart")] == ["crash", "restart"]
    assert sim.node("n") is made[0]
    assert evs(sim, "drop", reason="crashed")[0]["t"] == 1.5


def test_crash_restart_without_factory_keeps_the_object() -> None:
    node = Toy("n", start=[Subscribe(pattern="t")])
    sim = Simulation(0)
    sim.add_broker("b")
    sim.add_node(node, connections=[Connection("b")])
    sim.faults.crash("n", at=1.0, restart_after=1.0)
    sim.run()
    assert [g[:2] for g in node.got] == [("start", 0.0), ("start", 2.0)]


def test_crash_cancels_timers_and_compute() -> None:
    def react(node: Toy, ev: Event) -> list:
        return []

    node = Toy("n", start=[SetTimer(name="late", delay_s=5.0)], react=react)
    sim = Simulation(0)
    sim.add_broker("b")
    sim.add_node(node, connections=[Connection("b")])
    sim.faults.crash("n", at=1.0)
    assert sim.run() == 1.0
    assert [g[0] for g in node.got] == ["start"]


def test_crash_factory_must_keep_the_id() -> None:
    sim = Simulation(0)
    sim.add_broker("b")
    sim.add_node(Toy("n"), connections=[Connection("b")])
    sim.faults.crash("n", at=1.0, restart_after=1.0, factory=lambda: Toy("other"))
    with pytest.raises(ValidationError, match="returned a node with id"):
        sim.run()


def test_fault_validation() -> None:
    sim = Simulation(0)
    sim.add_broker("b")
    sim.add_node(Toy("n"), connections=[Connection("b")])
    with pytest.raises(ValidationError):
        sim.faults.partition("n", 0, 1)  # co-located only: no link
    with pytest.raises(ValidationError):
        sim.faults.crash("nobody", 1.0)
    with pytest.raises(ValidationError):
        sim.faults.crash("n", -1.0)
    with pytest.raises(ValidationError):
        sim.faults.crash("n", 1.0, restart_after=0)
    with pytest.raises(ValidationError):
        sim.faults.round_dropout("n", 1.5)
    with pytest.raises(ValidationError):
        sim.faults.availability_markov("n", 0.1, -0.1, 1.0)
    with pytest.raises(ValidationError):
        sim.faults.availability_markov("n", 0.1, 0.1, 0.0)
    with pytest.raises(ValidationError):
        sim.faults.availability_trace("n", [(2.0, 1.0)])
    with pytest.raises(ValidationError):
        sim.faults.availability_trace("n", [(0.0, 2.0), (1.0, 3.0)])


def test_trace_availability() -> None:
    on = TraceAvailability([(5.0, 7.0), (1.0, 2.0)])
    assert [on.is_online(t) for t in (0.0, 1.0, 1.5, 2.0, 5.0, 7.0)] == [
        False,
        True,
        True,
        False,
        True,
        False,
    ]
    assert on.next_online(0.0) == 1.0
    assert on.next_online(3.0) == 5.0
    assert on.next_online(8.0) is None
    off = TraceAvailability([(1.0, 2.0)], online=False)
    assert off.is_online(0.5) and not off.is_online(1.0) and off.is_online(2.0)
    assert off.next_online(1.5) == 2.0
