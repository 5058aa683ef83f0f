"""The tensor family's model description, message layout and server rule.

Methods of "Personalized Federated Heat-Kernel Enhanced Multi-View Clustering via
Advanced Tensor Decomposition" (Sinaga):

``"e-fkmvc"``
    Algorithm 1. Clients run E epochs of the heat-kernel fuzzy updates (Eqs. 29, 51, 31)
    from the global centres and view weights; the server averages centres and view
    weights by sample counts (Eqs. 60-61). Global model: ``A`` (c, Σ_h d_h; view h's
    centres in columns ``[o_h, o_h + d_h)``), ``V`` (s,).
``"fedhk-parafac2"`` / ``"fedhk-tucker"``
    Algorithms 2 / 3 locally (PARAFAC2 / Tucker factor model of the centre tensor, one
    blend weight λ of global vs previous local factors, uniform starting view weights),
    aggregated with the quality-weighted averages of Eqs. 100-101, 108-111.
``"fedhk-mvc-person"``
    Algorithm 4: as above with component-wise λ (core, P, Q, R) adapted by gradient
    descent on the client, view weights blended with ρ, on the chosen ``decomposition``
    (``"parafac2"`` default, ``"tucker"``, or ``"cp"``).

Every message is additive: a client pre-multiplies by its sample count ``n`` (E-FKMVC)
or by ``ŵ·n`` with the unnormalised quality weight ``ŵ = exp(−τ (J̃ − J_ref))``
(tensor methods); the softmax normaliser of Eq. 101 cancels in every ratio of Eqs. 100
and 108-111, so the server only needs the elementwise sum of all messages, then
:func:`aggregate` divides. ``J_ref`` (the previous round's mean per-sample objective)
is a public shift broadcast with the model that keeps ``ŵ`` in range.

Message keys (all float64, fixed order, see :func:`message_shapes`):

* E-FKMVC, ``efkmvc_message="centers"`` (Alg. 1's upload in additive form):
  ``A`` (c, Σd) = n·A^h (zero blocks for views not held), ``V`` (s,) = n·v (zeros where
  not held), ``presence`` (s,) = n·1[h held], ``nJ`` () = J_ℓ (= n × per-sample J),
  ``n`` ().
* E-FKMVC, ``efkmvc_message="stats"`` (Def. 2, Eqs. 96-98): ``S_num`` (c, Σd) =
  Σ_i w_ik x_ij^h, ``S_den`` (c, s) = Σ_i w_ik per view (``w = μ^m``, Eq. 96, or
  ``μ^m exp(−φ)`` with ``stats_weights="hk"``, Eq. 51), then ``V``, ``presence``,
  ``views`` (s,) = S^views (Eq. 97), ``nJ``, ``n``. The server's centres are
  ``S_num / S_den`` (Eq. 99 with ω_ℓ ≡ 1, i.e. the pooled fuzzy mean).
* Tensor methods: each factor of the model (Tucker ``G, U, Vf, W``; PARAFAC2
  ``B, C, A, P``; CP ``C, F, A``; see :mod:`~fedstrata.algorithms.tensor.decompositions`)
  times ``ŵn`` (rows/blocks of views not held are zero), ``V`` (s,) = ŵn·v,
  ``presence`` (s,) = ŵn·1[h held], ``views`` (s,) = S^views (Eq. 106; summed and not
  used by the server), ``wn`` () = ŵn, ``nJ`` () = J_ℓ, ``n`` (), ``clients`` () = 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fedstrata.algorithms.tensor._common import view_powers, view_weights
from fedstrata.algorithms.tensor.decompositions import (
    DECOMPOSITIONS,
    FACTOR_KEYS,
    VIEW_BLOCK_KEYS,
    VIEW_ROW_KEYS,
    align,
    als_step,
    block_dims,
    factor_shapes,
    initial_factors,
    reconstruct,
)
from fedstrata.errors import ValidationError

__all__ = [
    "METHODS",
    "TensorModel",
    "aggregate",
    "has_converged",
    "initial_global",
    "message_shapes",
    "model_shapes",
]

METHODS = ("e-fkmvc", "fedhk-parafac2", "fedhk-tucker", "fedhk-mvc-person")
#: Bandwidths γ accepted (see :attr:`TensorModel.bandwidth`): the project's choice, the
#: range swept on two real data sets (tests/algorithms/tensor/test_robustness.py).
BANDWIDTH_RANGE = (2.0, 64.0)
#: Fuzzifiers m accepted, (1, 2]: above 2 the memberships are uniform to 1 % on both real
#: sets measured, whatever the kernel (the project's choice, see :attr:`TensorModel.m`).
M_RANGE = (1.0, 2.0)
#: The largest m with a bandwidth: the Gaussian kernel's distances are nearly Euclidean,
#: and fuzzy c-means memberships flatten from m ≈ 1.5 in high dimension.
M_BANDWIDTH_MAX = 1.4
#: View exponents α accepted, (1, 1000] (the project's choice; every value works since
#: v^α is taken in log space when it would underflow).
ALPHA_RANGE = (1.0, 1000.0)

_CHOICES: dict[str, tuple[str, ...]] = {
    "decomposition": DECOMPOSITIONS,
    "delta": ("local", "pooled"),
    "center_update": ("paper", "exact"),
    "efkmvc_message": ("centers", "stats"),
    "stats_weights": ("fuzzy", "hk"),
    "omega_j": ("per_sample", "total"),
    "view_start": ("uniform", "global"),
    "factor_message": ("factors", "stats"),
}


def _is_int(x: object) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _is_real(x: object) -> bool:
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)


@dataclass(frozen=True)
class TensorModel:
    """Hyper-parameters and shape of one tensor-family run (validated on construction).

    Parameters
    ----------
    method
        One of :data:`METHODS`.
    n_clusters
        Number of clusters c (>= 2), common to all clients.
    dims
        Feature count d_h of every global view h (the global view schema; a client may
        hold a subset of the views).
    m, alpha
        Fuzzifier m in (1, 2] (in (1, 1.4] with a ``bandwidth``) and view-weight exponent
        α in (1, 1000] (:data:`M_RANGE`, :data:`M_BANDWIDTH_MAX`, :data:`ALPHA_RANGE`).
        Rule (the project's, measured on multiple-features and scikit-learn's digits):
        with the bandwidth kernel m = 1.3 (1.05-1.4 work; from 1.5 the memberships are
        uniform), α = 50 (10-1000 within 0.02 ARI on digits; α <= 10 lets low-cost views
        dominate on multiple-features); with the paper's min-max kernel m = 2 is the
        largest value that keeps memberships off uniform on multiple-features and is
        already uniform on digits.
    local_epochs
        Local epochs E per round (Alg. 1/4; T_max of Alg. 2/3 per round).
    ranks
        Tucker ranks (r1, r2, r3). Default ``r1 = c`` (Table 5 / Lemma 1 count the core as
        ``c·r2·r3`` and the cluster factor as ``c²``), ``r2 = min(c, D)``, ``r3 = s``.
    rank
        PARAFAC2 / CP rank r (Alg. 4's three ranks collapse to one). Default
        ``min(c, min_h d_h)`` for PARAFAC2 (tensorly needs r <= c and r <= every d_h),
        ``c·s`` for CP: the padded tensor makes feature j of every view share one row of
        the feature factor, and rank c·s lets each view keep its own rank-c block (with
        rank c, 10 clients of well-separated data reach ARI ≈ 0.5 only).
    lam
        Personalisation blend: the weight of the *global* factors in
        ``X⁽⁰⁾ = λ X_g + (1 − λ) X_prev`` (the Algorithms' convention; Eqs. 102/112-115
        write the complement, identical at the default 0.5). FedHK-MVC-Person starts all
        four component weights (core, P, Q, R) at ``lam`` and adapts them.
    rho
        FedHK-MVC-Person's view-weight blend ``v⁽⁰⁾ = ρ V_g + (1 − ρ) v_prev``.
    tau
        Temperature of the quality weights ``ω_ℓ ∝ exp(−τ J̃_ℓ)`` (Eq. 101).
    beta
        Step size of the λ/ρ adaptation (Alg. 4 Phase 5, run on the client).
    eps_a, eps_v
        E-FKMVC personalisation steps (Eqs. 62-63).
    decomposition
        FedHK-MVC-Person's factor model: ``"parafac2"`` (default), ``"tucker"``, ``"cp"``.
    n_als
        ALS sweeps (tensorly iterations) per local epoch.
    delta
        Heat-kernel coefficients against the client's own ``"local"`` min/max (the
        paper's FedH-KC, default) or the ``"pooled"`` range the data was scaled with.
    eps_delta
        ε in the denominator of Eq. 23 (kept apart from the convergence threshold).
    center_update
        E-FKMVC centre rule: ``"paper"`` (Eq. 51) or ``"exact"`` (true fixed point).
    efkmvc_message
        E-FKMVC upload: ``"centers"`` (Alg. 1, n-weighted centres) or ``"stats"``
        (Def. 2 sufficient statistics; the server never sees a client's centres).
    stats_weights
        Weights of the stats message: ``"fuzzy"`` μ^m (Eq. 96) or ``"hk"`` μ^m e^{−φ}.
    omega_j
        J̃ in Eq. 101: ``"per_sample"`` J_ℓ/n(ℓ) (default; raw J grows with n(ℓ) and makes
        the softmax favour small clients) or ``"total"`` J_ℓ (as printed).
    personalize
        E-FKMVC: apply Eqs. 62-63 (a gradient step from the global model) before the
        local epochs from the second round on.
    local_tol
        Local early stop: relative change of J below this ends the epochs (0 = never).
    n_iter_parafac
        Inner CP iterations of tensorly's PARAFAC2 ALS.
    view_start
        FedHK-Tucker / FedHK-PARAFAC2 starting view weights of each round: ``"global"``
        (default: the broadcast V restricted to the held views, renormalised) or
        ``"uniform"`` (Alg. 2/3 line 6 as printed). With ``"uniform"`` every client
        discards the aggregated V of Eq. 100 each round, so the server's view weights
        never feed back into the clustering; on the UCI multiple-features digits it also
        halves the ARI. FedHK-MVC-Person always uses its ρ-blend.
    bandwidth
        ``None`` (the paper): the min-max coefficients of Eq. 23 (``delta``). A number γ
        (the ``real-data`` preset): δ_ij = 1/(γ·D̄·var_j) for every sample, HK-MVFC's
        real-data heat kernel on the pooled feature variances
        (:mod:`~fedstrata.algorithms.tensor.kernel`); ``delta`` is then not used.
    pad
        PARAFAC2 (and FedHK-MVC-Person on PARAFAC2): zero-pad the centre slice of a view
        with fewer features than the rank, so the rank may exceed a view's dimension and
        reach c (a rank below c cannot hold c clusters in the cluster mode). The padded
        rows are fitted to 0 and dropped from the reconstruction. Default ``False``
        (tensorly's PARAFAC2 as is: rank <= every d_h).
    factor_message
        FedHK-PARAFAC2 / FedHK-Tucker upload. ``"factors"`` (default; Eqs. 108-111):
        each client runs ``local_epochs`` on its own data and sends its quality-weighted
        factors, which the server averages. ``"stats"`` (the project's): each client
        sends the sufficient statistics of one membership step under the global model
        (Σ μ^m x per cluster and view, Σ μ^m, the view distortions D_h), and the server
        computes the view weights (Eq. 31) and the ALS update of the factors on the
        pooled fuzzy means. With pooled kernel coefficients (a ``bandwidth``, or
        ``delta="pooled"``) a round is then one iteration of the centralised algorithm,
        whatever the split: tiny or non-IID clients lose nothing, as with HK-MVFC's
        summed statistics (``delta="local"`` measures each client against its own
        range). It needs ``local_epochs = 1`` (there are no local epochs) and is not for
        FedHK-MVC-Person (nothing stays on the client to personalise); ``lam``, ``tau``,
        ``view_start`` and ``omega_j`` play no part in it.
    center_views
        The project's choice (``True`` under the ``real-data`` preset for PARAFAC2):
        after min-max scaling, subtract the federation's pooled mean of every feature
        (exchanged in the setup round with the ranges), so the centre tensor holds the
        clusters' offsets from the mean. PARAFAC2 ties the per-view Gram matrices of the
        centres together (``A^h A^hᵀ = C diag(a_h) BᵀB diag(a_h) Cᵀ``); on data in
        [0, 1] a large shared offset dominates those Gram matrices, and centring leaves
        the constraint to the between-cluster geometry (the UCI multiple-features
        digits, FedHK-PARAFAC2, 10 seeds: ARI 0.790 against 0.763 centralized, 0.787
        against 0.738 over 10 IID clients at λ = 0.5). Factor signs are
        then fixed by agreement with the broadcast factors instead of by positive column
        sums, which centred factors no longer have. Needs a ``bandwidth``: the bandwidth
        kernel depends only on differences, the paper's min-max coefficients (Eq. 23) on
        where each value lies.
    """

    method: str
    n_clusters: int
    dims: tuple[int, ...]
    m: float = 2.0
    alpha: float = 2.0
    local_epochs: int = 5
    ranks: tuple[int, int, int] | None = None
    rank: int | None = None
    lam: float = 0.5
    rho: float = 0.5
    tau: float = 1.0
    beta: float = 0.05
    eps_a: float = 0.1
    eps_v: float = 0.1
    decomposition: str = "parafac2"
    n_als: int = 1
    delta: str = "local"
    eps_delta: float = 1e-8
    center_update: str = "paper"
    efkmvc_message: str = "centers"
    stats_weights: str = "fuzzy"
    omega_j: str = "per_sample"
    personalize: bool = True
    local_tol: float = 1e-4
    n_iter_parafac: int = 5
    view_start: str = "global"
    bandwidth: float | None = None
    pad: bool = False
    factor_message: str = "factors"
    center_views: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValidationError(
                f"unknown tensor method {self.method!r}; expected one of {', '.join(METHODS)}"
            )
        if not _is_int(self.n_clusters) or self.n_clusters < 2:
            raise ValidationError(f"n_clusters must be an int >= 2, got {self.n_clusters!r}")
        try:
            dims = tuple(self.dims)
        except TypeError:
            raise ValidationError(f"dims must be a sequence of ints, got {self.dims!r}") from None
        if not dims or not all(_is_int(d) and d >= 1 for d in dims):
            raise ValidationError(f"dims must be a non-empty sequence of ints >= 1, got {dims}")
        object.__setattr__(self, "dims", tuple(int(d) for d in dims))
        for name, (lo, hi) in (("m", M_RANGE), ("alpha", ALPHA_RANGE)):
            value = getattr(self, name)
            if not _is_real(value) or not math.isfinite(value) or not lo < value <= hi:
                raise ValidationError(f"{name} must be a number in ({lo:g}, {hi:g}], got {value!r}")
        for name in ("local_epochs", "n_als", "n_iter_parafac"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ValidationError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("lam", "rho"):
            value = getattr(self, name)
            if not _is_real(value) or not 0.0 <= value <= 1.0:
                raise ValidationError(f"{name} must be in [0, 1], got {value!r}")
        for name in ("tau", "beta", "eps_a", "eps_v", "eps_delta", "local_tol"):
            value = getattr(self, name)
            if not _is_real(value) or not math.isfinite(value) or value < 0:
                raise ValidationError(f"{name} must be a finite number >= 0, got {value!r}")
        self._check_bandwidth()
        for name, options in _CHOICES.items():
            if getattr(self, name) not in options:
                raise ValidationError(
                    f"{name} must be one of {', '.join(map(repr, options))}; "
                    f"got {getattr(self, name)!r}"
                )
        self._check_ranks()
        self._check_factor_message()

    def _check_factor_message(self) -> None:
        if self.factor_message != "stats":
            return
        if self.kind == "centers":
            raise ValidationError(
                "factor_message is for the factor methods; E-FKMVC's summed statistics are "
                "efkmvc_message='stats'"
            )
        if self.personalized:
            raise ValidationError(
                "factor_message='stats' leaves no factors on the client: FedHK-MVC-Person "
                "needs them to personalise; use 'factors'"
            )
        if self.local_epochs != 1:
            raise ValidationError(
                "factor_message='stats' runs one membership step per round on the clients "
                f"and the factor update on the server: local_epochs must be 1, got "
                f"{self.local_epochs!r}"
            )

    def _check_bandwidth(self) -> None:
        b = self.bandwidth
        if b is not None:
            lo, hi = BANDWIDTH_RANGE
            if not _is_real(b) or not math.isfinite(b) or not lo <= b <= hi:
                raise ValidationError(
                    f"bandwidth must be None or a number in [{lo:g}, {hi:g}], got {b!r}"
                )
            object.__setattr__(self, "bandwidth", float(b))
            if self.m > M_BANDWIDTH_MAX:
                raise ValidationError(
                    f"m must be in (1, {M_BANDWIDTH_MAX:g}] with a bandwidth (the memberships "
                    f"flatten above), got {self.m!r}"
                )
        for name in ("pad", "center_views"):
            if not isinstance(getattr(self, name), bool):
                raise ValidationError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.center_views and b is None:
            raise ValidationError(
                "center_views needs a bandwidth: the paper's min-max heat-kernel coefficients "
                "(Eq. 23) depend on where each scaled value lies, not only on differences"
            )

    def _check_ranks(self) -> None:
        c, dims = self.n_clusters, self.dims
        s, D = len(dims), max(dims)
        if self.ranks is not None:
            try:
                ranks = tuple(self.ranks)
            except TypeError:
                raise ValidationError(f"ranks must be three ints, got {self.ranks!r}") from None
            if len(ranks) != 3 or not all(_is_int(r) and r >= 1 for r in ranks):
                raise ValidationError(f"ranks must be three ints >= 1, got {self.ranks!r}")
            object.__setattr__(self, "ranks", tuple(int(r) for r in ranks))
        if self.rank is not None and (not _is_int(self.rank) or self.rank < 1):
            raise ValidationError(f"rank must be an int >= 1, got {self.rank!r}")
        kind = self.kind
        if kind == "tucker":
            r1, r2, r3 = self.tucker_ranks
            for name, r, bound, what in (
                ("r1", r1, c, "the number of clusters"),
                ("r2", r2, D, "the padded feature dimension D = max d_h"),
                ("r3", r3, s, "the number of views"),
            ):
                if r > bound:
                    raise ValidationError(f"Tucker rank {name}={r} is larger than {what} ({bound})")
        elif kind == "parafac2":
            r = self.factor_rank
            if r > c:
                raise ValidationError(
                    f"PARAFAC2 rank {r} is larger than the number of clusters ({c})"
                )
            for h, d in enumerate(dims):
                if r > d and not self.pad:
                    raise ValidationError(
                        f"PARAFAC2 rank {r} is larger than view {h}'s dimension d_{h}={d}"
                    )

    @property
    def kind(self) -> str:
        """``"centers"`` (E-FKMVC) or the factor model: ``"parafac2"``, ``"tucker"``, ``"cp"``."""
        if self.method == "e-fkmvc":
            return "centers"
        if self.method == "fedhk-parafac2":
            return "parafac2"
        if self.method == "fedhk-tucker":
            return "tucker"
        return self.decomposition

    @property
    def personalized(self) -> bool:
        """Whether the method is FedHK-MVC-Person (component-wise, adaptive λ and ρ)."""
        return self.method == "fedhk-mvc-person"

    @property
    def factor_signs(self) -> str:
        """How PARAFAC2/CP column signs are fixed (:func:`~.decompositions.align`).

        ``"sum"`` (positive column sums) on data in [0, 1]; ``"reference"`` (agreement
        with the broadcast factors) with ``center_views``, where sums are near 0.
        """
        return "reference" if self.center_views else "sum"

    @property
    def n_views(self) -> int:
        """Number of global views s."""
        return len(self.dims)

    @property
    def tucker_ranks(self) -> tuple[int, int, int]:
        """(r1, r2, r3) with the defaults resolved."""
        if self.ranks is not None:
            return self.ranks
        c, D, s = self.n_clusters, max(self.dims), len(self.dims)
        return (c, min(c, D), s)

    @property
    def factor_rank(self) -> int:
        """PARAFAC2 / CP rank with the default resolved."""
        if self.rank is not None:
            return int(self.rank)
        if self.kind == "cp":
            return self.n_clusters * len(self.dims)
        if self.pad:
            return self.n_clusters
        return min(self.n_clusters, min(self.dims))

    @property
    def rank_tuple(self) -> tuple[int, ...]:
        """The ranks of the factor model ((r1, r2, r3) or (r,))."""
        return self.tucker_ranks if self.kind == "tucker" else (self.factor_rank,)

    @property
    def offsets(self) -> np.ndarray:
        """Column offsets of each view in the concatenated (c, Σ d_h) layout."""
        return np.concatenate([[0], np.cumsum(self.dims)]).astype(int)


def model_shapes(model: TensorModel) -> dict[str, tuple[int, ...]]:
    """Shapes of the global model's arrays, in their fixed order.

    E-FKMVC: ``A`` (c, Σd), ``V`` (s,). Tensor methods: the factors of the model, ``V``
    (s,) and the scalar ``J_ref`` (the shift of the quality weights).
    """
    c, s = model.n_clusters, model.n_views
    if model.kind == "centers":
        return {"A": (c, int(sum(model.dims))), "V": (s,)}
    shapes = factor_shapes(model.kind, c, model.dims, model.rank_tuple)
    return {**shapes, "V": (s,), "J_ref": ()}


def message_shapes(model: TensorModel) -> dict[str, tuple[int, ...]]:
    """Shapes of one client's message arrays, in their fixed order (see the module doc)."""
    c, s, sd = model.n_clusters, model.n_views, int(sum(model.dims))
    # summed statistics: E-FKMVC's also carry its clients' view weights, the factor
    # methods' server computes them from the distortions
    sums = {"S_num": (c, sd), "S_den": (c, s)}
    tail_of_sums = {"presence": (s,), "views": (s,), "nJ": (), "n": ()}
    if model.kind == "centers":
        if model.efkmvc_message == "stats":
            return {**sums, "V": (s,), **tail_of_sums}
        return {"A": (c, sd), "V": (s,), "presence": (s,), "nJ": (), "n": ()}
    if model.factor_message == "stats":
        return {**sums, **tail_of_sums}
    shapes = factor_shapes(model.kind, c, model.dims, model.rank_tuple)
    tail = {"V": (s,), "presence": (s,), "views": (s,), "wn": (), "nJ": (), "n": (), "clients": ()}
    return {**shapes, **tail}


def initial_global(model: TensorModel, centers: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """The first global model from per-view centres (c, d_h) in the scaled space.

    E-FKMVC uses them as they are; the factor methods decompose the (padded, masked)
    centre tensor once with tensorly so that all factors are consistent. ``V = 1/s``,
    ``J_ref = 0``.
    """
    c, s = model.n_clusters, model.n_views
    if len(centers) != s:
        raise ValidationError(f"expected {s} centre arrays (one per view), got {len(centers)}")
    cs = []
    for h, (a, d) in enumerate(zip(centers, model.dims, strict=True)):
        a = np.asarray(a, dtype=np.float64)
        if a.shape != (c, d) or not np.isfinite(a).all():
            raise ValidationError(f"centers[{h}] must be a finite ({c}, {d}) array")
        cs.append(a)
    V = np.full(s, 1.0 / s)
    if model.kind == "centers":
        return {"A": np.hstack(cs), "V": V}
    f = initial_factors(model.kind, cs, model.dims, model.rank_tuple)
    return {**{k: np.asarray(f[k], dtype=np.float64) for k in f}, "V": V, "J_ref": np.array(0.0)}


def _rows(total: np.ndarray, den: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Row h of ``total / den[h]`` where ``den[h] > 0``, else the previous row."""
    ok = den > 0
    safe = np.where(ok, den, 1.0).reshape((-1,) + (1,) * (total.ndim - 1))
    mask = ok.reshape(safe.shape)
    return np.where(mask, total / safe, previous)


def _simplex(total: np.ndarray, den: np.ndarray, previous: np.ndarray) -> np.ndarray:
    v = _rows(total, den, previous)
    v = np.maximum(v, 0.0)
    return v / v.sum() if v.sum() > 0 else np.full(v.size, 1.0 / v.size)


def aggregate(
    model: TensorModel, total: Mapping[str, np.ndarray], previous: Mapping[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], float]:
    """The server rule on the summed messages ``total``; returns (new global, J).

    Views or clusters with no weight keep the ``previous`` global values. ``J`` is the
    mean per-sample local objective ``Σ_ℓ J_ℓ / Σ_ℓ n(ℓ)``.

    E-FKMVC ``"centers"``: ``A^h = Σ n A^h / Σ n·1[h]`` (Eq. 60 over the view's
    holders), ``V_h = Σ n v_h / Σ n·1[h]`` renormalised (Eq. 61). ``"stats"``:
    ``A^h = Σ S_num^h / Σ S_den^h``. Tensor methods: ``X = Σ ŵnX / Σ ŵn`` (Eqs. 108-111;
    per view row or block over its holders for the view factor and PARAFAC2's
    projections) and ``V`` likewise (Eq. 100) renormalised; ``J_ref ← J`` (or the mean
    total J per client with ``omega_j="total"``). ``factor_message="stats"``: the view
    weights and one ALS step on the pooled fuzzy means (:func:`_aggregate_stats`).
    """
    n = float(total["n"])
    J = float(total["nJ"]) / n if n > 0 else float("nan")
    s = model.n_views
    pres = np.asarray(total["presence"], dtype=np.float64)
    if model.kind != "centers" and model.factor_message == "stats":
        return _aggregate_stats(model, total, previous, pres), J
    V = _simplex(np.asarray(total["V"]), pres, np.asarray(previous["V"]))
    off = model.offsets
    if model.kind == "centers":
        A = np.array(previous["A"], dtype=np.float64)
        for h in range(s):
            sl = slice(off[h], off[h + 1])
            if model.efkmvc_message == "stats":
                den = np.asarray(total["S_den"])[:, h]
                A[:, sl] = _rows(np.asarray(total["S_num"])[:, sl], den, A[:, sl])
            elif pres[h] > 0:
                A[:, sl] = np.asarray(total["A"])[:, sl] / pres[h]
        return {"A": A, "V": V}, J
    kind = model.kind
    wn = float(total["wn"])
    out: dict[str, np.ndarray] = {}
    for key in FACTOR_KEYS[kind]:
        t = np.asarray(total[key], dtype=np.float64)
        prev = np.asarray(previous[key], dtype=np.float64)
        if key in VIEW_ROW_KEYS[kind]:
            out[key] = _rows(t, pres, prev)
        elif key in VIEW_BLOCK_KEYS[kind]:
            row_den = np.repeat(pres, block_dims(kind, model.dims, model.rank_tuple[0]))
            out[key] = _rows(t, row_den, prev)
        else:
            out[key] = t / wn if wn > 0 else prev.copy()
    out["V"] = V
    if model.omega_j == "total":
        clients = float(total["clients"])
        J_ref = float(total["nJ"]) / clients if clients > 0 else 0.0
    else:
        J_ref = J
    out["J_ref"] = np.array(J_ref if math.isfinite(J_ref) else float(previous["J_ref"]))
    return out, J


def _aggregate_stats(
    model: TensorModel,
    total: Mapping[str, np.ndarray],
    previous: Mapping[str, np.ndarray],
    pres: np.ndarray,
) -> dict[str, np.ndarray]:
    """``factor_message="stats"``: view weights and one ALS update from the pooled sums.

    The view weights solve Eq. 31 on the per-sample distortions D_h / Σ n·1[h] of the
    views someone holds (the others keep their share). The targets are the pooled fuzzy
    means Σ μ^m x / Σ μ^m (a cluster no sample weighs keeps its previous centre), the
    cluster masses the mean of Σ μ^m over the held views, and the factors take one
    ALS step from the previous ones towards them, gauge-aligned to them.
    """
    kind, dims, s = model.kind, model.dims, model.n_views
    held = pres > 0
    V = np.array(previous["V"], dtype=np.float64)
    if held.any():
        D = np.asarray(total["views"], dtype=np.float64)[held] / pres[held]
        V[held] = view_weights(D, model.alpha) * max(1.0 - V[~held].sum(), 0.0)
        V = V / V.sum()
    f = {k: np.asarray(previous[k], dtype=np.float64) for k in FACTOR_KEYS[kind]}
    before = reconstruct(kind, f, dims, range(s))
    num = np.asarray(total["S_num"], dtype=np.float64)
    den = np.asarray(total["S_den"], dtype=np.float64)
    off = model.offsets
    targets = [
        _rows(num[:, off[h] : off[h + 1]], den[:, h], before[h]) for h in range(s)
    ]  # a cluster's row of view h: its pooled mean where Σ μ^m > 0, else as before
    N = den[:, held].mean(axis=1) if held.any() else np.zeros(model.n_clusters)
    new = als_step(
        kind, f, targets, N, view_powers(V, model.alpha), list(range(s)), dims,
        model.rank_tuple, n_als=model.n_als, n_iter_parafac=model.n_iter_parafac,
    )  # fmt: skip
    new = align(kind, new, f, signs=model.factor_signs)
    out = {k: np.asarray(new[k], dtype=np.float64) for k in FACTOR_KEYS[kind]}
    return {**out, "V": V, "J_ref": np.array(float(previous["J_ref"]))}


def has_converged(previous_J: float, J: float, tol: float) -> bool:
    """Relative-change rule ``|J − J_prev| / |J_prev| < tol`` (never when J_prev is inf/nan).

    With ``J_prev = 0`` the absolute change is compared with ``tol``.
    """
    if not (math.isfinite(previous_J) and math.isfinite(J)):
        return False
    if previous_J == 0.0:
        return abs(J) < tol
    return abs(J - previous_J) / abs(previous_J) < tol
