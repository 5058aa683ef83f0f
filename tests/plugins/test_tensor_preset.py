"""``algorithm.preset: real-data`` for the tensor family through the node core.

The reference loop is written from public pieces (numpy min-max scaling, the pooled
variances of the scaled features computed here, :class:`TensorClient`, a sum,
:func:`aggregate`), so a run that exchanges the wrong spread or scales the kernel
otherwise shows up.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from fedstrata.algorithms.tensor import METHODS, TensorClient, aggregate
from fedstrata.errors import FedstrataError
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate

ROUNDS = 4


def scenario(method: str, **algorithm) -> dict:
    return {
        "name": f"t-{method}-real-data",
        "seed": 5,
        "data": {
            "dataset": "heat-kernel-synthetic",
            "params": {"n_per_cluster": 100},
            "partition": {"kind": "iid"},
        },
        "topology": {"clients": {"count": 5, "link": {"latency": 0.02}}},
        "algorithm": {"name": method, "n_clusters": 4, "preset": "real-data", **algorithm},
        "protocol": {"rule": "sum", "rounds": ROUNDS, "tol": 0.0, "deadline_s": 30},
    }


def run(sc: dict):
    return simulate(parse_scenario(yaml.safe_dump(sc)))


def reference(fed) -> dict[str, np.ndarray]:
    """The run as a loop, each client's kernel widths γ·D̄·var_j of the pooled scaled data.

    With ``center_views`` (PARAFAC2 under the preset) the scaled views are centred at
    their pooled mean, numpy's over every sample.
    """
    model = fed.model
    X = fed.dataset.views
    every = np.concatenate(list(fed.client_indices.values()))
    lo = [V[every].min(axis=0) for V in X]
    span = [V[every].max(axis=0) - V[every].min(axis=0) for V in X]
    scaled = [(V - lo[h]) / span[h] for h, V in enumerate(X)]
    if model.center_views:
        scaled = [S - S[every].mean(axis=0) for S in scaled]
    dbar = np.mean([V.shape[1] for V in X])
    widths = [model.bandwidth * dbar * S[every].var(axis=0) for S in scaled]
    clients = [
        TensorClient(
            model,
            [scaled[h][idx] for h in fed.client_views[c]],
            fed.client_views[c],
            [widths[h] for h in fed.client_views[c]],
        )
        for c, idx in fed.client_indices.items()
    ]
    glob = next(r["fields"]["state"] for r in fed.sim.records if r["kind"] == "init")
    for _ in range(ROUNDS):
        msgs = [cl.step(glob) for cl in clients]
        glob, _ = aggregate(model, {k: sum(m[k] for m in msgs) for k in msgs[0]}, glob)
    return glob


@pytest.mark.parametrize("method", METHODS)
def test_a_real_data_run_equals_the_plain_loop_and_separates_the_clusters(method):
    fed, summary, _ = run(scenario(method))
    model = fed.model
    assert (model.m, model.alpha, model.bandwidth) == (1.3, 50.0, 8.0)
    assert model.center_views == (model.kind == "parafac2")
    assert summary["rounds"] == ROUNDS
    state, want = fed.sim.results["cloud"]["state"], reference(fed)
    for key in want:
        np.testing.assert_allclose(state[key], want[key], rtol=1e-7, atol=1e-9, err_msg=key)
    assert summary["metrics"]["ari"] >= 0.99


def test_keys_set_in_the_scenario_win_over_the_preset():
    sc = scenario("fedhk-tucker", m=1.2, bandwidth=16.0, ranks=[4, 2, 2])
    fed, _, _ = run(sc)
    assert (fed.model.m, fed.model.bandwidth, fed.model.ranks) == (1.2, 16.0, (4, 2, 2))
    assert fed.model.alpha == 50.0


def test_a_fuzzifier_too_large_for_the_bandwidth_kernel_is_refused():
    with pytest.raises(FedstrataError, match=r"\(1, 1\.4\]"):
        run(scenario("e-fkmvc", m=1.8))
