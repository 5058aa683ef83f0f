"""Choosing the fuzzifier m: Schwämmle and Jensen's value and the data's collapse ceiling.

Two data-driven limits for the fuzzifier of (multi-view, kernel) fuzzy c-means:

* :func:`schwaemmle_jensen_fuzzifier` and :func:`auto_fuzzifier`: an m from the data's
  size alone (sample count, dimensions, clusters), what ``m="auto"`` resolves to;
* :func:`fuzzifier_ceiling`: the m above which the grand mean of the data is a stable
  fixed point of fuzzy c-means (J. Yu, Q. Cheng and H. Huang, "Analysis of the
  weighting exponent in the FCM", IEEE Transactions on Systems, Man, and Cybernetics,
  Part B 34(1), 2004). Every centre then drifts to the mean and the memberships become
  exactly uniform, 1/c: what m = 1.5 does on digits and multiple-features. It is a
  property of the objective, not a numerical accident, so no floor or log-space trick
  helps; m must stay below the ceiling.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedstrata.errors import ValidationError

__all__ = [
    "AUTO_FUZZIFIER_MAX",
    "CEILING_SHARE",
    "auto_fuzzifier",
    "fuzzifier_ceiling",
    "recommended_fuzzifier",
    "schwaemmle_jensen_fuzzifier",
]

#: Upper limit of ``m="auto"`` (see :func:`auto_fuzzifier`).
AUTO_FUZZIFIER_MAX = 1.3
#: The project's rule for an explicit m: 1 + CEILING_SHARE·(m* - 1), m* the ceiling of
#: :func:`fuzzifier_ceiling` (measured in ``benchmarks/hk_sweep.py``).
CEILING_SHARE = 0.75


def schwaemmle_jensen_fuzzifier(n_samples: int, dimension: float) -> float:
    """The fuzzifier m of Schwämmle and Jensen for N samples in D dimensions.

    m = 1 + (1418/N + 22.05) D^-2 + (12.33/N + 0.243) D^(-0.0406 ln N - 0.1134)
    (V. Schwämmle and O. N. Jensen, "A simple and fast method to determine the
    parameters for fuzzy c-means cluster analysis", Bioinformatics 26(22), 2010): the
    largest m for which fuzzy c-means still finds structure instead of uniform
    memberships in data of that size. It shrinks towards 1 as D grows (distances
    concentrate, Eq. 15's ratios tend to 1 and memberships flatten).
    """
    if n_samples < 2 or dimension <= 0:
        raise ValidationError("the fuzzifier needs n_samples >= 2 and dimension > 0")
    N, D = float(n_samples), float(dimension)
    return float(
        1.0
        + (1418.0 / N + 22.05) * D**-2.0
        + (12.33 / N + 0.243) * D ** (-0.0406 * np.log(N) - 0.1134)
    )


def auto_fuzzifier(n_samples: int, dims: Sequence[int], n_clusters: int) -> float:
    """``m="auto"``: Schwämmle and Jensen's m for N samples with D = min(Σ_h d_h, c), at most 1.3.

    :func:`schwaemmle_jensen_fuzzifier` is derived for D independent standardized
    features. Real views are highly redundant (the 649 features of multiple-features
    have a participation-ratio dimension of about 20), and a sample's memberships
    depend on how its distances to the c centres differ, which happens in the
    (c - 1)-dimensional span of the centres; D is therefore capped at c. Only N, the
    dimensions and c enter, so a federation computes it from the pooled sample count
    of the setup round. A heuristic, measured on multiple-features: the formula gives
    m = 1.32 at N = 2000 (ARI 0.84; the uncapped D gives m = 1.02 and ARI 0.73), and memberships
    flatten (ARI 0.43) from m ≈ 1.4 at every N tried (300, 1000, 2000), where the
    formula gives 1.40 for N = 300: hence the ceiling :data:`AUTO_FUZZIFIER_MAX`
    (multiple-features' :func:`fuzzifier_ceiling` is 1.42).
    """
    m = schwaemmle_jensen_fuzzifier(n_samples, min(float(sum(dims)), float(n_clusters)))
    return min(m, AUTO_FUZZIFIER_MAX)


def _top_variance_share(Z: np.ndarray, *, block: int = 4, sweeps: int = 12) -> float:
    """Largest eigenvalue of the covariance of the centred rows Z, over its trace.

    A few sweeps of block power iteration with a Rayleigh-Ritz step (a fixed start,
    so the value is deterministic): a (n, D) pass per sweep instead of a (D, D) Gram
    matrix and its eigen-decomposition, which on 2000 x 649 costs more than a fit.
    """
    total = float(np.einsum("ij,ij->", Z, Z))
    if total <= 0.0:
        return 1.0
    k = min(block, *Z.shape)
    Q = np.linalg.qr(np.random.default_rng(0).standard_normal((Z.shape[1], k)))[0]
    for _ in range(sweeps):
        Q = np.linalg.qr(Z.T @ (Z @ Q))[0]
    ZQ = Z @ Q
    return float(np.linalg.eigvalsh(ZQ.T @ ZQ)[-1]) / total


def recommended_fuzzifier(ceiling: float) -> float:
    """The project's rule m = 1 + 0.75·(m* - 1) for a ceiling m*, at most 2.

    m* from :func:`fuzzifier_ceiling` with equal view weights. Three quarters of the
    way to the ceiling keeps the memberships informative on the data measured
    (``benchmarks/hk_sweep.py``: digits m* = 1.29, multiple-features 1.42; ARI falls
    from m ≈ 0.9·(m* - 1) + 1, where some clusters merge before all do); 2 is the
    customary value of Bezdek's fuzzy c-means, kept when the data never collapse.
    """
    return min(1.0 + CEILING_SHARE * (ceiling - 1.0), 2.0)


def fuzzifier_ceiling(
    views: Sequence[np.ndarray],
    feature_weights: Sequence[np.ndarray] | None = None,
    alpha: float | None = None,
) -> float:
    """m* = 1/(1 - 2λ): at or above it the grand mean is a stable fixed point (Yu et al. 2004).

    λ is the share of the total variance along the first principal axis of the data in
    the metric the distances use, Σ_h v_h^α Σ_j w_hj (x_hj - a_hj)² (Yu, Cheng and
    Huang's λ_max of the trace-normalised covariance). At the grand mean every view's
    cost is its total variance T_h = Σ_j w_hj var_hj, so Eq. 17 gives
    v_h^α ∝ T_h^(-α/(α-1)) (equal weights without ``alpha``). λ >= 1/2 (one dominant
    axis) gives ``inf``: the mean is never stable.

    Exact for Euclidean distances (MV-FCM); for the kernel distance 1 - exp(-φ) it is
    the limit of a wide bandwidth, and measured close to it at the default γ = 8
    (``benchmarks/hk_sweep.py``). The fuzzifier's working range is (1, m*): with real
    views of tens to hundreds of features λ is small and m* is near 1.3-1.5 (digits
    1.29, multiple-features 1.42), which is why m = 1.5 and the paper's m = 2 give
    uniform memberships there.

    Parameters
    ----------
    views
        The views (n, d_h).
    feature_weights
        Per view the per-feature weights w_hj (d_h,) of the distance (the kernel's
        δ divided by the bandwidth's scale); ones by default (Euclidean).
    alpha
        View-weight exponent (> 1), or ``None`` for equal view weights.
    """
    if not views:
        raise ValidationError("fuzzifier_ceiling needs at least one view")
    weights = [np.ones(X.shape[1]) for X in views] if feature_weights is None else feature_weights
    cols, totals = [], []
    for X, w in zip(views, weights, strict=True):
        Z = (X - X.mean(axis=0)) * np.sqrt(np.asarray(w, dtype=np.float64))
        cols.append(Z)
        totals.append(float(np.einsum("ij,ij->", Z, Z)))
    T = np.maximum(np.array(totals), np.finfo(np.float64).tiny)
    if alpha is None:
        va = np.ones_like(T)
    else:  # v^α ∝ T^(-α/(α-1)), in log space: a large α must not underflow
        expo = -alpha / (alpha - 1.0) * np.log(T)
        va = np.exp(expo - expo.max())
    lam = _top_variance_share(np.hstack([Z * np.sqrt(a) for Z, a in zip(cols, va, strict=True)]))
    return float("inf") if lam >= 0.5 else 1.0 / (1.0 - 2.0 * lam)
