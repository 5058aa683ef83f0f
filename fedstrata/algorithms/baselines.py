"""Baselines with the same API: Euclidean multi-view fuzzy c-means and concatenated k-means."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.cluster import KMeans

from fedstrata.algorithms._base import MultiViewEstimator
from fedstrata.algorithms._validation import (
    FUZZY_CONSTRAINTS,
    Constraint,
    check_params,
    check_views,
    interval,
)
from fedstrata.algorithms.fuzzifier_check import checked_fuzzifier
from fedstrata.algorithms.multiview import MultiViewModel
from fedstrata.errors import ValidationError

__all__ = ["MVFCM", "ConcatKMeans"]


class MVFCM(MultiViewEstimator):
    """Multi-view fuzzy c-means with squared Euclidean distances and view weights.

    The centralized counterpart of the paper's Fed-MVFCM comparison: J = Σ_h v_h^α
    Σ_i Σ_k μ_ik^m ||x_i^h - a_k^h||^2, memberships and view weights as Eq. 15/17,
    centres the μ^m-weighted means. Parameters as :class:`~fedstrata.algorithms.HKMVFC`:
    α in (1, 1000], and m in (1, m*) with m* the data's fuzzifier ceiling
    (:func:`~fedstrata.algorithms.fuzzifier.fuzzifier_ceiling` of the raw views with
    Eq. 17's weights): fitting refuses an m at or above it with a ValidationError that
    names the range and the project's rule m = 1 + 0.75·(m* - 1). m* is an upper limit,
    not a target: clusters start to merge below it, and the rule was measured for
    HK-MVFC's default metric (standardized features), not for raw units. On the raw
    views of multiple-features (m* = 1.49 at α = 5; Eq. 17 gives the Fourier view 0.72
    of the weight) ARI falls from 0.81 at m = 1.1 to 0.52 at m = 1.3 (one start).
    The default m = 2 suits low-dimensional views only. On the raw views of
    multiple-features and digits (m* = 1.49 and 1.37) it gave uniform memberships
    (ARI 0.10 and 0.17), so a fit now refuses it there.
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = FUZZY_CONSTRAINTS

    def __init__(
        self,
        n_clusters: int = 4,
        *,
        m: float = 2.0,
        alpha: float = 5.0,
        max_iter: int = 100,
        tol: float = 1e-6,
        n_init: int = 10,
        init: Any = "kmeans",
        random_state: Any = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.m = m
        self.alpha = alpha
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
            distance="euclidean",
            kernel="none",
            center_update="exact",
        )

    def _fit_model(self, data: list[np.ndarray]) -> MultiViewModel:
        return checked_fuzzifier("MVFCM", data, self._model(), auto=False)


class ConcatKMeans(ClusterMixin, BaseEstimator):
    """k-means (scikit-learn) on the views concatenated column-wise.

    Attributes mirror the multi-view estimators: ``labels_``, ``centers_`` (per view),
    ``objective_`` (inertia), ``n_iter_``.
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_clusters": interval(int, 2, None),
        "max_iter": interval(int, 1, None),
        "n_init": interval(int, 1, None),
    }

    def __init__(
        self,
        n_clusters: int = 4,
        *,
        n_init: int = 10,
        max_iter: int = 300,
        random_state: Any = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.n_init = n_init
        self.max_iter = max_iter
        self.random_state = random_state

    def fit(self, views: Any, y: Any = None) -> ConcatKMeans:
        """Fit k-means on ``np.hstack(views)``."""
        check_params(type(self).__name__, self.get_params(deep=False), self._parameter_constraints)
        data = check_views(views, min_samples=2)
        if self.n_clusters > data[0].shape[0]:
            raise ValidationError(f"n_clusters={self.n_clusters} exceeds the number of samples")
        km = KMeans(
            self.n_clusters,
            n_init=self.n_init,
            max_iter=self.max_iter,
            random_state=self.random_state,
        ).fit(np.hstack(data))
        splits = np.cumsum([X.shape[1] for X in data])[:-1]
        self.kmeans_ = km
        self.n_features_in_ = [X.shape[1] for X in data]
        self.centers_ = np.split(km.cluster_centers_, splits, axis=1)
        self.labels_ = km.labels_
        self.objective_ = float(km.inertia_)
        self.n_iter_ = int(km.n_iter_)
        return self

    def predict(self, views: Any) -> np.ndarray:
        """Nearest-centre labels of new samples."""
        if not hasattr(self, "kmeans_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("ConcatKMeans is not fitted yet; call fit first")
        data = check_views(views)
        return self.kmeans_.predict(np.hstack(data))
