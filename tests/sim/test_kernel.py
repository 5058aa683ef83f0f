"""The simulation kernel with toy nodes: exact virtual times where the model is deterministic."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from fedstrata.errors import NodeProtocolError, ValidationError
from fedstrata.mqtt import Will, publish_packet_size
from fedstrata.nodes.events import (
    CancelTimer,
    Compute,
    Delivered,
    Event,
    Finished,
    Publish,
    Record,
    SetTimer,
    Subscribe,
    TimerFired,
)
from fedstrata.sim.kernel import Connection, Simulation
from fedstrata.sim.links import Constant, Link, LogNormal
from tests.sim.toys import Toy, publish_at, sink, source

# A 1000-byte QoS 0 PUBLISH on topic "t": 1 + 2 (Remaining Length 997) + 2 + 1 + 994.
KB_PAYLOAD = bytes(994)
assert publish_packet_size("t", len(KB_PAYLOAD), 0) == 1000


def evs(sim: Simulation, ev: str, **match: object) -> list[dict]:
    return [e for e in sim.events if e["ev"] == ev and all(e.get(k) == v for k, v in match.items())]


def test_exact_times_latency_plus_serialization() -> None:
    sim = Simulation(0, links="message-retry", record_events=True)
    sim.add_broker("b")
    dst = sink("dst", "t", qos=0)
    sim.add_node(dst, connections=[Connection("b", Link(Constant(0.25), bandwidth_bps=8000))])
    src = source("src", "t", [KB_PAYLOAD], qos=0)
    sim.add_node(
        src, connections=[Connection("b", Link(Constant(0.5), bandwidth_bps=8000))], start_at=1.0
    )
    sim.run()
    # up: 0.5 s + 1000 B * 8 / 8000 bit/s = 1.5 s; down: 0.25 s + 1.0 s.
    assert dst.deliveries() == [(3.75, "t", KB_PAYLOAD)]
    sends = evs(sim, "send")
    assert [(e["t"], e["src"], e["dst"], e["bytes"]) for e in sends] == [
        (1.0, "src", "b", 1000),
        (2.5, "b", "dst", 1000),
    ]
    assert evs(sim, "deliver")[0]["t"] == 3.75
    assert sim.now == 3.75
    st = sim.stats()
    assert st["bytes"] == {"up": 1000, "down": 1000, "total": 2000}
    assert st["ack_bytes"] == {"up": 0, "down": 0}  # QoS 0: no PUBACK


def test_colocated_is_instant_and_not_wire_bytes() -> None:
    sim = Simulation(0, record_events=True)
    sim.add_broker("b")
    dst = sink("dst", "t")
    sim.add_node(dst, connections=[Connection("b")])
    sim.add_node(source("src", "t", [b"x"]), connections=[Connection("b")], start_at=2.0)
    sim.run()
    assert dst.deliveries() == [(2.0, "t", b"x")]
    assert sim.stats()["bytes"]["total"] == 0
    assert {e["wire"] for e in evs(sim, "send")} == {False}


def test_routing_longest_prefix_then_first_connection() -> None:
    sim = Simulation(0, record_events=True)
    sim.add_broker("cloud", ["fs/r/"])
    sim.add_broker("fog", ["fs/r/fog/f1/"])
    at_cloud = sink("at_cloud", "#")
    at_fog = sink("at_fog", "#")
    sim.add_node(at_cloud, connections=[Connection("cloud")])
    sim.add_node(at_fog, connections=[Connection("fog")])
    pub = source("pub", "unused", [])
    pub.start = [
        Publish(topic="fs/r/fog/f1/up", payload=b"1"),
        Publish(topic="fs/r/cloud/root/up", payload=b"2"),
        Publish(topic="elsewhere", payload=b"3"),
    ]
    sim.add_node(
        pub,
        connections=[Connection("cloud", Link(0.1)), Connection("fog", Link(0.2))],
        start_at=1.0,
    )
    sim.run()
    assert at_fog.deliveries() == [(1.2, "fs/r/fog/f1/up", b"1")]
    assert [d[1:] for d in at_cloud.deliveries()] == [
        ("fs/r/cloud/root/up", b"2"),
        ("elsewhere", b"3"),  # no broker serves it: the first connection
    ]
    assert {(e["topic"], e["dst"]) for e in evs(sim, "send", src="pub")} == {
        ("fs/r/fog/f1/up", "fog"),
        ("fs/r/cloud/root/up", "cloud"),
        ("elsewhere", "cloud"),
    }


def test_subscriptions_route_by_prefix_too() -> None:
    sim = Simulation(0)
    sim.add_broker("cloud", ["fs/r/cloud/"])
    sim.add_broker("fog", ["fs/r/fog/"])
    both = sink("both", "fs/r/cloud/x", "fs/r/fog/y")
    sim.add_node(both, connections=[Connection("fog"), Connection("cloud")])
    sim.run()
    assert sim.brokers["cloud"].subscriptions.filters(sim.node_state("both").ports[1]) == {
        "fs/r/cloud/x": 1
    }
    assert list(sim.brokers["fog"].subscriptions.filters(sim.node_state("both").ports[0])) == [
        "fs/r/fog/y"
    ]


def test_qos0_loss_is_final() -> None:
    sim = Simulation(3, links="message-retry", record_events=True)
    sim.add_broker("b")
    dst = sink("dst", "t", qos=0)
    sim.add_node(dst, connections=[Connection("b")])
    payloads = [i.to_bytes(2, "big") for i in range(300)]
    sim.add_node(
        source("src", "t", payloads, qos=0), connections=[Connection("b", Link(0.01, loss=0.3))]
    )
    sim.run()
    st = sim.stats()
    got = [d[2] for d in dst.deliveries()]
    assert st["dropped_by_reason"] == {"loss": 300 - len(got)}
    assert 150 < len(got) < 260
    assert len(set(got)) == len(got)
    assert st["retransmissions"] == 0
    assert len(evs(sim, "drop", reason="loss")) == 300 - len(got)
    assert st["bytes"]["up"] == 300 * publish_packet_size("t", 2, 0)  # lost ones were sent too


def test_qos1_gets_everything_through_loss_with_duplicates() -> None:
    sim = Simulation(
        5, links="message-retry", record_events=True, retry_interval=1.0, max_retries=100
    )
    sim.add_broker("b")
    dst = sink("dst", "t")
    sim.add_node(dst, connections=[Connection("b", Link(LogNormal(0.05, 0.5), loss=0.3))])
    payloads = [i.to_bytes(2, "big") for i in range(200)]
    sim.add_node(source("src", "t", payloads), connections=[Connection("b", Link(0.02, loss=0.3))])
    sim.run()
    st = sim.stats()
    got = Counter(d[2] for d in dst.deliveries())
    assert set(got) == set(payloads)  # at least once
    assert st["delivered"] == 200
    assert st["duplicates"] == sum(got.values()) - 200 > 0
    assert len(evs(sim, "duplicate", dst="dst")) == st["duplicates"]
    assert st["retransmissions"] > 0
    assert st["retransmissions"] == len([e for e in evs(sim, "send") if e["dup"]])
    assert st["acks_lost"] > 0
    assert "max_retries" not in st["dropped_by_reason"]


def test_lost_puback_causes_exactly_one_duplicate() -> None:
    sim = Simulation(0, links="message-retry", record_events=True, retry_interval=2.0)
    sim.add_broker("b")
    dst = sink("dst", "t")
    sim.add_node(dst, connections=[Connection("b", Link(Constant(1.0)))])
    sim.add_node(source("src", "t", [b"m"]), connections=[Connection("b")], start_at=0.5)
    # The PUBLISH leaves the broker at 0.5 and arrives at 1.5; the PUBACK is sent at 1.5,
    # inside the outage, and lost. The broker retransmits at 0.5 + 2.0 with DUP set.
    sim.faults.partition("dst", 1.2, 2.0)
    sim.run()
    assert dst.deliveries() == [(1.5, "t", b"m"), (3.5, "t", b"m")]
    st = sim.stats()
    assert (st["delivered"], st["duplicates"], st["retransmissions"], st["acks_lost"]) == (
        1,
        1,
        1,
        1,
    )
    assert [(e["t"], e["dup"]) for e in evs(sim, "send", dst="dst")] == [(0.5, False), (2.5, True)]
    assert [e["t"] for e in evs(sim, "duplicate", dst="dst")] == [3.5]


def test_qos1_broker_duplicate_forwarded_again() -> None:
    # The publisher's PUBACK is lost: the broker gets the PUBLISH twice and (QoS 1,
    # §4.3.2) forwards it twice; the subscriber's second copy counts as a duplicate.
    sim = Simulation(0, links="message-retry", record_events=True, retry_interval=1.0)
    sim.add_broker("b")
    dst = sink("dst", "t")
    sim.add_node(dst, connections=[Connection("b")])
    sim.add_node(source("src", "t", [b"m"]), connections=[Connection("b", Link(0.4))])
    sim.faults.partition("src", 0.3, 0.5)  # the PUBACK leaves the broker at 0.4
    sim.run()
    assert dst.deliveries() == [(0.4, "t", b"m"), (1.4, "t", b"m")]
    st = sim.stats()
    assert (st["broker_duplicates"], st["duplicates"], st["delivered"]) == (1, 1, 1)


def test_subscription_qos_caps_delivery_qos() -> None:
    sim = Simulation(0, record_events=True)
    sim.add_broker("b")
    sim.add_node(sink("q0", "t", qos=0), connections=[Connection("b", Link(0.1))])
    sim.add_node(sink("q1", "t", qos=1), connections=[Connection("b", Link(0.1))])
    sim.add_node(source("src", "t", [b"x"], qos=1), connections=[Connection("b")], start_at=1)
    sim.run()
    assert {e["dst"]: e["qos"] for e in evs(sim, "send", src="b")} == {"q0": 0, "q1": 1}
    assert sim.stats()["ack_bytes"] == {"up": 4, "down": 0}  # only q1 sends a PUBACK on a wire


def test_retained_message_reaches_late_subscriber() -> None:
    sim = Simulation(0, record_events=True)
    sim.add_broker("b")
    sim.add_node(source("src", "state", [b"v1", b"v2"], retain=True), connections=[Connection("b")])
    late = sink("late", "state")
    sim.add_node(late, connections=[Connection("b", Link(0.5))], start_at=5.0)
    wild = sink("wild", "+")
    sim.add_node(wild, connections=[Connection("b", Link(0.5))], start_at=6.0)
    sim.run()
    assert late.deliveries() == [(5.5, "state", b"v2")]  # only the latest is kept
    assert wild.deliveries() == [(6.5, "state", b"v2")]
    assert [e["retain"] for e in evs(sim, "send", src="b")] == [True, True]
    assert sim.brokers["b"].retained["state"].payload == b"v2"


def test_empty_retained_payload_clears() -> None:
    sim = Simulation(0)
    sim.add_broker("b")
    live = sink("live", "state")
    sim.add_node(live, connections=[Connection("b")])
    sim.add_node(source("src", "state", [b"v1", b""], retain=True), connections=[Connection("b")])
    late = sink("late", "state")
    sim.add_node(late, connections=[Connection("b")], start_at=3.0)
    sim.run()
    assert [d[2] for d in live.deliveries()] == [b"v1", b""]  # still forwarded
    assert late.deliveries() == []
    assert "state" not in sim.brokers["b"].retained


def test_will_published_on_crash_not_on_finish() -> None:
    sim = Simulation(0, record_events=True)
    sim.add_broker("b")
    watcher = sink("watcher", "fs/r/presence/+")
    sim.add_node(watcher, connections=[Connection("b", Link(0.25))])
    for name in ("crasher", "quitter"):
        node = Toy(name, start=[SetTimer(name="quit", delay_s=1.0)] if name == "quitter" else [])
        if name == "quitter":
            node.react = lambda n, ev: (
                [Finished(result="bye")] if isinstance(ev, TimerFired) else []
            )
        sim.add_node(
            node,
            connections=[Connection("b", Link(0.1))],
            will=Will(f"fs/r/presence/{name}", b"gone", retain=True),
        )
    sim.faults.crash("crasher", at=3.0)
    late = sink("late", "fs/r/presence/#")
    sim.add_node(late, connections=[Connection("b")], start_at=10.0)
    sim.run()
    assert watcher.deliveries() == [(3.25, "fs/r/presence/crasher", b"gone")]
    assert late.deliveries() == [(10.0, "fs/r/presence/crasher", b"gone")]  # retained will
    assert sim.results == {"quitter": "bye"}
    assert [e["t"] for e in evs(sim, "crash")] == [3.0]
    assert evs(sim, "will")[0]["node"] == "crasher"


def test_timers_rearm_cancel_and_stale() -> None:
    fired: list[tuple[str, float]] = []

    def react(node: Toy, ev: Event) -> list:
        if not isinstance(ev, TimerFired):
            return []
        fired.append((ev.name, ev.now))
        if ev.name == "b":
            return [
                SetTimer(name="a", delay_s=1.0),  # replaces the 5 s timer: fires at 3, not 5
                SetTimer(name="c", delay_s=0.5),
                CancelTimer(name="c"),
                CancelTimer(name="never-set"),
            ]
        return []

    node = Toy(
        "n",
        start=[SetTimer(name="a", delay_s=5.0), SetTimer(name="b", delay_s=2.0)],
        react=react,
    )
    sim = Simulation(0, record_events=True)
    sim.add_broker("b")
    sim.add_node(node, connections=[Connection("b")])
    sim.run()
    assert fired == [("b", 2.0), ("a", 3.0)]
    assert sim.now == 3.0  # the stale 5 s timer neither fires nor extends the run
    assert sim.stats()["timers_fired"] == 2
    assert [(e["t"], e["name"]) for e in evs(sim, "timer")] == [(2.0, "b"), (3.0, "a")]


def test_timer_with_zero_delay_and_same_time_order() -> None:
    node = Toy("n", start=[SetTimer(name="x", delay_s=1.0), SetTimer(name="y", delay_s=1.0)])
    sim = Simulation(0)
    sim.add_broker("b")
    sim.add_node(node, connections=[Connection("b")])
    sim.run()
    assert [g for g in node.got if g[0] == "timer"] == [("timer", 1.0, "x"), ("timer", 1.0, "y")]


def test_compute_delays_rest_of_effects_and_queues_events() -> None:
    def react(node: Toy, ev: Event) -> list:
        if isinstance(ev, Delivered) and ev.topic == "in":
            return [Record(kind="saw", fields={"at": ev.now})]
        return []

    worker = Toy(
        "w",
        start=[
            Subscribe(pattern="in"),
            Compute(flops=2e9),
            Publish(topic="out", payload=b"done"),
            Compute(flops=0),
            Record(kind="after", fields={}),
        ],
        react=react,
    )
    sim = Simulation(0)
    sim.add_broker("b")
    out = sink("out", "out")
    sim.add_node(out, connections=[Connection("b")])
    sim.add_node(worker, connections=[Connection("b")], speed_flops=1e9, start_at=1.0)
    sim.add_node(
        publish_at("feeder", [(1.5, "in", b"1", 1), (2.0, "in", b"2", 1)]),
        connections=[Connection("b")],
    )
    sim.run()
    assert out.deliveries() == [(3.0, "out", b"done")]
    # Arrived at 1.5 and 2.0 while busy; handed over in order when the Compute ended.
    assert [g for g in worker.got if g[0] == "deliver"] == [
        ("deliver", 3.0, ("in", b"1")),
        ("deliver", 3.0, ("in", b"2")),
    ]
    assert [(r["t"], r["node"], r["kind"]) for r in sim.records] == [
        (3.0, "w", "after"),
        (3.0, "w", "saw"),
        (3.0, "w", "saw"),
    ]


def test_finished_node_receives_nothing_more() -> None:
    quitter = Toy("q", start=[Subscribe(pattern="t"), Finished(result=42)])
    sim = Simulation(0, record_events=True)
    sim.add_broker("b")
    sim.add_node(quitter, connections=[Connection("b")])
    other = sink("other", "t")
    sim.add_node(other, connections=[Connection("b")])
    sim.add_node(source("src", "t", [b"x"]), connections=[Connection("b")], start_at=1.0)
    sim.run()
    assert sim.results == {"q": 42}
    assert [g[0] for g in quitter.got] == ["start"]
    assert len(other.deliveries()) == 1


def test_effects_after_finished_are_an_error() -> None:
    sim = Simulation(0)
    sim.add_broker("b")
    sim.add_node(
        Toy("n", start=[Finished(result=1), Publish(topic="t", payload=b"")]),
        connections=[Connection("b")],
    )
    with pytest.raises(NodeProtocolError, match="last effect"):
        sim.run()


def test_unknown_effect_and_qos2_subscribe_are_errors() -> None:
    sim = Simulation(0)
    sim.add_broker("b")
    sim.add_node(Toy("n", start=[Subscribe(pattern="t", qos=2)]), connections=[Connection("b")])
    with pytest.raises(NodeProtocolError, match="QoS"):
        sim.run()


def test_run_ends_when_every_node_finished() -> None:
    ticker = Toy(
        "tick",
        start=[SetTimer(name="t", delay_s=1.0)],
        react=lambda n, ev: [SetTimer(name="t", delay_s=1.0)],  # would tick forever
    )
    stopper = Toy(
        "stop",
        start=[SetTimer(name="end", delay_s=4.5)],
        react=lambda n, ev: [Finished(result=None)],
    )
    sim = Simulation(0)
    sim.add_broker("b")
    sim.add_node(ticker, connections=[Connection("b")])
    sim.add_node(stopper, connections=[Connection("b")])
    assert sim.run(until=100.0) == 100.0  # ticker never finishes: until stops it
    assert len([g for g in ticker.got if g[0] == "timer"]) == 99
    sim2 = Simulation(0)
    sim2.add_broker("b")
    t2 = Toy("tick", start=[SetTimer(name="t", delay_s=1.0)], react=lambda n, ev: [Finished()])
    sim2.add_node(t2, connections=[Connection("b")])
    assert sim2.run() == 1.0


def test_until_and_progress() -> None:
    ticker = Toy(
        "tick",
        start=[SetTimer(name="t", delay_s=1.0)],
        react=lambda n, ev: [SetTimer(name="t", delay_s=1.0)] if ev.now < 10 else [],
    )
    sim = Simulation(0)
    sim.add_broker("b")
    sim.add_node(ticker, connections=[Connection("b")])
    seen: list[float] = []
    assert sim.run(until=3.5, progress=seen.append, progress_every=1.0) == 3.5
    assert seen == [1.0, 2.0, 3.0, 3.5]
    assert len([g for g in ticker.got if g[0] == "timer"]) == 3
    assert sim.run() == 10.0
    with pytest.raises(ValidationError):
        sim.run(until=5.0)


def byte_check_sim(seed: int, *, record: bool = True) -> Simulation:
    sim = Simulation(seed, links="message-retry", record_events=record, retry_interval=0.5)
    sim.add_broker("cloud", ["fs/r/cloud/"])
    sim.add_broker("fog", ["fs/r/fog/"])
    sim.add_node(
        Toy(
            "agg",
            start=[Subscribe(pattern="fs/r/fog/g/up"), Subscribe(pattern="fs/r/cloud/g/down")],
            react=lambda n, ev: (
                [Publish(topic="fs/r/cloud/g/up", payload=ev.payload[:3], qos=1)]
                if isinstance(ev, Delivered) and ev.topic.endswith("/up")
                else []
            ),
        ),
        connections=[Connection("fog"), Connection("cloud", Link(LogNormal(0.05, 0.3), loss=0.2))],
        tier="fog",
    )
    for i in range(6):
        sim.add_node(
            publish_at(
                f"c{i}", [(0.1 * k, "fs/r/fog/g/up", bytes(50 + 10 * k), k % 2) for k in range(8)]
            ),
            connections=[
                Connection("fog", Link(LogNormal(0.02, 0.5), bandwidth_bps=1e5, loss=0.25))
            ],
            tier="client",
        )
    fast = Link(LogNormal(0.03, 0.4), bandwidth_bps=1e6)  # no loss, no window: the fast path
    sim.add_node(
        sink("root", "fs/r/cloud/g/up"), connections=[Connection("cloud", fast)], tier="cloud"
    )
    sim.add_node(sink("watch", "fs/r/fog/#"), connections=[Connection("fog", fast)], tier="watch")
    return sim


def test_byte_counters_equal_the_event_log() -> None:
    sim = byte_check_sim(11)
    sim.run()
    st = sim.stats()
    tier = {ns.node_id: ns.tier for ns in sim.engine.nodes.values()}
    sites = set(sim.brokers)
    want: Counter[tuple[str, str]] = Counter()
    count: Counter[tuple[str, str]] = Counter()
    for e in evs(sim, "send", wire=True):
        direction, node = ("down", e["dst"]) if e["src"] in sites else ("up", e["src"])
        want[(tier[node], direction)] += e["bytes"]
        count[(tier[node], direction)] += 1
    for t, row in st["by_tier"].items():
        assert row["bytes_up"] == want[(t, "up")]
        assert row["bytes_down"] == want[(t, "down")]
        assert row["messages_up"] == count[(t, "up")]
        assert row["messages_down"] == count[(t, "down")]
    assert st["bytes"]["total"] == sum(want.values()) > 0
    assert st["dropped"] == len(evs(sim, "drop")) > 0
    assert st["delivered"] == len(evs(sim, "deliver"))


def test_same_seed_same_bytes_different_seed_different(tmp_path: Path) -> None:
    paths = []
    stats = []
    for k, seed in enumerate((7, 7, 8)):
        sim = byte_check_sim(seed)
        sim.faults.round_dropout("agg", 0.3, topic_suffix="/up")
        sim.faults.availability_markov("c4", 0.2, 0.5, 0.2)
        sim.run()
        path = tmp_path / f"events{k}.jsonl"
        sim.write_events(path)
        paths.append(path.read_bytes())
        stats.append(sim.stats())
    assert paths[0] == paths[1]
    assert stats[0] == stats[1]
    assert {"dropout", "loss", "offline"} <= set(stats[0]["dropped_by_reason"])
    assert paths[0] != paths[2]
    assert stats[0] != stats[2]
    first = paths[0].split(b"\n", 1)[0]
    assert first.startswith(b'{"bytes":')  # sorted keys


def test_the_event_log_does_not_change_the_run() -> None:
    # With the log on, the engine takes its general paths instead of the inlined ones:
    # the same draws in the same order must give the same run.
    for seed in (3, 4, 5):
        runs = []
        for record in (True, False):
            sim = byte_check_sim(seed, record=record)
            sim.faults.round_dropout("agg", 0.3, topic_suffix="/up")
            sim.faults.availability_markov("c4", 0.2, 0.5, 0.2)
            sim.run()
            runs.append((sim.stats(), sim.records, sim.now))
        assert runs[0] == runs[1]


def test_permanently_dead_subscriber_terminates() -> None:
    sim = Simulation(
        0, links="message-retry", record_events=True, retry_interval=1.0, max_retries=3
    )
    sim.add_broker("b")
    sim.add_node(sink("gone", "t"), connections=[Connection("b", Link(0.1))])
    sim.faults.availability_trace("gone", [(0.0, 1.0)])  # online only during [0, 1)
    sim.add_node(source("src", "t", [b"x"]), connections=[Connection("b")], start_at=2.0)
    sim.run()
    drops = [(e["t"], e["reason"]) for e in evs(sim, "drop")]
    assert drops == [
        (2.1, "offline"),
        (3.1, "offline"),
        (4.1, "offline"),
        (5.1, "offline"),
        (6.0, "max_retries"),
    ]
    assert sim.now == 6.0


def test_crashed_subscriber_terminates_and_drops_in_flight() -> None:
    sim = Simulation(0, links="message-retry", record_events=True, retry_interval=1.0)
    sim.add_broker("b")
    sim.add_node(sink("dst", "t"), connections=[Connection("b", Link(0.5))])
    sim.add_node(source("src", "t", [b"x"]), connections=[Connection("b")], start_at=1.0)
    sim.faults.crash("dst", at=1.2)  # the message is on the wire until 1.5
    sim.run()
    assert [(e["t"], e["reason"]) for e in evs(sim, "drop")] == [(1.5, "crashed")]
    assert sim.stats()["retransmissions"] == 0


def test_add_node_validation() -> None:
    sim = Simulation(0)
    sim.add_broker("b")
    with pytest.raises(ValidationError):
        sim.add_broker("b")
    with pytest.raises(ValidationError, match="unknown broker"):
        sim.add_node(Toy("n"), connections=[Connection("nope")])
    with pytest.raises(ValidationError, match="at least one"):
        sim.add_node(Toy("n"), connections=[])
    sim.add_node(Toy("n"), connections=[Connection("b")])
    with pytest.raises(ValidationError, match="already exists"):
        sim.add_node(Toy("n"), connections=[Connection("b")])
    with pytest.raises(ValidationError):
        sim.add_node(object(), connections=[Connection("b")])
    with pytest.raises(ValidationError):
        sim.add_node(Toy("m"), connections=[Connection("b"), Connection("b")])
    with pytest.raises(ValidationError):
        sim.add_node(Toy("m"), connections=[Connection("b")], speed_flops=0)
    with pytest.raises(ValidationError):
        sim.add_node(Toy("m"), connections=[Connection("b")], will=Will("w", qos=2))
    with pytest.raises(ValidationError):
        Simulation(-1)
    with pytest.raises(ValidationError):
        Simulation(0, protocol=3)
    with pytest.raises(ValidationError):
        Simulation(0).write_events("x.jsonl")
    with pytest.raises(ValidationError):
        sim.node_state("nobody")


def test_mqtt5_sizes() -> None:
    sim = Simulation(0, protocol=5, record_events=True)
    sim.add_broker("b")
    sim.add_node(sink("d", "t"), connections=[Connection("b", Link(0.1))])
    sim.add_node(source("s", "t", [bytes(10)]), connections=[Connection("b", Link(0.1))])
    sim.run()
    assert {e["bytes"] for e in evs(sim, "send")} == {publish_packet_size("t", 10, 1, protocol=5)}
