"""Exponents that cannot collapse: v^α, Eq. 17 and Eq. 15 at extreme α and tiny units.

Expected values are computed here in log space with plain numpy (logsumexp by hand),
independently of the engine's own rescaling.
"""

import warnings

import numpy as np
import pytest

from fedstrata.algorithms.fuzzifier import fuzzifier_ceiling
from fedstrata.algorithms.multiview import (
    MultiViewModel,
    State,
    local_statistics,
    memberships,
    objective,
    prepare_views,
    view_powers,
)
from fedstrata.algorithms.view_weights import view_weights_from_costs
from fedstrata.errors import ConvergenceWarning

from .conftest import blobs


def _logsumexp(a, axis):
    top = a.max(axis=axis, keepdims=True)
    return np.squeeze(top, axis) + np.log(np.exp(a - top).sum(axis=axis))


def test_view_powers_is_the_plain_power_for_ordinary_alpha():
    v = np.array([[0.1, 0.2, 0.3, 0.4]])
    for alpha in (1.5, 5.0, 50.0):  # 4^-50 ≈ 8e-31: far above the 1e-100 threshold
        assert view_powers(v, alpha).tobytes() == (v**alpha).tobytes()


def test_view_powers_keeps_ratios_where_the_plain_power_underflows():
    v = np.array([0.15, 0.16, 0.17, 0.17, 0.17, 0.18])
    assert not (v**500.0).any()  # the failure: every view's term is 0
    got = view_powers(v, 500.0)
    assert np.isfinite(got).all() and (got > 0).all()
    # ratio v_h^α / v_0^α by hand: exp(α (ln v_h - ln v_0))
    np.testing.assert_allclose(got / got[0], np.exp(500.0 * (np.log(v) - np.log(v[0]))))
    # the factor is H^(α-1)
    np.testing.assert_allclose(np.log(got), 500.0 * np.log(v) + 499.0 * np.log(6.0), rtol=1e-12)


def test_unweighted_view_stays_at_zero_under_the_rescaling():
    v = np.array([0.0, 0.2, 0.2, 0.2, 0.2, 0.2])  # a view no sample holds
    got = view_powers(v, 800.0)
    # by hand: 0.2^800 · 5^799 = (0.2 · 5)^800 / 5 = 0.2
    assert got[0] == 0.0 and np.allclose(got[1:], 0.2, rtol=1e-12)


def test_memberships_at_alpha_500_match_a_log_space_reference():
    views, _ = blobs(n_per=20)
    views = views + [v + 0.1 for v in views] + [2.0 * v for v in views]  # six views
    model = MultiViewModel(4, m=1.5, alpha=500.0, kernel="none", bandwidth=8.0)
    pv = prepare_views(views, model)
    rng = np.random.default_rng(0)
    A = tuple(X[rng.choice(len(X), 4, replace=False)][None] for X in views)
    v = rng.dirichlet(np.full(6, 200.0))
    stats = local_statistics(pv, State(A, v[None]), model)
    # reference: log W_ik = logsumexp_h(α ln v_h + ln d_ik^h), μ ∝ W^(-1/(m-1))
    logd = []
    for X, a, delta in zip(views, A, pv.deltas, strict=True):
        phi = (delta[:, None, :] * (X[:, None, :] - a[0][None]) ** 2).sum(-1)
        with np.errstate(divide="ignore"):  # a centre drawn on a sample: log 0 = -inf
            logd.append(np.log(-np.expm1(-phi)))
    logW = _logsumexp(
        np.stack([500.0 * np.log(vh) + d for vh, d in zip(v, logd, strict=True)]), axis=0
    )
    z = -logW / (model.m - 1.0)
    want = np.exp(z - _logsumexp(z, axis=1)[:, None])
    got = stats.memberships[0]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert got.max(axis=1).mean() > 0.5  # not the uniform 1/4 of the underflow


def test_objective_at_large_alpha_is_the_power_mean_of_the_costs():
    costs = np.array([[3.0, 1.0, 2.0, 5.0, 4.0, 2.5]]) * 40
    counts = np.full(6, 40)
    alpha = 400.0
    v = view_weights_from_costs(costs, counts, alpha)

    class _S:
        view_costs = costs

    J = objective(_S(), v, alpha)  # type: ignore[arg-type]
    # J H^(α-1) at Eq. 17's weights = (Σ_h c_h^(-1/(α-1)))^-(α-1) · 6^(α-1), by hand in logs
    p = -1.0 / (alpha - 1.0)
    log_want = -(alpha - 1.0) * np.log((costs[0] ** p).sum()) + (alpha - 1.0) * np.log(6.0)
    assert np.isfinite(J).all() and J[0] > 0
    np.testing.assert_allclose(np.log(J[0]), log_want, rtol=1e-10)


@pytest.mark.parametrize("units", [1.0, 1e-160])
def test_memberships_do_not_depend_on_the_distance_units(units):
    W = np.array([[1.0, 4.0, 9.0], [2.0, 0.5, 8.0], [0.0, 3.0, 1.0]]).T[None]  # (1, c, n)
    got = memberships(W * units, m=1.5)
    # by hand: μ_ik ∝ W_ik^-2; the third sample sits on its first centre
    inv = np.array([[1.0, 1 / 16, 1 / 81], [1 / 4, 4.0, 1 / 64]])
    want = np.vstack([inv / inv.sum(axis=1, keepdims=True), [[1.0, 0.0, 0.0]]]).T
    np.testing.assert_allclose(got[0], want, rtol=1e-12)


@pytest.mark.parametrize("units", [1.0, 1e-305])
def test_view_weights_do_not_depend_on_the_cost_units(units):
    costs = np.array([[1.0, 4.0]]) * units
    v = view_weights_from_costs(costs, np.array([1, 1]), 3.0)
    # by hand: v ∝ c^(-1/2) = [1, 1/2]
    np.testing.assert_allclose(v, [[2 / 3, 1 / 3]], rtol=1e-12)


def _axis_design(variances):
    """2·D points ±a_j e_j: mean 0, covariance diag(2 a_j² / (2 D)) = the variances."""
    v = np.asarray(variances, dtype=np.float64)
    a = np.sqrt(v * len(v))
    X = np.vstack([np.diag(a), -np.diag(a)])
    np.testing.assert_allclose(X.var(axis=0), v)
    return X


def test_fuzzifier_ceiling_by_hand():
    X = _axis_design([3.0, 3.0, 2.0, 2.0])
    # λ = 3 / 10, m* = 1 / (1 - 2λ) = 2.5; split into two views it is the same metric
    assert fuzzifier_ceiling([X]) == pytest.approx(2.5, rel=1e-9)
    assert fuzzifier_ceiling([X[:, :2], X[:, 2:]]) == pytest.approx(2.5, rel=1e-9)
    # feature weights scale the variances: [3, 3, 2, 2]·[1, 1, 3, 3] -> λ = 6/18, m* = 3
    w = [np.ones(2), np.full(2, 3.0)]
    assert fuzzifier_ceiling([X[:, :2], X[:, 2:]], w) == pytest.approx(3.0, rel=1e-9)
    # Eq. 17's weights at the mean, v_h^α ∝ T_h^(-α/(α-1)) with T = [6, 4], α = 3:
    # feature variances 3·6^-1.5 = 0.204 (view 1) and 2·4^-1.5 = 0.25 (view 2), trace
    # 6^-0.5 + 4^-0.5: λ = 0.25 / (6^-0.5 + 0.5)
    lam = 2.0 * 4.0**-1.5 / (6.0**-0.5 + 4.0**-0.5)
    want = 1.0 / (1.0 - 2.0 * lam)
    assert fuzzifier_ceiling([X[:, :2], X[:, 2:]], alpha=3.0) == pytest.approx(want, rel=1e-9)
    # one dominant axis (λ >= 1/2): the mean is never stable
    assert fuzzifier_ceiling([_axis_design([5.0, 1.0, 1.0])]) == float("inf")


def test_auto_m_at_or_above_the_ceiling_becomes_the_rule():
    from fedstrata.algorithms import HKMVFC
    from fedstrata.algorithms.fuzzifier import recommended_fuzzifier
    from fedstrata.algorithms.fuzzifier_check import metric_weights

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, 120))
    y = np.repeat(np.arange(4), 40)
    Z = centres[y] + rng.normal(size=(y.size, 120)) * 2.0  # 120 noisy dimensions: λ small
    views = [Z[:, :60], Z[:, 60:]]
    weights = metric_weights(views, HKMVFC(4)._build(1.1))
    ceiling = fuzzifier_ceiling(views, weights, 50.0)
    assert ceiling <= 1.3  # the precondition: auto (1.3 here) sits at or above it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = HKMVFC(4, random_state=0, max_iter=3).fit(views)
    rule = recommended_fuzzifier(min(ceiling, fuzzifier_ceiling(views, weights)))
    assert est.model_.m == rule < ceiling
