"""One engine for weighted multi-view c-means: client step, additive statistics, server step.

HK-MVFC (seed 004), MVKM-ED (seed 003) and the Euclidean multi-view fuzzy c-means
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

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from fedstrata.algorithms.kernels import (
    KernelReference,
    heat_kernel_coefficients,
    kernel_reference,
)
from fedstrata.errors import ValidationError

__all__ = [
    "CENTER_UPDATES",
    "MultiViewModel",
    "PreparedViews",
    "State",
    "Stats",
    "combine",
    "local_statistics",
    "memberships",
    "objective",
    "prepare_views",
    "state_from_statistics",
    "sum_statistics",
]

#: Centre-update forms; see :class:`MultiViewModel`.
CENTER_UPDATES = ("paper", "exact", "derivation")
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
    """

    n_clusters: int
    m: float = 2.0
    alpha: float = 5.0
    distance: str = "ked"
    kernel: str = "type1"
    center_update: str = "paper"
    membership: str = "fuzzy"
    eps_hkc: float = 1e-8


@dataclass(frozen=True)
class PreparedViews:
    """A client's data with the products the engine reuses every iteration.

    ``views`` holds the data of the views this client has; ``view_ids`` are their
    indices among the federation's ``n_views`` views (a client may hold a subset:
    hybrid views, seeds 001/002).
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

    @property
    def n_samples(self) -> int:
        """Number of samples."""
        return self.views[0].shape[0]


@dataclass(frozen=True)
class State:
    """Global model: per-view centres (..., c, d_h) and view weights (..., H)."""

    centers: tuple[np.ndarray, ...]
    view_weights: np.ndarray

    def take(self, index: np.ndarray | int) -> State:
        """Select restarts along the leading batch axis."""
        return State(tuple(a[index] for a in self.centers), self.view_weights[index])


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


def prepare_views(
    views: Sequence[np.ndarray],
    model: MultiViewModel,
    *,
    view_ids: Sequence[int] | None = None,
    n_views: int | None = None,
    references: Sequence[KernelReference] | None = None,
) -> PreparedViews:
    """Compute the heat-kernel coefficients and cached products for validated views.

    ``references`` (one per held view) fixes what δ is measured against; by default
    each client uses its own data (local FedH-KC, Eq. 37/38).
    """
    ids = tuple(range(len(views))) if view_ids is None else tuple(view_ids)
    total = len(ids) if n_views is None else n_views
    deltas = []
    for h, X in enumerate(views):
        ref = None if references is None else references[h]
        deltas.append(heat_kernel_coefficients(X, model.kernel, reference=ref, eps=model.eps_hkc))
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


def memberships(W: np.ndarray, m: float, kind: str = "fuzzy") -> np.ndarray:
    """Memberships from view-weighted distances W, laid out (..., c, n) (Eq. 15).

    Fuzzy: μ_ik ∝ W_ik^{-1/(m-1)}, computed relative to the per-sample minimum so
    that no power overflows for m close to 1. A sample with zero distances shares its
    membership equally among the zero entries (the limit of Eq. 15). Hard: one-hot
    argmin. Cluster-major layout keeps the reductions over k cheap in numpy.
    """
    c = W.shape[-2]
    if kind == "hard":
        return (W.argmin(axis=-2)[..., None, :] == np.arange(c)[:, None]).astype(W.dtype)
    rowmin = W.min(axis=-2, keepdims=True)
    zero = rowmin <= _TINY
    with np.errstate(divide="ignore", invalid="ignore"):
        U = rowmin / W  # in [0, 1]
        if m != 2.0:
            U **= 1.0 / (m - 1.0)
    if zero.any():
        U = np.where(zero, (W <= _TINY).astype(W.dtype), U)
    U /= U.sum(axis=-2, keepdims=True)
    return U


def _phi(pv: PreparedViews, h: int, A: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
    """δ-weighted squared distances φ (..., c, n) for held view ``h``."""
    phi = (A * A) @ pv.deltaT[h]
    phi -= 2.0 * (A @ pv.dXT[h])
    phi += pv.dxx[h]
    np.maximum(phi, 0.0, out=phi)
    if scale is not None:
        phi *= scale[..., None, None]
    return phi


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
        Optional per-view multiplier on δ, shape (..., H) (MVKM-ED's β_h).
    """
    H = pv.n_views
    batch = state.view_weights.shape[:-1]
    c = model.n_clusters
    euclid = model.distance == "euclidean"
    va = state.view_weights**model.alpha
    dist, expo = [], []
    W = np.zeros((*batch, c, pv.n_samples))
    for h, g in enumerate(pv.view_ids):
        scale = None if view_scale is None else view_scale[..., g]
        phi = _phi(pv, h, state.centers[g], scale)
        if euclid:
            d, e = phi, None
        else:
            e = np.exp(-phi)  # exp beats expm1 by 2x here; 1 - e is exact enough for sums
            d = 1.0 - e
        dist.append(d)
        expo.append(e)
        W += va[..., g, None, None] * d
    U = memberships(W, model.m, model.membership)
    if model.membership == "hard":
        Um = U
    else:
        Um = U * U if model.m == 2.0 else U**model.m

    costs = np.zeros((*batch, H))
    nums: list[np.ndarray] = [np.zeros((*batch, c, a.shape[-1])) for a in state.centers]
    dens: list[np.ndarray] = [np.zeros((*batch, c, a.shape[-1])) for a in state.centers]
    for h, g in enumerate(pv.view_ids):
        costs[..., g] = (Um * dist[h]).sum(axis=(-2, -1))
        X, delta = pv.views[h], pv.deltas[h]
        if euclid or model.center_update == "exact":
            G = Um if euclid else Um * expo[h]  # μ^m δ_ij exp(-φ_ik), δ_ij applied by dX, δ
            nums[g], dens[g] = G @ pv.dX[h], G @ delta
        elif model.center_update == "derivation":
            G = Um * expo[h]
            nums[g] = G @ X
            dens[g] = np.repeat(G.sum(axis=-1)[..., None], X.shape[1], axis=-1)
        else:  # paper, Eq. 16/44: exp(-δ_ij ||x_i - a_k||^2), one (c, n) slab per feature
            A = state.centers[g]
            sq = (A * A).sum(axis=-1)[..., None] - 2.0 * (A @ pv.XT[h])
            sq += pv.xx[h]
            np.maximum(sq, 0.0, out=sq)
            if view_scale is not None:
                sq *= view_scale[..., g, None, None]
            num = np.empty((*batch, c, X.shape[1]))
            den = np.empty_like(num)
            for j in range(X.shape[1]):  # loop over features, not samples
                E = np.exp(-pv.deltaT[h][j] * sq)
                E *= Um
                den[..., j] = E.sum(axis=-1)
                num[..., j] = E @ X[:, j]
            nums[g], dens[g] = num, den
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


def sum_statistics(stats: Sequence[Stats]) -> Stats:
    """Sum clients' statistics (exact aggregation); memberships are dropped."""
    if not stats:
        raise ValidationError("cannot sum an empty list of statistics")
    first = stats[0]
    if len(stats) == 1:
        return replace(first, memberships=None)
    return Stats(
        center_num=tuple(sum(s.center_num[g] for s in stats) for g in range(len(first.center_num))),
        center_den=tuple(sum(s.center_den[g] for s in stats) for g in range(len(first.center_den))),
        view_costs=sum(s.view_costs for s in stats),
        cluster_mass=sum(s.cluster_mass for s in stats),
        view_counts=sum(s.view_counts for s in stats),
        n_samples=sum(s.n_samples for s in stats),
    )


def _view_weights_from_costs(costs: np.ndarray, counts: np.ndarray, alpha: float) -> np.ndarray:
    """Eq. 17 on mean per-sample costs: v_h ∝ cost_h^{-1/(α-1)}, in log space."""
    if (counts == 0).any():
        missing = np.flatnonzero(counts == 0).tolist()
        raise ValidationError(f"view(s) {missing} are held by no sample; cannot weight them")
    mean_cost = costs / counts
    zero = mean_cost <= _TINY
    with np.errstate(divide="ignore"):
        logits = -np.log(mean_cost) / (alpha - 1.0)
    logits -= logits.max(axis=-1, keepdims=True)
    v = np.exp(logits)
    v /= v.sum(axis=-1, keepdims=True)
    any_zero = zero.any(axis=-1, keepdims=True)
    if any_zero.any():  # a perfectly fitted view takes all the weight (the limit of Eq. 17)
        v = np.where(any_zero, zero / zero.sum(axis=-1, keepdims=True), v)
    return v


def state_from_statistics(total: Stats, previous: State, model: MultiViewModel) -> State:
    """Server step on summed statistics: new centres (ratio of sums) and view weights.

    A centre whose weights all underflowed keeps its previous value.
    """
    centers = []
    for num, den, old in zip(total.center_num, total.center_den, previous.centers, strict=True):
        ok = den > _TINY
        with np.errstate(divide="ignore", invalid="ignore"):
            centers.append(np.where(ok, num / np.where(ok, den, 1.0), old))
    v = _view_weights_from_costs(total.view_costs, total.view_counts, model.alpha)
    return State(tuple(centers), v)


def combine(stats: Sequence[Stats], previous: State, model: MultiViewModel) -> State:
    """Server step: sum the clients' statistics and solve for the new global state."""
    return state_from_statistics(sum_statistics(stats), previous, model)


def objective(stats: Stats, view_weights: np.ndarray, alpha: float) -> np.ndarray:
    """J = Σ_h v_h^α Σ_i Σ_k μ_ik^m d_ik^h (Eq. 13), shape (...) of the batch."""
    return (view_weights**alpha * stats.view_costs).sum(axis=-1)
