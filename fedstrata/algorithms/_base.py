"""Shared estimator shell: validation, restarts (distinct ones, one per thread), predict."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state

from fedstrata.algorithms._validation import Constraint, check_new_views, check_params, check_views
from fedstrata.algorithms.fit import (
    FitResult,
    _restart_workers,
    _warn_max_iter,
    fit_batched,
    unique_restarts,
)
from fedstrata.algorithms.init import initial_centers
from fedstrata.algorithms.kernels import KernelReference, kernel_reference
from fedstrata.algorithms.multiview import (
    MultiViewModel,
    PreparedViews,
    State,
    local_statistics,
    prepare_views,
)
from fedstrata.errors import ValidationError

__all__ = ["FitResult", "MultiViewEstimator", "fit_batched", "unique_restarts"]

ScaleFn = Callable[[np.ndarray], np.ndarray] | None


class MultiViewEstimator(ClusterMixin, BaseEstimator):
    """Base of fedstrata's multi-view clustering estimators (scikit-learn conventions).

    ``fit(views)`` takes a list of (n, d_h) arrays, one per view. Subclasses define
    ``_parameter_constraints`` and ``_model()``.
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {}
    _init_methods: ClassVar[tuple[str, ...]] = ("kmeans", "k-means++", "random", "kmeans-best")

    def _model(self) -> MultiViewModel:
        raise NotImplementedError

    def _fit_model(self, data: list[np.ndarray]) -> MultiViewModel:
        """The model fitted to ``data`` (data-derived settings resolved); default ``_model()``."""
        return self._model()

    def _fitted_model(self) -> MultiViewModel:
        """The model of the last fit (``model_``), else ``_model()``."""
        model = getattr(self, "model_", None)
        return model if isinstance(model, MultiViewModel) else self._model()

    def _setting(self, name: str) -> Any:
        """The effective value of parameter ``name`` (subclasses resolve presets here)."""
        return getattr(self, name)

    def _relative_tol(self) -> bool:
        """Whether ``tol`` is relative to |J| (see :func:`fit_batched`)."""
        return False

    def _view_scale(self, pv: PreparedViews) -> ScaleFn:
        return None

    def _validate(self, views: Any) -> list[np.ndarray]:
        check_params(type(self).__name__, self.get_params(deep=False), self._parameter_constraints)
        data = check_views(views, min_samples=2)
        if self.n_clusters > data[0].shape[0]:
            raise ValidationError(
                f"n_clusters={self.n_clusters} is larger than the number of samples "
                f"({data[0].shape[0]})"
            )
        return data

    def _initial_state(self, data: list[np.ndarray], rng: np.random.Generator) -> State:
        H = len(data)
        init = self._setting("init")
        if isinstance(init, str):
            if init not in self._init_methods:
                raise ValidationError(
                    f"{type(self).__name__}: init must be one of {self._init_methods} or a "
                    f"list of per-view centre arrays; got {init!r}"
                )
            centers = initial_centers(
                data, self.n_clusters, n_init=self._setting("n_init"), method=init, rng=rng
            )
        else:
            if not isinstance(init, list | tuple) or len(init) != H:
                raise ValidationError(f"init must be a list of {H} arrays (one per view)")
            given: list[np.ndarray] = []
            for h, (a, X) in enumerate(zip(init, data, strict=True)):
                a = np.asarray(a, dtype=np.float64)
                if a.shape != (self.n_clusters, X.shape[1]) or not np.isfinite(a).all():
                    raise ValidationError(
                        f"init[{h}] must be a finite ({self.n_clusters}, {X.shape[1]}) array"
                    )
                given.append(a[None])
            centers = tuple(given)
        R = centers[0].shape[0]
        return State(tuple(centers), np.full((R, H), 1.0 / H))

    def fit(self, views: Any, y: Any = None) -> MultiViewEstimator:
        """Fit the model to multi-view data; ``views`` is a list of (n, d_h) arrays."""
        data = self._validate(views)
        rng = np.random.default_rng(check_random_state(self.random_state).randint(2**31 - 1))
        model = self._fit_model(data)
        self.model_ = model
        relative = self._relative_tol()
        self.kernel_references_ = [kernel_reference(X) for X in data]
        pv = prepare_views(data, model)
        init = self._initial_state(data, rng)
        # Restarts that start from the same centres are fitted once. The others run one
        # per thread (batching them is memory-bound and slower on (c, n) arrays): numpy
        # releases the GIL in its (c, n) loops, so distinct restarts use distinct cores.
        restarts = unique_restarts(init)
        view_scale = self._view_scale(pv)

        def run(r: int) -> FitResult:
            return fit_batched(
                pv,
                init.take(np.array([r])),
                model,
                max_iter=self.max_iter,
                tol=self.tol,
                view_scale=view_scale,
                warn=False,
                relative=relative,
            )

        workers = _restart_workers(len(restarts), pv.n_samples * model.n_clusters)
        if workers > 1:
            pv._warm_caches()  # build the shared caches before the threads start
            with ThreadPoolExecutor(max_workers=workers) as pool:
                results = list(pool.map(run, restarts))
        else:
            results = [run(r) for r in restarts]
        best = None
        for res in results:  # in restart order, as a sequential loop would
            _warn_max_iter(res.n_iter, self.max_iter, self.tol, stacklevel=2, relative=relative)
            if best is None or res.objective[0] < best.objective[0]:
                best = res
        assert best is not None
        self.n_iter_ = int(best.n_iter[0])  # before _set_fitted: MVKM-ED's β depends on it
        self._set_fitted(pv, best.state.take(0), model)
        self.objective_ = float(best.objective[0])
        self.objective_history_ = np.asarray(best.history[0])
        return self

    def _set_fitted(self, pv: PreparedViews, state: State, model: MultiViewModel) -> None:
        self.state_ = state
        self.centers_ = [np.array(a) for a in state.centers]
        self.view_weights_ = np.array(state.view_weights)
        self.memberships_ = self._memberships(pv, state, model)
        self.labels_ = self.memberships_.argmax(axis=1)
        self.n_features_in_ = [X.shape[1] for X in pv.views]

    def _memberships(self, pv: PreparedViews, state: State, model: MultiViewModel) -> np.ndarray:
        return local_statistics(pv, state, model).memberships  # type: ignore[return-value]

    def _prepare_new(self, views: Any) -> PreparedViews:
        data = check_new_views(self, views, "state_")
        refs: list[KernelReference] = self.kernel_references_
        return prepare_views(data, self._fitted_model(), references=refs)

    def predict_memberships(self, views: Any) -> np.ndarray:
        """Memberships (n, c) of new samples under the fitted centres and weights.

        Heat-kernel coefficients of the new samples are measured against the training
        data's per-feature statistics.
        """
        pv = self._prepare_new(views)
        return self._memberships(pv, self.state_, self._fitted_model())

    def predict(self, views: Any) -> np.ndarray:
        """Hard labels of new samples (argmax of :meth:`predict_memberships`)."""
        return self.predict_memberships(views).argmax(axis=1)

    def fit_predict(self, views: Any, y: Any = None, **kwargs: Any) -> np.ndarray:
        """Fit and return ``labels_``."""
        return self.fit(views).labels_
