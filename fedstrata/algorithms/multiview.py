"""One engine for weighted multi-view c-means: client step, additive statistics, server step.

HK-MVFC (FedHK-MVFC paper), MVKM-ED (Fed-MVKM paper) and the Euclidean multi-view fuzzy c-means
baseline are the same alternating scheme with different distances, memberships
and centre weights. Every server-side quantity is a ratio of sums over samples, so
the work splits into

* a client step, :func:`local_statistics`: memberships from the current global
  state, then per view and cluster the weighted point sums and weight sums, the
  per-view costs and the cluster masses (all additive over samples);
* a server step, :func:`combine`: sum the statistics and solve for the new state.

The centralized fit is ``combine([local_statistics(all data)])`` in a loop; with
sum aggregation a federated fit is the same computation with the sums split
across clients, hence equal up to floating-point summation order.

Order of the updates. Algorithm 1 of the paper updates U, then A, then V (with the
new A). Here the view weights are solved from the costs measured with the centres
the memberships were computed with, i.e. U → V → A. Each step is still a block
minimisation (U and V exactly, A exactly or as a majorise-minimise step), so the
fixed points are the same and, with ``center_update="exact"``, the objective still
never increases; in exchange a federated iteration needs one exchange instead of
two. The objective reported per iteration is J(U_t, A_{t-1}, V_t).

Every array may carry leading batch axes (several restarts fitted at once): centres
(..., c, d_h), view weights (..., H). Data arrays are never batched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import ClassVar, cast

import numpy as np

from fedstrata.algorithms._scratch import SMALL, Workspace, is_small
from fedstrata.algorithms.fuzzifier import (
    AUTO_FUZZIFIER_MAX,
    auto_fuzzifier,
    schwaemmle_jensen_fuzzifier,
)
from fedstrata.algorithms.kernels import (
    KernelReference,
    feature_variance,
    heat_kernel_coefficients,
    kernel_reference,
)
from fedstrata.algorithms.view_weights import view_powers, view_weights_from_costs
from fedstrata.errors import ValidationError

__all__ = [
    "AUTO_FUZZIFIER_MAX",
    "CENTER_UPDATES",
    "VIEW_BALANCES",
    "MultiViewModel",
    "PreparedViews",
    "State",
    "Stats",
    "auto_fuzzifier",
    "bandwidth_scales",
    "combine",
    "held_fraction",
    "local_statistics",
    "memberships",
    "objective",
    "prepare_views",
    "schwaemmle_jensen_fuzzifier",
    "state_from_statistics",
    "sum_statistics",
    "view_powers",
]

#: Centre-update forms; see :class:`MultiViewModel`.
CENTER_UPDATES = ("paper", "exact", "derivation")
#: How a kernel bandwidth shares the data's spread among views; see :class:`MultiViewModel`.
VIEW_BALANCES = ("dimension", "equal")
_TINY = 1e-300


@dataclass(frozen=True)
class MultiViewModel:
    """What is being fitted (hyper-parameters shared by clients and server).

    Parameters
    ----------
    n_clusters
        Number of clusters c.
    m
        Fuzzifier (> 1); ignored for hard memberships.
    alpha
        View-weight exponent (> 1).
    distance
        ``"ked"``: d = 1 - exp(-φ) (Eq. 12); ``"euclidean"``: d = φ.
        φ_ik = Σ_j δ_ij (x_ij - a_kj)^2.
    kernel
        Heat-kernel coefficient type for δ: ``"type1"``, ``"type2"`` or ``"none"``.
    center_update
        ``"paper"``: Eq. 16/44 as printed, weights μ^m exp(-δ_ij ||x_i - a_k||^2), the
        squared norm unweighted and only feature j's δ in the exponent. It is not the
        stationary point of Eq. 13, and the objective may rise slightly.
        ``"exact"``: the true fixed point of Eq. 13, weights μ^m δ_ij exp(-φ_ik); as a
        majorise-minimise step it never increases the objective.
        ``"derivation"``: weights μ^m exp(-φ_ik) (the paper's Eq. 63-65).
        For ``distance="euclidean"`` all three are the weighted mean (weights μ^m δ_ij).
    membership
        ``"fuzzy"`` (Eq. 15) or ``"hard"`` (argmin, as MVKM-ED).
    eps_hkc
        Stabiliser in the Type 1 denominator (Eq. 37).
    scale_schedule
        ``"none"``, or ``"mvkm-ed"``: a per-view multiplier on δ that changes with the
        iteration (MVKM-ED's β, :func:`fedstrata.algorithms.schedules.scheduled_scale`),
        computed by whoever owns the iteration count and carried in the
        :class:`State` (``view_scale``).
    bandwidth
        ``None`` (default; the paper): δ as the kernel type gives it. A number γ > 0:
        δ_ij is divided by γ·s_hj, a kernel width measured in the data's own spread,
        so that exp(-φ) neither saturates nor stays linear whatever the units of the
        features (the heat kernel exp(-||x - a||²/(4t)) with its time t set from the
        data). s_hj comes from the (pooled) kernel references, so a federation
        computes it from mergeable sums (n, Σx, Σ(x - mean)²): see ``standardize``
        and ``view_balance``. With γ·s large the kernel distance tends to the
        Euclidean one divided by γ·s.
    standardize
        With a bandwidth: ``True`` measures each feature in its own variance
        (s_hj ∝ var_hj, the Mahalanobis-diagonal distance of standardized data);
        ``False`` uses one scale per view, the mean variance of its features.
    view_balance
        With a bandwidth, how the spread is shared among views. ``"dimension"``: s is
        multiplied by the mean view dimension D̄ (over all the federation's views), so
        the mean squared distance of a view's points to its mean is d_h/(γ·D̄): views
        count like their share of the features, as in k-means on the concatenated
        standardized views. ``"equal"``: multiplied by d_h, 1/γ per view.
    """

    n_clusters: int
    m: float = 2.0
    alpha: float = 5.0
    distance: str = "ked"
    kernel: str = "type1"
    center_update: str = "paper"
    membership: str = "fuzzy"
    eps_hkc: float = 1e-8
    scale_schedule: str = "none"
    bandwidth: float | None = None
    standardize: bool = True
    view_balance: str = "dimension"


@dataclass(frozen=True)
class PreparedViews:
    """A client's data with the products the engine reuses every iteration.

    ``views`` holds the data of the views this client has; ``view_ids`` are their
    indices among the federation's ``n_views`` views (a client may hold a subset:
    hybrid views, the FMCSC and EFD-MVC papers).
    """

    views: tuple[np.ndarray, ...]
    deltas: tuple[np.ndarray, ...]
    view_ids: tuple[int, ...]
    n_views: int
    # cached: δ∘X, Σ_j δ x², Σ_j x², and transposes for the cluster-major (c, n) layout
    dX: tuple[np.ndarray, ...] = field(repr=False)
    dxx: tuple[np.ndarray, ...] = field(repr=False)
    xx: tuple[np.ndarray, ...] = field(repr=False)
    XT: tuple[np.ndarray, ...] = field(repr=False)
    deltaT: tuple[np.ndarray, ...] = field(repr=False)
    dXT: tuple[np.ndarray, ...] = field(repr=False)

    #: Leading axes of every array: none (one client; see the batched client step).
    lead: ClassVar[tuple[int, ...]] = ()

    @property
    def n_samples(self) -> int:
        """Number of samples."""
        return self.views[0].shape[0]

    @cached_property
    def _gemm_rows(self) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...], np.ndarray]:
        """Row stacks that turn each distance matrix into one GEMM (built on first use).

        Per view [δ; δx; Σ_j δx²] (2d+1, n) for φ and [x; Σ_j x²; 1] (d+2, n) for the
        unweighted squared norm of Eq. 16; and a ones vector (n,) for row sums.
        """
        phi_rows = tuple(
            np.vstack([dT, dxT, dxx[None]])
            for dT, dxT, dxx in zip(self.deltaT, self.dXT, self.dxx, strict=True)
        )
        ones = np.ones(self.n_samples)
        sq_rows = tuple(
            np.vstack([XT, xx[None], ones[None]]) for XT, xx in zip(self.XT, self.xx, strict=True)
        )
        return phi_rows, sq_rows, ones

    @cached_property
    def _workspace(self) -> Workspace:
        """Per-thread scratch arrays of :func:`local_statistics` (see ``_scratch``)."""
        return Workspace()

    def _warm_caches(self) -> None:
        """Build the lazily cached products now (before threads share this object)."""
        _ = self._gemm_rows, self._workspace


@dataclass(frozen=True)
class State:
    """Global model: per-view centres (..., c, d_h) and view weights (..., H).

    ``view_scale`` (..., H), when set, multiplies δ per view in the next client step
    (MVKM-ED's β of the iteration the state is for); ``None`` for the other algorithms.
    """

    centers: tuple[np.ndarray, ...]
    view_weights: np.ndarray
    view_scale: np.ndarray | None = None

    def batched(self) -> State:
        """Return an unbatched state as a batch of one restart."""
        scale = None if self.view_scale is None else self.view_scale[None]
        return State(tuple(a[None] for a in self.centers), self.view_weights[None], scale)

    def take(self, index: np.ndarray | int) -> State:
        """Select restarts along the leading batch axis."""
        scale = None if self.view_scale is None else self.view_scale[index]
        return State(tuple(a[index] for a in self.centers), self.view_weights[index], scale)

    def with_scale(self, view_scale: np.ndarray | None) -> State:
        """The same model with another ``view_scale``."""
        return State(self.centers, self.view_weights, view_scale)


@dataclass(frozen=True)
class Stats:
    """Additive statistics of one client (or a sum of clients) for one iteration.

    Attributes
    ----------
    center_num, center_den
        Per view, Σ_i w_ikj x_ij and Σ_i w_ikj, each (..., c, d_h).
    view_costs
        Per view, Σ_i Σ_k μ_ik^m d_ik^h, shape (..., H).
    cluster_mass
        Σ_i μ_ik, shape (..., c) (the paper's S_quality times n, Eq. 81).
    view_counts
        Number of samples holding each view, (H,).
    n_samples
        Number of samples.
    memberships
        The client's memberships (..., n, c). Local only: never summed, never sent.
    """

    center_num: tuple[np.ndarray, ...]
    center_den: tuple[np.ndarray, ...]
    view_costs: np.ndarray
    cluster_mass: np.ndarray
    view_counts: np.ndarray
    n_samples: int
    memberships: np.ndarray | None = field(default=None, repr=False, compare=False)

    def take(self, index: int) -> Stats:
        """Select one restart along the leading batch axis."""
        return Stats(
            center_num=tuple(a[index] for a in self.center_num),
            center_den=tuple(a[index] for a in self.center_den),
            view_costs=self.view_costs[index],
            cluster_mass=self.cluster_mass[index],
            view_counts=self.view_counts,
            n_samples=self.n_samples,
            memberships=None if self.memberships is None else self.memberships[index],
        )


def bandwidth_scales(
    references: Sequence[KernelReference],
    model: MultiViewModel,
    view_dims: Sequence[int] | None = None,
) -> list[np.ndarray]:
    """Per held view the divisor γ·s_hj of δ (d_h,) that ``model.bandwidth`` sets.

    ``view_dims`` are the dimensions of all the federation's views (for
    ``view_balance="dimension"``); by default those of ``references``.
    """
    if model.bandwidth is None:
        raise ValidationError("the model has no bandwidth")
    if model.view_balance not in VIEW_BALANCES:
        raise ValidationError(
            f"unknown view_balance {model.view_balance!r}; expected one of {VIEW_BALANCES}"
        )
    dims = [r.total.shape[0] for r in references] if view_dims is None else list(view_dims)
    mean_dim = float(np.mean(dims))
    out = []
    for ref in references:
        var = feature_variance(ref)
        d = var.shape[0]
        s = var if model.standardize else np.full(d, var.mean())
        share = mean_dim if model.view_balance == "dimension" else float(d)
        out.append(float(model.bandwidth) * share * s)
    return out


def prepare_views(
    views: Sequence[np.ndarray],
    model: MultiViewModel,
    *,
    view_ids: Sequence[int] | None = None,
    n_views: int | None = None,
    references: Sequence[KernelReference] | None = None,
    view_dims: Sequence[int] | None = None,
) -> PreparedViews:
    """Compute the heat-kernel coefficients and cached products for validated views.

    ``references`` (one per held view) fixes what δ is measured against; by default
    each client uses its own data (local FedH-KC, Eq. 37/38). With a
    ``model.bandwidth`` δ is divided by :func:`bandwidth_scales` of the same
    references (then they must carry ``sq_dev``); ``view_dims``, the dimensions of all
    the federation's views, matters only for ``view_balance="dimension"`` on a client
    that holds some of the views (default: the dimensions of ``views``).
    """
    ids = tuple(range(len(views))) if view_ids is None else tuple(view_ids)
    total = len(ids) if n_views is None else n_views
    deltas = []
    for h, X in enumerate(views):
        ref = None if references is None else references[h]
        deltas.append(heat_kernel_coefficients(X, model.kernel, reference=ref, eps=model.eps_hkc))
    if model.bandwidth is not None:
        refs = [kernel_reference(X) for X in views] if references is None else list(references)
        dims = [X.shape[1] for X in views] if view_dims is None else view_dims
        for h, s in enumerate(bandwidth_scales(refs, model, dims)):
            deltas[h] = deltas[h] / s
    dX = tuple(d * X for d, X in zip(deltas, views, strict=True))
    return PreparedViews(
        views=tuple(views),
        deltas=tuple(deltas),
        view_ids=ids,
        n_views=total,
        dX=dX,
        dxx=tuple((dx * X).sum(axis=1) for dx, X in zip(dX, views, strict=True)),
        xx=tuple(np.einsum("ij,ij->i", X, X) for X in views),
        XT=tuple(np.ascontiguousarray(X.T) for X in views),
        deltaT=tuple(np.ascontiguousarray(d.T) for d in deltas),
        dXT=tuple(np.ascontiguousarray(d.T) for d in dX),
    )


def _t(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a, -1, -2)


def _onehot_first_argmin(W: np.ndarray) -> np.ndarray:
    """One-hot of ``W.argmin(axis=-2)`` (ties to the lowest k), without the slow argmin.

    numpy's argmin over a short non-last axis costs ~5 ns per element; c compares on
    (n,) rows do the same in a fraction of that.
    """
    c = W.shape[-2]
    hit = np.equal(W, W.min(axis=-2, keepdims=True))
    seen = hit[..., 0, :].copy()
    for k in range(1, c):
        row = hit[..., k, :]
        np.logical_and(row, ~seen, out=row)  # keep only the first minimum (argmin's tie rule)
        seen |= row
    if not seen.all():  # NaN somewhere: defer to numpy's own rule
        return (W.argmin(axis=-2)[..., None, :] == np.arange(c)[:, None]).astype(W.dtype)
    return hit.astype(W.dtype)


def memberships(W: np.ndarray, m: float, kind: str = "fuzzy") -> np.ndarray:
    """Memberships from view-weighted distances W, laid out (..., c, n) (Eq. 15).

    Fuzzy: μ_ik ∝ W_ik^{-1/(m-1)}, computed relative to the per-sample minimum so
    that no power overflows for m close to 1. A sample with zero distances (at most
    1e-300 of its largest one: a relative floor, so that W's scale never matters)
    shares its membership equally among the zero entries (the limit of Eq. 15). Hard: one-hot
    argmin. Cluster-major layout keeps the reductions over k cheap in numpy.
    """
    if kind == "hard":
        return _onehot_first_argmin(W)
    rowmin = W.min(axis=-2, keepdims=True)
    zero = rowmin <= _TINY
    near = zero.any()
    if near:  # a distance that is 0 next to the sample's others: relative, not absolute
        limit = _TINY * W.max(axis=-2, keepdims=True)
        zero &= rowmin <= limit
    with np.errstate(divide="ignore", invalid="ignore"):
        U = np.divide(rowmin, W)  # in [0, 1]
        if m != 2.0:
            U **= 1.0 / (m - 1.0)
    if near and zero.any():
        U = np.where(zero, np.less_equal(W, limit).astype(W.dtype), U)
    U /= U.sum(axis=-2, keepdims=True)
    return U


# Performance (n = 10^4, c = 4, d_h = 2 on a 2-core x86 without AVX-512): a (c, n) pass
# costs ~10 µs and a float64 exp over it ~200 µs (numpy's exp is scalar there), so an
# iteration is dominated by its (1 + d_h) exps per view (paper form; one per view for
# the others). Everything else is kept to a few passes: each distance matrix is ONE
# small GEMM against cached row stacks, the weighted sums are mat-vec products (a
# (c, n) @ (n, d) GEMM with small d is slower than d mat-vecs), and the (c, n)
# temporaries live in per-thread workspaces reused across calls (``_scratch``).
_MATVEC_MAX_D = 8


def _neg_phi(
    pv: PreparedViews,
    h: int,
    A: np.ndarray,
    scale: np.ndarray | None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """-φ (..., c, n) for held view ``h``, times ``scale``.

    φ_ik = Σ_j δ_ij (x_ij - a_kj)^2 = [a², -2a, 1]_k · [δ; δx; Σδx²]_i: one GEMM. The
    expansion can leave -φ a few ulps above 0 where x_i = a_k; the caller clips the
    combined distance W once instead of clipping every view.
    """
    d = A.shape[-1]
    coef = np.empty((*A.shape[:-1], 2 * d + 1))  # [-a², 2a, -1], as one concatenate would
    np.multiply(A, A, out=coef[..., :d])
    np.negative(coef[..., :d], out=coef[..., :d])
    np.multiply(A, 2.0, out=coef[..., d : 2 * d])
    coef[..., 2 * d] = -1.0
    if scale is not None:
        coef *= scale[..., None, None]
    return np.matmul(coef, pv._gemm_rows[0][h], out=out)


def _neg_sq(
    pv: PreparedViews,
    h: int,
    A: np.ndarray,
    scale: np.ndarray | None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """-||x_i - a_k||^2 (unweighted, times ``scale``): one GEMM (see :func:`_neg_phi`)."""
    coef = np.concatenate(
        [2.0 * A, np.full((*A.shape[:-1], 1), -1.0), -(A * A).sum(axis=-1, keepdims=True)],
        axis=-1,
    )
    if scale is not None:
        coef *= scale[..., None, None]
    return np.matmul(coef, pv._gemm_rows[1][h], out=out)


def _weighted_sums(G: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Σ_i G_ki r_ij for every feature j, (..., c, d); rows is (..., d, n), cols (..., n, d).

    rows with a leading client axis (a batched client step) pair each client's G with
    its own rows: numpy then runs each client's mat-vec as the unbatched call does.
    """
    d = rows.shape[-2]
    if d <= _MATVEC_MAX_D:
        out = np.empty((*G.shape[:-1], d))
        for j in range(d):  # the same mat-vecs np.stack would gather, written in place
            if rows.ndim == 2:
                out[..., j] = G @ rows[j]
            else:
                out[..., j] = np.matmul(G, rows[..., j, :, None])[..., 0]
        return out
    return G @ cols


def _sum_products(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Σ over the last two axes of a * b, via the scratch array ``out``.

    Not a BLAS dot: OpenBLAS threads ddot above 10^4 elements, and on a busy 2-core
    machine waking its worker thread cost ~0.5 ms per call.
    """
    return np.multiply(a, b, out=out).sum(axis=(-2, -1))


def _paper_sums(
    pv: PreparedViews,
    h: int,
    A: np.ndarray,
    Um: np.ndarray,
    scale: np.ndarray | None,
    scratch: list[np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 16/44 numerator and denominator: weights μ^m exp(-δ_ij ||x_i - a_k||^2).

    The weight depends on the feature j through δ_ij: one exp over (..., c, n) per feature.
    Stacked views (a batched client step) carry a leading client axis in every array.
    """
    negsq = _neg_sq(pv, h, A, scale, out=scratch[0])
    E = scratch[1]
    XT, deltaT = pv.XT[h], pv.deltaT[h]
    ones = pv._gemm_rows[2]
    d = XT.shape[-2]
    num = np.empty((*pv.lead, *A.shape[:-1], d))
    den = np.empty_like(num)
    for j in range(d):  # loop over features, not samples
        if XT.ndim == 2:
            np.multiply(negsq, deltaT[j], out=E)
        else:
            np.multiply(negsq, deltaT[..., j, None, :], out=E)
        np.exp(E, out=E)
        E *= Um
        den[..., j] = E @ ones
        num[..., j] = E @ XT[j] if XT.ndim == 2 else np.matmul(E, XT[..., j, :, None])[..., 0]
    return num, den


def local_statistics(
    pv: PreparedViews,
    state: State,
    model: MultiViewModel,
    *,
    view_scale: np.ndarray | None = None,
) -> Stats:
    """Client step: memberships from ``state`` and the additive statistics.

    Parameters
    ----------
    pv
        The client's prepared data.
    state
        Global centres and view weights (optionally batched).
    model
        Hyper-parameters.
    view_scale
        Optional per-view multiplier on δ, shape (..., H) (MVKM-ED's β_h); by
        default the state's own ``view_scale``.
    """
    H = pv.n_views
    held = len(pv.view_ids)
    batch = state.view_weights.shape[:-1]
    if view_scale is None:
        view_scale = state.view_scale
    c = model.n_clusters
    # Euclidean distances: every centre form is the weighted mean (weights μ^m δ_ij)
    update = "mean" if model.distance == "euclidean" else model.center_update
    # Eq. 16's weight exp(-δ_ij ||x_i - a_k||^2) is exp(-φ_ik) itself when δ ≡ 1 or the
    # view has one feature: no extra exp then
    shared = [update == "paper" and (model.kernel == "none" or X.shape[1] == 1) for X in pv.views]
    # the exact and derivation weights reuse exp(-φ) too
    keep = [update in ("exact", "derivation") or sh for sh in shared]
    # scratch: d per view, exp(-φ) per view that keeps it, W, W-term / μ^m, 2 for Eq. 16
    shape = (*batch, c, pv.n_samples)
    scratch = (SMALL if is_small(shape) else pv._workspace).get(shape, held + sum(keep) + 4)
    d_buf, e_bufs = scratch[:held], iter(scratch[held : held + sum(keep)])
    W, tmp, spare = scratch[-4], scratch[-3], scratch[-2:]
    va = view_powers(state.view_weights, model.alpha)
    dist: list[np.ndarray] = []
    expo: list[np.ndarray | None] = []
    for h, g in enumerate(pv.view_ids):
        scale = None if view_scale is None else view_scale[..., g]
        if update == "mean":
            e = None
            d = np.negative(_neg_phi(pv, h, state.centers[g], scale, out=d_buf[h]), out=d_buf[h])
        else:
            e = _neg_phi(pv, h, state.centers[g], scale, out=next(e_bufs) if keep[h] else d_buf[h])
            np.exp(e, out=e)  # exp beats expm1 by 2x here; 1 - e is exact enough for sums
            d = np.subtract(1.0, e, out=d_buf[h])  # in place unless exp(-φ) is reused
            if not keep[h]:
                e = None
        dist.append(d)
        expo.append(e)
        if h == 0:
            np.multiply(d, va[..., g, None, None], out=W)
        else:
            W += np.multiply(d, va[..., g, None, None], out=tmp)
    if held == 0:
        W.fill(0.0)
    np.maximum(W, 0.0, out=W)  # rounding of the expanded φ can leave W at -1e-16
    U = memberships(W, model.m, model.membership)
    if model.membership == "hard":
        Um = U
    elif model.m == 2.0:
        Um = np.multiply(U, U, out=tmp)
    else:
        Um = np.power(U, model.m, out=tmp)

    costs = np.zeros((*batch, H))
    held_ids = set(pv.view_ids)  # a view not held keeps zero sums; the others are set below
    nums: list[np.ndarray] = [
        np.empty(0) if g in held_ids else np.zeros((*batch, c, a.shape[-1]))
        for g, a in enumerate(state.centers)
    ]
    dens: list[np.ndarray] = [
        np.empty(0) if g in held_ids else np.zeros((*batch, c, a.shape[-1]))
        for g, a in enumerate(state.centers)
    ]
    for h, g in enumerate(pv.view_ids):
        costs[..., g] = _sum_products(Um, dist[h], out=dist[h])  # d is not needed after
        if update == "paper" and not shared[h]:  # Eq. 16/44
            scale = None if view_scale is None else view_scale[..., g]
            nums[g], dens[g] = _paper_sums(pv, h, state.centers[g], Um, scale, spare)
            continue
        e = expo[h]
        G = Um if e is None else np.multiply(e, Um, out=e)
        if update in ("derivation", "paper"):  # μ^m exp(-φ_ik), the same for every feature
            nums[g] = _weighted_sums(G, pv.XT[h], pv.views[h])
            dens[g] = np.repeat(G.sum(axis=-1)[..., None], pv.views[h].shape[1], axis=-1)
        else:  # exact μ^m δ_ij exp(-φ_ik), or Euclidean μ^m δ_ij: δ applied by δx and δ
            nums[g] = _weighted_sums(G, pv.dXT[h], pv.dX[h])
            dens[g] = _weighted_sums(G, pv.deltaT[h], pv.deltas[h])
    counts = np.zeros(H, dtype=np.int64)
    counts[list(pv.view_ids)] = pv.n_samples
    return Stats(
        center_num=tuple(nums),
        center_den=tuple(dens),
        view_costs=costs,
        cluster_mass=U.sum(axis=-1),
        view_counts=counts,
        n_samples=pv.n_samples,
        memberships=_t(U),
    )


def _added(arrays: Iterable[np.ndarray]) -> np.ndarray:
    """Python's ``sum`` of arrays (starting from 0, as it always did), typed as an array."""
    return cast(np.ndarray, sum(arrays))


def sum_statistics(stats: Sequence[Stats]) -> Stats:
    """Sum clients' statistics (exact aggregation); memberships are dropped."""
    if not stats:
        raise ValidationError("cannot sum an empty list of statistics")
    first = stats[0]
    if len(stats) == 1:
        return replace(first, memberships=None)
    return Stats(
        center_num=tuple(
            _added(s.center_num[g] for s in stats) for g in range(len(first.center_num))
        ),
        center_den=tuple(
            _added(s.center_den[g] for s in stats) for g in range(len(first.center_den))
        ),
        view_costs=_added(s.view_costs for s in stats),
        cluster_mass=_added(s.cluster_mass for s in stats),
        view_counts=_added(s.view_counts for s in stats),
        n_samples=sum(s.n_samples for s in stats),
    )


def state_from_statistics(
    total: Stats, previous: State, model: MultiViewModel, *, min_den: float = 0.0
) -> State:
    """Server step on summed statistics: new centres (ratio of sums) and view weights.

    A centre coordinate whose denominator is not above ``min_den`` (and a tiny floor:
    its weights all underflowed) keeps its previous value. With noisy sums
    (differential privacy) ``min_den`` is a multiple of the noise's std: a ratio of
    two numbers that are mostly noise would throw the centre anywhere.
    """
    centers = []
    floor = max(_TINY, min_den)
    for num, den, old in zip(total.center_num, total.center_den, previous.centers, strict=True):
        ok = den > floor
        if ok.all():
            centers.append(num / den)
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            centers.append(np.where(ok, num / np.where(ok, den, 1.0), old))
    v = view_weights_from_costs(total.view_costs, total.view_counts, model.alpha)
    return State(tuple(centers), v, previous.view_scale)


def held_fraction(total: Stats, min_den: float) -> float:
    """The share of centre coordinates :func:`state_from_statistics` keeps at ``min_den``."""
    dens = np.concatenate([np.ravel(d) for d in total.center_den])
    return float((dens <= max(_TINY, min_den)).mean()) if dens.size else 0.0


def combine(stats: Sequence[Stats], previous: State, model: MultiViewModel) -> State:
    """Server step: sum the clients' statistics and solve for the new global state."""
    return state_from_statistics(sum_statistics(stats), previous, model)


def objective(stats: Stats, view_weights: np.ndarray, alpha: float) -> np.ndarray:
    """J = Σ_h v_h^α Σ_i Σ_k μ_ik^m d_ik^h (Eq. 13), shape (...) of the batch.

    With :func:`view_powers`' factor H₊^(α-1) when H₊^-α < 1e-100 (J itself would
    underflow: six views, α = 500).
    """
    return (view_powers(view_weights, alpha) * stats.view_costs).sum(axis=-1)
