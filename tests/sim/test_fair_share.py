"""A site's shared access link: max-min fair shares, times worked out by hand.

A 1000-byte QoS 0 PUBLISH is one TCP segment: 1000 + 52 header bytes = 8416 bits.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedstrata.errors import ValidationError
from fedstrata.sim.fair_share import max_min_rates
from fedstrata.sim.kernel import Connection, Simulation
from fedstrata.sim.links import Constant, Link
from tests.sim.toys import publish_at, sink, source

KB = bytes(994)  # a 1000-byte QoS 0 PUBLISH on "t"
BITS = 8416


def test_water_filling_by_hand() -> None:
    assert max_min_rates(10.0, [2.0, 8.0, 8.0]) == [2.0, 4.0, 4.0]
    assert max_min_rates(10.0, [20.0, 20.0]) == [5.0, 5.0]
    assert max_min_rates(10.0, [1.0, 2.0]) == [1.0, 2.0]  # not saturated: caps


@given(
    capacity=st.floats(1.0, 1e9),
    caps=st.lists(st.one_of(st.floats(1e-3, 1e10), st.just(float("inf"))), min_size=1),
)
def test_water_filling_is_feasible_and_max_min(capacity: float, caps: list[float]) -> None:
    rates = max_min_rates(capacity, caps)
    assert sum(rates) <= capacity * (1 + 1e-9)
    assert all(0 <= r <= c * (1 + 1e-12) for r, c in zip(rates, caps, strict=True))
    top = max(rates)
    # a flow below its cap gets the largest rate: no one can gain without taking from a smaller
    assert all(
        r >= top * (1 - 1e-9) for r, c in zip(rates, caps, strict=True) if r < c * (1 - 1e-9)
    )


def _site(access_bps: float, *links: Link) -> tuple[Simulation, object]:
    sim = Simulation(0)
    sim.add_broker("b", access_bps=access_bps)
    dst = sink("dst", "t", qos=0)
    sim.add_node(dst, connections=[Connection("b", None)])  # co-located: off the access link
    for i, link in enumerate(links):
        sim.add_node(publish_at(f"c{i}", [(1.0, "t", KB, 0)]), connections=[Connection("b", link)])
    return sim, dst


def test_equal_flows_share_the_site_and_end_together() -> None:
    sim, dst = _site(8000.0, Link(0.0), Link(0.0))
    sim.run()
    # 2 x 8416 bits through 8000 bit/s, at 4000 bit/s each: both end at 1 + 2.104
    assert [t for t, _, _ in dst.deliveries()] == pytest.approx([1 + 2.104, 1 + 2.104])


def test_a_flow_capped_by_its_own_link_leaves_the_rest_to_the_other() -> None:
    sim, dst = _site(8000.0, Link(Constant(0.0), bandwidth_bps=2000), Link(0.0))
    sim.run()
    # c0 at its own 2000 bit/s (4.208 s), c1 at the remaining 6000 bit/s (1.40267 s)
    times = sorted(t for t, _, _ in dst.deliveries())
    assert times == pytest.approx([1 + BITS / 6000, 1 + BITS / 2000])


def test_latency_comes_after_the_shared_transfer() -> None:
    sim, dst = _site(8000.0, Link(0.25), Link(0.25), Link(0.25))
    sim.run()
    # three flows at 8000/3 bit/s: 3 x 1.052 s, then 0.25 s of latency
    assert [t for t, _, _ in dst.deliveries()] == pytest.approx([1 + 3 * 1.052 + 0.25] * 3)


def test_a_connection_sends_its_messages_one_after_another() -> None:
    sim = Simulation(0)
    sim.add_broker("b", access_bps=8000.0)
    dst = sink("dst", "t", qos=0)
    sim.add_node(dst, connections=[Connection("b", None)])
    sim.add_node(source("c", "t", [KB, KB], qos=0), connections=[Connection("b", Link(0.0))])
    sim.run()
    assert [t for t, _, _ in dst.deliveries()] == pytest.approx([1.052, 2.104])


def test_access_needs_the_tcp_model() -> None:
    sim = Simulation(0, links="message-retry")
    with pytest.raises(ValidationError, match="links='tcp'"):
        sim.add_broker("b", access_bps=1e6)
