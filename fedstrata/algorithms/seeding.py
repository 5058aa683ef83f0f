"""Federated initialisation: reduce clients' local centres to one global seed (k-FED style).

Every client clusters its own data (k-means on its concatenated views) and reports its
local centres with their sizes; an aggregator reduces the weighted candidates it
received to ``n_clusters`` centres with weighted k-means++ and Lloyd, and forwards
them with their weights. A tree of aggregators thus reduces candidates level by level
and the root's result seeds the federation. Only centres and counts leave a client,
never samples (Dennis et al., "Heterogeneity for the win: one-shot federated
clustering", ICML 2021, do the one-level version). Seeding from a single client, as the
paper's Algorithm 3 suggests, fails when clients hold a handful of samples each.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedstrata.algorithms.init import initial_centers
from fedstrata.errors import ValidationError

__all__ = ["local_candidates", "reduce_candidates"]


def local_candidates(
    views: Sequence[np.ndarray],
    n_clusters: int,
    rng: np.random.Generator,
    *,
    method: str = "kmeans",
) -> tuple[list[np.ndarray], np.ndarray]:
    """A client's candidate centres per view (k, d_h) and their sizes (k,), k <= n_clusters.

    With fewer samples than clusters, the samples themselves are the candidates (weight 1
    each); a deployment that must not reveal single samples should set a minimum size.
    ``method`` is :func:`~fedstrata.algorithms.init.initial_centers`' (``"kmeans"``: one
    seeding; ``"kmeans-best"``: the best of 10 by inertia).
    """
    n = views[0].shape[0]
    if n <= n_clusters:
        return [np.array(X) for X in views], np.ones(n)
    centers = initial_centers(views, n_clusters, n_init=1, method=method, rng=rng)
    Z = np.hstack([X for X in views])
    C = np.hstack([a[0] for a in centers])
    d = ((Z[:, None, :] - C[None]) ** 2).sum(-1)
    sizes = np.bincount(d.argmin(axis=1), minlength=n_clusters).astype(np.float64)
    keep = sizes > 0
    return [a[0][keep] for a in centers], sizes[keep]


def reduce_candidates(
    candidates: Sequence[np.ndarray],
    weights: np.ndarray,
    n_clusters: int,
    rng: np.random.Generator,
    n_iter: int = 50,
    n_restarts: int = 10,
) -> tuple[list[np.ndarray], np.ndarray]:
    """Weighted k-means of candidate centres (per view (k, d_h), aligned rows) to <= c centres.

    Returns the reduced centres per view and their weights (sums of the members'). Views
    are standardized together by the weighted spread so no view dominates by its scale.
    The best of ``n_restarts`` k-means++ seedings (lowest weighted inertia) wins: the
    candidates are few (c per client), so restarts cost little, and one unlucky
    seeding otherwise merges two classes for the whole run (on the UCI digits, one
    seed in three started 0.09 ARI lower).
    """
    w = np.asarray(weights, dtype=np.float64)
    k = w.size
    if k == 0 or any(a.shape[0] != k for a in candidates):
        raise ValidationError("candidates and weights must be non-empty and aligned")
    if k <= n_clusters:
        return [np.array(a) for a in candidates], w.copy()
    Z = np.hstack(candidates)
    total = w.sum()
    mean = (w[:, None] * Z).sum(0) / total
    std = np.sqrt((w[:, None] * (Z - mean) ** 2).sum(0) / total)
    std[std == 0] = 1.0
    S = (Z - mean) / std
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for _ in range(max(1, n_restarts)):
        C, labels, inertia = _weighted_kmeans(S, w, n_clusters, rng, n_iter)
        if best is None or inertia < best[0]:
            best = (inertia, C, labels)
    assert best is not None
    _, C, labels = best
    mass = np.bincount(labels, weights=w, minlength=n_clusters)
    keep = mass > 0
    out = C[keep] * std + mean
    splits = np.cumsum([a.shape[1] for a in candidates])[:-1]
    return list(np.split(out, splits, axis=1)), mass[keep]


def _weighted_kmeans(
    S: np.ndarray, w: np.ndarray, n_clusters: int, rng: np.random.Generator, n_iter: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """One weighted k-means++ seeding and Lloyd run: centres, labels, weighted inertia."""
    k, total = w.size, w.sum()
    idx = [int(rng.choice(k, p=w / total))]
    closest = ((S - S[idx[0]]) ** 2).sum(1)
    for _ in range(1, n_clusters):
        p = w * closest
        nxt = int(rng.choice(k, p=p / p.sum())) if p.sum() > 0 else int(rng.integers(k))
        idx.append(nxt)
        closest = np.minimum(closest, ((S - S[nxt]) ** 2).sum(1))
    C = S[idx]
    labels = np.zeros(k, dtype=np.intp)
    for _ in range(n_iter):
        labels = ((S[:, None, :] - C[None]) ** 2).sum(-1).argmin(1)
        mass = np.bincount(labels, weights=w, minlength=n_clusters)
        sums = np.zeros_like(C)
        np.add.at(sums, labels, w[:, None] * S)
        new = np.where(mass[:, None] > 0, sums / np.maximum(mass, 1e-300)[:, None], C)
        if np.allclose(new, C, rtol=0, atol=1e-12):
            break
        C = new
    d = ((S[:, None, :] - C[None]) ** 2).sum(-1)
    labels = d.argmin(1)
    return C, labels, float((w * d[np.arange(k), labels]).sum())
