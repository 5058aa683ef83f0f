"""Sample-level DP rounds of the multi-view statistics: bounded sums, noise independent of n.

Under ``privacy.dp.unit: sample`` a client's round partial is built so that one sample
changes it by a bounded amount, whatever the client's size:

* the memberships come from the global model as in a plain round (the model is
  public: post-processing);
* each held view is centred on the pooled mean, divided by the frame's scale (the frame
  the private setup released) and clipped to radius r = radius·√d
  (:func:`~fedstrata.plugins.private_setup.standardized`);
* the centre numerators are Σ_i μ_ik^m ũ_i and the denominators Σ_i μ_ik^m, one per
  cluster and view: since Σ_k (μ_ik^m)² ≤ 1, a sample adds at most r and 1 to them
  (:func:`~fedstrata.privacy.sample_dp.cells_sensitivity`).

Gaussian noise of the run's multiplier, split between the sums and the counts
(:func:`~fedstrata.privacy.sample_dp.split_sigmas`), is added once in total
(each client a 1/√t share under secure aggregation, all of it without). The centre
step is then the membership-weighted mean, for every ``center_update``: the exact
heat-kernel update's per-feature denominators would need √d times the noise. View
costs, masses, sample counts and the objective are not released (zeros: the view
weights keep their initial values, and J is not known to anyone).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedstrata.algorithms.multiview import MultiViewModel, PreparedViews, State, local_statistics
from fedstrata.errors import WireError
from fedstrata.plugins.messages import Shape
from fedstrata.plugins.private_setup import read_frame_arrays, standardized
from fedstrata.privacy.sample_dp import PrivateConfig, clip_rows

__all__ = ["read_frame", "sample_partial", "state_from_sample_sums"]


def read_frame(extras: dict[str, Any], shape: Shape) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The pooled per-view means and scales a sample-level run's configuration carries."""
    frame = extras.get("frame")
    if not isinstance(frame, dict):
        raise WireError("a sample-level DP run's configuration needs its 'frame'")
    return read_frame_arrays(frame, shape, "the configuration")


def sample_partial(
    views: Sequence[np.ndarray],
    pv: PreparedViews,
    glob: State,
    model: MultiViewModel,
    shape: Shape,
    frame: tuple[list[np.ndarray], list[np.ndarray]],
    config: PrivateConfig,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """A client's noisy ``stats`` partial (module docstring)."""
    U = local_statistics(pv, glob, model).memberships
    assert U is not None
    U = np.asarray(U)[0]  # (n, c) of the one restart
    # each sample counts wholly for its most likely cluster (DPLloyd's step under the
    # model's memberships): fuzzy weights give far samples, whose kernel distances
    # saturate, near-uniform memberships that drag every centre to the global mean
    Um = np.zeros_like(U)
    Um[np.arange(U.shape[0]), U.argmax(axis=1)] = 1.0
    mus, sds = frame
    radii = config.radii(shape.dims)
    clipped = standardized(views, pv.view_ids, mus, sds, radii)
    s_sum, s_count = config.client_sigmas(shape.dims)
    c, H = shape.n_clusters, shape.n_views
    num = [np.zeros((c, d)) for d in shape.dims]
    den = [np.zeros((c, d)) for d in shape.dims]
    for g, u in zip(pv.view_ids, clipped, strict=True):
        num[g] = Um.T @ u
        den[g] = np.repeat(Um.sum(axis=0)[:, None], shape.dims[g], axis=1)
    for g in range(H):  # every view, held or not: the noise must not tell which it holds
        num[g] = num[g] + rng.normal(0.0, s_sum, num[g].shape)
        once = rng.normal(0.0, s_count, (c, 1))  # one draw per cluster, repeated per feature
        den[g] = den[g] + once
    return {
        "mode": "stats",
        "num": num,
        "den": den,
        "costs": np.zeros(H),
        "mass": np.zeros(c),
        "counts": np.zeros(H, dtype=np.int64),
        "n": 0,
        "contributors": 1,
        "objective": 0.0,
    }


def state_from_sample_sums(
    total: dict[str, Any],
    previous: State,
    frame: dict[str, Any],
    shape: Shape,
    config: PrivateConfig,
) -> tuple[State, float]:
    """The root's centres from summed noisy sums, and the share of coordinates held back.

    A centre whose summed denominator is within 3 noise s.d.s of zero keeps its
    previous value (post-processing: a ratio of two mostly-noise numbers would throw
    it anywhere).
    """
    floor = 3.0 * config.total_sigmas(shape.dims)[1]
    radii = config.radii(shape.dims)
    centers, held, cells = [], 0, 0
    for g, old in enumerate(previous.centers):
        den = np.asarray(total["den"][g])[:, :1]  # (c, 1): the repeats carry one draw
        ok = den > max(floor, 1e-12)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = total["num"][g] / np.where(ok, den, 1.0)
        mean = clip_rows(mean, radii[g])  # inside the clip, as every sample was
        new = frame["mu"][g] + frame["scale"][g] * mean
        centers.append(np.where(ok, new, old))
        held += int((~ok).sum()) * old.shape[-1]
        cells += old.size
    return State(tuple(centers), previous.view_weights, previous.view_scale), held / max(cells, 1)
