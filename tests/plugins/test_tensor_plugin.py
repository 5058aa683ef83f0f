"""The tensor family through the node core: simulated federations against a plain loop.

The reference here is written from the algorithms' public pieces only (pooled min-max
scaling by numpy, :class:`TensorClient` steps, a sum, :func:`aggregate`), not from the
plug-in, so a run that routes, sums, masks or orders anything wrongly shows up.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from sklearn.metrics import adjusted_rand_score

from fedstrata.algorithms.tensor import METHODS, TensorClient, aggregate
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate

ROUNDS = 4


def scenario(method: str, *, fogs: int = 0, clients: int = 6, **extra) -> dict:
    """A small federation of the paper's synthetic data, every round run (tol 0)."""
    sc = {
        "name": f"t-{method}",
        "seed": 3,
        "data": {
            "dataset": "heat-kernel-synthetic",
            "params": {"n_per_cluster": 120},
            "partition": {"kind": "iid"},
        },
        "topology": {"clients": {"count": clients, "link": {"latency": 0.02}}},
        "algorithm": {"name": method, "n_clusters": 4},
        "protocol": {"rule": "sum", "rounds": ROUNDS, "tol": 0.0, "deadline_s": 30},
    }
    if fogs:
        sc["topology"]["tiers"] = [{"name": "fog", "count": fogs, "link": {"latency": 0.01}}]
    for key, value in extra.items():
        sc.setdefault(key, {}).update(value)
    return sc


def run(sc: dict):
    return simulate(parse_scenario(yaml.safe_dump(sc)))


def root_state(fed) -> dict[str, np.ndarray]:
    return fed.sim.results["cloud"]["state"]


def assert_close(a: dict, b: dict, rtol: float, atol: float) -> None:
    assert set(a) == set(b)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=rtol, atol=atol, err_msg=key)


def reference(fed, rounds: int, private: bool = False) -> dict[str, np.ndarray]:
    """The federation as a loop: the same clients, the recorded first model, plain sums.

    ``private``: the run's setup was private (sums only), so its ranges are the pooled
    mean ± 3 population s.d.s rather than the extremes no client may disclose.
    """
    model = fed.model
    X = fed.dataset.views
    every = np.concatenate(list(fed.client_indices.values()))
    if private:
        lo = [V[every].mean(axis=0) - 3 * V[every].std(axis=0) for V in X]
        hi = [V[every].mean(axis=0) + 3 * V[every].std(axis=0) for V in X]
    else:
        lo = [V[every].min(axis=0) for V in X]
        hi = [V[every].max(axis=0) for V in X]

    def scaled(V, h):
        span = hi[h] - lo[h]
        return np.where(span > 0, (V - lo[h]) / np.where(span > 0, span, 1.0), 0.0)

    clients = [
        TensorClient(
            model, [scaled(X[h][idx], h) for h in fed.client_views[c]], fed.client_views[c]
        )
        for c, idx in fed.client_indices.items()
    ]
    glob = next(r["fields"]["state"] for r in fed.sim.records if r["kind"] == "init")
    for _ in range(rounds):
        msgs = [cl.step(glob) for cl in clients]
        total = {k: sum(m[k] for m in msgs) for k in msgs[0]}
        glob, _ = aggregate(model, total, glob)
    return glob


@pytest.mark.parametrize("fogs", [0, 2], ids=["flat", "fog"])
@pytest.mark.parametrize("method", METHODS)
def test_a_run_equals_the_plain_loop(method, fogs):
    # with a fog tier only the order of the sums changes (the first model differs: each
    # fog reduces its clients' k-means candidates, so each run has its own loop)
    fed, summary, _ = run(scenario(method, fogs=fogs))
    assert summary["status"] == "round_limit" and summary["rounds"] == ROUNDS
    assert_close(root_state(fed), reference(fed, ROUNDS), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("fogs", [0, 2], ids=["flat", "fog"])
@pytest.mark.parametrize("method", ["fedhk-parafac2", "fedhk-tucker"])
def test_a_summed_statistics_run_equals_the_plain_loop(method, fogs):
    sc = scenario(method, fogs=fogs)
    sc["algorithm"]["message"] = "stats"
    fed, summary, _ = run(sc)
    assert fed.model.factor_message == "stats" and fed.model.local_epochs == 1
    assert summary["status"] == "round_limit" and summary["rounds"] == ROUNDS
    assert_close(root_state(fed), reference(fed, ROUNDS), rtol=1e-7, atol=1e-9)


def test_labels_of_every_client_come_from_the_final_model():
    fed, summary, _ = run(scenario("e-fkmvc"))
    labels = np.full(fed.dataset.n_samples, -1)
    for c, idx in fed.client_indices.items():
        labels[idx] = fed.sim.results[c]["labels"]
    assert (labels >= 0).all()
    ari = adjusted_rand_score(fed.dataset.labels, labels)
    assert ari == pytest.approx(summary["metrics"]["ari"], abs=1e-12)
    assert ari > 0.9


@pytest.mark.parametrize("method", ["e-fkmvc", "fedhk-tucker"])
def test_secure_aggregation_masks_the_messages_and_keeps_the_sum(method):
    secure = {"secure_aggregation": "secagg"}  # groups of >= 3: three fogs of three clients
    fed, masked, _ = run(scenario(method, fogs=3, clients=9, privacy=secure))
    assert masked["rounds"] == ROUNDS
    # fixed-point masking rounds each value to 2**-precision_bits: the sums agree closely
    assert_close(root_state(fed), reference(fed, ROUNDS, private=True), rtol=1e-5, atol=1e-7)
    # the private setup seeds from securely summed cells, not from the clients' own
    # k-means candidates, so it starts elsewhere than the plain run (0.95 against 1.0 here)
    assert masked["metrics"]["ari"] >= 0.9


@pytest.mark.parametrize("kind", ["async", "buffered"])
def test_asynchronous_kinds_mix_the_sums(kind):
    sc = scenario("e-fkmvc", fogs=2, protocol={"kind": kind, "rounds": 12})
    _, summary, _ = run(sc)
    assert summary["status"] in ("round_limit", "converged"), summary["reason"]
    assert summary["metrics"]["ari"] > 0.9


def test_a_crashed_client_leaves_a_finished_run():
    sc = scenario(
        "fedhk-tucker",
        fogs=2,
        protocol={"quorum": 0.5, "deadline_s": 2, "rounds": 8},
        faults={"crashes": [{"node": "client-1", "at": 0.5}]},
    )
    _, summary, _ = run(sc)
    assert summary["status"] in ("round_limit", "converged"), summary["reason"]
    assert summary["rounds"] == 8
    assert summary["metrics"]["ari"] > 0.8
