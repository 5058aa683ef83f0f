"""The tensor family's declaration: E-FKMVC, FedHK-PARAFAC2, FedHK-Tucker, FedHK-MVC-Person.

"Personalized Federated Heat-Kernel Enhanced Multi-View Clustering via Advanced Tensor
Decomposition". The node-side half is :mod:`fedstrata.plugins.tensor`; this module is
what scenario files, ``validate``, ``fedstrata cluster`` and the records know of the
family (see :mod:`fedstrata.plugins.spec`). Unset keys take the method's defaults
(:class:`~fedstrata.algorithms.tensor.model.TensorModel`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from fedstrata.algorithms.tensor.model import TensorModel
from fedstrata.errors import FedstrataError, ScenarioError
from fedstrata.nodes.algorithm import Algorithm
from fedstrata.plugins.spec import (
    AlgorithmPlugin,
    AlgorithmSettings,
    BuildInput,
    Capabilities,
    CostInput,
    RoundCost,
)
from fedstrata.settings import ScenarioErrors

__all__ = [
    "TENSOR",
    "EFkmvcSettings",
    "FedHkMvcPersonSettings",
    "FedHkParafac2Settings",
    "FedHkTuckerSettings",
]

Fuzzifier = Annotated[float, Field(gt=1.0, le=2.0, description="(1, 2]")]
Exponent = Annotated[float, Field(gt=1.0, le=1000.0, description="(1, 1000]")]
Bandwidth = Annotated[float, Field(ge=2.0, le=64.0, description="[2, 64]")]
Epochs = Annotated[int, Field(ge=1, le=1000, description="1 .. 1000")]
Rank = Annotated[int, Field(ge=1, le=10_000, description="1 .. 10000")]
Ranks = Annotated[
    list[Annotated[int, Field(ge=1, le=10_000)]],
    Field(min_length=3, max_length=3, description="three ranks, each 1 .. 10000"),
]
Unit = Annotated[float, Field(ge=0.0, le=1.0, description="[0, 1]")]
Tau = Annotated[float, Field(ge=0.0, le=1e6, description="[0, 1e6]")]
Step = Annotated[float, Field(ge=0.0, le=10.0, description="[0, 10]")]


class _TensorSettings(AlgorithmSettings):
    """Keys every tensor method reads: ``preset``, ``m``, ``alpha``, ``bandwidth``, epochs.

    ``preset``: unset or ``paper`` is the paper's min-max heat kernel with m 2, alpha 2
    (what scenario files have always meant); ``real-data`` is what holds up on real
    multi-view data (m 1.3, alpha 50, a Gaussian heat kernel of ``bandwidth`` 8 in units
    of the pooled feature variances, ranks that hold every cluster; see
    ``fedstrata.algorithms.tensor.presets``). Keys set explicitly win over the preset.
    ``m`` in (1, 2], at most 1.4 with a bandwidth (memberships flatten above);
    ``alpha`` in (1, 1000]; ``bandwidth`` in [2, 64]. ``center_views``: centre the
    scaled views at the pooled mean (needs a bandwidth; on under ``real-data`` for
    PARAFAC2, where it loosens PARAFAC2's tie between the views' centre Gram
    matrices).
    """

    m: Fuzzifier = 2.0
    alpha: Exponent = 2.0
    local_epochs: Epochs | None = None
    preset: Literal["paper", "real-data"] | None = None
    bandwidth: Bandwidth | None = None
    center_views: bool | None = None


class EFkmvcSettings(_TensorSettings):
    """``e-fkmvc``: ``local_epochs`` and the personalisation steps ``eps_a``/``eps_v``."""

    name: Literal["e-fkmvc"]
    eps_a: Step | None = None
    eps_v: Step | None = None


class _MessageSettings(_TensorSettings):
    """The factor methods' ``message``: ``stats`` has no local epochs to set."""

    message: Literal["factors", "stats"] | None = None

    @model_validator(mode="after")
    def _stats_have_no_epochs(self) -> _MessageSettings:
        if self.message != "stats":
            return self
        errors = []
        if self.local_epochs not in (None, 1):
            errors.append(
                ScenarioError(
                    "message: stats has no local epochs (each round the clients send "
                    "one membership step's sums and the server updates the factors): "
                    f"local_epochs must be 1 or unset, got {self.local_epochs}",
                    path="algorithm.local_epochs",
                )
            )
        for key, what in (
            ("lam", "the blend of global and local factors"),
            ("tau", "the clients' quality weights"),
        ):
            if key in self.model_fields_set:
                errors.append(
                    ScenarioError(
                        f"message: stats keeps no factors on the clients, so {key} "
                        f"({what}) has no part in it; remove {key}",
                        path=f"algorithm.{key}",
                    )
                )
        if errors:
            raise ScenarioErrors(errors)
        return self


class FedHkParafac2Settings(_MessageSettings):
    """``fedhk-parafac2``: PARAFAC2 ``rank``, ``lam``, ``tau`` and the ``message``.

    ``lam``: λ, the weight of the global factors in a client's blend; ``tau``: τ of the
    clients' softmax weights. ``message``: ``factors`` (default, the paper's averaged
    factors) or ``stats`` (summed statistics of one membership step, the factor update
    on the server; ``local_epochs`` is then 1). With ``preset: real-data`` (a kernel on
    the pooled variances) a stats round is one centralised iteration whatever the
    split; the paper's min-max coefficients are each client's own, so there it is not.
    """

    name: Literal["fedhk-parafac2"]
    rank: Rank | None = None
    lam: Unit | None = None
    tau: Tau | None = None


class FedHkTuckerSettings(_MessageSettings):
    """``fedhk-tucker``: Tucker's three ``ranks``, ``lam``, ``tau`` and the ``message``.

    ``message`` as for ``fedhk-parafac2``.
    """

    name: Literal["fedhk-tucker"]
    ranks: Ranks | None = None
    lam: Unit | None = None
    tau: Tau | None = None


class FedHkMvcPersonSettings(_TensorSettings):
    """``fedhk-mvc-person``: a ``decomposition``, its rank(s), ``lam``, ``tau``, ``rho``, ``beta``.

    ``decomposition``: parafac2 (default), tucker or cp, with ``rank`` (PARAFAC2, CP) or
    ``ranks`` (Tucker); ``rho``: the view-weight blend; ``beta``: the λ step.
    """

    name: Literal["fedhk-mvc-person"]
    rank: Rank | None = None
    ranks: Ranks | None = None
    lam: Unit | None = None
    tau: Tau | None = None
    rho: Unit | None = None
    beta: Annotated[float, Field(ge=0.0, le=1e3, description="[0, 1000]")] | None = None
    decomposition: Literal["parafac2", "tucker", "cp"] | None = None

    @model_validator(mode="after")
    def _rank_fits(self) -> FedHkMvcPersonSettings:
        decomposition = self.decomposition or "parafac2"
        wrong = "rank" if decomposition == "tucker" else "ranks"
        if wrong in self.model_fields_set:
            raise ScenarioErrors(
                [
                    ScenarioError(
                        f"{wrong} does not fit decomposition {decomposition!r} (Tucker takes "
                        "ranks, PARAFAC2 and CP take rank); remove it",
                        path=f"algorithm.{wrong}",
                    )
                ]
            )
        return self


_KEYS = (
    "m",
    "alpha",
    "bandwidth",
    "local_epochs",
    "eps_a",
    "eps_v",
    "rank",
    "lam",
    "tau",
    "rho",
    "beta",
    "center_views",
)


def build(inp: BuildInput) -> Any:
    """The :class:`~fedstrata.algorithms.tensor.model.TensorModel`: the preset, then set keys.

    A value the model refuses (a rank above a view's feature count, say) becomes a
    :class:`~fedstrata.errors.ScenarioError` on ``algorithm`` (on the rank key it names).
    """
    from fedstrata.algorithms.tensor.model import TensorModel
    from fedstrata.algorithms.tensor.presets import preset_model_settings

    s = inp.settings
    if inp.dims is None:
        raise ScenarioError(
            f"{s.name} needs the views' feature counts to build its model", path="algorithm"
        )
    dims = tuple(int(d) for d in inp.dims)
    decomposition = getattr(s, "decomposition", None)
    preset = getattr(s, "preset", None)  # every tensor settings class declares it
    params = preset_model_settings(preset, s.name, s.n_clusters, dims, decomposition)
    params.update({k: getattr(s, k) for k in _KEYS if k in s.model_fields_set})
    if getattr(s, "ranks", None) is not None:
        params["ranks"] = tuple(s.ranks)  # type: ignore[attr-defined]
    if getattr(s, "decomposition", None) is not None:
        params["decomposition"] = s.decomposition  # type: ignore[attr-defined]
    message = getattr(s, "message", None)
    if message is not None:
        params["factor_message"] = message
    if message == "stats":  # no local epochs: the settings refuse any value but 1
        params.setdefault("local_epochs", 1)
    try:
        return TensorModel(s.name, s.n_clusters, dims, **params)
    except FedstrataError as exc:
        msg = str(exc)
        if msg.startswith("center_views"):
            raise ScenarioError(msg, path="algorithm.center_views") from exc
        key = next((k for k in ("ranks", "rank") if k in params and f"{k} " in msg.lower()), "")
        if not key and "rank" in msg.lower():
            key = next((k for k in ("ranks", "rank") if k in params), "")
        raise ScenarioError(msg, path=f"algorithm.{key}" if key else "algorithm") from exc


def model_arrays(model: Any) -> dict[str, Any]:
    """The fuzzifier ``m`` and view-weight exponent ``alpha`` of the model that ran."""
    return {"m": np.float64(model.m), "alpha": np.float64(model.alpha)}


_SUMS = "its clients send pre-weighted sums; the server rule is the paper's"


def _tensor_algorithm(model: TensorModel, protocol: Any, shape: Any) -> Algorithm:
    """The tensor family's node-side plug-in (its module loads on first use)."""
    from fedstrata.plugins.tensor import tensor_algorithm

    return tensor_algorithm(model, protocol, shape)


def round_cost(inp: CostInput) -> RoundCost:
    """A client's round, at least: its local epochs over the features it holds.

    The message sizes are the factors' (not bounded here: 0 bytes).
    """
    m = inp.model
    work = inp.n_samples * m.n_clusters * sum(inp.held_dims) * m.local_epochs
    return RoundCost(float(work * inp.protocol.flops_per_element), 0.0, 0.0)


TENSOR = AlgorithmPlugin(
    round_cost=round_cost,
    family="tensor",
    settings=(EFkmvcSettings, FedHkParafac2Settings, FedHkTuckerSettings, FedHkMvcPersonSettings),
    build=build,
    model_type=TensorModel,
    factory=_tensor_algorithm,
    needs_dims=True,
    capabilities=Capabilities(
        rules=("sum",),
        kernel_scopes=("global",),
        secure_aggregation=True,
        hybrid_views=True,
        reasons={
            "rule": "{name} runs with rule 'sum' (" + _SUMS + "), not {value!r}",
            "kernel_scope": "{name} scales every client's views with the pooled ranges: "
            "kernel_scope must be global",
            "compression": "{name}'s messages are factor sums; compression is for the "
            "multi-view statistics only",
            "dp": "differential privacy is calibrated for the multi-view statistics; {name}'s "
            "factor sums have no clipping bound yet",
            "personalization": "{name} personalises with its own λ blend (algorithm.lam); "
            "remove protocol.personalization",
            "tier_periods": "{name}: a middle tier cannot turn a tensor model back into client "
            "sums, so tier periods must be 1",
        },
    ),
    model_arrays=model_arrays,
    refusals=dict.fromkeys(
        ("kernel", "center_update"),
        "{name} has its own heat kernel (min-max coefficients) and centre steps; remove {key}",
    ),
    estimators={
        "e-fkmvc": ("fedstrata.algorithms:EFKMVC", frozenset({"m", "alpha", "preset"})),
        "fedhk-parafac2": (
            "fedstrata.algorithms:FedHKPARAFAC2",
            frozenset({"m", "alpha", "rank", "preset"}),
        ),
        "fedhk-tucker": ("fedstrata.algorithms:FedHKTucker", frozenset({"m", "alpha", "preset"})),
        "fedhk-mvc-person": (
            "fedstrata.algorithms:FedHKMVCPerson",
            frozenset({"m", "alpha", "rank", "preset"}),
        ),
    },
)
"""The tensor family's declaration (registered by :mod:`fedstrata.registry`)."""
