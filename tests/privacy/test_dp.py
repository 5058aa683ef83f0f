"""Differential privacy: clipping, Gaussian noise (Eq. 89/90), the Eq. 93 schedule, the accountant."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedstrata.errors import FedstrataError, ValidationError
from fedstrata.privacy import dp

FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=200)
DELTA = 1e-5


def norm(arrays: list[np.ndarray]) -> float:
    return float(np.linalg.norm(np.concatenate([np.ravel(a) for a in arrays])))


# ---------------------------------------------------------------------------
# clipping

array_lists = st.lists(
    hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=0, max_dims=2, max_side=5),
        elements=st.floats(-1e150, 1e150, allow_nan=False, allow_infinity=False),
    ),
    min_size=0,
    max_size=4,
)


@pytest.mark.slow
@FAST
@given(arrays=array_lists, clip=st.sampled_from([1e-6, 0.5, 1.0, 3.7, 1e4, 1e140]))
def test_clip_bound_holds_and_keeps_direction(arrays: list[np.ndarray], clip: float) -> None:
    before = [a.copy() for a in arrays]
    out, factor = dp.clip_l2(arrays, clip)
    assert [a.shape for a in out] == [a.shape for a in arrays]
    assert all(np.array_equal(a, b) for a, b in zip(arrays, before, strict=True))  # not modified
    size = sum(a.size for a in arrays)
    original = norm(arrays) if size else 0.0
    if original <= clip:
        assert factor == 1.0
        assert all(np.array_equal(a, b) for a, b in zip(out, arrays, strict=True))
    else:
        assert norm(out) <= clip * (1 + 1e-12)
        assert norm(out) == pytest.approx(clip, rel=1e-12)
        assert factor == pytest.approx(clip / original, rel=1e-12)
        for a, b in zip(out, arrays, strict=True):
            np.testing.assert_allclose(a, b * factor, rtol=1e-12, atol=clip * 1e-15)


def test_clip_survives_entries_near_the_float_limit() -> None:
    big = np.full(4, 1e308)  # ‖x‖² overflows float64
    out, factor = dp.clip_l2([big, -big], 2.0)
    np.testing.assert_allclose(out[0], np.full(4, 2.0 / math.sqrt(8)), rtol=1e-14)
    np.testing.assert_allclose(out[1], -out[0])
    assert factor == pytest.approx(2.0 / (1e308 * math.sqrt(8)), rel=1e-14)


def test_clip_of_zero_and_integer_input() -> None:
    out, factor = dp.clip_l2([np.zeros(3), [[0, 0]]], 1.0)
    assert factor == 1.0
    assert out[1].dtype == np.float64
    assert out[1].shape == (1, 2)
    out, factor = dp.clip_l2([[3, 4]], 1.0)  # ints: ‖(3, 4)‖ = 5
    np.testing.assert_allclose(out[0], [0.6, 0.8])
    assert factor == pytest.approx(0.2)


# ---------------------------------------------------------------------------
# calibration


def test_eq89_classic_calibration_and_the_eq92_erratum() -> None:
    # σ² = 2 ln(1.25/δ) Δ²/ε²: 23.47 at ε = 1, δ = 1e-5, Δ = 1, not the 23.03 printed as Eq. 92
    assert dp.gaussian_sigma(1.0, 1e-5) ** 2 == pytest.approx(2 * math.log(1.25e5))
    assert dp.gaussian_sigma(1.0, 1e-5) ** 2 == pytest.approx(23.47, abs=5e-3)
    assert dp.gaussian_sigma(0.5, 1e-3, sensitivity=2.0) == pytest.approx(
        2.0 * math.sqrt(2 * math.log(1250.0)) / 0.5
    )
    # Eq. 90: variance 2 ln(1.25/δ) / (ε² n²)
    assert dp.view_weight_sigma(0.8, 1e-5, 400) ** 2 == pytest.approx(
        2 * math.log(1.25e5) / (0.8**2 * 400**2)
    )


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0.0, 1e-5), "epsilon"),
        ((-1.0, 1e-5), "epsilon"),
        ((1.0, 0.0), "delta"),
        ((1.0, 1.0), "delta"),
        ((1.0, math.nan), "delta"),
        ((True, 1e-5), "epsilon"),
    ],
)
def test_calibration_rejects_bad_parameters(args: tuple[float, float], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        dp.gaussian_sigma(*args)


# ---------------------------------------------------------------------------
# the mechanism


def test_noise_std_matches_sigma() -> None:
    n = 400_000
    rel = 5 / math.sqrt(2 * n)  # five standard errors of a sample standard deviation
    rng = np.random.default_rng(1)
    release = dp.gaussian_mechanism(
        [np.zeros(n // 2), np.zeros((n // 4, 2))], clip=3.0, rng=rng, epsilon=0.7, delta=DELTA
    )
    sigma = 3.0 * math.sqrt(2 * math.log(1.25 / DELTA)) / 0.7
    assert release.sigma == pytest.approx(sigma)
    assert release.noise_std == release.sigma
    assert release.noise_multiplier == pytest.approx(sigma / 3.0)
    noise = np.concatenate([a.ravel() for a in release.arrays])
    assert np.std(noise) == pytest.approx(sigma, rel=rel)
    assert abs(np.mean(noise)) < 5 * sigma / math.sqrt(n)


def test_noise_is_added_to_the_clipped_vector() -> None:
    x = [np.full(50_000, 10.0), np.full(50_000, -10.0)]
    out = dp.gaussian_mechanism(x, clip=1.0, sigma=0.5, rng=np.random.default_rng(2))
    assert out.norm == pytest.approx(10.0 * math.sqrt(100_000))
    assert out.clip_factor == pytest.approx(1.0 / out.norm)
    expected = 10.0 * out.clip_factor
    assert np.mean(out.arrays[0]) == pytest.approx(expected, abs=5 * 0.5 / math.sqrt(50_000))
    assert np.mean(out.arrays[1]) == pytest.approx(-expected, abs=5 * 0.5 / math.sqrt(50_000))
    assert np.std(out.arrays[0]) == pytest.approx(0.5, rel=0.02)


def test_distributed_noise_sums_to_sigma_squared() -> None:
    n_clients, size, sigma = 16, 200_000, 2.0
    rng = np.random.default_rng(3)
    releases = [
        dp.gaussian_mechanism(
            [np.zeros(size)], clip=1.0, sigma=sigma, rng=rng, distributed=True, n_clients=n_clients
        )
        for _ in range(n_clients)
    ]
    per_client = sigma / math.sqrt(n_clients)
    assert all(r.noise_std == pytest.approx(per_client) for r in releases)
    assert all(r.sigma == sigma for r in releases)
    assert np.std(releases[0].arrays[0]) == pytest.approx(per_client, rel=5 / math.sqrt(2 * size))
    total = np.sum([r.arrays[0] for r in releases], axis=0)
    assert np.var(total) == pytest.approx(sigma**2, rel=5 * math.sqrt(2 / size))
    # only 9 of the 16 reach the sum: variance 9/16 σ²
    partial = np.sum([r.arrays[0] for r in releases[:9]], axis=0)
    assert np.std(partial) == pytest.approx(dp.effective_sigma(sigma, 16, 9), rel=0.01)
    assert dp.effective_sigma(sigma, 16, 9) == pytest.approx(sigma * 0.75)


def test_mechanism_is_deterministic_given_the_generator_and_leaves_input_alone() -> None:
    x = [np.arange(5.0), np.ones((2, 2))]
    copy = [a.copy() for a in x]
    a = dp.gaussian_mechanism(x, clip=2.0, sigma=1.0, rng=np.random.default_rng(7))
    b = dp.gaussian_mechanism(x, clip=2.0, sigma=1.0, rng=np.random.default_rng(7))
    c = dp.gaussian_mechanism(x, clip=2.0, sigma=1.0, rng=np.random.default_rng(8))
    assert all(np.array_equal(p, q) for p, q in zip(a.arrays, b.arrays, strict=True))
    assert not np.array_equal(a.arrays[0], c.arrays[0])
    assert all(np.array_equal(p, q) for p, q in zip(x, copy, strict=True))
    assert all(p is not q for p, q in zip(a.arrays, x, strict=True))
    zero = dp.gaussian_mechanism(x, clip=100.0, sigma=0.0, rng=np.random.default_rng(7))
    assert all(np.array_equal(p, q) for p, q in zip(zero.arrays, x, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sigma": 1.0, "rng": 7}, "Generator"),
        ({"sigma": 1.0, "epsilon": 1.0, "delta": DELTA}, "either"),
        ({"epsilon": 1.0}, "either"),
        ({}, "either"),
        ({"sigma": 1.0, "distributed": True}, "n_clients"),
        ({"sigma": 1.0, "n_clients": 3}, "distributed"),
        ({"sigma": 1.0, "distributed": True, "n_clients": 0}, "n_clients"),
        ({"sigma": -1.0}, "sigma"),
        ({"sigma": 1.0, "clip": 0.0}, "clip"),
        ({"sigma": 1.0, "arrays": [np.array([1.0, np.nan])]}, "NaN"),
        ({"sigma": 1.0, "arrays": [np.array(["a"])]}, "real"),
        ({"sigma": 1.0, "arrays": np.ones(3)}, "list"),
    ],
)
def test_mechanism_rejects_misuse(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"arrays": [np.ones(3)], "clip": 1.0, "rng": np.random.default_rng()}
    args.update(kwargs)
    with pytest.raises(ValidationError, match=match):
        dp.gaussian_mechanism(**args)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# accountant


def rdp_epsilon_by_hand(z: float, rounds: int, delta: float) -> float:
    """T Gaussian releases: RDP α·T/(2z²), then the conversion of Canonne, Kamath and Steinke."""
    best = math.inf
    for a in dp.DEFAULT_ORDERS:
        rdp = rounds * a / (2 * z * z)
        best = min(best, rdp + math.log1p(-1 / a) - math.log(delta * a) / (a - 1))
    return max(best, 0.0)


def analytic_gaussian_epsilon(z: float, delta: float) -> float:
    """The exact ε of one Gaussian release (Balle & Wang 2018), by bisection on δ(ε)."""

    def phi(x: float) -> float:
        return 0.5 * math.erfc(-x / math.sqrt(2))

    def delta_of(eps: float) -> float:
        return phi(1 / (2 * z) - eps * z) - math.exp(eps) * phi(-1 / (2 * z) - eps * z)

    lo, hi = 0.0, 50.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if delta_of(mid) > delta else (lo, mid)
    return hi


def test_accountant_matches_the_rdp_formula_by_hand() -> None:
    for z, rounds in [(1.0, 1), (4.0, 10), (28.6, 50), (0.7, 3)]:
        acc = dp.Accountant(DELTA)
        acc.spend(z, count=rounds)
        assert acc.epsilon() == pytest.approx(rdp_epsilon_by_hand(z, rounds, DELTA), rel=1e-9)
        assert acc.spent() == (acc.epsilon(), DELTA, rounds)


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 0.9, 0.99])
def test_classic_sigma_single_release_is_within_its_design_epsilon(epsilon: float) -> None:
    z = dp.gaussian_sigma(epsilon, DELTA)  # σ/clip with Δ = clip
    acc = dp.Accountant(DELTA)
    acc.spend(z)
    exact = analytic_gaussian_epsilon(z, DELTA)
    # the exact ε ≤ the RDP bound ≤ the ε Eq. 89 was designed for
    assert exact <= acc.epsilon() <= epsilon
    assert exact > 0.5 * epsilon  # and the bounds are not vacuous


def test_epsilon_grows_with_rounds_and_shrinks_with_sigma() -> None:
    by_rounds = []
    for rounds in [1, 2, 5, 10, 50, 200]:
        acc = dp.Accountant(DELTA)
        acc.spend(5.0, count=rounds)
        by_rounds.append(acc.epsilon())
    assert by_rounds == sorted(by_rounds)
    assert len(set(by_rounds)) == len(by_rounds)
    by_sigma = []
    for z in [0.5, 1.0, 2.0, 5.0, 20.0, 100.0]:
        acc = dp.Accountant(DELTA)
        acc.spend(z, count=10)
        by_sigma.append(acc.epsilon())
    assert by_sigma == sorted(by_sigma, reverse=True)
    assert len(set(by_sigma)) == len(by_sigma)


def test_accountant_composition_subsampling_and_edge_cases() -> None:
    one_by_one = dp.Accountant(DELTA)
    for _ in range(7):
        one_by_one.spend(3.0)
    at_once = dp.Accountant(DELTA)
    at_once.spend(3.0, count=7)
    assert one_by_one.epsilon() == pytest.approx(at_once.epsilon(), rel=1e-12)
    assert one_by_one.releases == 7

    sampled = dp.Accountant(DELTA)
    sampled.spend(3.0, sampling_rate=0.1, count=7)
    assert sampled.epsilon() < at_once.epsilon()  # amplification by sampling

    assert dp.Accountant(DELTA).epsilon() == 0.0
    no_noise = dp.Accountant(DELTA)
    no_noise.spend(0.0)
    assert no_noise.epsilon() == math.inf
    for bad in [{"sampling_rate": 0.0}, {"sampling_rate": 1.5}, {"count": 0}]:
        with pytest.raises(ValidationError):
            dp.Accountant(DELTA).spend(1.0, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        dp.Accountant(1.0)


@pytest.mark.parametrize(
    ("epsilon", "delta", "rounds"),
    [(1.0, 1e-5, 1), (1.0, 1e-5, 50), (8.0, 1e-6, 100), (0.1, 1e-3, 5)],
)
def test_sigma_for_inverts_the_accountant(epsilon: float, delta: float, rounds: int) -> None:
    z = dp.sigma_for(epsilon, delta, rounds)
    acc = dp.Accountant(delta)
    acc.spend(z, count=rounds)
    assert acc.epsilon() <= epsilon
    assert acc.epsilon() == pytest.approx(epsilon, rel=1e-5)
    tighter = dp.Accountant(delta)
    tighter.spend(z / (1 + 2e-6), count=rounds)
    assert tighter.epsilon() > epsilon


@pytest.mark.slow
def test_sigma_for_with_client_sampling() -> None:
    z = dp.sigma_for(2.0, 1e-5, 20, sampling_rate=0.2, rtol=1e-3)
    acc = dp.Accountant(1e-5)
    acc.spend(z, sampling_rate=0.2, count=20)
    assert acc.epsilon() <= 2.0
    assert acc.epsilon() == pytest.approx(2.0, rel=1e-2)
    assert z < dp.sigma_for(2.0, 1e-5, 20)


# ---------------------------------------------------------------------------
# Eq. 93


def test_eq93_schedule_literal() -> None:
    eps = dp.adaptive_budget(2.0, 25)
    assert eps.shape == (25,)
    assert eps[0] == pytest.approx(2.0 / 5.0)
    np.testing.assert_allclose(eps, 2.0 / 5.0 / np.sqrt(np.arange(1, 26)))
    assert np.all(np.diff(eps) < 0)  # round 0 gets the largest ε, the weakest privacy


@pytest.mark.parametrize(("rounds", "ratio"), [(23, 1.72), (50, 1.80)])
def test_eq93_overspends_under_basic_composition(rounds: int, ratio: float) -> None:
    raw = dp.adaptive_budget(1.0, rounds)
    assert raw.sum() == pytest.approx(ratio, abs=5e-3)
    basic = dp.adaptive_budget(1.0, rounds, normalise="basic")
    assert basic.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(basic / raw, basic[0] / raw[0])  # same shape, rescaled


@pytest.mark.parametrize(("epsilon_total", "rounds"), [(1.0, 1), (1.0, 23), (1.0, 50), (4.0, 10)])
def test_normalised_eq93_spends_the_target_by_the_accountant(
    epsilon_total: float, rounds: int
) -> None:
    raw = dp.adaptive_budget(epsilon_total, rounds)
    norm_ = dp.adaptive_budget(epsilon_total, rounds, normalise=True, delta=DELTA)
    assert np.array_equal(
        norm_, dp.adaptive_budget(epsilon_total, rounds, normalise="accountant", delta=DELTA)
    )
    np.testing.assert_allclose(norm_ / raw, norm_[0] / raw[0])  # one factor for all rounds
    # round by round, through Eq. 89 and the accountant
    acc = dp.Accountant(DELTA)
    for z in dp.noise_multipliers(norm_, DELTA):
        acc.spend(float(z))
    assert acc.epsilon() <= epsilon_total
    assert acc.epsilon() == pytest.approx(epsilon_total, rel=1e-5)
    assert dp.schedule_epsilon(norm_, DELTA) == pytest.approx(acc.epsilon(), rel=1e-12)
    # the literal schedule misses the target: it overspends by basic composition (Σ ε_t) but,
    # calibrated by Eq. 89 and composed by RDP, it spends less than the target
    spent_raw = dp.schedule_epsilon(raw, DELTA)
    if rounds > 1:
        assert raw.sum() > 1.5 * epsilon_total
    assert spent_raw < epsilon_total
    assert spent_raw != pytest.approx(epsilon_total, rel=1e-2)


def test_schedule_example_numbers() -> None:
    # the figures quoted in the module docstring (ε_total = 1, T = 50, δ = 1e-5)
    raw = dp.adaptive_budget(1.0, 50)
    assert raw.sum() == pytest.approx(1.80, abs=5e-3)
    assert dp.schedule_epsilon(raw, DELTA) == pytest.approx(0.22, abs=5e-3)


def test_budget_rejects_bad_parameters() -> None:
    with pytest.raises(ValidationError, match="delta"):
        dp.adaptive_budget(1.0, 10, normalise=True)
    with pytest.raises(ValidationError, match="normalise"):
        dp.adaptive_budget(1.0, 10, normalise="rdp")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="rounds"):
        dp.adaptive_budget(1.0, 0)
    with pytest.raises(ValidationError, match="epsilons"):
        dp.noise_multipliers([1.0, 0.0], DELTA)
    with pytest.raises(FedstrataError):
        dp.sigma_for(1.0, DELTA, 0)
