"""The multi-view family's batched client step: many small clients in one numpy call.

Under rule ``sum`` a client's partial is :func:`~fedstrata.plugins.multiview.
lean_statistics` of its prepared views under the global model. Clients with the same
sample count and the same views are stacked along a leading client axis
(:class:`StackedViews`) and run through the same function once: numpy runs each
client's slice with the loops of the unbatched call, so every client's partial is
the one it would have computed alone, bit for bit (``tests/plugins/
test_batch_update.py`` compares the two on random clients, models and settings).

A client is left to its own :meth:`~fedstrata.nodes.algorithm.Learner.update` (its
entry is None) whenever the batched step would not be that: DP noise (client- or
sample-level), an adaptive root's per-client ``kernel_scale``, or a client too large
for the lean step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstrata.algorithms.multiview import MultiViewModel, PreparedViews, local_statistics
from fedstrata.plugins._setup import setup_bodies
from fedstrata.plugins.global_models import GlobalModel
from fedstrata.plugins.lean import lean_memberships

__all__ = [
    "PreparedObserver",
    "StackCache",
    "StackedViews",
    "finish_batch",
    "labels_batch",
    "setup_batch",
    "stack_views",
    "update_batch",
]


@dataclass(frozen=True)
class StackedViews:
    """The prepared views of B clients with equal sample counts and views, stacked.

    Every array carries a leading client axis of length B; the fields are those of
    :class:`~fedstrata.algorithms.multiview.PreparedViews` that the lean step reads.
    """

    views: tuple[np.ndarray, ...]
    deltas: tuple[np.ndarray, ...]
    view_ids: tuple[int, ...]
    n_views: int
    dX: tuple[np.ndarray, ...]
    XT: tuple[np.ndarray, ...]
    deltaT: tuple[np.ndarray, ...]
    dXT: tuple[np.ndarray, ...]
    _gemm_rows: tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...], np.ndarray]
    n_samples: int
    lead: tuple[int, ...]


def stack_views(pvs: Sequence[PreparedViews]) -> StackedViews:
    """Stack prepared views that share their sample count and view ids."""
    first = pvs[0]

    def stack(name: str) -> tuple[np.ndarray, ...]:
        return tuple(
            np.stack(arrays) for arrays in zip(*(getattr(p, name) for p in pvs), strict=True)
        )

    return StackedViews(
        views=stack("views"),
        deltas=stack("deltas"),
        view_ids=first.view_ids,
        n_views=first.n_views,
        dX=stack("dX"),
        XT=stack("XT"),
        deltaT=stack("deltaT"),
        dXT=stack("dXT"),
        _gemm_rows=(
            tuple(np.stack(r) for r in zip(*[p._gemm_rows[0] for p in pvs], strict=True)),
            tuple(np.stack(r) for r in zip(*[p._gemm_rows[1] for p in pvs], strict=True)),
            first._gemm_rows[2],
        ),
        n_samples=first.n_samples,
        lead=(len(pvs),),
    )


class StackCache:
    """Stacked views by the clients they stack (a cohort stacks the same ones each round).

    A stack is kept from the second time its clients are asked for together: the
    groups a first round splits into while the members' configurations arrive one by
    one are asked for once and would otherwise be held to the end of the run (at a
    million clients, gigabytes). Holds the prepared views it stacked, so their ids
    stay theirs while remembered; ``entries`` stacks at most (the oldest forgotten
    first), and as many groups seen once.
    """

    def __init__(self, entries: int = 4096) -> None:
        self.entries = entries
        self._stacks: dict[tuple[int, ...], tuple[list[PreparedViews], StackedViews]] = {}
        self._seen: dict[tuple[int, ...], None] = {}  # asked for once (ids may be stale)

    def get(self, pvs: list[PreparedViews]) -> StackedViews:
        """The stack of ``pvs`` (made once per list of prepared views asked for again)."""
        key = tuple(map(id, pvs))
        got = self._stacks.get(key)
        if got is not None:
            return got[1]
        stacked = stack_views(pvs)
        if self._seen.pop(key, 0) is None:  # the second time: a group that repeats
            if len(self._stacks) >= self.entries:
                del self._stacks[next(iter(self._stacks))]
            self._stacks[key] = (pvs, stacked)
        else:
            if len(self._seen) >= self.entries:
                del self._seen[next(iter(self._seen))]
            self._seen[key] = None
        return stacked


def _groups(
    algorithm: Any, learners: Sequence[Any], learner_type: type, max_samples: int
) -> dict[tuple[int, tuple[int, ...]], list[int]]:
    """Indices of the learners the lean step takes, by (sample count, view ids)."""
    groups: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for i, learner in enumerate(learners):
        if type(learner) is not learner_type:
            continue
        it: Any = learner  # (type(x) is T narrows x to object for the type checker)
        if (
            it.algorithm is algorithm
            and it._frame is None
            and bool(it.view_ids)
            and it.n_samples <= max_samples
        ):
            groups.setdefault((it.n_samples, it.view_ids), []).append(i)
    return groups


def update_batch(
    algorithm: Any,
    learners: Sequence[Any],
    body: dict[str, Any],
    *,
    lean: Callable[..., Any],
    learner_type: type,
    max_samples: int,
    stacks: StackCache | None = None,
) -> list[tuple[dict[str, Any], float] | None]:
    """Each learner's ``update(body)``, computed in stacked groups; None where not batched.

    ``algorithm`` is the rule-``sum`` multi-view plug-in, ``lean`` its
    :func:`~fedstrata.plugins.lean.lean_statistics`, ``learner_type`` its learner
    class and ``max_samples`` the largest client the lean step takes; ``stacks``
    remembers the stacked views of the groups it has seen.
    """
    out: list[tuple[dict[str, Any], float] | None] = [None] * len(learners)
    model, p = algorithm.model, algorithm.protocol
    if p.dp_clip is not None or "kernel_scale" in body:
        return out
    groups = _groups(algorithm, learners, learner_type, max_samples)
    if not groups:
        return out
    glob = algorithm.models.read(body, algorithm.shape)
    H = algorithm.shape.n_views
    for (n, view_ids), members in groups.items():
        chosen = [learners[i] for i in members]
        pvs = [m.prepared() for m in chosen]
        stacked = stack_views(pvs) if stacks is None else stacks.get(pvs)
        num, den, costs, mass, J = lean(stacked, glob, model)
        counts = np.zeros(H, dtype=np.int64)
        counts[list(view_ids)] = n
        for b, (i, learner) in enumerate(zip(members, chosen, strict=True)):
            partial = {
                "mode": "stats",
                "num": [a[b] for a in num],
                "den": [a[b] for a in den],
                "costs": costs[b],
                "mass": mass[b],
                "counts": counts.copy(),
                "n": int(n),
                "contributors": 1,
                "objective": float(J[b]),
            }
            out[i] = (partial, learner._flops(1))
    return out


def finish_batch(
    algorithm: Any,
    learners: Sequence[Any],
    body: dict[str, Any],
    *,
    learner_type: type,
    max_samples: int,
    stacks: StackCache | None = None,
) -> list[tuple[dict[str, Any], float] | None]:
    """Each learner's ``finish(body)`` (labels and memberships), in stacked groups.

    Entry ``i`` is ``learners[i].finish(body)`` bit for bit
    (:func:`~fedstrata.plugins.lean.lean_memberships` are the memberships the engine
    computes), or None where the learner personalises its model (it fits or holds a
    local model) or the lean step does not take it.
    """
    out: list[tuple[dict[str, Any], float] | None] = [None] * len(learners)
    if algorithm.protocol.personal_iters is not None:
        return out
    groups = _groups(algorithm, learners, learner_type, max_samples)
    if not groups:
        return out
    glob = algorithm.models.read(body, algorithm.shape)
    for members in groups.values():
        chosen = [i for i in members if learners[i].local is None]
        if not chosen:
            continue
        pvs = [learners[i].prepared() for i in chosen]
        stacked = stack_views(pvs) if stacks is None else stacks.get(pvs)
        U = lean_memberships(stacked, glob, algorithm.model)  # (B, c, n)
        for b, i in enumerate(chosen):
            mine = U[b].T.copy()  # (n, c), C-contiguous: the client's own np.array(U)
            labels = mine.argmax(axis=1)
            out[i] = ({"labels": labels, "memberships": mine}, learners[i]._flops(1))
    return out


class PreparedObserver:
    """The labels of one client's prepared views under a global state (a callable).

    What the multi-view plug-in's ``observer`` returns: ``observer(state)`` is the
    engine's own computation; :func:`labels_batch` stacks many of them instead.
    """

    __slots__ = ("model", "prepared")

    def __init__(self, prepared: PreparedViews, model: MultiViewModel) -> None:
        self.prepared = prepared
        self.model = model

    def __call__(self, state: Any) -> np.ndarray:
        """The argmax of the client's memberships under ``state``."""
        U = local_statistics(self.prepared, state.batched(), self.model).memberships
        assert U is not None
        return U[0].argmax(axis=1)


def labels_batch(
    observers: Sequence[Any], state: Any, *, model: MultiViewModel, max_samples: int
) -> list[np.ndarray]:
    """``[o(state) for o in observers]``, the small clients' in stacked groups.

    Each entry is its observer's own result, bit for bit: the lean memberships are the
    engine's (:func:`~fedstrata.plugins.lean.lean_memberships`), cluster-major, and the
    first maximum over clusters is the same in either layout.
    """
    out: list[np.ndarray | None] = [None] * len(observers)
    groups: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for i, o in enumerate(observers):
        if type(o) is PreparedObserver and o.model is model:
            pv = o.prepared
            if pv.view_ids and pv.n_samples <= max_samples:
                groups.setdefault((pv.n_samples, pv.view_ids), []).append(i)
    if groups:
        glob = GlobalModel(state.batched())
        for members in groups.values():
            stacked = stack_views([observers[i].prepared for i in members])
            U = lean_memberships(stacked, glob, model)  # (B, c, n)
            for b, i in enumerate(members):
                out[i] = U[b].argmax(axis=0)
    return [o(state) if r is None else r for o, r in zip(observers, out, strict=True)]


def setup_batch(
    algorithm: Any, learners: Sequence[Any], *, learner_type: type
) -> list[tuple[dict[str, Any], float, Callable[[], bool]] | None]:
    """Each learner's ``setup()`` reply (no private stage), in groups of equal sample count.

    Only clients holding every view (their replies carry seeding candidates drawn from
    their own generators; see :func:`~fedstrata.plugins._setup.setup_bodies` for the
    claim each entry carries); the others compute their own.
    """
    out: list[tuple[dict[str, Any], float, Callable[[], bool]] | None] = [None] * len(learners)
    if algorithm.private is not None:
        return out
    every = tuple(range(algorithm.shape.n_views))
    groups: dict[int, list[int]] = {}
    for i, learner in enumerate(learners):
        it: Any = learner
        if type(learner) is learner_type and it.algorithm is algorithm and it.view_ids == every:
            groups.setdefault(it.n_samples, []).append(i)
    spread = algorithm.model.bandwidth is not None
    for members in groups.values():
        chosen = [learners[i] for i in members]
        replies = setup_bodies(
            [m.views for m in chosen],
            algorithm.shape,
            [m.rng for m in chosen],
            spread=spread,
        )
        for i, learner, (body, claim) in zip(members, chosen, replies, strict=True):
            out[i] = (body, learner._flops(10), claim)
    return out
