"""Differential privacy for additive statistics: Gaussian mechanism, budget schedule, accountant.

Equation numbers refer to the FedHK-MVFC paper ("FedHK-MVFC: Federated Heat Kernel
Multi-View Clustering", Sinaga, 2025), §5.

Mechanism
---------
A client's contribution to a (secure) sum is a flat list of float arrays, for
example the centre numerators and denominators, the view costs and the mass of the
multi-view plug-in. :func:`gaussian_mechanism` treats the whole list as one vector
``x``:

1. **Clip** ``x`` to L2 norm ``clip``: ``x ← x · min(1, clip / ‖x‖₂)``. The factor is
   reported. After clipping, adding or removing one contribution changes the sum by
   at most ``clip`` in L2 norm. That is the sensitivity Δ that Eq. 89 assumes but
   never bounds. The unit of privacy is therefore one contribution, usually a client
   in a round. Per-record privacy would need per-record clipping inside the client.
   A single client's vector released in the clear (no secure sum) has the
   replace-one sensitivity ``2 · clip``. Calibrate with ``sensitivity=2 * clip``
   for that case.
2. **Add noise** ``N(0, σ²)`` to every coordinate. σ is given directly, or computed
   by the paper's calibration, Eq. 89 with Δ = ``clip``:

       σ = Δ · sqrt(2 ln(1.25 / δ)) / ε                                (Eq. 89)

   This is the classic Gaussian mechanism (Dwork & Roth, Thm. A.1). The second
   argument of N in Eq. 89 is a variance, and ``log`` is the natural log. Eq. 90
   is the same formula with Δ = 1/n(ℓ) for the view weights
   (:func:`view_weight_sigma`). The worked number of Eq. 92, σ² ≈ 23.03 at
   ε = 1, δ = 1e-5 and Δ = 1, is an arithmetic slip: the formula gives
   2 ln(1.25e5) ≈ 23.47. The classic theorem only covers ε < 1. For the true
   guarantee of a release or a run, ask the :class:`Accountant`.

With ``distributed=True``, each of ``n_clients`` clients adds noise of variance
σ²/n. Independent Gaussian variances add, so a secure sum over all n clients
carries exactly N(0, σ²), and no single party sees the total noise. Each client's
own vector carries only σ²/n, so it is protected only inside the secure sum
(masks, :mod:`fedstrata.privacy.secagg`). If only m < n clients end up in the sum,
the sum carries σ²·m/n (:func:`effective_sigma`). Apply the mechanism to exactly
what enters the sum: after any weighting, such as Eq. 74's n(ℓ) pre-multiplication,
and before fixed-point encoding. Gaussian noise is unbounded, so the fixed-point
range needs headroom above ``clip`` (for instance ``clip + 6σ``).

Budget
------
:func:`adaptive_budget` is the adaptive schedule of Eq. 93,
ε_t = (ε_total / √T) · 1/√(t+1) for t = 0..T-1. The paper states no composition
theorem. Under basic composition, Σ ε_t ≈ 1.72 ε_total for T = 23 and 1.80 ε_total
for T = 50, so the schedule **overspends**. Its largest ε_t (the weakest privacy)
falls in round 0. When each ε_t drives Eq. 89 and the rounds are composed by the
RDP accountant, the same schedule instead **underspends** (ε ≈ 0.22 for
ε_total = 1, T = 50, δ = 1e-5): Eq. 89 is conservative and RDP composes
sublinearly. ``normalise=True`` (``"accountant"``) rescales the schedule so that
the accountant's total is ε_total. ``normalise="basic"`` rescales it so that
Σ ε_t = ε_total, which is the conservative basic-composition reading.

Accounting
----------
:class:`Accountant` wraps the RDP accountant of Google's ``dp-accounting``
(``RdpAccountant``, add-or-remove-one neighbouring relation). Each round is a
Gaussian mechanism with noise multiplier z = σ/clip, Poisson-subsampled when only
a fraction of the clients is sampled. :func:`sigma_for` inverts it by bisection.
``dp_accounting`` is imported on first use, because it takes about 2 s to import.

The functions are pure, and :class:`Accountant` is the only object with state.
Randomness comes only from the ``numpy.random.Generator`` that the caller passes in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedstrata.errors import ValidationError

__all__ = [
    "DEFAULT_ORDERS",
    "Accountant",
    "NoisyRelease",
    "Spent",
    "adaptive_budget",
    "clip_l2",
    "effective_sigma",
    "gaussian_mechanism",
    "gaussian_sigma",
    "noise_multipliers",
    "schedule_epsilon",
    "sigma_for",
    "view_weight_sigma",
]

DEFAULT_ORDERS: Final[tuple[float, ...]] = (
    *(1.0 + x / 10.0 for x in range(1, 100)),
    *range(11, 64),
    *(64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 1536, 2048, 3072, 4096),
)
"""The RDP orders α the accountant evaluates: 1.1 to 10.9 in steps of 0.1, 11 to 63,
then a geometric tail up to 4096. This is ``dp-accounting``'s default grid, extended
for the very small per-round spends of long schedules."""

_FloatArray = NDArray[np.float64]


# ---------------------------------------------------------------------------
# validation helpers


def _positive(name: str, value: object, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValidationError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = "non-negative" if allow_zero else "positive"
        raise ValidationError(f"{name} must be {bound} and finite, got {value!r}")
    return v


def _delta(value: object) -> float:
    d = _positive("delta", value)
    if d >= 1:
        raise ValidationError(f"delta must be in (0, 1), got {value!r}")
    return d


def _count(name: str, value: object, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValidationError(f"{name} must be an int, got {value!r}")
    if value < low:
        raise ValidationError(f"{name} must be at least {low}, got {value}")
    return int(value)


def _rate(value: object) -> float:
    q = _positive("sampling_rate", value)
    if q > 1:
        raise ValidationError(f"sampling_rate must be in (0, 1], got {value!r}")
    return q


def _arrays(arrays: Sequence[ArrayLike]) -> list[_FloatArray]:
    if isinstance(arrays, np.ndarray | str | bytes) or not isinstance(arrays, Sequence):
        raise ValidationError("arrays must be a list or tuple of arrays")
    out: list[_FloatArray] = []
    for i, a in enumerate(arrays):
        arr = np.asarray(a)
        if arr.dtype.kind not in "biuf":
            raise ValidationError(f"arrays[{i}] must hold real numbers, got dtype {arr.dtype}")
        arr = arr.astype(np.float64, copy=True)
        if not np.all(np.isfinite(arr)):
            raise ValidationError(f"arrays[{i}] holds NaN or infinite values")
        out.append(arr)
    return out


# ---------------------------------------------------------------------------
# calibration (Eq. 89, Eq. 90)


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """The noise standard deviation of Eq. 89: ``Δ · sqrt(2 ln(1.25/δ)) / ε``.

    This is the classic Gaussian mechanism. It is (ε, δ)-DP for ε < 1 (Dwork & Roth,
    Thm. A.1). At larger ε it remains the paper's rule, but only the
    :class:`Accountant` gives a guarantee. At ε = 1, δ = 1e-5 and Δ = 1,
    σ² = 2 ln(1.25e5) ≈ 23.47 (Eq. 92 prints 23.03, which drops the 1.25).

    Parameters
    ----------
    epsilon
        Privacy budget ε > 0 of this release.
    delta
        Failure probability δ in (0, 1).
    sensitivity
        L2 sensitivity Δ > 0. Use the clip norm for a clipped contribution to a sum.
    """
    eps = _positive("epsilon", epsilon)
    d = _delta(delta)
    sens = _positive("sensitivity", sensitivity)
    return sens * math.sqrt(2.0 * math.log(1.25 / d)) / eps


def view_weight_sigma(epsilon: float, delta: float, n_samples: int) -> float:
    """The noise standard deviation of Eq. 90 for a client's view weights.

    Eq. 90 gives the variance ``2 ln(1.25/δ) / (ε² n(ℓ)²)``. That is Eq. 89 with
    sensitivity 1/n(ℓ), which the paper does not derive. The paper's
    post-processing (clip the noisy weights to ≥ 0 and renormalise to the
    simplex) is left to the caller. It does not change the guarantee.
    """
    n = _count("n_samples", n_samples)
    return gaussian_sigma(epsilon, delta, 1.0 / n)


def effective_sigma(sigma: float, n_clients: int, n_included: int) -> float:
    """The noise std of a secure sum of ``n_included`` clients' distributed noise.

    Each of the ``n_clients`` clients planned for added variance σ²/n_clients
    (``distributed=True``). A sum that includes only ``n_included`` of them carries
    σ² · n_included / n_clients. Account for that value, not for σ, when clients
    drop out after adding noise.
    """
    s = _positive("sigma", sigma, allow_zero=True)
    n = _count("n_clients", n_clients)
    m = _count("n_included", n_included, low=0)
    if m > n:
        raise ValidationError(f"n_included ({m}) exceeds n_clients ({n})")
    return s * math.sqrt(m / n)


# ---------------------------------------------------------------------------
# the mechanism


def _scaled_norm(arrays: Sequence[_FloatArray]) -> tuple[float, float]:
    """``(m, s)`` with ``‖x‖₂ = m · s``, computed without overflow or underflow."""
    m = max((float(np.max(np.abs(a))) for a in arrays if a.size), default=0.0)
    if m == 0.0:
        return 0.0, 0.0
    s = math.sqrt(math.fsum(float(np.sum(np.square(a / m))) for a in arrays))
    return m, s


def _clip(xs: list[_FloatArray], c: float) -> tuple[list[_FloatArray], float, float]:
    """``(clipped arrays, factor, input norm)`` for validated float64 arrays."""
    m, s = _scaled_norm(xs)
    if m == 0.0 or m * s <= c:
        return xs, 1.0, m * s
    scale = c / s
    factor = scale / m  # c / ‖x‖ < 1
    if factor >= np.finfo(np.float64).tiny:  # a normal number: one rounding per entry
        return [a * factor for a in xs], factor, m * s
    # ‖x‖ is near the float64 limit: (x / m) · (c / s) never overflows
    return [(a / m) * scale for a in xs], factor, m * s


def clip_l2(arrays: Sequence[ArrayLike], clip: float) -> tuple[list[_FloatArray], float]:
    """Scale a list of arrays, taken as one vector, to L2 norm at most ``clip``.

    Returns float64 copies of the arrays (same shapes) and the factor
    ``min(1, clip / ‖x‖₂)`` applied to all of them. The factor is 1 when the vector
    is already inside the ball. The norm is computed without overflow, so vectors
    with entries near the float64 limit are clipped correctly. The result's norm is
    at most ``clip`` up to floating-point rounding (a relative 1e-15 or so).
    """
    clipped, factor, _ = _clip(_arrays(arrays), _positive("clip", clip))
    return clipped, factor


@dataclass(frozen=True, slots=True)
class NoisyRelease:
    """What :func:`gaussian_mechanism` returns.

    Attributes
    ----------
    arrays
        The clipped, noised arrays, float64, with the input shapes.
    norm
        L2 norm of the input before clipping (``inf`` if it overflows float64).
    clip_factor
        ``min(1, clip / norm)``, the factor applied before the noise.
    clip
        The clip norm, which is the sensitivity of the sum.
    sigma
        Noise std that the released sum carries: that of this vector, or with
        ``distributed=True`` that of the secure sum of all ``n_clients``.
    noise_std
        Noise std actually added to this vector: ``sigma``, or ``sigma / √n``.
    """

    arrays: tuple[_FloatArray, ...]
    norm: float
    clip_factor: float
    clip: float
    sigma: float
    noise_std: float

    @property
    def noise_multiplier(self) -> float:
        """``sigma / clip``, the z to pass to :meth:`Accountant.spend`."""
        return self.sigma / self.clip


def gaussian_mechanism(
    arrays: Sequence[ArrayLike],
    *,
    clip: float,
    rng: np.random.Generator,
    sigma: float | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    distributed: bool = False,
    n_clients: int | None = None,
) -> NoisyRelease:
    """Clip a contribution to L2 norm ``clip`` and add Gaussian noise (Eq. 89).

    Parameters
    ----------
    arrays
        The contribution: a list or tuple of real arrays, taken together as one
        vector. It is neither modified nor aliased.
    clip
        L2 bound on the whole contribution. It is also the sensitivity Δ in Eq. 89.
    rng
        The generator that draws the noise, array by array, in order.
    sigma
        Noise std of the released sum. Give either ``sigma`` or ``epsilon`` and
        ``delta``. ``sigma = 0`` clips without noise, which gives no privacy.
    epsilon, delta
        Per-release budget. Then σ = clip · sqrt(2 ln(1.25/δ)) / ε (Eq. 89).
    distributed
        Add noise of std σ/√n_clients, so that the secure sum of the ``n_clients``
        contributions carries std σ.
    n_clients
        Number of clients in the secure sum. Required with ``distributed=True``.
    """
    c = _positive("clip", clip)
    if not isinstance(rng, np.random.Generator):
        raise ValidationError("rng must be a numpy.random.Generator")
    if sigma is not None:
        if epsilon is not None or delta is not None:
            raise ValidationError("give either sigma or epsilon and delta, not both")
        s = _positive("sigma", sigma, allow_zero=True)
    elif epsilon is None or delta is None:
        raise ValidationError("give either sigma or both epsilon and delta")
    else:
        s = gaussian_sigma(epsilon, delta, c)
    if distributed:
        if n_clients is None:
            raise ValidationError("distributed=True needs n_clients")
        std = s / math.sqrt(_count("n_clients", n_clients))
    else:
        if n_clients is not None:
            raise ValidationError("n_clients is only used with distributed=True")
        std = s
    clipped, factor, norm = _clip(_arrays(arrays), c)
    noised = tuple(a + rng.normal(0.0, std, size=a.shape) if std > 0 else a for a in clipped)
    return NoisyRelease(
        arrays=noised, norm=norm, clip_factor=factor, clip=c, sigma=s, noise_std=std
    )


# ---------------------------------------------------------------------------
# accounting


class Spent(NamedTuple):
    """A run's cumulative guarantee: (ε, δ)-DP after ``releases`` Gaussian releases."""

    epsilon: float
    delta: float
    releases: int


class Accountant:
    """Cumulative (ε, δ) of a run of Gaussian releases, from RDP composition.

    It wraps ``dp_accounting.rdp.RdpAccountant`` with the add-or-remove-one
    neighbouring relation: a neighbouring run lacks one clipped contribution.
    Each :meth:`spend` composes a Gaussian mechanism with noise multiplier
    z = σ / clip. With ``sampling_rate < 1`` the mechanism is Poisson-subsampled:
    each contribution takes part in a round independently with that probability.
    Fixed-size client selection is not Poisson sampling, so use 1.0 for it
    unless another bound applies.

    Parameters
    ----------
    delta
        The δ at which :meth:`epsilon` reports ε.
    orders
        RDP orders to evaluate (default :data:`DEFAULT_ORDERS`).
    """

    def __init__(self, delta: float, *, orders: Sequence[float] = DEFAULT_ORDERS) -> None:
        from dp_accounting.rdp import rdp_privacy_accountant as rdp  # slow import, on use

        self.delta = _delta(delta)
        self.releases = 0
        self._acc: Any = rdp.RdpAccountant(
            [float(o) for o in orders], rdp.NeighborRel.ADD_OR_REMOVE_ONE
        )

    def spend(self, sigma_over_clip: float, sampling_rate: float = 1.0, count: int = 1) -> None:
        """Compose ``count`` Gaussian releases with noise multiplier ``sigma_over_clip``.

        ``sigma_over_clip = 0`` (no noise) makes ε infinite from then on.
        """
        from dp_accounting import dp_event

        z = _positive("sigma_over_clip", sigma_over_clip, allow_zero=True)
        q = _rate(sampling_rate)
        n = _count("count", count)
        event: Any = dp_event.GaussianDpEvent(z)
        if q < 1.0:
            event = dp_event.PoissonSampledDpEvent(q, event)
        self._acc.compose(event, n)
        self.releases += n

    def epsilon(self) -> float:
        """The ε of everything spent so far, at :attr:`delta` (0 before any spend)."""
        return float(self._acc.get_epsilon(self.delta))

    def spent(self) -> Spent:
        """The cumulative ``(epsilon, delta, releases)``."""
        return Spent(self.epsilon(), self.delta, self.releases)


def _epsilon_of(z: float, delta: float, rounds: int, sampling_rate: float) -> float:
    acc = Accountant(delta)
    acc.spend(z, sampling_rate, rounds)
    return acc.epsilon()


def sigma_for(
    epsilon: float,
    delta: float,
    rounds: int,
    sampling_rate: float = 1.0,
    *,
    rtol: float = 1e-6,
) -> float:
    """The smallest noise multiplier z = σ/clip that keeps ``rounds`` releases within ε.

    The search bisects on log z over the :class:`Accountant`. The result is the
    upper end of the final bracket, so ``Accountant(delta)`` after
    ``spend(z, sampling_rate, rounds)`` reports at most ``epsilon``. It exceeds the
    exact solution by less than a factor ``1 + rtol``. Each evaluation takes well
    under a millisecond for ``sampling_rate = 1`` and about 0.1 s otherwise.
    """
    eps = _positive("epsilon", epsilon)
    d = _delta(delta)
    t = _count("rounds", rounds)
    q = _rate(sampling_rate)
    tol = _positive("rtol", rtol)
    lo, hi = 1.0, 1.0
    if _epsilon_of(1.0, d, t, q) > eps:  # grow hi until it is within the budget
        while True:
            lo, hi = hi, hi * 2.0
            if _epsilon_of(hi, d, t, q) <= eps:
                break
            if hi > 1e12:
                raise ValidationError(f"no noise multiplier up to 1e12 reaches epsilon={eps}")
    else:  # shrink lo until it overspends (ε(z) → ∞ as z → 0 unless q is tiny)
        while True:
            lo, hi = lo / 2.0, lo
            if _epsilon_of(lo, d, t, q) > eps:
                break
            if lo < 1e-6:
                return hi
    while hi / lo > 1.0 + tol:
        mid = math.sqrt(lo * hi)
        if _epsilon_of(mid, d, t, q) > eps:
            lo = mid
        else:
            hi = mid
    return hi


# ---------------------------------------------------------------------------
# the adaptive budget (Eq. 93)


def noise_multipliers(epsilons: ArrayLike, delta: float) -> _FloatArray:
    """Per-round noise multipliers z_t = σ_t / clip of Eq. 89 for a budget schedule."""
    eps = np.asarray(epsilons, dtype=np.float64)
    if eps.ndim != 1 or not np.all(np.isfinite(eps)) or np.any(eps <= 0):
        raise ValidationError("epsilons must be a 1-D array of positive finite numbers")
    return gaussian_sigma(1.0, delta) / eps


def schedule_epsilon(epsilons: ArrayLike, delta: float) -> float:
    """The accountant's total ε at ``delta`` for rounds calibrated by Eq. 89 with ε_t."""
    acc = Accountant(delta)
    for z in noise_multipliers(epsilons, delta):
        acc.spend(float(z))
    return acc.epsilon()


def adaptive_budget(
    epsilon_total: float,
    rounds: int,
    *,
    normalise: bool | Literal["accountant", "basic"] = False,
    delta: float | None = None,
) -> _FloatArray:
    """The per-round budgets ε_0..ε_{T-1} of Eq. 93.

    ``ε_t = (ε_total / √T) · 1/√(t+1)``, with t the 0-based round index.

    As printed, the schedule has no composition theorem behind it. Its basic
    composition Σ ε_t is about 1.8 ε_total at T = 50. Through Eq. 89 and RDP
    composition, it spends only about 0.22 ε_total at T = 50, δ = 1e-5 (see the
    module docstring).

    Parameters
    ----------
    epsilon_total
        The run's target ε.
    rounds
        T, the number of rounds.
    normalise
        ``False``: Eq. 93 literally. ``True`` or ``"accountant"``: rescale every ε_t
        by one factor so that rounds noised by Eq. 89 with ε_t compose, in the
        :class:`Accountant` at ``delta``, to ε_total (at most, within 1e-6
        relative). Needs ``delta``. The rescaled ε_t are then calibration inputs,
        not per-round guarantees. ``"basic"``: rescale so that Σ ε_t = ε_total.
        That is basic sequential composition, giving (ε_total, T·δ) when every
        ε_t < 1.
    delta
        δ used both in Eq. 89 and for the accountant (``normalise="accountant"``).
    """
    e = _positive("epsilon_total", epsilon_total)
    t = _count("rounds", rounds)
    eps = e / math.sqrt(t) / np.sqrt(np.arange(1, t + 1, dtype=np.float64))
    if normalise is False:
        return eps
    if normalise == "basic":
        return eps * (e / math.fsum(eps))
    if normalise is not True and normalise != "accountant":
        raise ValidationError(
            f"normalise must be False, True, 'accountant' or 'basic', got {normalise!r}"
        )
    if delta is None:
        raise ValidationError("normalise='accountant' needs delta")
    # Gaussian RDP is α/(2z²), so rounds with multipliers z_t compose exactly like one
    # release with 1/z_eff² = Σ 1/z_t². Scaling every ε_t by c divides every z_t by c.
    z = noise_multipliers(eps, delta)
    z_eff = 1.0 / math.sqrt(math.fsum(1.0 / z**2))
    z_star = sigma_for(e, delta, 1)
    return eps * (z_eff / z_star)
