"""MVKM-ED: rectified Gaussian kernel multi-view k-means.

From "Fed-MVKM: Federated Multi-View K-Means Clustering" (Yang & Sinaga).

Hard memberships from Σ_h v_h^α (1 - exp(-β_h ||x_i^h - a_k^h||^2)), centres as
kernel-weighted means, view weights v_h ∝ cost_h^{-1/(α-1)}; β_h follows the
author's schedule β_h^(t) = |Σ_j mean_i x_ij^h| · c / (t · n) (Fed-MVKM paper's tutorial code).
It is the engine of :mod:`fedstrata.algorithms.multiview` with δ ≡ β_h and
argmin memberships, so its federated statistics are the same additive sums.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from fedstrata.algorithms._base import MultiViewEstimator
from fedstrata.algorithms._validation import FIT_CONSTRAINTS, Constraint
from fedstrata.algorithms.kernels import KernelReference
from fedstrata.algorithms.multiview import MultiViewModel, PreparedViews
from fedstrata.algorithms.schedules import mvkm_ed_model, scheduled_scale
from fedstrata.errors import ConvergenceWarning

__all__ = ["MVKMED", "beta_schedule", "mvkm_ed_model", "saturated_share", "scheduled_scale"]

#: Beyond this, 1 − exp(−x) rounds to exactly 1 in float64 (exp(−x) < 2⁻⁵³): the cost
#: can no longer rank the centres.
_SATURATION = 53 * np.log(2.0)


def beta_schedule(
    references: Sequence[KernelReference], n_clusters: int
) -> Callable[[np.ndarray], np.ndarray]:
    """β_h^(t) = |Σ_j mean_j^h| · c / (t · n), vectorized over t (R,) → (R, H).

    Only per-view feature sums and the sample count enter, so a federation can
    compute it from summed statistics.
    """
    n = references[0].count
    base = np.array([abs(float(r.mean.sum())) * n_clusters / n for r in references])

    def scale(t: np.ndarray) -> np.ndarray:
        return base[None, :] / np.asarray(t, dtype=np.float64)[:, None]

    return scale


def saturated_share(
    views: Sequence[np.ndarray], centers: Sequence[np.ndarray], beta: np.ndarray
) -> float:
    """Share of samples whose cost 1 − exp(−β_h‖x − a‖²) is 1 for every centre in every view.

    The cost rounds to exactly 1 once β‖x − a‖² > 53·ln 2 ≈ 36.7. Such a sample costs 1
    against every centre, so its membership is a tie (argmin keeps
    cluster 0) and it no longer moves any centre. The author's β comes from the views'
    feature sums, which on unstandardized data (pixel counts, say) makes β‖x − a‖² far
    above exp's range.
    """
    tied = np.ones(views[0].shape[0], dtype=bool)
    for X, A, b in zip(views, centers, beta, strict=True):
        d2 = (X * X).sum(1)[:, None] - 2.0 * X @ A.T + (A * A).sum(1)[None, :]
        tied &= b * np.maximum(d2, 0.0).min(axis=1) > _SATURATION
    return float(tied.mean())


class MVKMED(MultiViewEstimator):
    """Multi-view k-means with a rectified Gaussian kernel (MVKM-ED, from the Fed-MVKM paper).

    Parameters
    ----------
    n_clusters
        Number of clusters (>= 2).
    alpha
        View-weight exponent in (1, 1000] (the author's default is 2); v^α is
        computed in log space where it would underflow (``view_powers``).
    max_iter, tol
        Stop when |ΔJ| <= tol or after max_iter iterations (author: 100, 1e-4).
    n_init
        Restarts fitted as one batch; the lowest objective wins. The author runs one.
    init
        ``"random"`` (the author's: c random samples shared by all views),
        ``"k-means++"``, ``"kmeans"``, or a list of (c, d_h) arrays.
    random_state
        Seed or generator.

    Notes
    -----
    The author's code recomputes β every iteration and predicts with a hard-coded
    β = 0.1; here :meth:`predict` uses the β of the final iteration, the one the
    centres were fitted with. The J values are with the β of their iteration, so J is
    not monotone (β shrinks as 1/t).

    β comes from the views' feature sums, so its scale follows the data's units: on
    unstandardized counts (scikit-learn's digits pixels, say) β‖x − a‖² exceeds 36.7 for
    every centre, the cost rounds to 1, and the samples tie in cluster 0. ``fit`` then
    warns (:class:`~fedstrata.errors.ConvergenceWarning`, :func:`saturated_share` above
    one half).
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = FIT_CONSTRAINTS

    def __init__(
        self,
        n_clusters: int = 4,
        *,
        alpha: float = 2.0,
        max_iter: int = 100,
        tol: float = 1e-4,
        n_init: int = 1,
        init: Any = "random",
        random_state: Any = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.alpha = alpha
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.init = init
        self.random_state = random_state

    def _model(self) -> MultiViewModel:
        return mvkm_ed_model(self.n_clusters, float(self.alpha))

    def _view_scale(self, pv: PreparedViews) -> Callable[[np.ndarray], np.ndarray]:
        return beta_schedule(self.kernel_references_, self.n_clusters)

    def _memberships(self, pv, state, model):
        from fedstrata.algorithms.multiview import local_statistics

        t = np.array([max(getattr(self, "n_iter_", 1), 1)])
        scale = self._view_scale(pv)(t)[0]
        share = saturated_share(pv.views, state.centers, scale)
        if share > 0.5:
            warnings.warn(
                f"MVKM-ED: the cost 1 - exp(-beta*||x - a||^2) rounds to 1 for every centre "
                f"on {share:.0%} of the samples (beta = {np.round(scale, 4).tolist()} from the "
                "views' feature sums): they tie and fall into one cluster. The author's beta "
                "schedule expects standardized views; standardize each feature.",
                ConvergenceWarning,
                stacklevel=4,  # _memberships < _set_fitted < fit < the caller
            )
        return local_statistics(pv, state, model, view_scale=scale).memberships
