"""The multi-view family's declaration: HK-MVFC, MV-FCM and MVKM-ED settings and capabilities.

The node-side half is :mod:`fedstrata.plugins.multiview`; this module is what a
scenario file, ``validate``, ``fedstrata cluster`` and the records know of the family
(see :mod:`fedstrata.plugins.spec`). It imports the engine only when a model is built.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from fedstrata.algorithms._validation import ALPHA_MAX, BANDWIDTH_MAX, BANDWIDTH_MIN
from fedstrata.algorithms.multiview import MultiViewModel
from fedstrata.errors import ScenarioError
from fedstrata.plugins.multiview import multiview_algorithm
from fedstrata.plugins.spec import (
    AlgorithmPlugin,
    AlgorithmSettings,
    BuildInput,
    Capabilities,
    CostInput,
    RoundCost,
)
from fedstrata.settings import ScenarioErrors

__all__ = ["MULTIVIEW", "HkMvfcSettings", "MvfcmSettings", "MvkmEdSettings"]

Fuzzifier = Annotated[float, Field(gt=1.0, le=50.0, description="(1, 50]")]
Exponent = Annotated[float, Field(gt=1.0, le=ALPHA_MAX, description="(1, 1000]")]
Bandwidth = Annotated[float, Field(ge=BANDWIDTH_MIN, le=BANDWIDTH_MAX, description="[1, 1e6]")]
Kernel = Literal["type1", "type2", "none"]
CenterUpdate = Literal["paper", "exact", "derivation"]


class HkMvfcSettings(AlgorithmSettings):
    """``hk-mvfc``: FedHK-MVFC, heat-kernel enhanced multi-view fuzzy clustering.

    The fuzzifier ``m`` lies in ``(1, 50]``, the view-weight exponent ``alpha`` in
    ``(1, 1000]``, the ``bandwidth`` in ``[1, 1e6]`` (below 1 the kernel distance
    saturates and the memberships flatten to 1/c). m must also stay below the data's
    fuzzifier ceiling, 1/(1 - 2λ) with λ the share of the variance on the first
    principal axis (about 1.3-1.5 for real views of tens to hundreds of features; the
    grand mean is a stable fixed point above it): the ``HKMVFC`` estimator checks it,
    a federation cannot (it needs the pooled covariance); see docs/algorithms.md,
    "Choosing m, α and the bandwidth".

    ``preset``: unset or ``paper`` is the FedHK-MVFC paper's Algorithm 1 with the
    settings printed for its federated two-client analysis (m 2, alpha 5, type1) and
    paper centres: what scenario files have always meant; ``real-data`` is what holds
    up on real multi-view data, the ``HKMVFC`` estimator's defaults (m ``auto``, alpha
    50, no per-sample coefficients but a Gaussian heat kernel of ``bandwidth`` 8 in
    units of the pooled feature variances, ``standardize`` true, ``view_balance``
    dimension, exact centres). Keys set explicitly win over the preset. With
    ``real-data`` and no ``m``, m is Schwämmle and Jensen's fuzzifier for the
    federation's size (capped at 1.3).
    """

    name: Literal["hk-mvfc"] = "hk-mvfc"
    m: Fuzzifier = 2.0
    alpha: Exponent = 5.0
    kernel: Kernel = "type1"
    center_update: CenterUpdate = "paper"
    preset: Literal["paper", "real-data"] | None = None
    bandwidth: Bandwidth | None = None
    standardize: bool | None = None
    view_balance: Literal["dimension", "equal"] | None = None


class MvfcmSettings(AlgorithmSettings):
    """``mvfcm``: multi-view fuzzy c-means, no heat kernel and the exact centre update.

    ``m`` in ``(1, 50]``, ``alpha`` in ``(1, 1000]``; ``kernel`` and ``center_update``
    may only be given as ``none`` and ``exact``.
    """

    name: Literal["mvfcm"]
    m: Fuzzifier = 2.0
    alpha: Exponent = 5.0
    kernel: Kernel = "none"
    center_update: CenterUpdate = "exact"

    @model_validator(mode="after")
    def _fixed(self) -> MvfcmSettings:
        errors = []
        if self.kernel != "none":
            errors.append(
                ScenarioError("mvfcm uses no heat kernel; remove kernel", path="algorithm.kernel")
            )
        if self.center_update != "exact":
            errors.append(
                ScenarioError(
                    "mvfcm always uses the exact centre update; remove center_update",
                    path="algorithm.center_update",
                )
            )
        if errors:
            raise ScenarioErrors(errors)
        return self


class MvkmEdSettings(AlgorithmSettings):
    """``mvkm-ed``: multi-view k-means with hard memberships and its own β schedule.

    ``alpha`` in ``(1, 1000]``; no fuzzifier, heat kernel or centre update. Runs with
    ``protocol.rule: sum`` and ``kernel_scope: global`` (its β travels with the summed
    statistics' model and comes from the pooled feature means).
    """

    name: Literal["mvkm-ed"]
    alpha: Exponent = 5.0


_HK_MODEL_KEYS = (
    "m",
    "alpha",
    "kernel",
    "center_update",
    "bandwidth",
    "standardize",
    "view_balance",
)


def _hk_model(s: HkMvfcSettings, dims: tuple[int, ...] | None, n_samples: int | None) -> Any:
    """hk-mvfc's model: the preset's settings, then the keys the scenario sets."""
    from fedstrata.algorithms.multiview import MultiViewModel, auto_fuzzifier
    from fedstrata.algorithms.presets import PRESETS

    preset = s.preset or "paper"
    settings: dict[str, Any] = {k: v for k, v in PRESETS[preset].items() if k in _HK_MODEL_KEYS}
    settings.update({k: getattr(s, k) for k in _HK_MODEL_KEYS if k in s.model_fields_set})
    bandwidth = settings.pop("bandwidth")
    settings["bandwidth"] = None if bandwidth in (None, "none") else float(bandwidth)
    if settings["m"] == "auto":
        if dims is None or n_samples is None:
            raise ScenarioError(
                "preset real-data without m chooses m from the federation's sample count "
                "and view sizes; give m a number on a device",
                path="algorithm.m",
            )
        settings["m"] = auto_fuzzifier(int(n_samples), list(dims), s.n_clusters)
    return MultiViewModel(s.n_clusters, **settings)


def build(inp: BuildInput) -> Any:
    """The engine's :class:`~fedstrata.algorithms.multiview.MultiViewModel` for the settings."""
    from fedstrata.algorithms.multiview import MultiViewModel
    from fedstrata.algorithms.schedules import mvkm_ed_model

    s = inp.settings
    if isinstance(s, HkMvfcSettings):
        return _hk_model(s, inp.dims, inp.n_samples)
    if isinstance(s, MvfcmSettings):
        return MultiViewModel(
            s.n_clusters,
            m=s.m,
            alpha=s.alpha,
            distance="euclidean",
            kernel="none",
            center_update="exact",
        )
    assert isinstance(s, MvkmEdSettings)
    return mvkm_ed_model(s.n_clusters, s.alpha)


def model_arrays(model: Any) -> dict[str, Any]:
    """``m`` (fuzzy memberships only) and ``alpha`` of the model that ran."""
    arrays = {"alpha": np.float64(model.alpha)}
    if model.membership != "hard":
        arrays = {"m": np.float64(model.m), **arrays}
    return arrays


_FULL = Capabilities(
    compressions=("float32", "float16", "qsgd"),
    secure_aggregation=True,
    dp=True,
    personalization=True,
    hybrid_views=True,
    tier_periods=True,
)
_MVKM_ED = Capabilities(
    rules=("sum",),
    kernel_scopes=("global",),
    compressions=_FULL.compressions,
    secure_aggregation=True,
    dp=True,
    personalization=True,
    hybrid_views=True,
    tier_periods=True,
    reasons={
        "rule": "{name} runs with rule 'sum' (its β schedule travels with the summed "
        "statistics' model; the parameter rules do not carry it yet)",
        "kernel_scope": "{name}'s β comes from the pooled feature means: kernel_scope must "
        "be global",
    },
)


def round_cost(inp: CostInput) -> RoundCost:
    """A client's round, at least: one local iteration and the centres down (and up).

    The learner reports every (sample, cluster, feature) per iteration it ran, and runs
    at least one (a parameter rule may stop its ``local_iters`` early); the global
    model carries the centres as float64, and so does an uncompressed partial.
    """
    p = inp.protocol
    c = inp.model.n_clusters
    centres = 8.0 * c * sum(inp.dims)
    work = inp.n_samples * c * sum(inp.held_dims) * p.flops_per_element
    return RoundCost(
        flops=float(work),
        down_bytes=centres,
        up_bytes=centres if p.compression == "none" else 0.0,
    )


def data_notes(model: MultiViewModel, views: Any) -> list[str]:
    """A fuzzy model's m at or above the pooled views' fuzzifier ceiling m*, if it is.

    The estimators refuse such an m (:func:`~fedstrata.algorithms.fuzzifier_check.
    checked_fuzzifier`); a federation cannot, as no node sees the pooled data, so a run
    that holds it says so in its record. Per-sample kernels (Type 1/2) have no fixed
    metric and are not checked.
    """
    from fedstrata.algorithms.fuzzifier_check import fuzzifier_excess

    excess = fuzzifier_excess([np.asarray(X, dtype=np.float64) for X in views], model)
    if excess is None:
        return []
    ceiling, rule = excess
    return [
        f"algorithm.m = {model.m:g} is at or above {ceiling:.3f}, the fuzzifier ceiling of "
        "the pooled data: from there the grand mean is a stable fixed point and the "
        f"memberships drift towards 1/c. Choose m in (1, {ceiling:.3f}); the rule "
        f"1 + 0.75·(m* - 1) gives {rule:.3f}"
    ]


MULTIVIEW = AlgorithmPlugin(
    round_cost=round_cost,
    data_notes=data_notes,
    family="multi-view",
    settings=(HkMvfcSettings, MvfcmSettings, MvkmEdSettings),
    build=build,
    model_type=MultiViewModel,
    factory=multiview_algorithm,
    capabilities={"hk-mvfc": _FULL, "mvfcm": _FULL, "mvkm-ed": _MVKM_ED},
    model_arrays=model_arrays,
    refusals=dict.fromkeys(
        ("m", "kernel", "center_update"),
        "{name} has hard memberships, no heat kernel and the exact centre update; remove {key}",
    ),
    estimators={
        "hk-mvfc": (
            "fedstrata.algorithms:HKMVFC",
            frozenset({"m", "alpha", "kernel", "center_update", "n_init", "preset"}),
        ),
        "mvfcm": ("fedstrata.algorithms:MVFCM", frozenset({"m", "alpha", "n_init"})),
        "mvkm-ed": ("fedstrata.algorithms:MVKMED", frozenset({"alpha", "n_init"})),
    },
)
"""The multi-view family's declaration (registered by :mod:`fedstrata.registry`)."""
