"""factor_message="stats": a round is one centralised iteration, whatever the split."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstrata.algorithms.tensor import (
    TensorClient,
    TensorModel,
    aggregate,
    initial_global,
    tensor_federated_fit,
)
from fedstrata.errors import ValidationError


def _blobs(seed: int, n_per: int = 30) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), n_per)
    means = rng.uniform(0, 1, (3, 7))
    X = means[y] + 0.08 * rng.standard_normal((y.size, 7))
    return [X[:, :3], X[:, 3:]], y


def _model(kind: str, **kw) -> TensorModel:
    base = {"local_epochs": 1, "factor_message": "stats", "m": 1.3, "alpha": 50.0}
    if kind == "fedhk-parafac2":
        base["pad"] = True
    return TensorModel(kind, 3, (3, 4), **{**base, **kw})


def _round(model, parts, glob):
    msgs = [c.step(glob) for c in parts]
    total = {k: sum(msg[k] for msg in msgs) for k in msgs[0]}
    return aggregate(model, total, glob)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["fedhk-parafac2", "fedhk-tucker"]),
    st.integers(0, 10_000),
    st.integers(2, 9),
    st.booleans(),
)
def test_a_split_federation_equals_one_client_round_by_round(kind, seed, n_clients, bandwidth):
    views, _ = _blobs(seed)
    # the paper's delta="local" measures each client against its own range: by design
    # not split-invariant; the pooled range and the bandwidth kernel are
    model = _model(kind, **({"bandwidth": 8.0} if bandwidth else {"delta": "pooled"}))
    rng = np.random.default_rng(seed)
    cut = np.sort(rng.choice(np.arange(1, 90), n_clients - 1, replace=False))
    order = rng.permutation(90)
    pieces = np.split(order, cut)
    scales = None
    if bandwidth:  # the pooled widths every client is given
        scales = TensorClient(model, views, [0, 1]).kernel_scales
    whole = [TensorClient(model, views, [0, 1], scales)]
    split = [TensorClient(model, [X[p] for X in views], [0, 1], scales) for p in pieces]
    start = initial_global(model, [views[0][:3], views[1][:3]])
    g1, g2 = start, start
    for _ in range(4):
        g1, J1 = _round(model, whole, g1)
        g2, J2 = _round(model, split, g2)
        assert pytest.approx(J2, rel=1e-9) == J1
        for k in g1:
            np.testing.assert_allclose(g2[k], g1[k], rtol=1e-7, atol=1e-9)


def test_tiny_clients_lose_nothing_against_one_client():
    views, _ = _blobs(3, n_per=8)  # 24 samples, 12 clients of 2
    model = _model("fedhk-tucker", bandwidth=8.0)
    ids = np.arange(24)
    one = tensor_federated_fit(model, [views], rounds=15, tol=0, init="random", random_state=1)
    many = tensor_federated_fit(
        model,
        [[X[p] for X in views] for p in np.split(ids, 12)],
        rounds=15,
        tol=0,
        init="random",
        random_state=1,
        scaling="minmax",
    )
    labels = np.concatenate(many.labels)
    np.testing.assert_array_equal(labels, one.labels[0])
    assert len(np.unique(labels)) == 3  # not a collapse both runs share
    np.testing.assert_allclose(many.objective_history, one.objective_history, rtol=1e-8)


def test_a_held_out_view_keeps_its_rows_and_the_holders_weigh_the_rest():
    views, _ = _blobs(5)
    model = _model("fedhk-tucker")
    a = TensorClient(model, views, [0, 1])
    b = TensorClient(model, [views[0][:20]], [0])  # holds only view 0
    glob = initial_global(model, [views[0][:3], views[1][:3]])
    new, J = _round(model, [a, b], glob)
    assert np.isfinite(J) and np.isclose(new["V"].sum(), 1.0)
    msg = b.step(glob)
    assert msg["S_den"][:, 1].sum() == 0 and msg["presence"][1] == 0


@pytest.mark.parametrize(
    ("kind", "kw", "match"),
    [
        ("fedhk-mvc-person", {}, "personalise"),
        ("fedhk-parafac2", {"local_epochs": 5}, "local_epochs must be 1"),
        ("e-fkmvc", {}, "efkmvc_message"),
        ("fedhk-tucker", {"factor_message": "sums"}, "factor_message must be one of"),
    ],
)
def test_what_the_stats_message_refuses(kind, kw, match):
    with pytest.raises(ValidationError, match=match):
        _model(kind, **kw)
