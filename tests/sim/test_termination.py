"""Runs end under every fault the kernel models, however extreme (toy nodes)."""

from __future__ import annotations

import math
import time

from fedstrata.nodes.events import Event, Publish, SetTimer, Subscribe, TimerFired
from fedstrata.sim.kernel import Connection, Simulation
from fedstrata.sim.links import Link
from fedstrata.sim.log import check_invariants
from tests.sim.toys import Toy, sink


def ticker(node_id: str, every: float, *, qos: int = 1) -> Toy:
    """Publishes on ``tick`` and re-arms its timer forever: only faults can stop it."""

    def react(node: Toy, ev: Event) -> list:
        if isinstance(ev, TimerFired):
            return [Publish(topic="tick", payload=b"x", qos=qos), SetTimer(name="t", delay_s=every)]
        return []

    return Toy(
        node_id, start=[Subscribe(pattern="tick"), SetTimer(name="t", delay_s=every)], react=react
    )


def test_a_node_offline_for_good_neither_keeps_the_run_alive_nor_is_rescheduled() -> None:
    sim = Simulation(0, links="message-retry", retry_interval=1.0, max_retries=3)
    sim.add_broker("b")
    sim.add_node(ticker("tick", 0.5), connections=[Connection("b", Link(0.01))])
    sim.faults.availability_markov("tick", 1.0, 0.0, 1e-9)  # offline from 1e-9 s on
    t0 = time.perf_counter()
    assert sim.run() == 0.5  # its first timer is due offline: dropped, nothing is left
    assert time.perf_counter() - t0 < 1.0
    st = sim.stats()
    assert st["suppressed"] == 1 and check_invariants(st) == []


def test_tiny_markov_step_with_a_busy_node_ends_fast() -> None:
    # Step 1e-9 s with p = 0.5 each way: ~1e13 state changes over the run; the old toggle
    # list grew until MemoryError. The ticker is stopped by a crash at t = 10,000 s.
    sim = Simulation(0, links="message-retry", retry_interval=1.0, max_retries=2)
    sim.add_broker("b")
    dst = sink("dst", "tick")
    sim.add_node(dst, connections=[Connection("b", Link(0.01))])
    sim.add_node(ticker("tick", 1.0), connections=[Connection("b", Link(0.01))])
    for node in ("tick", "dst"):
        sim.faults.availability_markov(node, 0.5, 0.5, 1e-9)
    sim.faults.crash("tick", at=10_000.0)
    t0 = time.perf_counter()
    end = sim.run()
    assert time.perf_counter() - t0 < 10.0
    assert 10_000.0 <= end < 10_100.0
    st = sim.stats()
    assert check_invariants(st) == []
    assert 2_000 < len(dst.deliveries()) < 9_000  # about half the ticks and half the sends


def test_extreme_links_end() -> None:
    # Total loss, a partition "forever", 1e6 s latency and 1 bit/s: every retry loop is
    # bounded, so the run ends (after days of virtual time).
    sim = Simulation(0, links="message-retry", retry_interval=5.0, max_retries=10)
    sim.add_broker("b")
    sim.add_node(sink("dst", "t"), connections=[Connection("b", Link(1e6, bandwidth_bps=1.0))])
    sim.add_node(
        Toy("lossy", start=[Publish(topic="t", payload=bytes(100))]),
        connections=[Connection("b", Link(0.0, loss=1.0))],
    )
    sim.add_node(
        Toy("cut", start=[Publish(topic="t", payload=b"y")]),
        connections=[Connection("b", Link(0.0))],
    )
    sim.faults.partition("cut", 0.0, 1e12)
    sim.add_node(
        Toy("slow", start=[Publish(topic="t", payload=bytes(1000))]),
        connections=[Connection("b", Link(1e6, bandwidth_bps=1.0))],
    )
    end = sim.run()
    assert math.isfinite(end) and end > 2e6
    st = sim.stats()
    assert check_invariants(st) == []
    assert st["gave_up"] >= 2  # lossy and cut gave up after max_retries


def test_a_root_like_node_crashing_for_good_ends_the_run() -> None:
    sim = Simulation(0, links="message-retry", retry_interval=1.0, max_retries=3)
    sim.add_broker("b")
    root = ticker("root", 0.1)
    sim.add_node(root, connections=[Connection("b")])
    for i in range(3):
        sim.add_node(sink(f"c{i}", "tick"), connections=[Connection("b", Link(0.05, loss=0.5))])
    sim.faults.crash("root", at=2.0)
    end = sim.run()
    assert 2.0 <= end < 10.0  # in-flight copies and bounded retries drain, then it ends
    assert check_invariants(sim.stats()) == []
