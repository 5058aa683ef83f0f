"""The server side of the deep methods: phases, weighted model averages, k-means.

Pure numpy: an aggregator never runs a network, so fog and cloud nodes need no
PyTorch. A run's global state is a dict ``{"step", "groups", "centroids"}``:
``groups`` maps each global model (:func:`groups_of`) to its float32 parameter
vector, ``centroids`` is None until the k-means phase. The step counts completed
rounds and names the phase of the next one (:func:`phase_of`):

* ``pretrain`` (steps 0 .. pretrain_rounds − 1): every client trains reconstruction only,
  from the shared seeded network first; the sample-weighted average goes to every
  global model (the papers' cross-client consensus pre-training as averaging rounds);
* ``train`` (the next train_rounds steps): the method's round; each group is the weighted
  average of the uploads for it (FMCSC Eq. 10, EFD-MVC Eqs. 9-10), or unchanged if
  nobody uploaded one;
* ``candidates``: clients send weighted k-means++ candidates of their fused features;
  the server reduces them to ``n_clusters`` centres;
* ``lloyd``: clients send per-cluster sums and counts of their features; the server's
  Lloyd step moves the centres, until they stop moving or ``kmeans_rounds`` pass.

This federated k-means replaces the papers' last step (FMCSC: local k-means per
client, results concatenated; the alignment to client 0's centres is in its released
code, not its paper; EFD-MVC: the server clusters every uploaded feature), so that no
sample's feature leaves its client.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedstrata.algorithms.deep.config import DeepModel
from fedstrata.algorithms.seeding import reduce_candidates

__all__ = [
    "average_groups",
    "groups_of",
    "initial_state",
    "lloyd_step",
    "phase_of",
    "reduce_feature_candidates",
]


def groups_of(model: DeepModel) -> tuple[str, ...]:
    """The global models of a method: ``all`` (and FMCSC's ``view<v>`` per view)."""
    if model.method == "fmcsc":
        return ("all", *(f"view{v}" for v in range(model.n_views)))
    return ("all",)


def phase_of(model: DeepModel, step: int) -> str:
    """``pretrain``, ``train``, ``candidates`` or ``lloyd``: what round ``step + 1`` does."""
    if step < model.pretrain_rounds:
        return "pretrain"
    if step < model.rounds_before_kmeans:
        return "train"
    if step == model.rounds_before_kmeans:
        return "candidates"
    return "lloyd"


def initial_state(model: DeepModel, params: np.ndarray) -> dict[str, Any]:
    """Step 0: every group holds the same seeded initial network ``params``."""
    flat = np.asarray(params, dtype=np.float32)
    return {"step": 0, "groups": {g: flat.copy() for g in groups_of(model)}, "centroids": None}


def average_groups(
    model: DeepModel,
    state: dict[str, Any],
    sums: dict[str, np.ndarray],
    weights: dict[str, float],
) -> dict[str, np.ndarray]:
    """Each group's weighted average ``Σ w θ / Σ w`` (unchanged without uploads).

    After pre-training, the one averaged network initialises every group.
    """
    new = dict(state["groups"])
    for g, total in sums.items():
        w = float(weights[g])
        if w > 0:
            new[g] = (np.asarray(total, dtype=np.float64) / w).astype(np.float32)
    if phase_of(model, state["step"]) == "pretrain" and "all" in sums:
        new = {g: new["all"].copy() for g in new}
    return new


def reduce_feature_candidates(
    model: DeepModel, candidates: np.ndarray, sizes: np.ndarray
) -> np.ndarray:
    """The weighted k-means++ reduction of every client's candidates to the centres.

    Seeded by the model's seed, so the root's choice is reproducible.
    """
    rng = np.random.default_rng([model.seed, 7919])
    (centers,), _ = reduce_candidates([candidates], sizes, model.n_clusters, rng)
    return np.asarray(centers, dtype=np.float64)


def lloyd_step(
    previous: np.ndarray, sums: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, float]:
    """New centres (an empty cluster keeps its centre) and the largest centre shift."""
    safe = np.where(counts > 0, counts, 1.0)[:, None]
    new = np.where(counts[:, None] > 0, sums / safe, previous)
    return new, float(np.abs(new - previous).max(initial=0.0))
