"""The TCP + MQTT link model: times worked out by hand from the model's stated rules.

Every expected time below is computed in the comment next to it from the rules of
``fedstrata.sim.tcp`` (a 52-byte IPv4 + TCP header per 1448-byte segment, slow start
from 10 segments, retransmission timeout = rtt + 0.2 s doubling, keep-alive 30 s), not
by calling the model.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstrata.errors import ValidationError
from fedstrata.mqtt import publish_packet_size
from fedstrata.sim.kernel import Connection, Simulation
from fedstrata.sim.links import Constant, Link
from fedstrata.sim.log import check_invariants
from fedstrata.sim.tcp import TcpModel
from tests.sim.toys import publish_at, sink, source

KB = bytes(994)  # a 1000-byte QoS 0 PUBLISH on "t"


def _pair(dst_link: Link | None) -> tuple[Simulation, object]:
    """A broker and a QoS 1 subscriber of ``t`` connected by ``dst_link``."""
    sim = Simulation(0, record_events=True)
    sim.add_broker("b")
    dst = sink("dst", "t", qos=1)
    sim.add_node(dst, connections=[Connection("b", dst_link)])
    return sim, dst


def test_latency_plus_serialization_with_headers() -> None:
    assert publish_packet_size("t", len(KB), 0) == 1000
    sim, dst = _pair(Link(Constant(0.25), bandwidth_bps=8000))
    sim.add_node(publish_at("src", [(1.0, "t", KB, 0)]), connections=[Connection("b", None)])
    sim.run()
    # one segment: (1000 + 52) * 8 / 8000 = 1.052 s on the subscriber's link; 0.25 s latency
    ((t, _, _),) = dst.deliveries()
    assert t == pytest.approx(1.0 + 0.25 + 1.052)
    st_ = sim.stats()
    # the session's 2,600 bytes, half each way; QoS 0, one segment down, its pure ACK up
    assert st_["ip_bytes"] == {
        "up": 1300 + 52,
        "down": 1300 + 1052,
        "retransmitted": 0,
        "total": 2600 + 1104,
    }
    assert st_["link_model"] == "tcp"


def test_a_connection_sends_in_order_one_message_after_another() -> None:
    sim, dst = _pair(None)
    sim.add_node(
        source("src", "t", [KB, KB, KB], qos=0),
        connections=[Connection("b", Link(Constant(0.1), bandwidth_bps=8000))],
    )
    sim.run()
    # each message occupies the sender 1.052 s; the k-th arrives 0.1 s after it left
    times = [t for t, _, _ in dst.deliveries()]
    assert times == pytest.approx([1.052 + 0.1, 2 * 1.052 + 0.1, 3 * 1.052 + 0.1])


def test_slow_start_costs_round_trips_for_a_large_message() -> None:
    body = bytes(100_000)
    size = publish_packet_size("t", len(body), 0)
    assert math.ceil(size / 1448) == 70
    sim, dst = _pair(None)
    sim.add_node(
        source("src", "t", [body], qos=0), connections=[Connection("b", Link(Constant(0.05)))]
    )
    sim.run()
    # rtt 0.1 s, unlimited bandwidth: flights of 10, 20 then the last 40 segments:
    # two round trips before the last flight, then 0.05 s of latency
    ((t, _, _),) = dst.deliveries()
    assert t == pytest.approx(0.2 + 0.05)


def test_segment_loss_delays_but_never_loses_or_duplicates() -> None:
    sim, dst = _pair(None)
    payloads = [i.to_bytes(2, "big") for i in range(300)]
    sim.add_node(
        publish_at("src", [(float(i), "t", p, 0) for i, p in enumerate(payloads)]),
        connections=[Connection("b", Link(Constant(0.01), loss=0.3))],
    )
    sim.run()
    got = dst.deliveries()
    assert [p for _, _, p in got] == payloads  # all of them, in order, once
    st_ = sim.stats()
    assert st_["dropped"] == 0 and st_["duplicates"] == 0 and st_["retransmissions"] == 0
    assert check_invariants(st_) == []
    # each message leaves at i; rtt 0.02: a lost one-segment message waits for the
    # retransmission timeout 0.22 s, a lost retransmission 0.44 s more, ...
    # (a message may also wait for the one before it: a connection delivers in order)
    late, previous = 0, 0.0
    for i, (t, _, _) in enumerate(got):
        delay = t - i
        own = min(abs(delay - x) for x in (0.01, 0.23, 0.67, 1.55, 3.31, 6.83)) < 1e-9
        assert own or t == previous, (i, delay)
        late += delay > 0.0100001 and own
        previous = t
    assert 60 < late < 120  # about 30 % of 300


def test_outage_resends_at_the_backoff_instant_after_the_window() -> None:
    sim, dst = _pair(None)
    sim.add_node(
        publish_at("src", [(1.0, "t", b"x", 1)]),
        connections=[Connection("b", Link(Constant(0.05)))],
    )
    sim.faults.partition(["src"], 0.5, 2.0)
    sim.run()
    # rto = 0.1 + 0.2 = 0.3: resends at 1.3, 1.9, then 1.9 + 1.2 = 3.1 (after 2.0)
    assert [t for t, _, _ in dst.deliveries()] == pytest.approx([3.1 + 0.05])
    assert sim.stats()["connections_closed"] == 0


def test_a_long_outage_closes_the_session_qos1_redelivered_qos0_lost() -> None:
    sim, dst = _pair(None)
    sim.add_node(
        publish_at("src", [(1.0, "t", b"q1", 1), (1.0, "t", b"q0", 0)]),
        connections=[Connection("b", Link(Constant(0.05)))],
    )
    sim.faults.partition(["src"], 0.5, 100.0)
    sim.run()
    # silent 99 s > 45 s: closed; QoS 1 leaves after two handshakes (2 rtt = 0.2 s)
    assert dst.deliveries() == [(pytest.approx(100.0 + 0.2 + 0.05), "t", b"q1")]
    st_ = sim.stats()
    assert st_["connections_closed"] == 2
    assert st_["dropped_by_reason"] == {"outage": 1}


def test_offline_receiver_gets_qos1_when_back_and_loses_qos0() -> None:
    sim, dst = _pair(Link(Constant(0.5)))
    sim.add_node(
        publish_at("src", [(2.6, "t", b"q1", 1), (2.6, "t", b"q0", 0)]),
        connections=[Connection("b", None)],
    )
    sim.faults.availability_trace("dst", [(2.0, 5.0)], online=False)
    sim.run()
    # both reach the offline receiver's link at 3.1; the broker keeps the QoS 1 one
    # for the session and sends it again when the node is back at 5.0: 5.0 + 0.5
    assert dst.deliveries() == [(5.5, "t", b"q1")]
    assert sim.stats()["dropped_by_reason"] == {"offline": 1}


def test_retry_settings_are_refused_under_tcp() -> None:
    with pytest.raises(ValidationError, match="message-retry"):
        Simulation(0, retry_interval=1.0)
    sim = Simulation(0)
    with pytest.raises(ValidationError, match="message-retry"):
        sim.add_broker("b", max_retries=3)
    with pytest.raises(ValidationError, match="links must be one of"):
        Simulation(0, links="udp")


def test_loss_throughput_formula_caps_a_bulk_transfer() -> None:
    m = TcpModel()
    n = 1000
    nbytes = n * 1448
    # sqrt(1.5) * 1500 * 8 / (0.1 * sqrt(0.01)) = 1.4697 Mbit/s, below the 100 Mbit/s link
    cap = math.sqrt(1.5) * 1500 * 8 / (0.1 * 0.1)
    t = m.transfer(nbytes, 100e6, 0.1, 0.01)
    # slow start at the capped rate: windows 10, 20 (< 12.2 segments per rtt? no: 10 only)
    assert t > nbytes * 8 / cap * 0.99
    assert m.transfer(nbytes, 100e6, 0.1, 0.0) < t / 5


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40_000), min_size=1, max_size=12),
    latency=st.floats(0.0, 0.3),
    bw=st.one_of(st.none(), st.floats(1e4, 1e9)),
    loss=st.floats(0.0, 0.5),
    seed=st.integers(0, 2**16),
)
def test_in_order_never_faster_than_latency_plus_serialization(
    sizes: list[int], latency: float, bw: float | None, loss: float, seed: int
) -> None:
    sim = Simulation(seed)
    sim.add_broker("b")
    dst = sink("dst", "t", qos=0)
    sim.add_node(dst, connections=[Connection("b", None)])
    payloads = [i.to_bytes(2, "big") + bytes(s) for i, s in enumerate(sizes)]
    sim.add_node(
        source("src", "t", payloads, qos=1),
        connections=[Connection("b", Link(Constant(latency), bandwidth_bps=bw, loss=loss))],
    )
    sim.run()
    got = dst.deliveries()
    assert [p for _, _, p in got] == payloads
    sent_bits = 0.0
    for t, _, p in got:
        size = publish_packet_size("t", len(p), 1)
        sent_bits += (size + math.ceil(size / 1448) * 52) * 8
        floor = latency + (0.0 if bw is None else sent_bits / bw)
        assert t >= floor * (1 - 1e-9) - 1e-12
    assert check_invariants(sim.stats()) == []


def _draws(*values: float):
    it = iter(values)
    return lambda: next(it)


def test_tail_probe_timing_by_hand() -> None:
    m = TcpModel()
    # one segment sent alone, lost once: the timeout rtt + 0.2 = 0.22 s
    assert m.loss_delay(100, 0.02, 0.5, 0.0, _draws(0.1, 0.9)) == pytest.approx(0.22)
    # ... and its retransmission lost too: + 2 x 0.22
    assert m.loss_delay(100, 0.02, 0.5, 0.0, _draws(0.1, 0.1, 0.9)) == pytest.approx(0.66)
    # with another segment unacknowledged: the probe after 2 rtt + 10 ms
    got = m.loss_delay(100, 0.02, 0.5, 0.0, _draws(0.1, 0.9), alone=False)
    assert got == pytest.approx(0.05)
    # a 20-segment message not paced (segment time 0 < rtt): 2 rtt + 10 ms as well
    nbytes = 20 * 1448
    # (draws: the last segment lost, its probe through, no other segment lost)
    got = m.loss_delay(nbytes, 0.02, 0.5, 0.0, _draws(0.1, 0.9, 1e-9))
    assert got == pytest.approx(0.05)
    # paced by its bandwidth (1.2 ms per segment > rtt 1 ms): the timeout, 0.201 s
    got = m.loss_delay(nbytes, 0.001, 0.5, 0.0012, _draws(0.1, 0.9, 1e-9))
    assert got == pytest.approx(0.201)


def test_a_segment_lost_near_the_end_costs_the_repair_minus_what_follows() -> None:
    m = TcpModel()
    nbytes = 20 * 1448
    # loss 0.5, u = 0.3: 1 + log(0.3) / log(0.5) = 2.74 -> the lost segment has 2 after it;
    # repair 1.25 x 0.001 + 0.04 - 2 x 0.0012 = 0.03885 s; its resend arrives (0.9)
    got = m.loss_delay(nbytes, 0.001, 0.5, 0.0012, _draws(0.9, 0.3, 0.9))
    assert got == pytest.approx(0.00125 + 0.04 - 0.0024)
    # u small: the nearest lost segment is far from the end, the repair is hidden
    assert m.loss_delay(nbytes, 0.001, 0.5, 0.0012, _draws(0.9, 1e-6)) == 0.0


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 20_000), min_size=1, max_size=10),
    latency=st.floats(0.0, 0.3),
    bw=st.one_of(st.none(), st.floats(1e4, 1e9)),
    gaps=st.lists(st.floats(0.0, 0.5), min_size=10, max_size=10),
)
def test_the_fast_path_gives_the_general_paths_times(
    sizes: list[int], latency: float, bw: float | None, gaps: list[float]
) -> None:
    # a degradation window that never applies makes a link take the general (SLOW) path
    from fedstrata.sim.links import Degradation

    def times(link: Link) -> list[float]:
        sim, dst = _pair(link)
        t, schedule = 0.0, []
        for i, (size, gap) in enumerate(zip(sizes, gaps, strict=False)):
            t += gap
            schedule.append((t, "t", i.to_bytes(2, "big") + bytes(size), 1))
        sim.add_node(publish_at("src", schedule), connections=[Connection("b", link)])
        sim.run()
        return [d[0] for d in dst.deliveries()]

    fast = Link(Constant(latency), bandwidth_bps=bw)
    slow = fast.with_windows(Degradation(1e8, 2e8))
    assert times(fast) == times(slow)
