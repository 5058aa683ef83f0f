"""The fit-time check of the fuzzifier against the data's ceiling (estimators only).

:func:`~fedstrata.algorithms.fuzzifier.fuzzifier_ceiling` needs the distances' metric:
the per-feature weights a constant-δ model uses (δ ≡ 1, or divided by a bandwidth's
scale). The Type 1 and Type 2 kernels weigh each sample's features by its own value,
which is no fixed metric: those models are not checked.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fedstrata.algorithms.fuzzifier import fuzzifier_ceiling, recommended_fuzzifier
from fedstrata.algorithms.kernels import kernel_reference
from fedstrata.algorithms.multiview import MultiViewModel, bandwidth_scales
from fedstrata.errors import ValidationError

__all__ = ["checked_fuzzifier", "fuzzifier_excess", "metric_weights"]


def metric_weights(data: list[np.ndarray], model: MultiViewModel) -> list[np.ndarray] | None:
    """Per view the per-feature weights of the model's distance, or None (per-sample δ)."""
    if model.kernel != "none":
        return None
    if model.bandwidth is None:
        return [np.ones(X.shape[1]) for X in data]
    return [1.0 / s for s in bandwidth_scales([kernel_reference(X) for X in data], model)]


def fuzzifier_excess(data: list[np.ndarray], model: MultiViewModel) -> tuple[float, float] | None:
    """(m*(α), the rule's m) if the model's m is at or above the data's ceiling, else None.

    None also for hard memberships and for per-sample kernels (no fixed metric).
    """
    if model.membership == "hard":
        return None
    weights = metric_weights(data, model)
    if weights is None:
        return None
    ceiling = fuzzifier_ceiling(data, weights, model.alpha)
    if model.m < ceiling:
        return None
    return ceiling, recommended_fuzzifier(min(ceiling, fuzzifier_ceiling(data, weights)))


def checked_fuzzifier(
    owner: str, data: list[np.ndarray], model: MultiViewModel, *, auto: bool
) -> MultiViewModel:
    """``model`` if its m lies below the data's ceiling m*; else the rule's m, or an error.

    An ``auto`` m at or above m* (only N, the dimensions and c chose it) becomes
    :func:`~fedstrata.algorithms.fuzzifier.recommended_fuzzifier`'s; an explicit one
    raises a ValidationError naming the range (1, m*).
    """
    excess = fuzzifier_excess(data, model)
    if excess is None:
        return model
    ceiling, rule = excess
    if auto:
        return replace(model, m=rule)
    raise ValidationError(
        f"{owner}: parameter 'm' = {model.m:g} is at or above {ceiling:.3f}, the fuzzifier "
        "ceiling of these data: from there the grand mean is a stable fixed point and the "
        "memberships collapse to 1/c (Yu, Cheng and Huang, 'Analysis of the weighting "
        f"exponent in the FCM', 2004). Choose m in (1, {ceiling:.3f}); the project's rule "
        f"1 + 0.75·(m* - 1) gives m = {rule:.3f}"
    )
