"""The deep hybrid-view family's declaration: FMCSC and EFD-MVC (PyTorch optional).

For federations whose clients hold different subsets of the views. ``fmcsc`` is
"Bridging Gaps: Federated Multi-View Clustering in Heterogeneous Hybrid Views" (NeurIPS
2024: per-view autoencoders, feature and model contrasts, V+1 global models aggregated
by mutual-information weights), ``efd-mvc`` "Enhanced Federated Deep Multi-View
Clustering under Uncertainty Scenario" (AAAI 2026: one global model, hierarchical
contrast, a view-adaptive drift module and balanced aggregation weights). Both cluster
the final embeddings with federated k-means. The node-side half is
:mod:`fedstrata.plugins.deep`; this module imports without PyTorch (``validate`` says
when the ``[deep]`` extra is missing).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from fedstrata.algorithms import deep as _deep
from fedstrata.algorithms.deep.config import DeepModel
from fedstrata.errors import ScenarioError, ValidationError
from fedstrata.plugins.deep import deep_algorithm
from fedstrata.plugins.spec import (
    AlgorithmPlugin,
    AlgorithmSettings,
    BuildInput,
    Capabilities,
    CostInput,
    Extra,
    Fail,
    RoundCost,
)
from fedstrata.wire import DEFAULT_MAX_SIZE

__all__ = ["DEEP", "DEEP_EXTRA_ROUNDS", "EfdMvcSettings", "FmcscSettings"]

DEEP_EXTRA_ROUNDS = 2
"""Rounds a deep run takes besides ``pretrain_rounds`` and ``train_rounds``: the k-means
candidates and at least one Lloyd round."""


class _DeepSettings(AlgorithmSettings):
    """Keys of both deep methods; unset keys take :class:`DeepModel`'s CPU-friendly defaults.

    ``hidden`` (each view's encoder layer widths; the decoder mirrors them), ``latent``
    (per-view code size), ``head`` (projection and fusion head width),
    ``pretrain_rounds`` (consensus pre-training rounds: reconstruction only, averaged),
    ``train_rounds`` (training rounds after them), ``pretrain_epochs`` (epochs per
    pre-training round), ``local_epochs`` (epochs per training round), ``batch_size``,
    ``lr`` (the optimiser's step size), ``temperature`` (τ of every contrastive loss),
    ``kmeans_rounds`` (most Lloyd rounds of the final k-means). Defaults: hidden [256,
    256], latent 20, head 256, pretrain_rounds 4, train_rounds 5, pretrain_epochs 50,
    local_epochs 10, batch_size 256, lr 0.001, temperature 0.5, kmeans_rounds 20; the
    FMCSC paper's settings are hidden [500, 500, 2000], pretrain_epochs 250, local_epochs
    25 and lr 0.0003 (the EFD-MVC paper gives none); the defaults are the project's. A run takes at
    least ``pretrain_rounds + train_rounds + 2`` protocol
    rounds (pre-training, training, k-means candidates, one Lloyd round), with rule
    ``sum`` and synchronous rounds. The networks' initial weights come from the
    scenario's ``seed``.
    """

    hidden: (
        Annotated[
            list[Annotated[int, Field(ge=1, le=8192)]],
            Field(min_length=1, max_length=6, description="1 .. 6 layer widths, each 1 .. 8192"),
        ]
        | None
    ) = None
    latent: Annotated[int, Field(ge=1, le=4096, description="1 .. 4096")] | None = None
    head: Annotated[int, Field(ge=1, le=8192, description="1 .. 8192")] | None = None
    pretrain_rounds: Annotated[int, Field(ge=1, le=10_000, description="1 .. 10000")] | None = None
    train_rounds: Annotated[int, Field(ge=0, le=10_000, description="0 .. 10000")] | None = None
    pretrain_epochs: Annotated[int, Field(ge=0, le=100_000, description="0 .. 100000")] | None = (
        None
    )
    local_epochs: Annotated[int, Field(ge=1, le=1000, description="1 .. 1000")] | None = None
    batch_size: Annotated[int, Field(ge=2, le=1_000_000, description="2 .. 1000000")] | None = None
    lr: Annotated[float, Field(gt=0.0, le=10.0, description="(0, 10]")] | None = None
    temperature: Annotated[float, Field(gt=0.0, le=100.0, description="(0, 100]")] | None = None
    kmeans_rounds: Annotated[int, Field(ge=1, le=10_000, description="1 .. 10000")] | None = None


class FmcscSettings(_DeepSettings):
    """``fmcsc``: the deep keys, ``copy_epochs`` and ``mi_bins``.

    ``copy_epochs``: epochs a multi-view client fits each single-view global model (Eq. 6;
    default 5); ``mi_bins``: histogram bins of its mutual-information weights (default 10).
    """

    name: Literal["fmcsc"]
    copy_epochs: Annotated[int, Field(ge=0, le=100_000, description="0 .. 100000")] | None = None
    mi_bins: Annotated[int, Field(ge=2, le=1000, description="2 .. 1000")] | None = None


class EfdMvcSettings(_DeepSettings):
    """``efd-mvc``: the deep keys, ``contrast_weight``, ``mu`` and ``noise``.

    ``contrast_weight``: α of Eq. 11 (default 0.5); ``mu``: the FedProx μ of its drift
    module (default 0.01); ``noise``: σ of the single-view clients' augmentation, on
    [0, 1]-scaled inputs (default 0.1).
    """

    name: Literal["efd-mvc"]
    contrast_weight: Annotated[float, Field(ge=0.0, le=1.0, description="[0, 1]")] | None = None
    mu: Annotated[float, Field(ge=0.0, le=1e6, description="[0, 1e6]")] | None = None
    noise: Annotated[float, Field(ge=0.0, le=100.0, description="[0, 100]")] | None = None


def build(inp: BuildInput) -> DeepModel:
    """The :class:`DeepModel`: the keys the scenario sets, its defaults else.

    The scenario's ``seed`` fixes the initial networks. A value the model refuses (fmcsc
    with a single view, say) becomes a :class:`~fedstrata.errors.ScenarioError` on the
    key it names, else on ``algorithm``; so does a model body over the wire limit.
    """
    s = inp.settings
    if inp.dims is None:
        raise ScenarioError(
            f"{s.name} needs the views' feature counts to build its model", path="algorithm"
        )
    own = set(type(s).model_fields) - {"name", "n_clusters"}
    params: dict[str, Any] = {
        k: getattr(s, k) for k in own if k in s.model_fields_set and getattr(s, k) is not None
    }
    if "hidden" in params:
        params["hidden"] = tuple(params["hidden"])
    try:
        model = DeepModel(
            s.name, s.n_clusters, tuple(int(d) for d in inp.dims), seed=int(inp.seed), **params
        )
    except ValidationError as exc:
        msg = str(exc)
        key = msg.split(" ", 1)[0]
        raise ScenarioError(msg, path=f"algorithm.{key}" if key in params else "algorithm") from exc
    # a model body carries every global network; it must fit one wire message
    models = model.n_views + 1 if model.method == "fmcsc" else 1
    size = 4 * model.parameter_count * models
    if size > DEFAULT_MAX_SIZE - 64 * 1024:
        raise ScenarioError(
            f"{s.name}'s model body would carry {models} network(s) of "
            f"{model.parameter_count:,} float32 parameters ({size / 2**20:.0f} MiB), over "
            f"the wire limit of {DEFAULT_MAX_SIZE // 2**20} MiB; choose smaller hidden widths",
            path="algorithm.hidden",
        )
    return model


def check_rounds(scenario: Any, settings: Any, fail: Fail) -> None:
    """The round budget: pre-training, training, k-means candidates and one Lloyd round."""
    pre = (
        DeepModel.pretrain_rounds if settings.pretrain_rounds is None else settings.pretrain_rounds
    )
    train = DeepModel.train_rounds if settings.train_rounds is None else settings.train_rounds
    need = pre + train + DEEP_EXTRA_ROUNDS
    rounds = scenario.protocol.rounds
    if rounds < need:
        fail(
            "protocol.rounds",
            f"{settings.name} needs at least pretrain_rounds + train_rounds + "
            f"{DEEP_EXTRA_ROUNDS} = {need} rounds ({pre} of consensus pre-training, {train} of "
            f"training, 1 of k-means candidates and at least 1 Lloyd round), got {rounds}",
        )


def round_cost(inp: CostInput) -> RoundCost:
    """The costliest training phase of a client, at least, as its learner reports it.

    Forward and backward (6 flops per parameter and sample) for the pre-training
    epochs, or for the training epochs (FMCSC's single-view copies left out); one
    network (float32) down and one up.
    """
    m: DeepModel = inp.model
    epochs = max(m.pretrain_epochs, 1)
    if m.train_rounds > 0:
        epochs = max(epochs, m.local_epochs, 1)
    network = 4.0 * m.parameter_count
    return RoundCost(6.0 * m.parameter_count * inp.n_samples * epochs, network, network)


DEEP = AlgorithmPlugin(
    round_cost=round_cost,
    family="deep hybrid-view",
    settings=(FmcscSettings, EfdMvcSettings),
    build=build,
    model_type=DeepModel,
    factory=deep_algorithm,
    needs_dims=True,
    capabilities=Capabilities(
        additive=False,
        rules=("sum",),
        kernel_scopes=("global",),
        hybrid_views=True,
        protocol_kinds=("sync", "adaptive"),
        # looked up when validating, so that a test can pretend PyTorch is missing
        extras=(
            Extra(
                'PyTorch, the [deep] extra: pip install "fedstrata[deep]"',
                lambda: _deep.torch_available(),
            ),
        ),
        reasons={
            "rule": "{name} runs with rule 'sum' (the server weighs the clients' networks as "
            "the paper does), not {value!r}",
            "kernel_scope": "{name} min-max scales every client's views with the pooled "
            "ranges: kernel_scope must be global",
            "compression": "{name}'s messages are network weights; compression is for the "
            "multi-view statistics only",
            "dp": "differential privacy is calibrated for the multi-view statistics; {name}'s "
            "network weights have no clipping bound yet",
            "secure_aggregation": "masking {name}'s float32 network weights is not implemented "
            "yet; set secure_aggregation: none",
            "personalization": "{name} has no personalised models; remove protocol.personalization",
            "tier_periods": "{name}: every phase (pre-training, training, k-means) takes one "
            "root round, so tier periods must be 1",
            "protocol_kind": "{name}'s pre-training, training and k-means phases need "
            "synchronous rounds: kind must be sync or adaptive, not {value!r}",
        },
    ),
    check=check_rounds,
    refusals=dict.fromkeys(
        ("m", "alpha", "kernel", "center_update"),
        "{name} clusters its networks' embeddings with k-means (no fuzzifier, view-weight "
        "exponent, heat kernel or centre update); remove {key}",
    ),
)
"""The deep family's declaration (registered by :mod:`fedstrata.registry`); no estimator:
these run only as a federation."""
