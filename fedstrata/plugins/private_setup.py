"""The private setup round: two stages of sums only, then seeding on the aggregate.

With secure aggregation or differential privacy on, no client message may carry a
per-client extreme, centre or sample. The plain setup round (:mod:`fedstrata.plugins.
_setup`) sends exactly those, so a private run replaces it with two stages whose
replies are sums over the client's samples, which secure aggregation can add up and
sample-level DP can noise (:mod:`fedstrata.privacy.sample_dp`):

1. **moments**: per view, the count, Σu and Σu² of the samples, u in the box units of
   the declared public bounds (raw values without bounds, secure aggregation only);
2. **cells**: the root announces the pooled per-view mean and scale (from stage 1,
   already public: the bounds' half-width, or the s.d. without bounds) and a seed;
   every client derives the same ``cells · c`` public candidate directions from it,
   assigns each sample (its views centred, scaled and clipped to radius r) to the
   nearest candidate, and sends each cell's count and sum.

The root then runs weighted k-means++ (best of :data:`RESTARTS` starts, then Lloyd
steps) on the cell means: post-processing of released sums, which costs no privacy.
The kernel references are rebuilt from the moments, with the public bounds (or, without
them, mean ± 3 s.d.) as the per-feature range. Without candidates that depend on the
data's centre (stage 2 needs stage 1's mean), cells in the raw box put every sample of
a data set lying on a thin shell away from the box's centre (multiple-features does) in
one cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedstrata.algorithms.kernels import KernelReference
from fedstrata.errors import WireError
from fedstrata.plugins.messages import Shape, references_body
from fedstrata.privacy.layout import Layout, SummedField, flatten, unflatten
from fedstrata.privacy.sample_dp import PrivateConfig, box_units, clip_rows

__all__ = [
    "RESTARTS",
    "candidates",
    "cells_body",
    "frame_of",
    "moments_body",
    "read_frame_arrays",
    "seed_from_cells",
    "setup_layout",
    "setup_request",
    "sum_setup_bodies",
]

#: Weighted k-means++ starts on the cell means; the lowest weighted cost wins.
RESTARTS = 20
_LLOYD_STEPS = 10
_SPREAD = 3.0  # the range mean ± 3 s.d. stands for min/max without public bounds


def setup_layout(shape: Shape, stage: int, cells: int) -> Layout:
    """The summed fields of a stage's reply, for secure aggregation and merging."""
    if stage == 1:
        per_view = tuple((d,) for d in shape.dims)
        return Layout(
            (
                SummedField("cnt", tuple(() for _ in shape.dims), listed=True, noised=True),
                SummedField("s1", per_view, listed=True, noised=True),
                SummedField("s2", per_view, listed=True, noised=True),
            ),
            {"mode": "setup", "stage": 1},
        )
    k = cells * shape.n_clusters
    return Layout(
        (
            SummedField("cell_n", tuple((k,) for _ in shape.dims), listed=True, noised=True),
            SummedField("cell_s", tuple((k, d) for d in shape.dims), listed=True, noised=True),
        ),
        {"mode": "setup", "stage": 2},
    )


def sum_setup_bodies(bodies: Sequence[dict[str, Any]], layout: Layout) -> dict[str, Any]:
    """The elementwise sum of stage replies (what secure aggregation would unmask)."""
    total = np.sum([flatten(b, layout, skip=("sub",)) for b in bodies], axis=0)
    return unflatten(total, layout)


def _view_bounds(config: PrivateConfig, g: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """View ``g``'s public (lo, hi), one bound per feature (a scalar bound broadcast)."""
    assert config.bounds is not None
    lo, hi = (np.broadcast_to(np.asarray(b, dtype=np.float64), (d,)) for b in config.bounds[g])
    return lo.copy(), hi.copy()


def _noise(arr: Any, sigma: float, rng: np.random.Generator | None) -> Any:
    if sigma <= 0 or rng is None:
        return arr
    return arr + rng.normal(0.0, sigma, np.shape(arr))


def moments_body(
    views: Sequence[np.ndarray],
    view_ids: Sequence[int],
    shape: Shape,
    config: PrivateConfig,
    rng: np.random.Generator | None,
) -> dict[str, Any]:
    """Stage 1: per view the count, Σu and Σu² (zeros for views not held), noised under DP."""
    sigma = config.sigma_moments(shape.dims) if config.dp else 0.0
    cnt = [np.float64(0.0) for _ in shape.dims]
    s1 = [np.zeros(d) for d in shape.dims]
    s2 = [np.zeros(d) for d in shape.dims]
    for g, X in zip(view_ids, views, strict=True):
        U = X if config.bounds is None else box_units(X, *config.bounds[g])
        cnt[g], s1[g], s2[g] = np.float64(X.shape[0]), U.sum(axis=0), (U * U).sum(axis=0)
    return {
        "mode": "setup",
        "stage": 1,
        "cnt": [np.float64(_noise(np.float64(c), sigma, rng)) for c in cnt],
        "s1": [_noise(a, sigma, rng) for a in s1],
        "s2": [_noise(a, sigma, rng) for a in s2],
    }


def frame_of(total: dict[str, Any], shape: Shape, config: PrivateConfig) -> dict[str, Any]:
    """Per view the pooled mean, s.d. and scale in raw units, from summed moments (root).

    The scale standardizes the seeding cells and the DP rounds: the public bounds'
    half-width when declared, else the s.d. (exact: secure aggregation alone).
    """
    mus, sds, scales, counts = [], [], [], []
    for g, d in enumerate(shape.dims):
        n = float(total["cnt"][g])
        if not n >= 1.0:
            raise WireError(f"view {g}: no samples in the summed moments")
        mean = total["s1"][g] / n
        var = np.maximum(total["s2"][g] / n - mean * mean, 1e-12)
        if config.bounds is None:
            mu, sd = mean, np.sqrt(var)
            scale = sd
        else:
            lo, hi = _view_bounds(config, g, d)
            half = (hi - lo) / 2.0
            mu = lo + half + half * np.clip(mean, -1.0, 1.0)
            sd = np.where(half > 0, half * np.sqrt(var), 1.0)
            # the public half-width, not the noisy s.d.: a near-constant feature's s.d.
            # is mostly noise under DP and dividing by it would make that feature rule
            scale = np.where(half > 0, half, 1.0)
        mus.append(np.asarray(mu, dtype=np.float64).reshape(d))
        sds.append(np.maximum(np.asarray(sd, dtype=np.float64).reshape(d), 1e-12))
        scales.append(np.maximum(np.asarray(scale, dtype=np.float64).reshape(d), 1e-12))
        counts.append(n)
    return {"mu": mus, "sd": sds, "scale": scales, "count": counts}


def setup_request(frame: dict[str, Any], seed: int) -> dict[str, Any]:
    """The second stage's request: the public frame (means, scales) and the candidates' seed."""
    return {"stage": 2, "mu": frame["mu"], "scale": frame["scale"], "seed": int(seed)}


def candidates(shape: Shape, config: PrivateConfig, seed: int) -> list[np.ndarray]:
    """Per view the (cells·c, d) public candidates: random directions at half the radius."""
    rng = np.random.default_rng([int(seed), 31])
    k = config.cells * shape.n_clusters
    out = []
    for d, r in zip(shape.dims, config.radii(shape.dims), strict=True):
        G = rng.standard_normal((k, d))
        G /= np.maximum(np.linalg.norm(G, axis=1, keepdims=True), 1e-300)
        out.append(0.5 * r * G)
    return out


def read_request(request: Any, shape: Shape) -> tuple[list[np.ndarray], list[np.ndarray], int]:
    """The frame (means, scales) and seed of a stage-2 request (WireError if malformed)."""
    if not isinstance(request, dict) or request.get("stage") != 2:
        raise WireError("a second setup stage needs a request with stage 2")
    seed = request.get("seed")
    if not isinstance(seed, int):
        raise WireError("the setup request needs an int 'seed'")
    mus, scales = read_frame_arrays(request, shape, "the setup request")
    return mus, scales, seed


def read_frame_arrays(
    frame: dict[str, Any], shape: Shape, what: str
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """A frame's per-view means and scales (``mu``, ``scale``), checked (WireError).

    Shared by the stage-2 request and a sample-level run's configuration, which carry
    the same frame.
    """
    mus, scales = frame.get("mu"), frame.get("scale")
    if not (isinstance(mus, list) and isinstance(scales, list)):
        raise WireError(f"{what} needs lists 'mu' and 'scale'")
    if len(mus) != shape.n_views or len(scales) != shape.n_views:
        raise WireError(f"{what} must cover {shape.n_views} views")
    for d, mu, sd in zip(shape.dims, mus, scales, strict=True):
        ok = isinstance(mu, np.ndarray) and isinstance(sd, np.ndarray)
        if not ok or mu.shape != (d,) or sd.shape != (d,) or not (sd > 0).all():
            raise WireError(f"{what}'s frame does not match the views")
        if not (np.isfinite(mu).all() and np.isfinite(sd).all()):
            raise WireError(f"{what}'s frame is not finite")
    return list(mus), list(scales)


def standardized(
    views: Sequence[np.ndarray],
    view_ids: Sequence[int],
    mus: Sequence[np.ndarray],
    sds: Sequence[np.ndarray],
    radii: Sequence[float],
) -> list[np.ndarray]:
    """Each held view centred, divided by the frame's scale and clipped to its radius."""
    return [
        clip_rows((X - mus[g]) / sds[g], radii[g]) for g, X in zip(view_ids, views, strict=True)
    ]


def cells_body(
    views: Sequence[np.ndarray],
    view_ids: Sequence[int],
    shape: Shape,
    config: PrivateConfig,
    request: Any,
    rng: np.random.Generator | None,
) -> dict[str, Any]:
    """Stage 2: each public cell's count and sum of standardized samples, noised under DP."""
    mus, sds, seed = read_request(request, shape)
    radii = config.radii(shape.dims)
    cand = candidates(shape, config, seed)
    U = standardized(views, view_ids, mus, sds, radii)
    k = cand[0].shape[0]
    n = U[0].shape[0] if U else 0
    dist = np.zeros((n, k))
    for g, u in zip(view_ids, U, strict=True):
        C = cand[g]
        dist += (u * u).sum(axis=1)[:, None] - 2.0 * u @ C.T + (C * C).sum(axis=1)[None, :]
    nearest = dist.argmin(axis=1) if n else np.zeros(0, dtype=np.int64)
    s_sum, s_count = config.client_sigmas(shape.dims) if config.dp else (0.0, 0.0)
    cell_n = [np.zeros(k) for _ in shape.dims]
    cell_s = [np.zeros((k, d)) for d in shape.dims]
    for g, u in zip(view_ids, U, strict=True):
        cell_n[g] = np.bincount(nearest, minlength=k).astype(np.float64)
        np.add.at(cell_s[g], nearest, u)
    return {
        "mode": "setup",
        "stage": 2,
        "cell_n": [_noise(a, s_count, rng) for a in cell_n],
        "cell_s": [_noise(a, s_sum, rng) for a in cell_s],
    }


def _kmeanspp(P: np.ndarray, w: np.ndarray, c: int, rng: np.random.Generator) -> np.ndarray:
    """Weighted k-means++ then Lloyd steps on points ``P`` with weights ``w``."""
    first = rng.choice(len(P), p=w / w.sum())
    chosen = [first]
    d2 = ((P - P[first]) ** 2).sum(axis=1)
    for _ in range(c - 1):
        p = w * d2
        pick = rng.choice(len(P), p=p / p.sum()) if p.sum() > 0 else rng.integers(len(P))
        chosen.append(int(pick))
        d2 = np.minimum(d2, ((P - P[pick]) ** 2).sum(axis=1))
    C = P[chosen].copy()
    for _ in range(_LLOYD_STEPS):
        a = ((P[:, None, :] - C[None]) ** 2).sum(axis=-1).argmin(axis=1)
        for j in range(c):
            m = a == j
            if w[m].sum() > 0:
                C[j] = (w[m, None] * P[m]).sum(axis=0) / w[m].sum()
    return C


def _weighted_cost(P: np.ndarray, w: np.ndarray, C: np.ndarray) -> float:
    return float((w * ((P[:, None, :] - C[None]) ** 2).sum(axis=-1).min(axis=1)).sum())


def seed_from_cells(
    total: dict[str, Any],
    frame: dict[str, Any],
    shape: Shape,
    config: PrivateConfig,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], np.ndarray] | None:
    """Initial centres (raw units, per view) and weights from summed cells.

    Cells whose noisy count is within 3 noise s.d.s of zero are left out; when fewer
    than ``c`` remain, the ``c`` heaviest seed one centre each (a repeated setup stage
    would be another release, beyond the run's budget). None only without ``c`` cells.
    """
    c = shape.n_clusters
    if config.cells * c < c:
        return None
    counts = np.vstack([np.asarray(a, dtype=np.float64) for a in total["cell_n"]])
    floor = 3.0 * config.total_sigmas(shape.dims)[1] if config.dp else 0.5
    weight = counts.min(axis=0)
    keep = np.flatnonzero(weight > floor)
    if keep.size < c:  # too few cells above the noise: the c heaviest, all the same
        keep = np.argsort(-weight)[:c]
    w = np.maximum(weight[keep], 1.0)  # a noisy count may be <= 0; it still seeds a centre
    radii = config.radii(shape.dims)
    P = np.hstack(
        [  # each cell's mean, inside the clip (a small noisy count inflates it)
            clip_rows(total["cell_s"][g][keep] / w[:, None], radii[g]) for g in range(shape.n_views)
        ]
    )
    best: tuple[float, np.ndarray] | None = None
    for _ in range(RESTARTS):
        C = _kmeanspp(P, w, c, rng)
        cost = _weighted_cost(P, w, C)
        if best is None or cost < best[0]:
            best = (cost, C)
    assert best is not None
    C = best[1]
    a = ((P[:, None, :] - C[None]) ** 2).sum(axis=-1).argmin(axis=1)
    sizes = np.array([max(float(w[a == j].sum()), 1.0) for j in range(c)])
    centers, at = [], 0
    for g, d in enumerate(shape.dims):
        centers.append(frame["mu"][g] + frame["scale"][g] * C[:, at : at + d])
        at += d
    return centers, sizes


def plain_setup(
    frame: dict[str, Any],
    seeded: tuple[list[np.ndarray], np.ndarray] | None,
    shape: Shape,
    config: PrivateConfig,
) -> dict[str, Any]:
    """The merged setup the plug-ins' ``after_setup`` reads: references and candidates."""
    refs = []
    for g, d in enumerate(shape.dims):
        mu, sd, n = frame["mu"][g], frame["sd"][g], max(1, round(frame["count"][g]))
        if config.bounds is None:
            lo, hi = mu - _SPREAD * sd, mu + _SPREAD * sd
        else:
            lo, hi = _view_bounds(config, g, d)
        refs.append(KernelReference(lo, hi, mu * n, n, sd * sd * n))
    body: dict[str, Any] = {"mode": "setup", **references_body(refs)}
    if seeded is not None:
        body["init"], body["init_w"] = seeded
    return body
