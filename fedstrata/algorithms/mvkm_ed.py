"""MVKM-ED: rectified Gaussian kernel multi-view k-means.

From "Fed-MVKM: Federated Multi-View K-Means Clustering" (Yang & Sinaga).

Hard memberships from Σ_h v_h^α (1 - exp(-β_h ||x_i^h - a_k^h||^2)), centres as
kernel-weighted means, view weights v_h ∝ cost_h^{-1/(α-1)}; β_h follows the
author's schedule β_h^(t) = |Σ_j mean_i x_ij^h| · c / (t · n) (Fed-MVKM paper's tutorial code).
It is the engine of :mod:`fedstrata.algorithms.multiview` with δ ≡ β_h and
argmin memberships, so its federated statistics are the same additive sums.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from fedstrata.algorithms._base import MultiViewEstimator
from fedstrata.algorithms._validation import FIT_CONSTRAINTS, Constraint
from fedstrata.algorithms.kernels import KernelReference
from fedstrata.algorithms.multiview import MultiViewModel, PreparedViews
from fedstrata.algorithms.schedules import mvkm_ed_model, scheduled_scale

__all__ = ["MVKMED", "beta_schedule", "mvkm_ed_model", "scheduled_scale"]


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
        return local_statistics(pv, state, model, view_scale=scale).memberships
