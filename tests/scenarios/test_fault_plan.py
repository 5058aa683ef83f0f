"""The fault plan against the simulator's own draws: the same dropouts, availability, crashes.

The plan (:mod:`fedstrata.scenarios.fault_plan`) is what a run over a real broker
injects; these tests hold it to what the simulator does with the same scenario and
seed: the generators the simulator wires into its node states, and the dropout
decisions it logs while it runs.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedstrata.scenarios.build import build_federation
from fedstrata.scenarios.fault_plan import Crash, fault_plan
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate

BASE = """
name: plan
seed: {seed}
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 20}}, partition: {{kind: iid}}}}
topology: {{clients: {{count: {clients}, link: {{latency: 0.01, bandwidth_mbps: 10}}}}}}
algorithm: {{name: hk-mvfc, n_clusters: 4, center_update: exact}}
protocol: {{rule: sum, rounds: {rounds}, tol: 1.0e-12, deadline_s: 1.0, quorum: 0.25}}
faults:
  dropout: {dropout}
  crashes: {crashes}
  availability: {{kind: markov, p_off: {p_off}, p_on: {p_on}, step_s: {step}}}
"""

_SLOW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def scenario(seed=3, clients=3, rounds=4, dropout=0.3, crashes="[]", p_off=0.2, p_on=0.5, step=1.0):
    return parse_scenario(
        BASE.format(
            seed=seed,
            clients=clients,
            rounds=rounds,
            dropout=dropout,
            crashes=crashes,
            p_off=p_off,
            p_on=p_on,
            step=step,
        )
    )


@_SLOW
@given(
    seed=st.integers(0, 2**31 - 1),
    dropout=st.floats(0.01, 0.99),
    n=st.integers(1, 400),
)
def test_dropout_draws_are_the_simulators(seed, dropout, n):
    sc = scenario(seed=seed, dropout=round(dropout, 6))
    fed = build_federation(sc)
    plan = fault_plan(sc)
    for c in fed.client_indices:
        ns = fed.sim.engine.nodes[c]
        sim_draws = [ns.dropout_draw() for _ in range(n)]
        mine = plan.of(c).dropout_draws()
        assert [mine() for _ in range(n)] == sim_draws
        assert plan.of(c).dropout == ns.dropout_p


@_SLOW
@given(
    seed=st.integers(0, 2**31 - 1),
    p_off=st.floats(0.0, 1.0),
    p_on=st.floats(0.0, 1.0),
    step=st.sampled_from([0.1, 0.5, 1.0, 2.5]),
    gaps=st.lists(st.floats(0.0, 7.0), min_size=1, max_size=60),
)
def test_availability_answers_are_the_simulators(seed, p_off, p_on, step, gaps):
    """Asked at the same times, the plan's chain and the simulator's answer alike."""
    sc = scenario(seed=seed, p_off=round(p_off, 6), p_on=round(p_on, 6), step=step)
    fed = build_federation(sc)
    plan = fault_plan(sc)
    times = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    for c in fed.client_indices:
        sim_avail = fed.sim.engine.nodes[c].avail
        mine = plan.of(c).availability()
        assert mine is not None and sim_avail is not None
        for t in times:
            assert mine.is_online(t) == sim_avail.is_online(t), (c, t)
            assert mine.next_online(t) == sim_avail.next_online(t), (c, t)


@_SLOW
@given(
    seed=st.integers(0, 2**31 - 1),
    p_off=st.floats(0.05, 0.9),
    p_on=st.floats(0.05, 0.9),
    step=st.sampled_from([0.5, 1.0, 3.0]),
)
def test_offline_windows_are_the_chain_asked_at_every_step(seed, p_off, p_on, step):
    sc = scenario(seed=seed, p_off=round(p_off, 6), p_on=round(p_on, 6), step=step)
    nf = fault_plan(sc).of("client-0")
    horizon = 60 * step
    windows = nf.offline_windows(horizon)
    chain = nf.availability()
    for k in range(60):
        t = k * step
        inside = any(a <= t < b for a, b in windows)
        assert chain.is_online(t) == (not inside), (k, windows)
    for a, b in windows:  # on the grid, non-empty, in order
        assert a < b and math.isclose(a / step, round(a / step), abs_tol=1e-9)


def test_crashes_per_node_sorted_and_link_faults_left_out():
    sc = parse_scenario(
        BASE.format(
            seed=1,
            clients=3,
            rounds=3,
            dropout=0.0,
            crashes="[{node: client-2, at: 9.0}, {node: cloud, at: 4.0, restart_after: 1.5},"
            " {node: client-2, at: 2.0, restart_after: 3.0}]",
            p_off=0.0,
            p_on=1.0,
            step=1.0,
        ).replace("faults:\n", "faults:\n  partitions: [{nodes: [client-0], start: 1, end: 2}]\n")
    )
    plan = fault_plan(sc, seed=42)
    assert plan.seed == 42 and plan.link_faults == ("partitions",)
    assert plan.of("client-2").crashes == (Crash(2.0, 3.0), Crash(9.0, None))
    assert plan.of("cloud").crashes == (Crash(4.0, 1.5),)
    assert plan.of("cloud").markov is None and plan.of("cloud").dropout == 0.0  # clients only
    assert plan.of("client-0").markov is not None and not plan.of("client-0").crashes
    assert plan.kinds == ("crashes", "availability")
    assert plan.of("nobody").empty


def test_the_simulators_logged_dropouts_follow_the_plans_sequence(tmp_path):
    """Each ``/down`` delivery the simulator logs (delivered or dropped out) is one draw."""
    sc = scenario(seed=11, clients=4, rounds=8, dropout=0.4, p_off=0.0, p_on=1.0)
    fed, summary, _ = simulate(sc, events=True)
    plan = fault_plan(sc)
    seen: dict[str, list[bool]] = {c: [] for c in fed.client_indices}
    for e in fed.sim.events:
        topic = e.get("topic") or ""
        if e["dst"] in seen and topic.endswith("/down") and not e.get("dup"):
            if e["ev"] == "deliver":
                seen[e["dst"]].append(False)
            elif e["ev"] == "drop" and e.get("reason") == "dropout":
                seen[e["dst"]].append(True)
    assert sum(map(sum, seen.values())) == summary["dropped"]["by_reason"]["dropout"] > 0
    for c, decisions in seen.items():
        assert decisions == plan.of(c).dropout_sequence(len(decisions)), c


def test_a_node_offline_for_good_has_an_open_window():
    sc = scenario(seed=5, p_off=1.0, p_on=0.0, step=1.0)
    windows = fault_plan(sc).of("client-1").offline_windows(100.0)
    assert windows == [(1.0, math.inf)]


def test_the_gate_keeps_or_resends_a_message_for_an_offline_node_by_network_model():
    """Offline on [1, 2): tcp keeps a QoS 1 message until 2.0, message-retry resends in 5 s."""
    from fedstrata.nodes.events import Delivered, TimerFired
    from fedstrata.scenarios.fault_inject import MAX_RETRIES, FaultGate

    sc = scenario(seed=2, dropout=0.0, p_off=1.0, p_on=1.0, step=1.0)  # alternates
    assert fault_plan(sc).network_model == "tcp"
    nf = fault_plan(sc).of("client-0")
    msg = Delivered(now=1.25, topic="fs/plan/cloud/cloud/down", payload=b"x")
    kept = FaultGate(nf, qos=1, held=True)
    assert kept.verdict(msg, 0.5, 0) == 0.0  # online: handed over
    assert kept.verdict(msg, 1.25, 0) == pytest.approx(0.75)
    assert (kept.counts.held, kept.counts.dropped["offline"]) == (1, 0)
    resent = FaultGate(nf, qos=1, held=False)
    assert resent.verdict(msg, 1.25, 0) == 5.0
    assert resent.verdict(msg, 3.5, MAX_RETRIES) is None  # offline again at 3.5: given up
    assert (resent.counts.dropped["offline"], resent.counts.abandoned) == (2, 1)
    lost = FaultGate(nf, qos=0, held=True)
    assert lost.verdict(msg, 1.25, 0) is None and lost.counts.dropped["offline"] == 1
    timer = FaultGate(nf, qos=1)
    assert timer.verdict(TimerFired(now=1.5, name="t"), 1.5, 0) == pytest.approx(0.5)
    assert timer.counts.deferred == 1 and timer.counts.timeline == [(1.5, "deferred")]
