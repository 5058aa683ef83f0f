"""The batched fitting loop shared by the estimators and the federated client.

Kept apart from the estimator shell so that node code (and ``fedstrata run``) does
not import scikit-learn, which costs a second or more at start-up.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

import numpy as np

from fedstrata.algorithms.multiview import (
    MultiViewModel,
    PreparedViews,
    State,
    local_statistics,
    objective,
    state_from_statistics,
)
from fedstrata.errors import ConvergenceWarning

__all__ = ["FitResult", "fit_batched", "unique_restarts"]

ScaleFn = Callable[[np.ndarray], np.ndarray] | None


class FitResult:
    """Outcome of :func:`fit_batched` for every restart (leading axis R)."""

    def __init__(
        self, state: State, objective: np.ndarray, n_iter: np.ndarray, history: list[list[float]]
    ) -> None:
        self.state = state
        self.objective = objective
        self.n_iter = n_iter
        self.history = history


#: Below this many (sample, cluster) pairs a restart is too short for a thread to pay.
_PARALLEL_MIN_SIZE = 20_000


def _restart_workers(n_restarts: int, size: int) -> int:
    """Threads to fit ``n_restarts`` restarts of ``size`` = n·c with: one per CPU at most."""
    if n_restarts < 2 or size < _PARALLEL_MIN_SIZE:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(n_restarts, cpus))


def _warn_max_iter(
    n_iter: np.ndarray, max_iter: int, tol: float, stacklevel: int, relative: bool = False
) -> None:
    """ConvergenceWarning for restarts that stopped at ``max_iter`` before |ΔJ| < tol."""
    if (n_iter == max_iter).any() and tol > 0:
        rule = "|ΔJ| < tol·|J|" if relative else "|ΔJ| < tol"
        warnings.warn(
            f"{int((n_iter == max_iter).sum())} of {n_iter.size} restarts stopped at "
            f"max_iter={max_iter} before {rule}",
            ConvergenceWarning,
            stacklevel=stacklevel + 1,
        )


def fit_batched(
    pv: PreparedViews,
    init: State,
    model: MultiViewModel,
    *,
    max_iter: int,
    tol: float,
    view_scale: Callable[[np.ndarray], np.ndarray] | None = None,
    warn: bool = True,
    relative: bool = False,
) -> FitResult:
    """Run the alternating updates for R restarts at once until |ΔJ| < tol (Alg. 1).

    Converged restarts leave the batch, so the cost follows the slowest restart only
    for the iterations it alone needs. ``view_scale(t)`` (1-based t) returns a per-view
    δ multiplier (R, H) given each restart's iteration t (R,) (MVKM-ED's β schedule).
    ``relative=True`` stops at |ΔJ| < tol·|J| instead: J carries the factor v_h^α,
    which for a large α is far below 1, so an absolute tolerance would stop at once.
    """
    R = init.view_weights.shape[0]
    state = init
    active = np.arange(R)
    prev = np.full(R, np.inf)
    n_iter = np.zeros(R, dtype=np.int64)
    history: list[list[float]] = [[] for _ in range(R)]
    final_centers = [a.copy() for a in init.centers]
    final_weights = init.view_weights.copy()
    for t in range(1, max_iter + 1):
        scale = None if view_scale is None else view_scale(np.full(active.size, t))
        stats = local_statistics(pv, state, model, view_scale=scale)
        new = state_from_statistics(stats, state, model)  # one client: nothing to sum
        J = objective(stats, new.view_weights, model.alpha)
        for r, j in zip(active, J, strict=True):
            history[r].append(float(j))
        n_iter[active] = t
        change = np.abs(prev[active] - J)
        done = change < tol * np.abs(J) if relative else change < tol
        prev[active] = J
        state = new
        if done.any() or t == max_iter:
            finished = np.flatnonzero(done) if t < max_iter else np.arange(len(active))
            for g, a in enumerate(state.centers):
                final_centers[g][active[finished]] = a[finished]
            final_weights[active[finished]] = state.view_weights[finished]
            keep = np.flatnonzero(~done)
            active = active[keep]
            state = state.take(keep)
            if active.size == 0:
                break
    if warn:
        _warn_max_iter(n_iter, max_iter, tol, stacklevel=3, relative=relative)
    final = State(tuple(final_centers), final_weights)
    scale = None if view_scale is None else view_scale(np.maximum(n_iter, 1))
    final_stats = local_statistics(pv, final, model, view_scale=scale)
    return FitResult(
        final, objective(final_stats, final.view_weights, model.alpha), n_iter, history
    )


def unique_restarts(init: State, rtol: float = 1e-10) -> list[int]:
    """Indices of restarts whose initial centres differ (up to cluster order).

    Lloyd-initialised restarts often land on the same partition; their trajectories are
    then the same up to a relabelling, so fitting one of them is enough.
    """
    flat = np.concatenate([a for a in init.centers], axis=-1)  # (R, c, D)
    keys = []
    for r in range(flat.shape[0]):
        order = np.lexsort(flat[r].T[::-1])
        keys.append(np.concatenate([flat[r][order].ravel(), init.view_weights[r]]))
    kept: list[int] = []
    for r, key in enumerate(keys):
        scale = np.abs(key).max() + 1.0
        if all(np.abs(key - keys[q]).max() > rtol * scale for q in kept):
            kept.append(r)
    return kept
