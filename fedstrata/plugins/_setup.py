"""The setup round the shipped plug-ins share: pooled per-view references, k-means seeds.

A client reports, per view it holds, its per-feature references (min, max, sum, count
and, when asked, Σ(x − mean)²) and, if it holds every view, k-means candidates with
their sizes (:func:`~fedstrata.algorithms.seeding.local_candidates`). An aggregator
merges references exactly and reduces the candidates to ``n_clusters`` weighted
centres (:func:`~fedstrata.algorithms.seeding.reduce_candidates`), level by level.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fedstrata.algorithms.kernels import kernel_reference
from fedstrata.algorithms.seeding import local_candidates, reduce_candidates
from fedstrata.algorithms.seeding_batch import local_candidates_batch
from fedstrata.errors import WireError
from fedstrata.plugins import private_setup
from fedstrata.plugins.messages import (
    Shape,
    merge_reference_bodies,
    read_candidates,
    read_choice,
    read_int,
    read_references,
    references_body,
)
from fedstrata.privacy.layout import Layout, flatten
from fedstrata.privacy.sample_dp import PrivateConfig

__all__ = [
    "SharedSetupRound",
    "check_setup_body",
    "merge_setup_bodies",
    "setup_bodies",
    "setup_body",
]


def setup_body(
    views: Sequence[np.ndarray],
    view_ids: Sequence[int],
    shape: Shape,
    rng: np.random.Generator,
    *,
    spread: bool,
) -> dict[str, Any]:
    """A client's setup reply; ``spread``: include Σ(x − mean)² (bytes count)."""
    body = _references_reply(views, view_ids, shape, spread)
    if len(view_ids) == shape.n_views:  # only full-view clients can seed all views
        candidates, sizes = local_candidates(views, shape.n_clusters, rng)
        body["init"], body["init_w"] = candidates, sizes
    return body


def _references_reply(
    views: Sequence[np.ndarray], view_ids: Sequence[int], shape: Shape, spread: bool
) -> dict[str, Any]:
    refs: list[Any] = [None] * shape.n_views
    for g, X in zip(view_ids, views, strict=True):
        ref = kernel_reference(X)
        refs[g] = ref if spread else dataclasses.replace(ref, sq_dev=None)
    n = int(views[0].shape[0])
    return {"mode": "setup", "n": n, **references_body(refs)}


def setup_bodies(
    views: Sequence[Sequence[np.ndarray]],
    shape: Shape,
    rngs: Sequence[np.random.Generator],
    *,
    spread: bool,
) -> list[tuple[dict[str, Any], Callable[[], bool]]]:
    """:func:`setup_body` of clients holding every view, with equal sample counts.

    ``views[b]`` are client b's views in view order. Each reply is its client's own,
    bit for bit (:func:`~fedstrata.algorithms.seeding_batch.local_candidates_batch`),
    but the clients' generators are left as they were: each reply comes with a claim
    that advances its generator as the client's own call would have, and refuses
    (False) if the generator moved in the meantime.
    """
    ids = tuple(range(shape.n_views))
    before = [rng.bit_generator.state for rng in rngs]
    stacked = [np.stack([v[h] for v in views]) for h in ids]
    candidates = local_candidates_batch(stacked, shape.n_clusters, rngs)
    out: list[tuple[dict[str, Any], Callable[[], bool]]] = []
    for v, rng, old, (cands, sizes) in zip(views, rngs, before, candidates, strict=True):
        body = _references_reply(v, ids, shape, spread)
        body["init"], body["init_w"] = cands, sizes
        out.append((body, _claim(rng, old, rng.bit_generator.state)))
        rng.bit_generator.state = old
    return out


def _claim(rng: np.random.Generator, before: Any, after: Any) -> Callable[[], bool]:
    def claim() -> bool:
        if rng.bit_generator.state != before:
            return False
        rng.bit_generator.state = after
        return True

    return claim


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
    """The setup round of a plug-in that uses this module: plain, or private in two stages.

    Mixed into an :class:`~fedstrata.nodes.algorithm.Algorithm` that has ``shape`` and
    ``protocol``. With ``protocol.private`` set (secure aggregation or DP on), the
    setup is :mod:`fedstrata.plugins.private_setup`'s: replies are sums (a secure
    session sums them), the root asks for the second stage under the first one's
    frame, and :meth:`plain_setup` turns the second stage's sum into the references
    and candidates the plug-in's ``after_setup`` reads.
    """

    shape: Shape
    protocol: Any
    #: Root only: the frame the first private stage released (set by setup_request).
    _frame: dict[str, Any] | None = None

    @property
    def private(self) -> PrivateConfig | None:
        """The private pipeline's settings (None: the plain setup)."""
        return getattr(self.protocol, "private", None)

    def _stage_layout(self, body: dict[str, Any] | None) -> Layout:
        assert self.private is not None
        stage = 1 if body is None else body.get("stage")
        if stage not in (1, 2):
            raise WireError(f"unknown private setup stage {stage!r}")
        return private_setup.setup_layout(self.shape, int(stage), self.private.cells)

    def setup_layout(self, request: dict[str, Any] | None) -> Layout | None:
        """A private stage's summed fields (None for the plain setup: not summable)."""
        return None if self.private is None else self._stage_layout(request)

    def setup_reply(
        self,
        views: Sequence[np.ndarray],
        view_ids: Sequence[int],
        request: dict[str, Any] | None,
        rng: np.random.Generator | None,
    ) -> dict[str, Any]:
        """A client's private stage reply (``rng``: its DP noise stream)."""
        private = self.private
        assert private is not None
        if request is None:
            return private_setup.moments_body(views, view_ids, self.shape, private, rng)
        return private_setup.cells_body(views, view_ids, self.shape, private, request, rng)

    def check_setup(self, body: dict[str, Any]) -> None:
        """References and candidates (plain), or a stage's finite sums (private)."""
        if self.private is None:
            check_setup_body(body, self.shape)
            return
        vector = flatten(body, self._stage_layout(body), skip=("sub",))
        if not np.isfinite(vector).all():
            raise WireError("a private setup reply holds non-finite sums")

    def merge_setup(
        self, bodies: Sequence[dict[str, Any]], rng: np.random.Generator
    ) -> dict[str, Any]:
        """Plain: pooled references and reduced candidates. Private: the stage's sum."""
        if self.private is None:
            return merge_setup_bodies(bodies, self.shape, rng)
        return private_setup.sum_setup_bodies(bodies, self._stage_layout(bodies[0]))

    def setup_request(self, total: dict[str, Any]) -> dict[str, Any] | None:
        """Root, private: after the moments, the cells stage under their frame."""
        private = self.private
        if private is None or total.get("stage") != 1:
            return None
        self._frame = private_setup.frame_of(total, self.shape, private)
        return private_setup.setup_request(self._frame, private.seed)

    def plain_setup(self, merged: dict[str, Any]) -> dict[str, Any]:
        """The merged setup as the plain setup's (references, candidates) for ``after_setup``."""
        private = self.private
        if private is None or merged.get("stage") != 2:
            return merged
        if self._frame is None:
            raise WireError("the cells stage closed before any moments were released")
        rng = np.random.default_rng([private.seed, 37])
        seeded = private_setup.seed_from_cells(merged, self._frame, self.shape, private, rng)
        return private_setup.plain_setup(self._frame, seeded, self.shape, private)
