"""HK-MVFC: heat-kernel-enhanced multi-view fuzzy clustering (FedHK-MVFC paper, §3).

The client and server steps live in :mod:`fedstrata.algorithms.multiview`
(:func:`local_statistics`, :func:`combine`); this module adds the estimator.
"""

from __future__ import annotations

from typing import Any, ClassVar

from fedstrata.algorithms._base import MultiViewEstimator
from fedstrata.algorithms._validation import FUZZY_CONSTRAINTS, Constraint, one_of
from fedstrata.algorithms.kernels import KERNELS
from fedstrata.algorithms.multiview import CENTER_UPDATES, MultiViewModel

__all__ = ["HKMVFC"]


class HKMVFC(MultiViewEstimator):
    """Heat-kernel-enhanced multi-view fuzzy clustering (Algorithm 1 of the FedHK-MVFC paper).

    Minimises J = Σ_h v_h^α Σ_i Σ_k μ_ik^m (1 - exp(-Σ_j δ_ij^h (x_ij^h - a_kj^h)^2))
    (Eq. 13) by alternating memberships (Eq. 15), view weights (Eq. 17) and centres
    (Eq. 16, or its exact form).

    Parameters
    ----------
    n_clusters
        Number of clusters c (>= 2).
    m
        Fuzzifier, > 1.
    alpha
        View-weight exponent, > 1.
    kernel
        Heat-kernel coefficients: ``"type1"`` min-max (Eq. 8), ``"type2"`` mean
        deviation (Eq. 9), ``"none"`` (δ ≡ 1).
    center_update
        ``"paper"``: Eq. 16/44 as printed (weights μ^m exp(-δ_ij ||x_i - a_k||^2));
        not the stationary point of Eq. 13, so J may rise slightly between iterations.
        ``"exact"``: the true fixed point of Eq. 13 (weights μ^m δ_ij exp(-φ_ik)), a
        majorise-minimise step: J never increases. ``"derivation"``: Eq. 63-65.
    max_iter
        Iteration limit per restart.
    tol
        Stop when |J_t - J_{t-1}| < tol (Algorithm 1).
    n_init
        Restarts; the lowest final objective wins. Restarts that start from the same
        centres are fitted once; distinct ones run in parallel threads for large n·c.
    init
        ``"kmeans"`` (default), ``"k-means++"``, ``"random"``, or a list of per-view
        (c, d_h) centre arrays (then a single run).
    random_state
        Seed or generator.

    Attributes
    ----------
    labels_ : ndarray (n,)
    memberships_ : ndarray (n, c)
    centers_ : list of ndarray (c, d_h)
    view_weights_ : ndarray (H,)
    objective_ : float
        J at the final (U, A, V).
    n_iter_ : int
    objective_history_ : ndarray
        J(U_t, A_{t-1}, V_t) per iteration of the winning restart.
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **FUZZY_CONSTRAINTS,
        "kernel": one_of(*KERNELS),
        "center_update": one_of(*CENTER_UPDATES),
    }

    def __init__(
        self,
        n_clusters: int = 4,
        *,
        m: float = 2.0,
        alpha: float = 5.0,
        kernel: str = "type1",
        center_update: str = "paper",
        max_iter: int = 100,
        tol: float = 1e-6,
        n_init: int = 10,
        init: Any = "kmeans",
        random_state: Any = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.m = m
        self.alpha = alpha
        self.kernel = kernel
        self.center_update = center_update
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.init = init
        self.random_state = random_state

    def _model(self) -> MultiViewModel:
        return MultiViewModel(
            n_clusters=self.n_clusters,
            m=float(self.m),
            alpha=float(self.alpha),
            kernel=self.kernel,
            center_update=self.center_update,
        )
