"""Eq. 138 (experimental): a client scales its heat-kernel coefficients by its factor."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from fedstrata.algorithms.kernels import kernel_reference
from fedstrata.algorithms.multiview import (
    MultiViewModel,
    local_statistics,
    objective,
    prepare_views,
)
from fedstrata.errors import ScenarioError, WireError
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.plugins import multiview as mvp
from fedstrata.plugins.messages import Shape, read_state, references_body
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import run_scenario

SHAPE = Shape(3, (2, 3))


def setup(seed=0):
    rng = np.random.default_rng(seed)
    vs = [rng.normal(size=(6, 2)), rng.normal(size=(6, 3))]
    model = MultiViewModel(3, center_update="exact")
    proto = ProtocolConfig(run="t", rule="sum", kernel_scope="global")
    algo = mvp.multiview_algorithm(model, proto, SHAPE)
    refs = [kernel_reference(X) for X in vs]
    learner = algo.learner(vs, view_ids=(0, 1), rng=np.random.default_rng(seed), node_id="c1")
    learner.configure(references_body(refs))
    body = {
        "phase": "iter",
        "centers": [rng.normal(size=(3, 2)), rng.normal(size=(3, 3))],
        "view_weights": np.array([0.4, 0.6]),
    }
    pv = prepare_views(vs, model, view_ids=(0, 1), n_views=2, references=refs)
    return model, learner, body, pv


def test_a_factor_scales_the_coefficients_like_a_view_scale():
    model, learner, body, pv = setup()
    got, _ = learner.update({**body, "kernel_scale": {"c1": 0.25, "other": 0.5}})
    # the engine itself, with δ of both views multiplied by 0.25 through the state
    state = read_state(body, SHAPE).batched().with_scale(np.full((1, 2), 0.25))
    stats = local_statistics(pv, state, model)
    want_J = float(objective(stats, state.view_weights, model.alpha)[0])
    np.testing.assert_array_equal(got["num"][1], stats.take(0).center_num[1])
    assert got["objective"] == want_J
    plain, _ = learner.update({**body, "round_marker": 1})
    assert plain["objective"] != got["objective"]  # the factor changed something


def test_no_entry_or_a_factor_of_one_is_the_unscaled_step():
    _, learner, body, _ = setup(1)
    a, _ = learner.update(body)
    b, _ = learner.update({**body, "kernel_scale": {"someone-else": 0.1}})
    c, _ = learner.update({**body, "kernel_scale": {"c1": 1.0}})
    assert a["objective"] == b["objective"] == c["objective"]


@pytest.mark.parametrize("bad", [[0.5], {"c1": 0.0}, {"c1": 1.5}, {"c1": "x"}, {"c1": True}])
def test_malformed_factors_are_refused(bad):
    _, learner, body, _ = setup(2)
    with pytest.raises(WireError):
        learner.update({**body, "kernel_scale": bad})


SCENARIO = """
name: nk
seed: 1
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 300}, partition: {kind: iid}}
topology:
  clients: {count: 6, link: {latency: 0.05, bandwidth_mbps: 10}}
algorithm: {name: hk-mvfc, n_clusters: 4}
protocol:
  kind: KIND
  rule: sum
  rounds: 10
  deadline_s: 10
  quorum: 0.5
  network_kernel: {f: exp, tau_s: 0.5}
faults:
  degradations:
    - {nodes: [client-5], start: 0, end: 100000, extra_latency_s: 1.0}
"""


def test_the_adaptive_root_scales_the_slow_client_it_observed(tmp_path):
    summary = run_scenario(
        parse_scenario(SCENARIO.replace("KIND", "adaptive")), tmp_path, progress=False
    )
    assert summary["metrics"]["ari"] >= 0.9
    with open(tmp_path / "rounds.csv", newline="") as fh:
        root = [r for r in csv.DictReader(fh) if r["tier"] == "cloud" and r["phase"] == "iter"]
    # client-5 answers about 2 s late (1 s more each way): exp(-2 / 0.5) ~ 0.018
    later = [float(r["kernel_scale_min"]) for r in root[3:]]
    assert later and all(0.005 < f < 0.05 for f in later)


def test_network_kernel_is_for_the_adaptive_kind_only():
    with pytest.raises(ScenarioError, match="network_kernel: is for protocol kind adaptive"):
        parse_scenario(SCENARIO.replace("KIND", "sync"))
