"""Scikit-learn style estimators of the tensor family (a centralized fit = one client).

Each estimator runs :func:`~fedstrata.algorithms.tensor.tensor_federated_fit` with a
single client holding all the data, so the centralized and federated maths are the same
code: the quality weights of Eq. 101 cancel with one client, and personalisation blends
the global model with the client's own previous local one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin

from fedstrata.algorithms._validation import (
    Constraint,
    check_new_views,
    check_params,
    check_views,
    interval,
    one_of,
)
from fedstrata.algorithms.tensor._common import minmax_scale_views
from fedstrata.algorithms.tensor.client import TensorClient
from fedstrata.algorithms.tensor.decompositions import DECOMPOSITIONS, FACTOR_KEYS, reconstruct
from fedstrata.algorithms.tensor.federated import INITS, SCALINGS, tensor_federated_fit
from fedstrata.algorithms.tensor.model import (
    ALPHA_RANGE,
    BANDWIDTH_RANGE,
    M_RANGE,
    TensorModel,
)
from fedstrata.algorithms.tensor.presets import (
    TENSOR_PRESETS,
    preset_init,
    preset_model_settings,
)
from fedstrata.errors import ValidationError

__all__ = ["EFKMVC", "FedHKMVCPerson", "FedHKPARAFAC2", "FedHKTucker"]


def _in_range(bounds: tuple[float, float], *, open_low: bool) -> Constraint:
    """``None`` (the preset's value) or a number in ``bounds``; the message names the range."""
    lo, hi = bounds
    check = interval(float, lo, hi, closed="right" if open_low else "both")
    text = f"{'(' if open_low else '['}{lo:g}, {hi:g}]"

    def constraint(value: Any) -> str | None:
        if value is None or check(value) is None:
            return None
        return f"must be None or a number in {text}, got {value!r}"

    return constraint


_COMMON: dict[str, Constraint] = {
    "n_clusters": interval(int, 2, None),
    "m": _in_range(M_RANGE, open_low=True),
    "alpha": _in_range(ALPHA_RANGE, open_low=True),
    "bandwidth": _in_range(BANDWIDTH_RANGE, open_low=False),
    "local_epochs": interval(int, 1, None),
    "max_iter": interval(int, 1, None),
    "tol": interval(float, 0.0, None),
    "init": one_of(None, *INITS),
    "scaling": one_of(*SCALINGS),
    "preset": one_of(*TENSOR_PRESETS),
}
_FACTOR: dict[str, Constraint] = {
    "lam": lambda value: None if value is None else interval(float, 0.0, 1.0)(value),
    "tau": interval(float, 0.0, None),
    "n_als": interval(int, 1, None),
}


class _TensorEstimator(ClusterMixin, BaseEstimator):
    """Shared fit/predict of the four estimators.

    Attributes (after ``fit``)
    --------------------------
    labels_ : ndarray (n,)
    memberships_ : ndarray (n, c)
    n_iter_ : int
        Rounds run.
    objective_history_ : ndarray
        Mean per-sample objective after every round.
    objective_ : float
        Its last value.
    factors_ : dict of ndarray
        The final global model (centres ``A`` and ``V`` for E-FKMVC; the factors, ``V``
        and ``J_ref`` for the factor methods).
    centers_ : list of ndarray (c, d_h)
        The model's centres per view, in the scaled space (min-max, and centred at the
        training mean when ``model_.center_views``).
    view_weights_ : ndarray (s,)
    model_ : TensorModel
    converged_ : bool
    n_features_in_ : list of int
    """

    _method: ClassVar[str] = ""
    _parameter_constraints: ClassVar[dict[str, Constraint]] = _COMMON

    def _model_kwargs(self) -> dict[str, Any]:
        return {}

    def _model(self, dims: list[int]) -> TensorModel:
        """The preset's settings, then every parameter set explicitly (not ``None``)."""
        decomposition = getattr(self, "decomposition", None)
        settings = preset_model_settings(
            self.preset, self._method, self.n_clusters, dims, decomposition
        )
        explicit = {
            "m": self.m,
            "alpha": self.alpha,
            "bandwidth": self.bandwidth,
            **self._model_kwargs(),
        }
        settings.update({k: v for k, v in explicit.items() if v is not None})
        for key in ("m", "alpha", "bandwidth", "lam", "rho", "tau", "beta", "eps_a", "eps_v"):
            if key in settings:
                settings[key] = float(settings[key])
        return TensorModel(
            method=self._method,
            n_clusters=self.n_clusters,
            dims=tuple(dims),
            local_epochs=self.local_epochs,
            **settings,
        )

    def fit(self, views: Any, y: Any = None) -> _TensorEstimator:
        """Fit to multi-view data: ``views`` is a list of (n, d_h) arrays."""
        check_params(type(self).__name__, self.get_params(deep=False), self._parameter_constraints)
        data = check_views(views, min_samples=2)
        if self.n_clusters > data[0].shape[0]:
            raise ValidationError(
                f"n_clusters={self.n_clusters} is larger than the number of samples "
                f"({data[0].shape[0]})"
            )
        model = self._model([X.shape[1] for X in data])
        res = tensor_federated_fit(
            model,
            [data],
            rounds=self.max_iter,
            tol=float(self.tol),
            random_state=self.random_state,
            init=self.init if self.init is not None else preset_init(self.preset),
            scaling=self.scaling,
        )
        self.model_ = model
        self.labels_ = res.labels[0]
        self.memberships_ = res.memberships[0]
        self.n_iter_ = res.n_rounds
        self.objective_history_ = res.objective_history
        self.objective_ = float(res.objective_history[-1])
        self.converged_ = res.converged
        self.factors_ = {k: np.array(v) for k, v in res.model.items()}
        self.view_weights_ = np.array(res.model["V"])
        self.centers_ = self._centers(model, res.model)
        self.n_features_in_ = [X.shape[1] for X in data]
        self._ranges = (res.minimum, res.maximum, res.mean)
        self._scales = res.clients[0].kernel_scales
        return self

    @staticmethod
    def _centers(model: TensorModel, glob: dict[str, np.ndarray]) -> list[np.ndarray]:
        views = list(range(model.n_views))
        if model.kind == "centers":
            off = model.offsets
            return [np.array(glob["A"][:, off[h] : off[h + 1]]) for h in views]
        f = {k: glob[k] for k in FACTOR_KEYS[model.kind]}
        return [np.array(a) for a in reconstruct(model.kind, f, model.dims, views)]

    def predict_memberships(self, views: Any) -> np.ndarray:
        """Memberships (n, c) of new samples under the fitted global model.

        The new views are scaled with the training range (and centred at the training
        mean when the model centres its views) and their heat-kernel coefficients
        measured against it.
        """
        data = check_new_views(self, views, "factors_")
        lo, hi, mean = self._ranges
        if lo is not None and hi is not None:
            data = minmax_scale_views(data, lo, hi, mean)
        model = dataclasses.replace(self.model_, delta="pooled")
        client = TensorClient(model, data, range(model.n_views), self._scales)
        return client.memberships(self.factors_)

    def predict(self, views: Any) -> np.ndarray:
        """Hard labels of new samples (argmax of :meth:`predict_memberships`)."""
        return self.predict_memberships(views).argmax(axis=1)

    def fit_predict(self, views: Any, y: Any = None, **kwargs: Any) -> np.ndarray:
        """Fit and return ``labels_``."""
        return self.fit(views).labels_


class EFKMVC(_TensorEstimator):
    """E-FKMVC (Algorithm 1): heat-kernel fuzzy multi-view clustering, federated averaging.

    Per round each client runs ``local_epochs`` of memberships (Eq. 29), centres (Eq. 51)
    and view weights (Eq. 31) from the (personalised, Eqs. 62-63) global model and sends
    ``n·A^h`` (c, Σd), ``n·v`` (s,), ``n·1[h held]`` (s,), ``J_ℓ`` and ``n`` (all
    additive); the server averages by sample counts (Eqs. 60-61).

    Every parameter left at ``None`` takes its value from ``preset``; a value given
    explicitly always wins.

    Parameters
    ----------
    n_clusters
        Clusters c.
    m
        Fuzzifier in (1, 2], at most 1.4 with a bandwidth. ``"paper"``: 2;
        ``"real-data"``: 1.3.
    alpha
        View exponent in (1, 1000]. ``"paper"``: 2; ``"real-data"``: 50.
    local_epochs
        Local epochs E per round.
    max_iter
        Rounds T.
    tol
        Relative objective change that stops the rounds.
    init
        ``"kmeans"`` (``"paper"``), ``"kmeans-best"`` (``"real-data"``: best of 10
        k-means++ seedings) or ``"random"`` (U[0, 1] centres).
    scaling
        ``"minmax"`` (default) or ``"none"``.
    bandwidth
        Kernel width γ in [2, 64] in units of the pooled feature variances, or ``None``
        for the paper's min-max coefficients (Eq. 23). ``"real-data"``: 8.
    preset
        ``"paper"`` (default: the paper's kernel, the model's defaults) or
        ``"real-data"`` (:mod:`~fedstrata.algorithms.tensor.presets`: m = 1.3, α = 50,
        γ = 8, best-of-10 k-means start, ranks that hold every cluster).
    eps_a, eps_v
        Personalisation step sizes of Eqs. 62-63.
    center_update
        ``"paper"`` (Eq. 51) or ``"exact"``.
    random_state
        Seed.
    """

    _method = "e-fkmvc"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **_COMMON,
        "eps_a": interval(float, 0.0, None),
        "eps_v": interval(float, 0.0, None),
        "center_update": one_of("paper", "exact"),
    }

    def __init__(
        self,
        n_clusters: int = 4,
        *,
        m: float | None = None,
        alpha: float | None = None,
        local_epochs: int = 5,
        max_iter: int = 30,
        tol: float = 1e-4,
        init: str | None = None,
        scaling: str = "minmax",
        bandwidth: float | None = None,
        preset: str = "paper",
        eps_a: float = 0.1,
        eps_v: float = 0.1,
        center_update: str = "paper",
        random_state: Any = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.m = m
        self.alpha = alpha
        self.local_epochs = local_epochs
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.scaling = scaling
        self.bandwidth = bandwidth
        self.preset = preset
        self.eps_a = eps_a
        self.eps_v = eps_v
        self.center_update = center_update
        self.random_state = random_state

    def _model_kwargs(self) -> dict[str, Any]:
        return {
            "eps_a": float(self.eps_a),
            "eps_v": float(self.eps_v),
            "center_update": self.center_update,
        }


class FedHKTucker(_TensorEstimator):
    """FedHK-Tucker (Algorithm 3): a Tucker model of the cluster-centre tensor.

    The c × D × s centre tensor is ``G ×1 U ×2 Vf ×3 W`` (tensorly HOOI with a mask over
    padded features and absent views). Each epoch: memberships from the reconstructed
    centres (Eq. 86), one weighted-LS Tucker update towards the fuzzy-mean target
    (Eqs. 87, 90-92), view weights (Eq. 88). A client sends ``ŵn·G`` (r1, r2, r3),
    ``ŵn·U`` (c, r1), ``ŵn·Vf`` (D, r2), ``ŵn·W`` (s, r3), ``ŵn·v``, ``ŵn·1[h held]``,
    ``S^views`` (s,), ``ŵn``, ``J_ℓ``, ``n``, 1 (all additive; ŵ = exp(−τ(J/n − J_ref))).

    Parameters
    ----------
    n_clusters, m, alpha, local_epochs, max_iter, tol, init, scaling, bandwidth, preset
        As :class:`EFKMVC`.
    random_state
        Seed.
    ranks
        (r1, r2, r3); default (c, min(c, D), s), with ``"real-data"`` (c, min(D, c·s), s).
    lam
        Weight of the global factors in the start of each round (vs the previous local);
        ``None``: 0.5.
    tau
        Temperature of the quality weights (Eq. 101).
    n_als
        HOOI sweeps per epoch.
    """

    _method = "fedhk-tucker"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {**_COMMON, **_FACTOR}

    def __init__(
        self,
        n_clusters: int = 4,
        *,
        m: float | None = None,
        alpha: float | None = None,
        ranks: tuple[int, int, int] | None = None,
        local_epochs: int = 5,
        max_iter: int = 30,
        tol: float = 1e-4,
        init: str | None = None,
        scaling: str = "minmax",
        bandwidth: float | None = None,
        preset: str = "paper",
        lam: float | None = None,
        tau: float = 1.0,
        n_als: int = 1,
        random_state: Any = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.m = m
        self.alpha = alpha
        self.ranks = ranks
        self.local_epochs = local_epochs
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.scaling = scaling
        self.bandwidth = bandwidth
        self.preset = preset
        self.lam = lam
        self.tau = tau
        self.n_als = n_als
        self.random_state = random_state

    def _model_kwargs(self) -> dict[str, Any]:
        return {
            "ranks": self.ranks,
            "lam": self.lam,
            "tau": float(self.tau),
            "n_als": self.n_als,
        }


class FedHKPARAFAC2(_TensorEstimator):
    """FedHK-PARAFAC2 (Algorithm 2): a PARAFAC2 model over the per-view centre slices.

    ``(A^h)ᵀ = P_h B diag(a_h) Cᵀ`` (tensorly ``parafac2``; the varying mode is the
    feature mode d_h). Epochs as :class:`FedHKTucker`. A client sends ``ŵn·B`` (r, r),
    ``ŵn·C`` (c, r), ``ŵn·A`` (s, r), ``ŵn·P`` (Σd, r; its views' projection blocks),
    then the same tail as Tucker (all additive).

    Parameters
    ----------
    n_clusters, m, alpha, local_epochs, max_iter, tol, init, scaling, bandwidth, preset
        As :class:`EFKMVC`.
    random_state
        Seed.
    rank
        r; default min(c, min_h d_h), with ``"real-data"`` c (views with fewer
        features zero-padded, ``TensorModel.pad``).
    lam, tau, n_als
        As :class:`FedHKTucker`.
    """

    _method = "fedhk-parafac2"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {**_COMMON, **_FACTOR}

    def __init__(
        self,
        n_clusters: int = 4,
        *,
        m: float | None = None,
        alpha: float | None = None,
        rank: int | None = None,
        local_epochs: int = 5,
        max_iter: int = 30,
        tol: float = 1e-4,
        init: str | None = None,
        scaling: str = "minmax",
        bandwidth: float | None = None,
        preset: str = "paper",
        lam: float | None = None,
        tau: float = 1.0,
        n_als: int = 1,
        random_state: Any = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.m = m
        self.alpha = alpha
        self.rank = rank
        self.local_epochs = local_epochs
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.scaling = scaling
        self.bandwidth = bandwidth
        self.preset = preset
        self.lam = lam
        self.tau = tau
        self.n_als = n_als
        self.random_state = random_state

    def _model_kwargs(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "lam": self.lam,
            "tau": float(self.tau),
            "n_als": self.n_als,
        }


class FedHKMVCPerson(_TensorEstimator):
    """FedHK-MVC-Person (Algorithm 4): personalised federated tensor clustering.

    As :class:`FedHKPARAFAC2` (or Tucker / CP via ``decomposition``) with component-wise
    blend weights λ (core, P, Q, R) and a view-weight blend ρ, adapted on the client by
    ``λ ← clip(λ − β dJ/dλ, 0, 1)``. ``labels_`` are under the client's personalised
    model; :meth:`predict` uses the global one. Messages as the chosen decomposition's.

    Parameters
    ----------
    n_clusters, m, alpha, local_epochs, max_iter, tol, init, scaling, bandwidth, preset
        As :class:`EFKMVC`.
    random_state
        Seed.
    decomposition
        ``"parafac2"`` (default), ``"tucker"`` or ``"cp"``.
    rank, ranks
        PARAFAC2 / CP rank, Tucker ranks (defaults as the other estimators; CP: c·s).
    lam, rho
        Initial λ (all four; ``None``: 0.5, with ``"real-data"`` 0.8) and ρ.
    beta
        Step size of the λ/ρ adaptation.
    tau, n_als
        As :class:`FedHKTucker`.
    """

    _method = "fedhk-mvc-person"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **_COMMON,
        **_FACTOR,
        "decomposition": one_of(*DECOMPOSITIONS),
        "rho": interval(float, 0.0, 1.0),
        "beta": interval(float, 0.0, None),
    }

    def __init__(
        self,
        n_clusters: int = 4,
        *,
        decomposition: str = "parafac2",
        m: float | None = None,
        alpha: float | None = None,
        rank: int | None = None,
        ranks: tuple[int, int, int] | None = None,
        local_epochs: int = 5,
        max_iter: int = 30,
        tol: float = 1e-4,
        init: str | None = None,
        scaling: str = "minmax",
        bandwidth: float | None = None,
        preset: str = "paper",
        lam: float | None = None,
        rho: float = 0.5,
        beta: float = 0.05,
        tau: float = 1.0,
        n_als: int = 1,
        random_state: Any = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.decomposition = decomposition
        self.m = m
        self.alpha = alpha
        self.rank = rank
        self.ranks = ranks
        self.local_epochs = local_epochs
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.scaling = scaling
        self.bandwidth = bandwidth
        self.preset = preset
        self.lam = lam
        self.rho = rho
        self.beta = beta
        self.tau = tau
        self.n_als = n_als
        self.random_state = random_state

    def _model_kwargs(self) -> dict[str, Any]:
        return {
            "decomposition": self.decomposition,
            "rank": self.rank,
            "ranks": self.ranks,
            "lam": self.lam,
            "rho": float(self.rho),
            "beta": float(self.beta),
            "tau": float(self.tau),
            "n_als": self.n_als,
        }
