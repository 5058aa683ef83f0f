"""Sample-level DP's pure functions: box units, row clipping, the noise split."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fedstrata.errors import ValidationError
from fedstrata.privacy.sample_dp import (
    PrivateConfig,
    box_units,
    cells_sensitivity,
    clip_rows,
    moments_sensitivity,
    split_sigmas,
)

finite = st.floats(-1e6, 1e6, allow_nan=False)


@given(arrays(np.float64, (7, 3), elements=finite), st.floats(0.1, 100), st.floats(-50, 50))
def test_box_units_lie_in_the_box_and_invert_inside_it(X, width, low):
    lo, hi = np.full(3, low), np.full(3, low + width)
    U = box_units(X, lo, hi)
    assert np.all(np.abs(U) <= 1.0 + 1e-12)
    inside = (lo <= X) & (hi >= X)
    back = lo + (U + 1.0) * width / 2.0
    assert np.allclose(back[inside], X[inside], rtol=1e-9, atol=1e-9 * (1 + abs(low) + width))


def test_a_constant_feature_is_zero_and_bad_bounds_are_refused():
    X = np.array([[1.0, 5.0], [2.0, 5.0]])
    assert np.array_equal(box_units(X, np.array([0.0, 5.0]), np.array([4.0, 5.0]))[:, 1], [0, 0])
    with pytest.raises(ValidationError):
        box_units(X, np.array([1.0, 1.0]), np.array([0.0, 2.0]))


@given(arrays(np.float64, (9, 4), elements=finite), st.floats(1e-3, 1e3))
def test_clipped_rows_are_within_the_radius_and_short_rows_are_kept(U, r):
    C = clip_rows(U, r)
    norms = np.linalg.norm(U, axis=1)
    assert np.all(np.linalg.norm(C, axis=1) <= r * (1 + 1e-12))
    short = norms <= r
    assert np.allclose(C[short], U[short])
    # a clipped row keeps its direction
    long = norms > r
    assert np.allclose(C[long] * norms[long, None] / r, U[long], rtol=1e-9, atol=1e-6)


@given(st.lists(st.floats(0.01, 100.0), min_size=1, max_size=8), st.floats(0.01, 100.0))
def test_the_split_is_one_gaussian_mechanism_of_multiplier_z(radii, z):
    """Scaling the blocks to unit bound: (R/σ_s)² + (C/σ_c)² = 1/z², whatever ρ."""
    s_sum, s_count = split_sigmas(z, radii)
    big_r, big_c = math.sqrt(sum(r * r for r in radii)), math.sqrt(len(radii))
    assert (big_r / s_sum) ** 2 + (big_c / s_count) ** 2 == pytest.approx(1.0 / z**2, rel=1e-9)
    # when the sums' bound is the larger, the counts get less noise than one std for both
    if big_r >= big_c:
        assert s_count <= z * cells_sensitivity(radii) * (1 + 1e-12)


def test_the_sensitivities_are_the_bounds_written_out():
    # moments: √d on Σu and on Σu², 1 on the count, per view
    assert moments_sensitivity([2, 3]) == pytest.approx(math.sqrt(5 + 7))
    assert cells_sensitivity([2.0, 1.0]) == pytest.approx(math.sqrt(5 + 2))


def test_shares_add_up_to_the_whole_noise_once():
    cfg = PrivateConfig(noise=3.0, shares=4, radius=0.5)
    total = cfg.total_sigmas([4, 9])
    client = cfg.client_sigmas([4, 9])
    for t, c in zip(total, client, strict=True):
        assert 4 * c * c == pytest.approx(t * t)
    assert cfg.radii([4, 9]) == [1.0, 1.5]


def test_a_budget_refuses_the_release_after_the_last():
    cfg = PrivateConfig(noise=1.0, releases=3)
    for made in range(3):
        cfg.check_release(made)
    from fedstrata.privacy.sample_dp import BudgetSpentError

    with pytest.raises(BudgetSpentError):
        cfg.check_release(3)
    PrivateConfig(noise=1.0).check_release(10**6)  # no budget given: no limit
