"""The lean client step: a small client's (or a stack of clients') statistics, bit for bit.

A client with few samples spends more time on per-call overhead than on its
arithmetic. :func:`lean_statistics` runs the numpy operations of
:func:`~fedstrata.algorithms.multiview.local_statistics` on the same numbers in the same
order (hence the same bits), without the batch axis and the scratch workspace that pay
off for large clients only, with the per-view constants of the global model computed
once (:class:`~fedstrata.plugins.global_models.GlobalModel`).
:func:`lean_memberships` is its first half: the memberships a client labels its samples
with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fedstrata.algorithms.multiview import (  # the engine's private helpers, on purpose
    MultiViewModel,
    PreparedViews,
    _paper_sums,
    _sum_products,
    _weighted_sums,
    memberships,
)
from fedstrata.plugins.global_models import GlobalModel

if TYPE_CHECKING:
    from fedstrata.plugins.batch_update import StackedViews

__all__ = ["lean_memberships", "lean_statistics"]


def lean_memberships(
    pv: PreparedViews | StackedViews, glob: GlobalModel, model: MultiViewModel
) -> np.ndarray:
    """The memberships of :func:`lean_statistics`, cluster-major: (*lead, c, n).

    Bit for bit the transpose of ``local_statistics(...).memberships[0]`` (a property
    test compares them), so a client's labels are ``argmax`` over the cluster axis.
    """
    return _weights(pv, glob, model)[3]


def _weights(
    pv: PreparedViews | StackedViews, glob: GlobalModel, model: MultiViewModel
) -> tuple[list[np.ndarray], list[np.ndarray | None], list[bool], np.ndarray]:
    """Per held view the distances, exp(-φ) where kept and the shared flags; memberships."""
    c, n = model.n_clusters, pv.n_samples
    lead = pv.lead
    update = "mean" if model.distance == "euclidean" else model.center_update
    coefs, va = glob.coefs(), glob.va(model.alpha)
    dist: list[np.ndarray] = []
    expo: list[np.ndarray | None] = []
    shared: list[bool] = []
    W = np.empty((*lead, c, n))
    for h, g in enumerate(pv.view_ids):
        sh = update == "paper" and (model.kernel == "none" or pv.views[h].shape[-1] == 1)
        e: np.ndarray | None = np.matmul(coefs[g], pv._gemm_rows[0][h])  # -φ (times scale)
        assert e is not None
        if update == "mean":
            d = np.negative(e, out=e)
            e = None
        else:
            np.exp(e, out=e)
            keep = update in ("exact", "derivation") or sh
            d = np.subtract(1.0, e) if keep else np.subtract(1.0, e, out=e)
            if not keep:
                e = None
        dist.append(d)
        expo.append(e)
        shared.append(sh)
        if h == 0:
            np.multiply(d, va[g], out=W)
        else:
            W += np.multiply(d, va[g])
    np.maximum(W, 0.0, out=W)
    return dist, expo, shared, memberships(W, model.m, model.membership)


def lean_statistics(
    pv: PreparedViews, glob: GlobalModel, model: MultiViewModel
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, np.ndarray, float]:
    """``local_statistics(pv, glob.state, model)`` of a small client, and its objective.

    Returns the per-view ``num`` and ``den`` sums (c, d_h), the view costs (H,), the
    cluster masses (c,) and J: the values of the engine's ``Stats.take(0)`` and
    ``objective(...)[0]``, bit for bit. It runs the engine's operations on the same
    numbers in the same order; only the batch axis of one restart is left out (numpy
    then takes the same loops) and the coefficient rows and v^α come precomputed from
    ``glob``. A property test compares the two on random clients and models.

    ``pv`` may also be a :class:`~fedstrata.plugins.batch_update.StackedViews` of
    several clients with the same sample count and views: every array then has a
    leading client axis, and so do the results (J is then an array). numpy runs the
    same loops on each client's slice, so each client's values are its own call's,
    bit for bit (the batched step's property test checks it).
    """
    state = glob.state
    c, n, H = model.n_clusters, pv.n_samples, pv.n_views
    lead = pv.lead
    update = "mean" if model.distance == "euclidean" else model.center_update
    va = glob.va(model.alpha)
    scales = None if state.view_scale is None else state.view_scale[0]
    dist, expo, shared, U = _weights(pv, glob, model)
    if model.membership == "hard":
        Um = U
    elif model.m == 2.0:
        Um = np.multiply(U, U)
    else:
        Um = np.power(U, model.m)
    costs = np.zeros((*lead, H))
    nums = [np.zeros((*lead, c, a.shape[-1])) for a in state.centers]
    dens = [np.zeros((*lead, c, a.shape[-1])) for a in state.centers]
    for h, g in enumerate(pv.view_ids):
        costs[..., g] = _sum_products(Um, dist[h], out=dist[h])
        if update == "paper" and not shared[h]:  # Eq. 16/44: one exp per feature
            scale = None if scales is None else scales[g]
            spare = [np.empty((*lead, c, n)), np.empty((*lead, c, n))]
            nums[g], dens[g] = _paper_sums(pv, h, state.centers[g][0], Um, scale, spare)
            continue
        e = expo[h]
        G = Um if e is None else np.multiply(e, Um, out=e)
        if update in ("derivation", "paper"):
            nums[g] = _weighted_sums(G, pv.XT[h], pv.views[h])
            dens[g] = np.repeat(G.sum(axis=-1)[..., None], pv.views[h].shape[-1], axis=-1)
        else:
            nums[g] = _weighted_sums(G, pv.dXT[h], pv.dX[h])
            dens[g] = _weighted_sums(G, pv.deltaT[h], pv.deltas[h])
    J = (va * costs).sum(axis=-1)
    return nums, dens, costs, U.sum(axis=-1), float(J) if not lead else J
