"""The setup round the shipped plug-ins share: pooled per-view references, k-means seeds.

A client reports, per view it holds, its per-feature references (min, max, sum, count
and, when asked, Σ(x − mean)²) and, if it holds every view, k-means candidates with
their sizes (:func:`~fedstrata.algorithms.seeding.local_candidates`). An aggregator
merges references exactly and reduces the candidates to ``n_clusters`` weighted
centres (:func:`~fedstrata.algorithms.seeding.reduce_candidates`), level by level.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedstrata.algorithms.kernels import kernel_reference
from fedstrata.algorithms.seeding import local_candidates, reduce_candidates
from fedstrata.plugins.messages import (
    Shape,
    merge_reference_bodies,
    read_candidates,
    read_choice,
    read_int,
    read_references,
    references_body,
)

__all__ = ["SharedSetupRound", "check_setup_body", "merge_setup_bodies", "setup_body"]


def setup_body(
    views: Sequence[np.ndarray],
    view_ids: Sequence[int],
    shape: Shape,
    rng: np.random.Generator,
    *,
    spread: bool,
) -> dict[str, Any]:
    """A client's setup reply; ``spread``: include Σ(x − mean)² (bytes count)."""
    refs: list[Any] = [None] * shape.n_views
    for g, X in zip(view_ids, views, strict=True):
        ref = kernel_reference(X)
        refs[g] = ref if spread else dataclasses.replace(ref, sq_dev=None)
    n = int(views[0].shape[0])
    body: dict[str, Any] = {"mode": "setup", "n": n, **references_body(refs)}
    if len(view_ids) == shape.n_views:  # only full-view clients can seed all views
        candidates, sizes = local_candidates(views, shape.n_clusters, rng)
        body["init"], body["init_w"] = candidates, sizes
    return body


def check_setup_body(body: dict[str, Any], shape: Shape) -> None:
    """A setup reply's references and candidates must parse (WireError otherwise)."""
    read_choice(body, "mode", ("setup",))
    read_int(body, "n")  # merge_setup_bodies adds them up
    read_references(body, shape)
    read_candidates(body, shape)


def merge_setup_bodies(
    bodies: Sequence[dict[str, Any]], shape: Shape, rng: np.random.Generator
) -> dict[str, Any]:
    """Pooled references and the candidates reduced to ``n_clusters`` (k-means++)."""
    merged: dict[str, Any] = {"mode": "setup", "n": sum(int(b.get("n", 0)) for b in bodies)}
    merged.update(merge_reference_bodies(bodies, shape))
    cands = [c for c in (read_candidates(b, shape) for b in bodies) if c is not None]
    if cands:
        views = [np.vstack([c[0][h] for c in cands]) for h in range(shape.n_views)]
        weights = np.concatenate([c[1] for c in cands])
        centers, w = reduce_candidates(views, weights, shape.n_clusters, rng)
        merged["init"], merged["init_w"] = centers, w
    return merged


class SharedSetupRound:
    """``check_setup`` and ``merge_setup`` of a plug-in that uses this setup round.

    Mixed into an :class:`~fedstrata.nodes.algorithm.Algorithm` that has ``shape``.
    """

    shape: Shape

    def check_setup(self, body: dict[str, Any]) -> None:
        """References and candidates must parse (WireError otherwise)."""
        check_setup_body(body, self.shape)

    def merge_setup(
        self, bodies: Sequence[dict[str, Any]], rng: np.random.Generator
    ) -> dict[str, Any]:
        """Pooled references and the candidates reduced to ``n_clusters`` (k-means++)."""
        return merge_setup_bodies(bodies, self.shape, rng)
