"""MVKM-ED's saturation check: the author's β on unstandardized views ties every sample."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstrata.algorithms import MVKMED
from fedstrata.algorithms.mvkm_ed import saturated_share
from fedstrata.errors import ConvergenceWarning


def _blobs(scale: float, offset: float, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), 60)
    means = np.array([[0.0, 0.0, 0.0], [4.0, 4.0, 0.0], [0.0, 4.0, 4.0]])
    X = means[y] + rng.standard_normal((y.size, 3))
    Z = -means[y] + rng.standard_normal((y.size, 3))
    return [X * scale + offset, Z * scale + offset], y


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 30),
    st.integers(1, 4),
    st.integers(2, 5),
    st.floats(1e-3, 1e3),
    st.integers(0, 2**31 - 1),
)
def test_saturated_share_counts_the_samples_whose_cost_is_one_for_every_centre(
    n: int, d: int, c: int, beta: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    views = [rng.standard_normal((n, d)) * rng.uniform(0.1, 20) for _ in range(2)]
    centers = [rng.standard_normal((c, d)) * 5 for _ in range(2)]
    betas = np.array([beta, beta * rng.uniform(0.5, 2.0)])
    # direct: the rectified Gaussian cost, evaluated as the algorithm evaluates it
    tied = np.ones(n, dtype=bool)
    for X, A, b in zip(views, centers, betas, strict=True):
        d2 = ((X[:, None, :] - A[None]) ** 2).sum(-1)
        tied &= (1.0 - np.exp(-b * d2) == 1.0).all(axis=1)
    got = saturated_share(views, centers, betas)
    # the two sides compute d2 in different orders: a sample may sit on the boundary
    assert abs(got - tied.mean()) <= 1.0 / n + 1e-12


def test_mvkm_ed_warns_when_the_kernel_cannot_rank_the_centres() -> None:
    views, _ = _blobs(scale=40.0, offset=200.0)  # pixel-like units: β from the sums is large
    with pytest.warns(ConvergenceWarning, match="standardize"):
        est = MVKMED(3, random_state=0).fit(views)
    assert np.bincount(est.labels_, minlength=3).max() > 0.9 * len(est.labels_)


def test_mvkm_ed_on_unit_scale_views_neither_warns_nor_ties() -> None:
    views, _ = _blobs(scale=1.0, offset=1.0)  # β·‖x − a‖² of order 1
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="MVKM-ED", category=ConvergenceWarning)
        est = MVKMED(3, init="k-means++", random_state=0, n_init=5).fit(views)
    assert len(np.unique(est.labels_)) == 3


def test_view_weights_of_all_zero_costs_are_uniform_without_a_warning() -> None:
    from fedstrata.algorithms.view_weights import view_weights_from_costs

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = view_weights_from_costs(np.zeros(3), np.full(3, 5.0), alpha=2.0)
    np.testing.assert_array_equal(v, np.full(3, 1.0 / 3.0))
