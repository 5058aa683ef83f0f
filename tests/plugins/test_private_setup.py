"""Issue 31, items 1-3: the private setup, sample-level DP and the one accountant.

Every message each client publishes in a private run is tapped and decoded; what a
client may put in the clear is checked field by field against what the private
pipeline is meant to send (sums only, and under DP only noisy ones). The sums the
stages compute are checked against sums written out here from the data, and the
root's seeding against the true cluster centres of well-separated data.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedstrata import wire
from fedstrata.analysis import leakage
from fedstrata.errors import WireError
from fedstrata.plugins import private_setup as ps
from fedstrata.plugins.messages import Shape
from fedstrata.privacy.sample_dp import PrivateConfig, box_units, cells_sensitivity, clip_rows
from fedstrata.scenarios.loader import load_scenario
from fedstrata.scenarios.orchestrate import Run
from fedstrata.scenarios.run import SimTransport

SCENARIO = """\
name: private-{tag}
seed: 4
data:
  dataset: heat-kernel-synthetic
  params: {{n_per_cluster: 60}}
  partition: {partition}
topology:
{topology}
algorithm: {{name: hk-mvfc, n_clusters: 4}}
protocol: {{rule: sum, rounds: 3, tol: 0.0, deadline_s: 30}}
privacy: {privacy}
"""
FLAT = "  clients: {count: 6}"
#: Two small clients with four samples each (a plain setup sends their samples).
SKEWED = "{kind: stratified, fractions: [0.3, 0.3, 0.2, 0.166, 0.017, 0.017]}"
FOGS = "  tiers: [{name: fog, count: 3}]\n  clients: {count: 9}"
BOUNDS = "bounds: [[0, 10], [-8, 8]]"
#: The fields a private run's client may send in the clear, by message kind and mode.
SETUP_FIELDS = {"mode", "stage", "cnt", "s1", "s2", "cell_n", "cell_s", "sub"}
FORBIDDEN = {"init", "init_w", "refs", "min", "max", "sum", "sq_dev", "candidates"}


class _TapAll(SimTransport):
    """The simulator's transport, tapping every node once the federation is built."""

    def build(self, sc: Any) -> Any:
        fed = super().build(sc)
        self.sent: dict[str, list[leakage.Tapped]] = {}
        for node in fed.client_indices:
            self.sent[node] = leakage.tap(fed.sim.node(node))
        return fed


def _run(tmp: Path, tag: str, privacy: str, topology: str = FLAT):
    path = tmp / f"{tag}.yaml"
    partition = SKEWED if topology == FLAT else "{kind: iid}"
    path.write_text(
        SCENARIO.format(tag=tag, privacy=privacy, topology=topology, partition=partition)
    )
    transport = _TapAll()
    fed, summary, _ = Run(load_scenario(path), transport).execute()
    sent = {
        node: [wire.decode(m.payload) for m in msgs if m.direction == "out"]
        for node, msgs in transport.sent.items()
    }
    return fed, summary, sent


def _walk(value: Any, path: str = ""):
    """Every (path, value) of a decoded body."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}[{i}]")


@pytest.mark.parametrize("topology", [FLAT, FOGS], ids=["flat", "fogs"])
def test_under_secure_aggregation_a_client_sends_nothing_in_the_clear(tmp_path, topology):
    """Every message a client publishes is a secure-session message: keys, shares,
    a masked vector, a signature, reveals. None carries a plain update, a centre,
    an extreme or a sample."""
    _, summary, sent = _run(tmp_path, "secagg", "{secure_aggregation: secagg}", topology)
    assert summary["status"] == "round_limit"
    kinds = {env.kind for msgs in sent.values() for env in msgs}
    assert kinds == {"secagg"}, kinds
    for node, msgs in sent.items():
        for env in msgs:
            keys = {p.rsplit(".", 1)[-1] for p, _ in _walk(env.body)}
            assert not keys & FORBIDDEN, (node, env.body.keys())
            masked = env.body.get("masked")
            if masked is not None:  # words modulo 2**64, not an encoding of the partial
                assert np.asarray(masked).dtype == np.uint64
    # the setup's two stages and the three rounds: five secure sums at the root
    assert summary["privacy"]["rounds_unmasked"] == 5


def test_under_local_dp_a_client_sends_only_noisy_sums(tmp_path):
    """Without secure aggregation each client's release is in the clear, so each must
    be a noisy sum: the setup's moments and cells, and rounds with no exact count,
    cost or mass of its own."""
    fed, summary, sent = _run(tmp_path, "dp", f"{{dp: {{epsilon: 2, {BOUNDS}}}}}")
    assert summary["privacy"]["noise"] == "local"
    for node, msgs in sent.items():
        X = [V[fed.client_indices[node]] for V in fed.dataset.views]
        setups = [e.body for e in msgs if e.body.get("mode") == "setup"]
        rounds = [e.body for e in msgs if e.body.get("mode") == "stats"]
        assert [b["stage"] for b in setups] == [1, 2] and len(rounds) == 3
        for body in setups:
            assert set(body) <= SETUP_FIELDS, body.keys()
        exact = box_units(X[0], np.zeros(2), np.full(2, 10.0)).sum(axis=0)
        # noise of std z·√(2·2+1 + 2·2+1) ≈ tens: the client's own sum is not readable
        assert np.abs(setups[0]["s1"][0] - exact).min() > 1e-3
        assert abs(float(setups[0]["cnt"][0]) - len(X[0])) > 1e-3
        for body in rounds:
            assert body["n"] == 0 and not np.asarray(body["counts"]).any()
            assert not np.asarray(body["costs"]).any() and not np.asarray(body["mass"]).any()
            assert body["objective"] == 0.0


def test_the_moments_and_cells_are_the_sums_they_claim():
    rng = np.random.default_rng(0)
    shape = Shape(3, (2, 3))
    views = [rng.normal(size=(40, 2)), rng.normal(size=(40, 3))]
    config = PrivateConfig(bounds=((np.full(2, -2.0), np.full(2, 2.0)), (-1.5, 1.5)), cells=2)
    body = ps.moments_body(views, [0, 1], shape, config, None)
    for g, X in enumerate(views):
        lo, hi = np.broadcast_to(config.bounds[g][0], X.shape[1]), config.bounds[g][1]
        U = (np.clip(X, lo, hi) - (lo + hi) / 2) / ((hi - lo) / 2)  # written out here
        assert np.allclose(body["s1"][g], U.sum(0)) and np.allclose(body["s2"][g], (U * U).sum(0))
        assert body["cnt"][g] == 40
    frame = {"mu": [v.mean(0) for v in views], "scale": [v.std(0) for v in views]}
    request = ps.setup_request(frame, seed=5)
    cells = ps.cells_body(views, [0, 1], shape, config, request, None)
    cand = ps.candidates(shape, config, 5)
    radii = config.radii(shape.dims)
    Z = [
        clip_rows((v - m) / s, r)
        for v, m, s, r in zip(views, frame["mu"], frame["scale"], radii, strict=True)
    ]
    d = sum(((z[:, None, :] - c[None]) ** 2).sum(-1) for z, c in zip(Z, cand, strict=True))
    nearest = d.argmin(1)
    for g, z in enumerate(Z):
        for k in range(6):
            assert np.allclose(cells["cell_s"][g][k], z[nearest == k].sum(0))
            assert cells["cell_n"][g][k] == (nearest == k).sum()


def test_seeding_on_the_summed_cells_finds_well_separated_clusters():
    rng = np.random.default_rng(1)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])
    X = np.vstack([c + rng.normal(scale=0.5, size=(200, 2)) for c in centres])
    shape = Shape(4, (2,))
    config = PrivateConfig(cells=4, seed=3)
    total = ps.moments_body([X], [0], shape, config, None)
    frame = ps.frame_of(total, shape, config)
    cells = ps.cells_body([X], [0], shape, config, ps.setup_request(frame, 3), None)
    seeded = ps.seed_from_cells(cells, frame, shape, config, np.random.default_rng(0))
    assert seeded is not None
    found = seeded[0][0]
    for c in centres:  # each true centre has a seed within one cluster's s.d. or so
        assert np.linalg.norm(found - c, axis=1).min() < 1.5


def test_a_malformed_request_is_refused_not_computed_on():
    shape = Shape(2, (2,))
    good = {"stage": 2, "mu": [np.zeros(2)], "scale": [np.ones(2)], "seed": 1}
    ps.read_request(good, shape)
    for bad in (
        {**good, "stage": 1},
        {**good, "mu": [np.zeros(3)]},
        {**good, "scale": [np.zeros(2)]},
        {**good, "scale": [np.full(2, np.nan)]},
        {**good, "seed": "x"},
        [1, 2],
    ):
        with pytest.raises(WireError):
            ps.read_request(bad, shape)


def test_sample_level_dp_clusters_at_epsilon_one_under_secure_aggregation(tmp_path):
    """The §6.1 data (2,500 samples a cluster), 10 clients, ε = 1 over the whole run."""
    text = (
        "name: dp-one\nseed: 2\ndata: {dataset: heat-kernel-synthetic, partition: {kind: iid}}\n"
        "topology: {clients: {count: 10}}\nalgorithm: {name: hk-mvfc, n_clusters: 4}\n"
        "protocol: {rule: sum, rounds: 3}\nprivacy: {secure_aggregation: secagg, dp: "
        f"{{epsilon: 1, {BOUNDS}}}}}\n"
    )
    path = tmp_path / "dp.yaml"
    path.write_text(text)
    _, summary, _ = Run(load_scenario(path), SimTransport()).execute()
    p = summary["privacy"]
    assert summary["metrics"]["ari"] >= 0.99
    assert p["unit"] == "sample" and p["noise"] == "distributed"
    assert p["phases"]["setup"]["releases"] == 2 and p["phases"]["rounds"]["releases"] == 3
    assert 0.99 <= p["epsilon_spent"] <= 1.0
    # the noise a cluster count carries is the run's multiplier times one sample's bound
    assert p["noise_multiplier"] > 1.0
    assert cells_sensitivity([2**0.5, 2**0.5]) == pytest.approx(6**0.5)


def test_validate_refuses_releases_that_cannot_fit(tmp_path):
    """Forty samples a cluster cannot carry the noise ε = 0.1 over 23 releases needs."""
    path = tmp_path / "tight.yaml"
    path.write_text(
        "name: tight\nseed: 0\ndata: {dataset: heat-kernel-synthetic, params: "
        "{n_per_cluster: 40}}\ntopology: {clients: {count: 4}}\n"
        "algorithm: {name: hk-mvfc, n_clusters: 4}\nprotocol: {rule: sum, rounds: 21}\n"
        f"privacy: {{dp: {{epsilon: 0.1, {BOUNDS}}}}}\n"
    )
    res = subprocess.run(["fedstrata", "validate", str(path)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "privacy.dp.epsilon" in res.stderr and "23 releases cannot fit" in res.stderr
    path.write_text(path.read_text().replace("epsilon: 0.1", "epsilon: 1000"))
    ok = subprocess.run(["fedstrata", "validate", str(path)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


def test_dp_without_bounds_is_refused_with_the_reason(tmp_path):
    path = tmp_path / "nobounds.yaml"
    path.write_text(
        "name: nb\nseed: 0\ndata: {dataset: heat-kernel-synthetic}\n"
        "algorithm: {name: hk-mvfc, n_clusters: 4}\nprivacy: {dp: {epsilon: 1}}\n"
    )
    res = subprocess.run(["fedstrata", "validate", str(path)], capture_output=True, text=True)
    assert res.returncode == 1
    assert "public feature bounds" in res.stderr


def test_a_client_refuses_releases_beyond_its_budget():
    """The budget is enforced where the data is: the third setup stage is refused."""
    from fedstrata.algorithms.multiview import MultiViewModel
    from fedstrata.nodes.config import ProtocolConfig
    from fedstrata.plugins.multiview import multiview_algorithm
    from fedstrata.privacy.sample_dp import BudgetSpentError

    private = PrivateConfig(bounds=((0.0, 1.0),), noise=2.0, releases=2, sample_rounds=True)
    protocol = ProtocolConfig(rule="sum", private=private)
    algo = multiview_algorithm(MultiViewModel(n_clusters=2), protocol, Shape(2, (3,)))
    X = np.random.default_rng(0).uniform(size=(20, 3))
    learner = algo.learner([X], view_ids=[0], rng=np.random.default_rng(1), node_id="c")
    first, _ = learner.setup()
    assert first["stage"] == 1
    learner.setup()  # the second release the budget allows
    with pytest.raises(BudgetSpentError, match="allows 2 noisy releases"):
        learner.setup()
