"""Shared heat-kernel building blocks of the tensor family (per client, vectorized numpy).

All formulas come from "Personalized Federated Heat-Kernel Enhanced Multi-View
Clustering via Advanced Tensor Decomposition" (Sinaga):

* heat-kernel coefficients δ (Eq. 23, min-max; Eq. 68 is the same on the tensor),
* the per-view heat-kernel distance ``FKED_ik^h = 1 - exp(-φ_ik^h)`` with
  ``φ_ik^h = Σ_j δ_ij^h (x_ij^h - a_kj^h)^2`` (Eq. 42; TKED, Eq. 67, is the same
  quantity on the zero-padded tensor restricted to ``j <= d_h``). Eqs. 22/67 print the
  sum over views inside the exponential, but every use (Eqs. 25, 29, 31, 71, 75, 77)
  carries a per-view superscript and an outer ``Σ_h v_h^α``: the per-view reading is
  implemented,
* memberships (Eq. 29 = 75 = 86), view weights (Eq. 31 = 77 = 88), the local objective
  ``J = Σ_h v_h^α Σ_i Σ_k μ_ik^m FKED_ik^h`` (Eq. 25 without its stray outer sum over
  clients),
* the centre update of E-FKMVC (Eq. 51; Eq. 30 is typeset with equal numerator and
  denominator) and the gradients of J used by the personalisation steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from fedstrata.algorithms.kernels import KernelReference

__all__ = [
    "EPS_DIST",
    "ViewData",
    "bandwidth_coefficients",
    "center_update",
    "distortions",
    "grad_centers",
    "heat_coefficients",
    "memberships",
    "minmax_scale_views",
    "objective",
    "phi",
    "view_powers",
    "view_weights",
]

#: Floor of the weighted distance Σ_h v_h^α FKED_ik^h before it is raised to -1/(m-1),
#: relative to the sample's largest weighted distance (an absolute floor of 1e-10 made
#: every membership uniform once v^α fell below it: α = 50 with six views gives 1e-39).
EPS_DIST = 1e-10
#: Below this, v^α is recomputed in log space and rescaled to a largest value of 1.
_POWER_TINY = 1e-200
#: Floor of a view's distortion D_h before it is raised to -1/(α-1).
EPS_D = 1e-300


def minmax_scale_views(
    views: Sequence[np.ndarray],
    minimum: Sequence[np.ndarray],
    maximum: Sequence[np.ndarray],
    mean: Sequence[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Per-feature min-max scaling of each view into [0, 1] (a constant feature maps to 0).

    With ``mean`` (per view, the pooled per-feature means in the raw units) the scaled
    views are also centred: the scaled mean is subtracted, so the pooled data has mean 0
    (``TensorModel.center_views``).
    """
    means: Sequence[np.ndarray | None] = [None] * len(views) if mean is None else mean
    out = []
    for X, lo, hi, mu in zip(views, minimum, maximum, means, strict=True):
        span = hi - lo
        safe = np.where(span > 0, span, 1.0)
        shift = lo if mu is None else mu
        out.append(np.where(span > 0, (X - shift) / safe, 0.0))
    return out


def scale_with_ranges(
    views: Sequence[np.ndarray], refs: Sequence[KernelReference], center: bool = False
) -> list[np.ndarray]:
    """Each view min-max scaled with its pooled per-feature range (``refs``, one per view).

    With ``center`` the scaled views are also centred at the pooled mean.
    """
    mean = [r.mean for r in refs] if center else None
    return minmax_scale_views(views, [r.minimum for r in refs], [r.maximum for r in refs], mean)


def heat_coefficients(X: np.ndarray, scope: str, eps: float) -> np.ndarray:
    """Heat-kernel coefficients δ (n, d) of one view (Eq. 23 with ``+eps`` as in Alg. 2/3).

    ``scope="local"`` measures every feature against this client's own minimum and maximum
    (the paper's local FedH-KC). ``scope="pooled"`` assumes ``X`` is already min-max
    scaled into [0, 1] with the federation's pooled range and measures against that
    range, i.e. ``δ = x / (1 + eps)``: the same coefficient for a sample whichever client
    holds it.
    """
    if scope == "pooled":
        return X / (1.0 + eps)
    lo = X.min(axis=0)
    hi = X.max(axis=0)
    return (X - lo) / (hi - lo + eps)


@dataclass(frozen=True)
class ViewData:
    """One view's data with its cached heat-kernel products (computed once per client)."""

    X: np.ndarray
    delta: np.ndarray
    dX: np.ndarray
    dXX: np.ndarray

    @classmethod
    def build(
        cls, X: np.ndarray, scope: str, eps: float, scale: np.ndarray | None = None
    ) -> ViewData:
        """Cache δ, δ∘X and the row sums of δ∘X∘X.

        δ is the paper's min-max coefficient (:func:`heat_coefficients`), or with a
        ``scale`` the bandwidth kernel's (:func:`bandwidth_coefficients`).
        """
        if scale is None:
            delta = heat_coefficients(X, scope, eps)
        else:
            delta = bandwidth_coefficients(X, scale)
        dX = delta * X
        return cls(X, delta, dX, (dX * X).sum(axis=1))


def phi(v: ViewData, A: np.ndarray) -> np.ndarray:
    """φ_ik = Σ_j δ_ij (x_ij - a_kj)^2 for centres ``A`` (c, d); (n, c), clipped at 0."""
    out = v.dXX[:, None] - 2.0 * (v.dX @ A.T) + v.delta @ (A * A).T
    return np.maximum(out, 0.0)


def view_powers(v: np.ndarray, alpha: float) -> np.ndarray:
    """v_h^α, or a positive multiple of it when v^α would underflow (s views, α large).

    Memberships (Eq. 29) and the weighted least-squares steps only use ratios of the
    v_h^α, so when the largest power falls below 1e-200 (1/6^α at α >= 257) the powers
    are taken in log space, ``exp(α (ln v_h − max_h ln v_h))``. Above that they are
    ``v**alpha`` as they always were, bit for bit (the paper preset's records).
    """
    v = np.asarray(v, dtype=np.float64)
    va = v**alpha
    if va.size and va.max() >= _POWER_TINY:
        return va
    with np.errstate(divide="ignore"):
        logv = alpha * np.log(v)
    top = logv.max() if va.size else 0.0
    return np.exp(logv - top) if np.isfinite(top) else np.ones_like(v)


def bandwidth_coefficients(X: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """δ_ij = 1 / s_j for every sample: the Gaussian heat kernel of width ``scale`` (d,).

    With ``scale = γ·D̄·var_j`` (:func:`fedstrata.algorithms.multiview.bandwidth_scales`,
    pooled variances) φ is the squared distance of the standardized features divided
    by γ·D̄, as in HK-MVFC's real-data kernel.
    """
    return np.broadcast_to(1.0 / np.asarray(scale, dtype=np.float64), X.shape).copy()


def memberships(fked: Sequence[np.ndarray], va: np.ndarray, m: float) -> np.ndarray:
    """μ_ik ∝ (Σ_h v_h^α FKED_ik^h)^(-1/(m-1)) (Eq. 29), rows on the simplex; (n, c).

    ``va`` holds v_h^α of the views in ``fked`` (or any positive multiple of them, see
    :func:`view_powers`). Computed in log space (a softmax), with the weighted distance
    floored at :data:`EPS_DIST` times the sample's largest one: the floor scales with
    the distances, so small view weights cannot push every distance onto it.
    """
    S = sum(w * F for w, F in zip(va, fked, strict=True))
    floor = np.maximum(EPS_DIST * S.max(axis=1, keepdims=True), np.finfo(np.float64).tiny)
    logits = -np.log(np.maximum(S, floor)) / (m - 1.0)
    logits -= logits.max(axis=1, keepdims=True)
    U = np.exp(logits)
    U /= U.sum(axis=1, keepdims=True)
    return U


def distortions(Um: np.ndarray, fked: Sequence[np.ndarray]) -> np.ndarray:
    """D_h = Σ_i Σ_k μ_ik^m FKED_ik^h per view; ``Um`` is μ^m (n, c)."""
    return np.array([float((Um * F).sum()) for F in fked])


def view_weights(D: np.ndarray, alpha: float) -> np.ndarray:
    """v_h ∝ D_h^(-1/(α-1)) (Eq. 31), on the simplex (log space, D floored)."""
    logits = -np.log(np.maximum(D, EPS_D)) / (alpha - 1.0)
    logits -= logits.max()
    w = np.exp(logits)
    return w / w.sum()


def objective(D: np.ndarray, v: np.ndarray, alpha: float) -> float:
    """J = Σ_h v_h^α D_h (Eq. 25 = 71 = 82)."""
    return float((v**alpha * D).sum())


def center_update(v: ViewData, W: np.ndarray, A_old: np.ndarray, rule: str = "paper") -> np.ndarray:
    """E-FKMVC centres (c, d) from the weights ``W = μ^m ∘ exp(-φ)`` (n, c).

    ``"paper"``: Eq. 51, ``a_kj = Σ_i w_ik x_ij / Σ_i w_ik`` (v^α cancels).
    ``"exact"``: the stationary point of Eq. 25 in ``a`` for fixed weights,
    ``a_kj = Σ_i w_ik δ_ij x_ij / Σ_i w_ik δ_ij`` (the derivation divides by δ_ij inside
    a sum over i); where that denominator is 0 the paper's rule is used. A cluster with
    zero total weight keeps ``A_old``.
    """
    den = W.sum(axis=0)
    paper = np.where(den[:, None] > 0, (W.T @ v.X) / np.where(den > 0, den, 1.0)[:, None], A_old)
    if rule == "paper":
        return paper
    den_e = W.T @ v.delta
    num_e = W.T @ v.dX
    return np.where(den_e > 0, num_e / np.where(den_e > 0, den_e, 1.0), paper)


def grad_centers(v: ViewData, W: np.ndarray, A: np.ndarray, va: float) -> np.ndarray:
    """∂J/∂A^h = 2 v_h^α [(Wᵀδ)∘A − Wᵀ(δ∘X)] with ``W = μ^m ∘ exp(-φ)`` (Eqs. 41, 46, 53)."""
    return 2.0 * va * ((W.T @ v.delta) * A - W.T @ v.dX)
