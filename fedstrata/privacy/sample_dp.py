"""Sample-level differential privacy: bounded per-sample contributions, noise independent of n.

The unit of privacy is one sample: two runs are neighbours when one client holds one
sample more. Every statistic a client releases is a sum over its samples of terms
whose size is bounded by construction, so the sensitivity of the release is a
constant that does not grow with the client's size or the number of clients:

* features are clipped into declared public bounds ``[lo, hi]`` and measured in the
  box's own units, ``(x − mid) / half`` in ``[−1, 1]``: a sample adds at most
  √d to a view's first-moment sum and √d to its second-moment sum;
* for the seeding cells and the rounds, a sample's standardized, centred view is
  clipped to L2 radius ``r`` (:func:`clip_rows`), and its membership weights sum to
  at most 1 (Σ_k μ_ik^m ≤ Σ_k μ_ik = 1 for m ≥ 1), so it adds at most ``r`` to a
  view's numerators and 1 to its denominators.

:func:`release_sigma` turns a noise multiplier z and such a sensitivity into the
Gaussian noise std; :func:`noise_share` is the std one client adds (all of it without
secure aggregation, a 1/√t share under it, so that any unmaskable sum of at least t
clients carries the whole std once). The noise multiplier comes from the run's one
budget (:func:`~fedstrata.privacy.dp.sigma_for` over all its releases).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedstrata.errors import ValidationError, WireError

__all__ = [
    "SETUP_RELEASES",
    "BudgetSpentError",
    "PrivateConfig",
    "box_units",
    "cells_sensitivity",
    "clip_rows",
    "moments_sensitivity",
    "noise_share",
    "release_sigma",
    "split_sigmas",
]


class BudgetSpentError(WireError):
    """A client was asked for a noisy release beyond its run's budget (it refuses)."""


#: Noisy releases of the private setup: the moments and the seeding cells.
SETUP_RELEASES = 2


def box_units(X: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``X`` clipped into ``[lo, hi]`` and mapped to ``[−1, 1]`` (a constant feature: 0)."""
    lo = np.broadcast_to(np.asarray(lo, dtype=np.float64), X.shape[1:])
    hi = np.broadcast_to(np.asarray(hi, dtype=np.float64), X.shape[1:])
    if not np.all(hi >= lo):
        raise ValidationError("public bounds must match the view's features, with hi >= lo")
    half = (hi - lo) / 2.0
    mid = lo + half
    safe = np.where(half > 0, half, 1.0)
    return np.where(half > 0, (np.clip(X, lo, hi) - mid) / safe, 0.0)


def clip_rows(U: np.ndarray, radius: float) -> np.ndarray:
    """Each row of ``U`` scaled down to L2 norm at most ``radius``."""
    if not radius > 0:
        raise ValidationError(f"the clipping radius must be > 0, got {radius!r}")
    norms = np.linalg.norm(U, axis=1, keepdims=True)
    return U * np.minimum(1.0, radius / np.maximum(norms, 1e-300))


def moments_sensitivity(dims: Sequence[int]) -> float:
    """L2 sensitivity of one sample's moments release: Σu, Σu² and a count per view.

    In box units each of a view's d features lies in [−1, 1], so the sample adds at
    most √d to the first and √d to the second moments, and 1 to the count.
    """
    return math.sqrt(sum(2 * d + 1 for d in dims))


def cells_sensitivity(radii: Sequence[float]) -> float:
    """L2 sensitivity of one sample's cell or cluster sums and counts, all views together.

    Its clipped view adds at most ``r`` (spread over clusters by weights summing to at
    most 1) to the sums, and its weights at most 1 to the counts.
    """
    return math.sqrt(sum(r * r + 1.0 for r in radii))


def split_sigmas(z: float, radii: Sequence[float]) -> tuple[float, float]:
    """Total noise std on the sums and on the counts: one Gaussian mechanism, two blocks.

    The sums' block has L2 bound R = √Σ r², the counts' C = √H. Scaling the blocks by
    √(1−ρ)/R and √ρ/C gives a vector of norm at most 1, noised with std z: that is
    std z·R/√(1−ρ) on the sums and z·C/√ρ on the counts, the privacy of multiplier z
    for any split ρ. ρ = C/(R+C) keeps the counts, whose noise decides which centres
    move at all, from carrying noise sized for the sums (3x less on multiple-features
    than one std for both).
    """
    big_r = math.sqrt(sum(r * r for r in radii))
    big_c = math.sqrt(len(radii))
    rho = big_c / (big_r + big_c)
    return z * big_r / math.sqrt(1.0 - rho), z * big_c / math.sqrt(rho)


def release_sigma(z: float, sensitivity: float) -> float:
    """The Gaussian noise std of a release: multiplier × sensitivity."""
    if not (z >= 0 and sensitivity > 0):
        raise ValidationError(f"bad noise multiplier {z!r} or sensitivity {sensitivity!r}")
    return z * sensitivity


def noise_share(sigma: float, shares: int) -> float:
    """The std one client adds: all of ``sigma`` alone, ``sigma/√shares`` in a secure sum."""
    if shares < 1:
        raise ValidationError(f"shares must be >= 1, got {shares!r}")
    return sigma / math.sqrt(shares)


@dataclass(frozen=True)
class PrivateConfig:
    """A run's private pipeline: a setup that only sums, and sample-level DP if asked.

    Parameters
    ----------
    bounds
        Per view, the public per-feature bounds ``(lo, hi)``; None: no bounds (then
        DP is off: secure aggregation alone needs none).
    noise
        The noise multiplier z of every sample-level release (0: no DP noise).
    shares
        Secure aggregation's smallest unmasking threshold of the client groups (1
        without it): each client adds a 1/√shares share of the noise.
    radius
        A view's clipping radius in standardized units is ``radius · √d``.
    cells
        Seeding cells per cluster: the second setup stage sums over
        ``cells · n_clusters`` public candidate directions.
    sample_rounds
        Whether the rounds are sample-level DP too (``dp.unit: sample``); False: the
        rounds keep the client-level mechanism (``dp_clip``) or no DP.
    seed
        The public seed of the seeding candidates and of the root's k-means++.
    releases
        The noisy releases the run's budget allows each client (the setup's two and
        the rounds); a client refuses to make more (0: no DP, no limit).
    """

    bounds: tuple[tuple[np.ndarray, np.ndarray], ...] | None = None
    noise: float = 0.0
    shares: int = 1
    radius: float = 1.0
    cells: int = 4
    sample_rounds: bool = False
    seed: int = 0
    releases: int = 0

    def check_release(self, made: int) -> None:
        """Refuse the release after ``made`` ones when the budget allows no more."""
        if self.releases and made >= self.releases:
            raise BudgetSpentError(
                f"the privacy budget allows {self.releases} noisy releases and this client "
                "made them all: it sends no more"
            )

    @property
    def dp(self) -> bool:
        """Whether releases are noised (sample-level)."""
        return self.noise > 0

    def radii(self, dims: Sequence[int]) -> list[float]:
        """Each view's clipping radius ``radius · √d``."""
        return [self.radius * math.sqrt(d) for d in dims]

    def sigma_moments(self, dims: Sequence[int]) -> float:
        """The std one client adds to its moments release."""
        return noise_share(self.noise * moments_sensitivity(dims), self.shares)

    def total_sigmas(self, dims: Sequence[int]) -> tuple[float, float]:
        """The total noise std of a cells or rounds release: on the sums, on the counts."""
        return split_sigmas(self.noise, self.radii(dims))

    def client_sigmas(self, dims: Sequence[int]) -> tuple[float, float]:
        """The std one client adds to the sums and to the counts of such a release."""
        s, c = self.total_sigmas(dims)
        return noise_share(s, self.shares), noise_share(c, self.shares)
