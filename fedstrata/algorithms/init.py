"""Initial centres that keep cluster indices aligned across views.

Memberships are shared by all views, so centre k of view 1 and centre k of view 2
must describe the same cluster. Seeding each view on its own (what the paper's
Algorithm 1 suggests) permutes labels between views; every method here therefore
works on the concatenated, standardized views and maps back per view.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedstrata.errors import ValidationError

__all__ = ["INIT_METHODS", "initial_centers", "kmeans_plusplus_indices", "lloyd"]

#: Names accepted by :func:`initial_centers`.
INIT_METHODS = ("kmeans", "k-means++", "random", "kmeans-best")
#: k-means++ seedings ``"kmeans-best"`` draws before keeping the lowest-inertia ones.
BEST_OF_SEEDS = 10


def _standardized(views: Sequence[np.ndarray]) -> np.ndarray:
    """The views side by side, each feature standardized over the samples (axis -2).

    Views (n, d_h) give (n, D); stacked clients' views (B, n, d_h) give each client's
    own standardization, (B, n, D).
    """
    Z = np.concatenate(list(views), axis=-1)
    std = Z.std(axis=-2, keepdims=True)
    std[std == 0] = 1.0  # constant features: leave them, never divide by zero
    return (Z - Z.mean(axis=-2, keepdims=True)) / std


def _sq_dist(Z: np.ndarray, zz: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances (R, n, c) between rows of Z and centres C (R, c, D).

    Z is (n, D) with zz its squared norms (n,), or one data set per restart: (R, n, D)
    and (R, n).
    """
    # Z·(2C) is 2(Z·C) bit for bit (scaling by 2 is exact), so this rounds exactly as
    # zz - 2 Z·C + |C|² written out, with one temporary and one pass fewer
    d = Z @ np.swapaxes(2.0 * C, -1, -2)
    np.subtract(zz[..., None], d, out=d)
    d += (C * C).sum(axis=-1)[:, None, :]
    return np.maximum(d, 0.0, out=d)


def kmeans_plusplus_indices(
    Z: np.ndarray, n_clusters: int, n_init: int, rng: np.random.Generator
) -> np.ndarray:
    """k-means++ seeding (D² sampling), ``n_init`` independent draws at once: (n_init, c)."""
    n = Z.shape[0]
    zz = np.einsum("ij,ij->i", Z, Z)
    idx = np.empty((n_init, n_clusters), dtype=np.intp)
    idx[:, 0] = rng.integers(n, size=n_init)
    closest = _sq_dist(Z, zz, Z[idx[:, :1]])[..., 0]  # (R, n)
    for k in range(1, n_clusters):
        total = closest.sum(axis=1, keepdims=True)
        # all points on the chosen centres (duplicates): fall back to uniform draws
        probs = np.where(total > 0, closest / np.where(total > 0, total, 1.0), 1.0 / n)
        cdf = np.cumsum(probs, axis=1)
        u = rng.random((n_init, 1)) * cdf[:, -1:]
        idx[:, k] = np.minimum((cdf < u).sum(axis=1), n - 1)
        d_new = _sq_dist(Z, zz, Z[idx[:, k : k + 1]])[..., 0]
        np.minimum(closest, d_new, out=closest)
    return idx


def _first_argmin(D: np.ndarray) -> np.ndarray:
    """``D.argmin(axis=-2)`` for D (..., c, n), ties to the lowest index.

    c row compares instead of numpy's argmin over a short non-last axis (~5 ns/element).
    """
    best = D[..., 0, :].copy()
    labels = np.zeros(best.shape, dtype=np.intp)
    for k in range(1, D.shape[-2]):
        closer = D[..., k, :] < best
        labels[closer] = k
        np.minimum(best, D[..., k, :], out=best)
    return labels


def lloyd(Z: np.ndarray, centers: np.ndarray, n_iter: int = 20) -> np.ndarray:
    """Batched Lloyd iterations; returns labels (R, n). Empty clusters keep their centre.

    ``Z`` is the data (n, D) of every restart, or one data set per restart (R, n, D)
    without NaN. Works cluster-major, (R, c, n), so that the reductions over c are row
    operations; a restart whose labels stopped changing is at a fixed point and
    leaves the batch.
    """
    each = Z.ndim == 3
    if not each and np.isnan(Z).any():  # NaN breaks the row compares: numpy's argmin rules
        return _lloyd_reference(Z, centers, n_iter)
    zz = np.einsum("bij,bij->bi", Z, Z) if each else np.einsum("ij,ij->i", Z, Z)
    c = centers.shape[1]
    labels = _first_argmin(_sq_dist(Z, zz, centers).transpose(0, 2, 1))
    active = np.arange(labels.shape[0])
    ks = np.arange(c)[:, None]
    for _ in range(n_iter):
        onehot = (labels[active][:, None, :] == ks).astype(Z.dtype)  # (R', c, n)
        counts = onehot.sum(axis=2)[..., None]
        Za, zza = (Z[active], zz[active]) if each else (Z, zz)
        sums = onehot @ Za
        cen = np.where(counts > 0, sums / np.maximum(counts, 1.0), centers[active])
        centers[active] = cen
        new = _first_argmin(_sq_dist(Za, zza, cen).transpose(0, 2, 1))
        moved = (new != labels[active]).any(axis=1)
        labels[active] = new
        active = active[moved]
        if active.size == 0:
            break
    return labels


def _lloyd_reference(Z: np.ndarray, centers: np.ndarray, n_iter: int) -> np.ndarray:
    zz = np.einsum("ij,ij->i", Z, Z)
    c = centers.shape[1]
    labels = _sq_dist(Z, zz, centers).argmin(axis=-1)
    for _ in range(n_iter):
        onehot = (labels[..., None] == np.arange(c)).astype(Z.dtype)  # (R, n, c)
        counts = onehot.sum(axis=1)[..., None]
        sums = np.swapaxes(onehot, 1, 2) @ Z
        centers = np.where(counts > 0, sums / np.maximum(counts, 1.0), centers)
        new = _sq_dist(Z, zz, centers).argmin(axis=-1)
        if np.array_equal(new, labels):
            break
        labels = new
    return labels


def initial_centers(
    views: Sequence[np.ndarray],
    n_clusters: int,
    *,
    n_init: int = 1,
    method: str = "kmeans",
    rng: np.random.Generator,
) -> tuple[np.ndarray, ...]:
    """Aligned initial centres for ``n_init`` restarts: per view an (n_init, c, d_h) array.

    Parameters
    ----------
    views
        Validated views.
    n_clusters
        Number of clusters.
    n_init
        Number of independent initialisations.
    method
        ``"kmeans"``: k-means++ seeding then Lloyd on the concatenated standardized
        views; centres are the per-view means of the resulting clusters (the robust
        default: the FedHK-MVFC paper's data needs it, random seeds give ARI 0.15-0.75).
        ``"k-means++"``: the seed samples themselves. ``"random"``: c distinct random
        samples (the Fed-MVKM paper's MVKM-ED), the same rows in every view.
        ``"kmeans-best"``: as ``"kmeans"`` from max(``n_init``, :data:`BEST_OF_SEEDS`)
        seedings, keeping the ``n_init`` with the lowest k-means inertia (as
        scikit-learn's ``KMeans(n_init=10)`` keeps its best run). Restarts of a
        clustering method from Lloyd solutions mostly reach the same fixed point, so
        one fit from the best seeding costs a tenth of ten fits (the new
        :class:`~fedstrata.algorithms.HKMVFC` default).
    rng
        Random generator.
    """
    n = views[0].shape[0]
    if method == "random":
        idx = np.stack([rng.choice(n, size=n_clusters, replace=False) for _ in range(n_init)])
        return tuple(X[idx] for X in views)
    if method not in INIT_METHODS:
        raise ValidationError(f"unknown init {method!r}; expected one of {INIT_METHODS}")
    Z = _standardized(views)
    best = method == "kmeans-best"
    seeds = max(n_init, BEST_OF_SEEDS) if best else n_init
    idx = kmeans_plusplus_indices(Z, n_clusters, seeds, rng)
    if method == "k-means++":
        return tuple(X[idx] for X in views)
    labels = lloyd(Z, Z[idx], n_iter=50 if best else 20)
    onehot = (labels[..., None] == np.arange(n_clusters)).astype(np.float64)
    counts = onehot.sum(axis=1)[..., None]
    if best:  # inertia = Σ|z|² - Σ_k n_k |mean_k|², per seeding
        zsum = np.swapaxes(onehot, 1, 2) @ Z
        inertia = np.einsum("ij,ij->", Z, Z) - (
            (zsum * zsum).sum(-1) / np.maximum(counts[..., 0], 1.0)
        ).sum(-1)
        keep = np.sort(np.argsort(inertia, kind="stable")[:n_init])
        onehot, counts, idx = onehot[keep], counts[keep], idx[keep]
    out = []
    for X in views:
        means = (np.swapaxes(onehot, 1, 2) @ X) / np.maximum(counts, 1.0)
        out.append(np.where(counts > 0, means, X[idx]))
    return tuple(out)
