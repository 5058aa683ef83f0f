"""HK-MVFC: heat-kernel-enhanced multi-view fuzzy clustering (FedHK-MVFC paper, §3).

The client and server steps live in :mod:`fedstrata.algorithms.multiview`
(:func:`local_statistics`, :func:`combine`); this module adds the estimator.

Two sets of defaults. ``preset="paper"`` is Algorithm 1 of the FedHK-MVFC paper
(Eq. 16 centres, |ΔJ| < tol) with m = 2, α = 5 and Type 1 coefficients, which the
paper prints only for its federated two-client analysis (§6.6.2), and 10 restarts from
k-means keeping the best, the project's choice (the paper averages ten single-start
runs, §6.5). The default (``preset=None``) is what holds up on real data: on the UCI
multiple-features digits (six views of 6-240 features) the paper's settings give ARI
≈ 0.2-0.3, because the Type 1 kernel saturates when feature scales differ and m = 2
flattens the memberships in high dimension. See :class:`HKMVFC` for each setting.
"""

from __future__ import annotations

import numbers
from typing import Any, ClassVar

import numpy as np

from fedstrata.algorithms._base import MultiViewEstimator
from fedstrata.algorithms._validation import (
    BANDWIDTH_MAX,
    BANDWIDTH_MIN,
    FUZZY_CONSTRAINTS,
    Constraint,
    interval,
    one_of,
)
from fedstrata.algorithms.fuzzifier_check import checked_fuzzifier
from fedstrata.algorithms.kernels import KERNELS
from fedstrata.algorithms.multiview import (
    CENTER_UPDATES,
    VIEW_BALANCES,
    MultiViewModel,
    auto_fuzzifier,
)
from fedstrata.algorithms.presets import DEFAULTS, PRESETS
from fedstrata.errors import ValidationError

__all__ = ["DEFAULTS", "HKMVFC", "PRESETS", "auto_fuzzifier"]


def _bandwidth_ok(value: Any) -> str | None:
    if value is None or value == "none":
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        span = f"[{BANDWIDTH_MIN:g}, {BANDWIDTH_MAX:g}]"
        return f"must be a number in {span}, 'none' or None; got {value!r}"
    return interval(float, BANDWIDTH_MIN, BANDWIDTH_MAX)(value)


def _m_ok(value: Any) -> str | None:
    if value is None or value == "auto":
        return None
    return interval(float, 1.0, None, closed="neither")(value)


def _or_none(check: Constraint) -> Constraint:
    return lambda value: None if value is None else check(value)


class HKMVFC(MultiViewEstimator):
    """Heat-kernel-enhanced multi-view fuzzy clustering (Algorithm 1 of the FedHK-MVFC paper).

    Minimises J = Σ_h v_h^α Σ_i Σ_k μ_ik^m (1 - exp(-Σ_j δ_ij^h (x_ij^h - a_kj^h)^2))
    (Eq. 13) by alternating memberships (Eq. 15), view weights (Eq. 17) and centres
    (Eq. 16, or its exact form).

    Every parameter left at ``None`` takes its value from ``preset``: the defaults
    below (``preset=None``), or the paper's (``preset="paper"``, in brackets). A value
    given explicitly always wins over the preset.

    Parameters
    ----------
    n_clusters
        Number of clusters c (>= 2).
    m
        Fuzzifier in (1, m*), or ``"auto"``. Default ``"auto"`` [paper: 2.0]: the
        Schwämmle-Jensen value for the data's size (:func:`auto_fuzzifier`; V. Schwämmle
        and O. N. Jensen, "A simple and fast method to determine the parameters for
        fuzzy c-means cluster analysis", Bioinformatics 26(22), 2010), at most 1.3.
        m* is the data's fuzzifier ceiling
        (:func:`~fedstrata.algorithms.fuzzifier.fuzzifier_ceiling`, J. Yu, Q. Cheng and
        H. Huang, "Analysis of the weighting exponent in the FCM", 2004): 1/(1 - 2λ),
        λ the share of the variance on the first principal axis in the kernel's
        metric. From m* on the grand mean is a stable fixed point and the memberships
        can collapse to 1/c: digits has m* = 1.31, multiple-features 1.54 (α = 50), so
        m = 1.5 and the paper's 2 fail there. With ``kernel="none"`` a fit refuses an
        explicit m >= m* (ValidationError naming the range) and an ``"auto"`` m at or
        above it becomes the rule's; the Type 1 and 2 kernels have no fixed metric and
        are not checked. Rule (the project's, measured in ``benchmarks/hk_sweep.py``):
        m = 1 + 0.75·(m* - 1) (:func:`~fedstrata.algorithms.fuzzifier.recommended_fuzzifier`);
        up to 0.9 of the way ARI stays within 0.9 of k-means', beyond it clusters merge.
        The resolved value is ``model_.m`` after fitting.
    alpha
        View-weight exponent in (1, 1000]. Default 50 [paper: 5]. Eq. 17 gives v_h ∝
        cost_h^{-1/(α-1)}: with α = 5 a 6-feature view, whose costs are small because
        it has few features, takes several times the weight of a 240-feature one
        (multiple-features: ARI 0.56 at α <= 5 against 0.84 at α >= 50). With a large α
        the weights stay near 1/H and v_h^α ∝ 1/cost_h, each view's cost normalised;
        α = 200 and 1000 give the same fits as 50 on the data measured. v_h^α is
        computed in log space when it would underflow
        (:func:`~fedstrata.algorithms.multiview.view_powers`): any α in the range
        keeps informative memberships. Rule: α = 50 when the views' dimensions
        differ, a small α (2-5) only to let the views' costs pick one view.
    kernel
        Heat-kernel coefficients: ``"type1"`` min-max (Eq. 8), ``"type2"`` mean
        deviation (Eq. 9), ``"none"`` (δ ≡ 1). Default ``"none"`` [paper: ``"type1"``]:
        with a bandwidth, δ ≡ 1 is the Gaussian heat kernel exp(-||x - a||²/(γ s))
        with the diffusion time set by the data's variance. Type 1 weights each
        feature by the sample's own min-max-scaled value, which on multiple-features
        loses 0.15 ARI against δ ≡ 1 under the same bandwidth.
    center_update
        ``"paper"``: Eq. 16/44 as printed (weights μ^m exp(-δ_ij ||x_i - a_k||^2));
        not the stationary point of Eq. 13, so J may rise slightly between iterations,
        and it costs one exp per feature. ``"exact"``: the true fixed point of Eq. 13
        (weights μ^m δ_ij exp(-φ_ik)), a majorise-minimise step: J never increases,
        one exp per view. ``"derivation"``: Eq. 63-65. Default ``"exact"`` [paper:
        ``"paper"``].
    bandwidth
        Kernel width γ in [1, 10^6], in units of the data's own spread, or ``"none"``
        for δ as the kernel gives it. Default 8.0 [paper: ``"none"``]. Below 1 the
        kernel distance 1 - exp(-φ) saturates at 1 for most sample-centre pairs and
        the memberships flatten towards 1/c (ARI 0.37-0.57 on multiple-features at
        γ = 0.05-0.25); the smaller γ, the lower the usable m (a saturated kernel
        compresses distance ratios as a larger m does). Rule: 8, or 2-8 (digits: ARI
        0.63 at 2-4, 0.59 at 8). δ is divided by γ·s_hj
        (:class:`~fedstrata.algorithms.multiview.MultiViewModel`, ``bandwidth``), so
        exp(-φ) works in its informative range whatever the features' units: the
        paper's unscaled kernel saturates (all distances ≈ 1) when features are in the
        hundreds, as in multiple-features. The scale comes from per-feature counts,
        sums and sums of squared deviations (mergeable). γ = 8 puts the mean squared
        distance of the data to its mean at 1/8 per view on average: the kernel bends
        far points' weights a little and stays close to the Euclidean fuzzy c-means
        inside clusters (γ from 4 to 32 gives the same labels on multiple-features).
    standardize
        With a bandwidth, measure each feature in its own variance (``True``, default)
        or each view in its mean feature variance (``False``).
    view_balance
        With a bandwidth, ``"dimension"`` (default): views count like their number of
        features, as in k-means on the concatenated standardized views; ``"equal"``:
        each view's spread is normalised to the same size (a 6-feature view then
        counts as much as a 240-feature one).
    max_iter
        Iteration limit per restart.
    tol
        Stop when |J_t - J_{t-1}| < tol (Algorithm 1), or < tol·|J_t| with
        ``relative_tol``.
    relative_tol
        Default ``True`` [paper: ``False``]. J carries v_h^α, about H^-α: with α = 50
        an absolute tol would stop after two iterations.
    n_init
        Restarts; the lowest final objective wins. Restarts that start from the same
        centres are fitted once; distinct ones run in parallel threads for large n·c.
        Default 1 [paper: 10]: the default init already keeps the best of 10 k-means
        runs, and fits from other Lloyd solutions reach the same fixed point on the
        data measured (multiple-features: 10 of 10 restarts).
    init
        ``"kmeans-best"``: k-means++ and Lloyd on the concatenated standardized views,
        best of 10 by inertia (default); ``"kmeans"``: one k-means per restart [paper];
        ``"k-means++"``, ``"random"``, or a list of per-view (c, d_h) centre arrays
        (then a single run).
    preset
        ``None`` (the defaults above) or ``"paper"``: m = 2, α = 5, Type 1 kernel,
        no bandwidth, Eq. 16 centres, absolute tol, ``n_init=10``, ``init="kmeans"``:
        the FedHK-MVFC paper's Algorithm 1 with the settings of its federated analysis
        (restarts and init are the project's choice; see the module docstring), bit
        for bit the estimator's behaviour before these defaults changed.
    random_state
        Seed or generator.

    Attributes
    ----------
    labels_ : ndarray (n,)
    memberships_ : ndarray (n, c)
    centers_ : list of ndarray (c, d_h)
    view_weights_ : ndarray (H,)
    objective_ : float
        J at the final (U, A, V); times H₊^(α-1) (H₊ views of weight > 0) when H₊^-α
        < 1e-100, where J itself would underflow
        (:func:`~fedstrata.algorithms.multiview.view_powers`).
    n_iter_ : int
    objective_history_ : ndarray
        J(U_t, A_{t-1}, V_t) per iteration of the winning restart.
    model_ : MultiViewModel
        The model fitted, with ``m`` and the preset resolved.
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **FUZZY_CONSTRAINTS,
        "m": _m_ok,
        "alpha": _or_none(FUZZY_CONSTRAINTS["alpha"]),
        "n_init": _or_none(FUZZY_CONSTRAINTS["n_init"]),
        "kernel": one_of(None, *KERNELS),
        "center_update": one_of(None, *CENTER_UPDATES),
        "bandwidth": _bandwidth_ok,
        "standardize": one_of(True, False),
        "view_balance": one_of(*VIEW_BALANCES),
        "relative_tol": one_of(None, True, False),
        "preset": one_of(*PRESETS),
    }

    def __init__(
        self,
        n_clusters: int = 4,
        *,
        m: float | str | None = None,
        alpha: float | None = None,
        kernel: str | None = None,
        center_update: str | None = None,
        bandwidth: float | str | None = None,
        standardize: bool = True,
        view_balance: str = "dimension",
        max_iter: int = 100,
        tol: float = 1e-6,
        relative_tol: bool | None = None,
        n_init: int | None = None,
        init: Any = None,
        preset: str | None = None,
        random_state: Any = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.m = m
        self.alpha = alpha
        self.kernel = kernel
        self.center_update = center_update
        self.bandwidth = bandwidth
        self.standardize = standardize
        self.view_balance = view_balance
        self.max_iter = max_iter
        self.tol = tol
        self.relative_tol = relative_tol
        self.n_init = n_init
        self.init = init
        self.preset = preset
        self.random_state = random_state

    def _setting(self, name: str) -> Any:
        value = getattr(self, name)
        if value is None and name in DEFAULTS:
            preset = PRESETS.get(self.preset)
            if preset is None:
                raise ValidationError(
                    f"HKMVFC: unknown preset {self.preset!r}; expected one of {list(PRESETS)}"
                )
            return preset[name]
        return value

    def _relative_tol(self) -> bool:
        return bool(self._setting("relative_tol"))

    def _model(self) -> MultiViewModel:
        m = self._setting("m")
        return self._build(2.0 if m == "auto" else float(m))

    def _build(self, m: float) -> MultiViewModel:
        bandwidth = self._setting("bandwidth")
        return MultiViewModel(
            n_clusters=self.n_clusters,
            m=m,
            alpha=float(self._setting("alpha")),
            kernel=self._setting("kernel"),
            center_update=self._setting("center_update"),
            bandwidth=None if bandwidth == "none" else float(bandwidth),
            standardize=bool(self.standardize),
            view_balance=self.view_balance,
        )

    def _fit_model(self, data: list[np.ndarray]) -> MultiViewModel:
        m = self._setting("m")
        auto = m == "auto"
        if auto:
            m = auto_fuzzifier(data[0].shape[0], [X.shape[1] for X in data], self.n_clusters)
        return checked_fuzzifier("HKMVFC", data, self._build(float(m)), auto=auto)
