"""Many clients' seeding candidates in one stacked computation, each client's own bits.

:func:`local_candidates_batch` is :func:`~fedstrata.algorithms.seeding.local_candidates`
for B clients with the same sample count and views, stacked along a leading client
axis. It runs the operations of :func:`~fedstrata.algorithms.init.initial_centers`
(``method="kmeans"``, one seeding) on each client's slice: elementwise operations,
reductions along the same axes and matrix products of slices with the same layout,
so numpy takes the same loops and each client's candidates are those of its own call,
bit for bit. Each client draws from its own generator, the same draws in the same
order. A property test compares the two on random clients.

A client whose data holds NaN, or with no more samples than clusters, takes the
unbatched function (the reference).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedstrata.algorithms.init import _sq_dist, _standardized, lloyd
from fedstrata.algorithms.seeding import local_candidates

__all__ = ["local_candidates_batch"]

_LLOYD_ITERS = 20  # initial_centers' Lloyd iterations for method "kmeans"


def local_candidates_batch(
    views: Sequence[np.ndarray], n_clusters: int, rngs: Sequence[np.random.Generator]
) -> list[tuple[list[np.ndarray], np.ndarray]]:
    """``local_candidates([X[b] for X in views], n_clusters, rngs[b])`` for every b.

    ``views``: per view an array (B, n, d_h); ``rngs``: the B clients' generators, each
    advanced exactly as its own call would advance it.
    """
    B, n = views[0].shape[:2]
    if n <= n_clusters:
        return [local_candidates([X[b] for X in views], n_clusters, rngs[b]) for b in range(B)]
    Z = _standardized(views)
    nan = np.isnan(Z).any(axis=(1, 2))
    out: list[tuple[list[np.ndarray], np.ndarray] | None] = [None] * B
    for b in np.flatnonzero(nan).tolist():  # Lloyd's reference path: the client's own call
        out[b] = local_candidates([X[b] for X in views], n_clusters, rngs[b])
    ok = np.flatnonzero(~nan)
    if ok.size:
        Zo = Z[ok]
        idx = _kmeans_plusplus(Zo, n_clusters, [rngs[b] for b in ok.tolist()])
        centers = Zo[np.arange(ok.size)[:, None], idx]  # (B', c, D)
        labels = lloyd(Zo, centers, n_iter=_LLOYD_ITERS)
        onehot = (labels[..., None] == np.arange(n_clusters)).astype(np.float64)  # (B', n, c)
        counts = onehot.sum(axis=1)[..., None]
        per_view = []
        for X in views:
            Xo = X[ok]
            means = (np.swapaxes(onehot, 1, 2) @ Xo) / np.maximum(counts, 1.0)
            per_view.append(np.where(counts > 0, means, Xo[np.arange(ok.size)[:, None], idx]))
        raw = np.concatenate([X[ok] for X in views], axis=-1)  # (B', n, D)
        C = np.concatenate(per_view, axis=-1)  # (B', c, D)
        d = ((raw[:, :, None, :] - C[:, None]) ** 2).sum(-1)
        nearest = d.argmin(axis=2)
        for j, b in enumerate(ok.tolist()):
            sizes = np.bincount(nearest[j], minlength=n_clusters).astype(np.float64)
            keep = sizes > 0
            out[b] = ([a[j][keep] for a in per_view], sizes[keep])
    assert all(o is not None for o in out)
    return out  # type: ignore[return-value]


def _kmeans_plusplus(
    Z: np.ndarray, n_clusters: int, rngs: Sequence[np.random.Generator]
) -> np.ndarray:
    """k-means++ indices (B, c): kmeans_plusplus_indices with one seeding per client."""
    B, n = Z.shape[:2]
    zz = np.einsum("bij,bij->bi", Z, Z)
    idx = np.empty((B, n_clusters), dtype=np.intp)
    idx[:, 0] = [rng.integers(n, size=1)[0] for rng in rngs]
    rows = np.arange(B)[:, None]
    closest = _sq_dist(Z, zz, Z[rows, idx[:, :1]])[..., 0]  # (B, n)
    for k in range(1, n_clusters):
        total = closest.sum(axis=1, keepdims=True)
        probs = np.where(total > 0, closest / np.where(total > 0, total, 1.0), 1.0 / n)
        cdf = np.cumsum(probs, axis=1)
        u = np.concatenate([rng.random((1, 1)) for rng in rngs]) * cdf[:, -1:]
        idx[:, k] = np.minimum((cdf < u).sum(axis=1), n - 1)
        d_new = _sq_dist(Z, zz, Z[rows, idx[:, k : k + 1]])[..., 0]
        np.minimum(closest, d_new, out=closest)
    return idx
