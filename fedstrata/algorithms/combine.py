"""Server-side aggregation rules of FedHK-MVFC (FedHK-MVFC paper, §4.6) as pure functions.

Two kinds of client update exist:

* :class:`~fedstrata.algorithms.multiview.Stats` — additive sufficient statistics;
  their sum gives exactly the centralized update (rule ``"sum"``);
* :class:`ParamUpdate` — a client's locally fitted centres and view weights after E
  local iterations, combined by the paper's rules: weighted average (Eq. 74/75),
  coordinate median (Eq. 76) or plain mean (Eq. 77).

Sums and (weighted) means decompose over a tree of aggregators and can be masked by
secure aggregation; the median can do neither (see :data:`ADDITIVE_RULES`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedstrata.algorithms.multiview import State
from fedstrata.errors import ValidationError

__all__ = [
    "ADDITIVE_RULES",
    "RULES",
    "ParamUpdate",
    "aggregate_params",
    "coordinate_median",
    "has_converged",
    "personalize",
    "plain_mean",
    "weighted_average",
]

#: Aggregation rule names. "sum" works on statistics, the others on parameters.
RULES = ("sum", "weighted", "mean", "median")
#: Rules that are sums (so hierarchical and secure-aggregation compatible).
ADDITIVE_RULES = frozenset({"sum", "weighted", "mean"})


@dataclass(frozen=True)
class ParamUpdate:
    """A client's parameters after its local iterations (paper mode; Eq. 88's Share(ℓ)).

    ``centers[h]`` is None for a view the client does not hold; ``view_weights`` has
    zeros there. ``cluster_mass`` is Σ_i μ_ik (S_quality · n, Eq. 81).
    """

    centers: tuple[np.ndarray | None, ...]
    view_weights: np.ndarray
    n_samples: int
    cluster_mass: np.ndarray | None = None
    objective: float | None = None

    @property
    def held(self) -> np.ndarray:
        """Boolean mask of the views this client holds."""
        return np.array([a is not None for a in self.centers])


def _check(updates: Sequence[ParamUpdate]) -> None:
    if not updates:
        raise ValidationError("cannot aggregate an empty list of updates")
    H = len(updates[0].centers)
    if any(len(u.centers) != H for u in updates):
        raise ValidationError("updates disagree on the number of views")


def _renormalized(v: np.ndarray) -> np.ndarray:
    v = np.clip(v, 0.0, None)
    total = v.sum()
    return v / total if total > 0 else np.full_like(v, 1.0 / v.size)


def weighted_average(
    updates: Sequence[ParamUpdate], weights: Sequence[float] | np.ndarray | None = None
) -> State:
    """Eq. 74/75: A = Σ_ℓ w_ℓ A_ℓ, V = Σ_ℓ w_ℓ V_ℓ with w_ℓ ∝ n(ℓ) by default.

    Per view, only the clients holding it take part, with their weights renormalized;
    V is renormalized to the simplex.
    """
    _check(updates)
    w = np.array([u.n_samples for u in updates] if weights is None else weights, dtype=float)
    if w.shape != (len(updates),) or (w < 0).any() or not np.isfinite(w).all():
        raise ValidationError("weights must be one finite non-negative number per update")
    centers = []
    for h in range(len(updates[0].centers)):
        held = [
            (wi, u.centers[h]) for wi, u in zip(w, updates, strict=True) if u.centers[h] is not None
        ]
        total = sum(wi for wi, _ in held)
        if not held or total <= 0:
            raise ValidationError(f"no update with positive weight holds view {h}")
        centers.append(sum(wi * a for wi, a in held) / total)
    held_mask = np.array([u.held for u in updates], dtype=float)
    V = np.array([u.view_weights for u in updates])
    denom = (w[:, None] * held_mask).sum(axis=0)
    v = (w[:, None] * V).sum(axis=0) / np.where(denom > 0, denom, 1.0)
    return State(tuple(centers), _renormalized(v))


def plain_mean(updates: Sequence[ParamUpdate]) -> State:
    """Eq. 77: the unweighted mean of the clients' centres and view weights."""
    return weighted_average(updates, np.ones(len(updates)))


def coordinate_median(updates: Sequence[ParamUpdate]) -> State:
    """Eq. 76: coordinate-wise median (mean of the middle two for an even count).

    Robust to a minority of outlying clients, but not a sum: it cannot be computed
    hierarchically (a median of medians is another estimator) nor under secure
    aggregation. V is renormalized to the simplex.
    """
    _check(updates)
    centers = []
    for h in range(len(updates[0].centers)):
        held = [c for c in (u.centers[h] for u in updates) if c is not None]
        if not held:
            raise ValidationError(f"no update holds view {h}")
        centers.append(np.median(np.stack(held), axis=0))
    V = np.array([u.view_weights for u in updates], dtype=float)
    held_mask = np.array([u.held for u in updates])
    v = np.array(
        [
            np.median(V[held_mask[:, h], h]) if held_mask[:, h].any() else 0.0
            for h in range(V.shape[1])
        ]
    )
    return State(tuple(centers), _renormalized(v))


def aggregate_params(rule: str, updates: Sequence[ParamUpdate]) -> State:
    """Dispatch to the paper rule named ``rule`` ("weighted", "mean" or "median")."""
    if rule == "weighted":
        return weighted_average(updates)
    if rule == "mean":
        return plain_mean(updates)
    if rule == "median":
        return coordinate_median(updates)
    raise ValidationError(f"unknown parameter rule {rule!r}; expected weighted, mean or median")


def personalize(global_state: State, local_state: State, gamma: float, rho: float) -> State:
    """Eq. 78/79: A_ℓ = γ A_global + (1-γ) A_ℓ, V_ℓ = ρ V_global + (1-ρ) V_ℓ."""
    for name, value in (("gamma", gamma), ("rho", rho)):
        if not 0.0 <= value <= 1.0:
            raise ValidationError(f"{name} must lie in [0, 1], got {value!r}")
    centers = tuple(
        gamma * g + (1.0 - gamma) * loc
        for g, loc in zip(global_state.centers, local_state.centers, strict=True)
    )
    v = rho * global_state.view_weights + (1.0 - rho) * local_state.view_weights
    return State(centers, v)


def has_converged(old: State, new: State, tol: float, *, relative: bool = False) -> bool:
    """Eq. 86: ||A_new - A_old||_F < tol and ||V_new - V_old||_2 < tol (all views together).

    With ``relative`` the centre change is divided by ||A_old||_F (view weights lie on
    the simplex, so their change is already on a fixed scale).
    """
    dA = np.sqrt(
        sum(float(((a - b) ** 2).sum()) for a, b in zip(new.centers, old.centers, strict=True))
    )
    if relative:
        scale = np.sqrt(sum(float((b**2).sum()) for b in old.centers))
        dA /= max(scale, 1e-300)
    dV = float(np.linalg.norm(new.view_weights - old.view_weights))
    return dA < tol and dV < tol
