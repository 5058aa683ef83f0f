"""View weights of the multi-view engine: Eq. 17 from the costs, and their powers v^α.

Both work in log space with relative floors: Eq. 17's v_h ∝ cost_h^(-1/(α-1)) and the
v_h^α of Eq. 13 and 15 span hundreds of orders of magnitude for α near 1 or in the
hundreds, where a plain power underflows and every membership turns uniform.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from fedstrata.errors import ValidationError

__all__ = ["view_powers", "view_weights_from_costs"]

_TINY = 1e-300
#: ln(1e100): :func:`view_powers` rescales v^α when H^-α would fall below 1e-100.
_LOG_POWER_FLOOR = 230.0


def view_weights_from_costs(costs: np.ndarray, counts: np.ndarray, alpha: float) -> np.ndarray:
    """Eq. 17 on mean per-sample costs: v_h ∝ cost_h^{-1/(α-1)}, in log space.

    A view no sample holds (a hybrid-view client's missing view) gets weight 0; the
    weights of the held views are solved among themselves.
    """
    if (counts == 0).all():
        raise ValidationError("no view is held by any sample; cannot weight views")
    if (counts == 0).any():
        held = counts > 0
        v = np.zeros(costs.shape)
        v[..., held] = view_weights_from_costs(costs[..., held], counts[held], alpha)
        return v
    mean_cost = costs / counts
    zero = mean_cost <= _TINY
    if zero.any():  # relative: only a cost 1e-300 of the largest view's counts as 0
        zero &= mean_cost <= _TINY * mean_cost.max(axis=-1, keepdims=True)
    degenerate = zero.any()
    # cost 0 (or a rounding error below it) is handled by the limit below: no warning
    # every cost 0 gives inf - inf below: also replaced by the limit
    with np.errstate(divide="ignore", invalid="ignore") if degenerate else nullcontext():
        logits = -np.log(mean_cost) / (alpha - 1.0)
        logits -= logits.max(axis=-1, keepdims=True)
        v = np.exp(logits)
        v /= v.sum(axis=-1, keepdims=True)
    if degenerate:  # a perfectly fitted view takes all the weight (the limit of Eq. 17)
        any_zero = zero.any(axis=-1, keepdims=True)
        v = np.where(any_zero, zero / zero.sum(axis=-1, keepdims=True), v)
    return v


def view_powers(view_weights: np.ndarray, alpha: float) -> np.ndarray:
    """v_h^α (..., H), times H₊^(α-1) when H₊^-α < 1e-100 (H₊: views of weight > 0).

    Eq. 13 and 15 weight view h by v_h^α. Near equal weights that is H^-α: with six views
    and α = 500 it underflows to 0, every W_ik becomes 0 and every membership uniform.
    Memberships (Eq. 15) do not change when all views' terms share a factor, and
    H₊^(α-1) turns J at Eq. 17's weights into the power mean of the view costs
    (J = (Σ_h cost_h^(-1/(α-1)))^-(α-1)), which neither underflows nor overflows. The
    factor depends on α and H₊ only, so it is the same in every iteration, restart and
    client: objectives still compare and sum. Below the threshold (α log H₊ <= 230) it is
    the plain power, bit for bit; the exponent is capped at 700 (never reached with
    α <= 1000 unless one view weighs twice the mean) so that nothing overflows.
    """
    held = np.count_nonzero(view_weights > 0, axis=-1)
    log_held = np.log(np.maximum(held, 1))
    big = alpha * log_held > _LOG_POWER_FLOOR
    if not big.any():
        return view_weights**alpha
    with np.errstate(divide="ignore"):  # a weight of 0 gives exp(-inf) = 0
        expo = alpha * np.log(view_weights) + ((alpha - 1.0) * log_held)[..., None]
    scaled = np.exp(np.minimum(expo, 700.0))
    return np.where(big[..., None], scaled, view_weights**alpha)
