"""What an algorithm plug-in declares about itself, and the registry of declarations.

A plug-in is one :class:`AlgorithmPlugin`: its scenario settings (one typed pydantic
model per algorithm name, a subclass of :class:`AlgorithmSettings` with ``name:
Literal[...]``, bounds and docs), its :class:`Capabilities` (what ``fedstrata validate``
lets it run with), an optional extra cross-check, how to build its model from the
settings and a dataset, and what its ``model.npz`` records. The application layer reads
everything from here: the scenario schema validates ``algorithm`` with the settings
model that ``algorithm.name`` selects, the capability checks, ``fedstrata cluster``, the
reference docs and the records ask the declaration, never a list of names.

Declarations are registered at the composition root (:mod:`fedstrata.registry`, one line
per plug-in) with :func:`register_algorithm_plugin`; this module imports neither a
plug-in nor the composition root.
The node-side half of a plug-in (:class:`fedstrata.nodes.algorithm.Algorithm`) is
registered there too.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field
from pydantic.json_schema import GetJsonSchemaHandler, JsonSchemaValue
from pydantic_core import CoreSchema

from fedstrata.nodes.algorithm import register_algorithm, unregister_algorithm
from fedstrata.settings import MAX_CLUSTERS, Strict

__all__ = [
    "AlgorithmPlugin",
    "AlgorithmSettings",
    "BuildInput",
    "Capabilities",
    "CostInput",
    "Extra",
    "Fail",
    "RoundCost",
    "algorithm_plugins",
    "model_arrays_of",
    "needs_dims",
    "plugin_for",
    "register_algorithm_plugin",
    "settings_models",
    "unregister_algorithm_plugin",
]

Fail = Callable[[str, str], None]
"""``fail(path, reason)``: report one located problem of a scenario (collected, not raised)."""


class AlgorithmSettings(Strict):
    """Clustering algorithm and its hyper-parameters.

    ``name`` selects the algorithm; its other keys are the algorithm's own (each one is
    listed below under its name). ``n_clusters`` lies in ``2 .. 1000``. A key of another
    algorithm is an error that names the algorithms taking it.
    """

    name: str
    n_clusters: Annotated[int, Field(ge=2, le=MAX_CLUSTERS, description="2 .. 1000")] = 4

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The algorithm names this settings model validates (its ``name`` literal)."""
        return tuple(typing.get_args(cls.model_fields["name"].annotation))

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The base stands for every registered algorithm: one of their settings models."""
        if cls is not AlgorithmSettings:
            return handler(core_schema)
        options = [handler(model.__pydantic_core_schema__) for model in settings_models()]
        return {
            "oneOf": options,
            "title": "Algorithm",
            "description": inspect.cleandoc(cls.__doc__ or ""),
        }


@dataclass(frozen=True)
class Extra:
    """An optional dependency a plug-in needs (checked by ``validate``).

    ``what`` completes "<name> needs ..." (say how to install it); ``available`` is
    asked at validation time.
    """

    what: str
    available: Callable[[], bool]


#: Capability keys a plug-in may give its own refusal text for (:attr:`Capabilities.reasons`).
CAPABILITY_KEYS = (
    "rule",
    "kernel_scope",
    "compression",
    "secure_aggregation",
    "dp",
    "personalization",
    "hybrid_views",
    "protocol_kind",
    "tier_periods",
)


@dataclass(frozen=True)
class Capabilities:
    """What an algorithm runs with; ``validate`` refuses the rest with a located message.

    ``additive``: partials combine by plain sums (needed by secure aggregation, the
    asynchronous protocols' staleness mixing and compression). ``rules``: the
    ``protocol.rule`` values it runs with (None: every rule). ``kernel_scopes``: the
    ``protocol.kernel_scope`` values. ``compressions``: uplink schemes besides ``none``.
    ``secure_aggregation``, ``dp``, ``personalization`` (``protocol.personalization``),
    ``hybrid_views`` (``data.views``: clients holding some or one of the views),
    ``tier_periods`` (a middle tier period > 1). ``protocol_kinds``: the
    ``protocol.kind`` values (None: every kind). ``extras``: optional dependencies.
    ``reasons``: the plug-in's own refusal text per capability key
    (:data:`CAPABILITY_KEYS`), a template with ``{name}`` (the algorithm) and ``{value}``
    (the refused value, ``repr``-quoted with ``{value!r}``); the generic text names the
    algorithm and the capability.
    """

    additive: bool = True
    rules: tuple[str, ...] | None = None
    kernel_scopes: tuple[str, ...] = ("global", "local")
    compressions: tuple[str, ...] = ()
    secure_aggregation: bool = False
    dp: bool = False
    personalization: bool = False
    hybrid_views: bool = False
    tier_periods: bool = False
    protocol_kinds: tuple[str, ...] | None = None
    extras: tuple[Extra, ...] = ()
    reasons: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.reasons) - set(CAPABILITY_KEYS)
        if unknown:
            raise ValueError(f"reasons for unknown capabilities {sorted(unknown)}")

    def reason(self, key: str, default: str, **values: Any) -> str:
        """The refusal text for capability ``key``: the plug-in's own, else ``default``.

        ``values`` fill the plug-in's template; ``default`` is used as it is.
        """
        template = self.reasons.get(key)
        return default if template is None else template.format(**values)


@dataclass(frozen=True)
class CostInput:
    """What a plug-in's :attr:`AlgorithmPlugin.round_cost` estimates one client's round from.

    ``model``: the built model; ``n_samples``: the client's samples; ``held_dims``: the
    feature counts of the views it holds; ``dims``: those of every view; ``protocol``:
    the nodes' :class:`~fedstrata.nodes.config.ProtocolConfig` (rule, compression,
    ``flops_per_element``, ...).
    """

    model: Any
    n_samples: int
    held_dims: tuple[int, ...]
    dims: tuple[int, ...]
    protocol: Any


@dataclass(frozen=True)
class RoundCost:
    """A lower bound of one client's costliest round: local work and message sizes.

    ``flops``: at most the work the client reports for that round (the simulator
    charges it at the client's ``speed_gflops``); ``down_bytes``/``up_bytes``: at most
    the payload of the model it receives and of the partial it sends. Pre-flight refuses
    a scenario whose rounds cannot close even at these, so they must never overstate:
    leave out what a setting can shrink (0 bytes when unsure).
    """

    flops: float
    down_bytes: float
    up_bytes: float


@dataclass(frozen=True)
class BuildInput:
    """What a plug-in's model is built from: its settings, the scenario, the dataset's shape.

    ``dims``: the views' feature counts and ``n_samples`` the federation's sample count
    (None when not known yet: :attr:`AlgorithmPlugin.needs_dims` says whether the model
    can be built without them); ``seed``: the scenario's seed.
    """

    settings: AlgorithmSettings
    dims: tuple[int, ...] | None
    n_samples: int | None
    seed: int
    scenario: Any = None


@dataclass(frozen=True)
class AlgorithmPlugin:
    """Everything about one algorithm plug-in the application layer needs.

    ``family``: a short name for docs and messages. ``settings``: one settings model
    per algorithm name (each validates its ``name`` literal). ``capabilities``: the
    plug-in's, or per name (a mapping from name to :class:`Capabilities`).
    ``build(BuildInput)`` returns the model the node-side plug-in is registered for
    (raise :class:`~fedstrata.errors.ScenarioError` with a path for a value it refuses).
    ``needs_dims``: the model cannot be built before the dataset is read.
    ``model_arrays(model)``: the hyper-parameters of the built model that ``model.npz``
    records next to the state's arrays (only those the algorithm has).
    ``check(scenario, settings, fail)``: cross-checks beyond the capabilities (a round
    budget, say). ``refusals``: per key of *another* algorithm, this plug-in's own
    refusal text (``{name}`` and ``{key}`` placeholders) instead of "is for ... only".
    ``estimators``: per name, the centralised estimator ``fedstrata cluster`` fits
    (``"module:Class"``) and the ``cluster`` options it takes; a name without one runs
    only as a federation. ``round_cost(CostInput)``: a lower bound of a client's
    costliest round (:class:`RoundCost`), from which ``validate`` tells whether rounds
    can fit their deadline (None: no estimate, no such check). ``model_type`` and
    ``factory``: the node side, the type
    ``build`` returns and ``factory(model, protocol, shape) -> Algorithm``
    (:func:`~fedstrata.nodes.algorithm.register_algorithm`), registered with the
    declaration by :func:`register_algorithm_plugin`. ``data_notes(model, views)``:
    what the built model will do badly on the pooled views (a fuzzifier above the
    data's ceiling, say), as sentences for the run record's ``warnings``; a run that
    holds every client's data (the simulator, an in-process MQTT run) asks, a device
    cannot.
    """

    family: str
    settings: tuple[type[AlgorithmSettings], ...]
    build: Callable[[BuildInput], Any]
    model_type: type
    factory: Callable[[Any, Any, Any], Any]
    capabilities: Capabilities | Mapping[str, Capabilities] = Capabilities()
    needs_dims: bool = False
    model_arrays: Callable[[Any], dict[str, Any]] = lambda _model: {}
    check: Callable[[Any, Any, Fail], None] | None = None
    refusals: Mapping[str, str] = field(default_factory=dict)
    estimators: Mapping[str, tuple[str, frozenset[str]]] = field(default_factory=dict)
    round_cost: Callable[[CostInput], RoundCost] | None = None
    data_notes: Callable[[Any, Sequence[Any]], list[str]] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Every algorithm name of the plug-in, in declaration order."""
        return tuple(n for model in self.settings for n in model.names())

    def settings_model(self, name: str) -> type[AlgorithmSettings]:
        """The settings model of algorithm ``name``."""
        for model in self.settings:
            if name in model.names():
                return model
        raise KeyError(name)

    def capabilities_of(self, name: str) -> Capabilities:
        """The capabilities of algorithm ``name``."""
        caps = self.capabilities
        return caps if isinstance(caps, Capabilities) else caps[name]


_PLUGINS: list[AlgorithmPlugin] = []


def register_algorithm_plugin(plugin: AlgorithmPlugin) -> None:
    """Register a plug-in: its declaration and its node-side factory (one call).

    The composition root (:mod:`fedstrata.registry`) registers the built-in families;
    a test or an outside package registers its own the same way.

    Raises
    ------
    ValueError
        When one of its names belongs to a registered plug-in already, or a settings
        model's ``name`` is no ``Literal`` of names.

    """
    if plugin in _PLUGINS:  # registered already (a composition root imported twice)
        return
    unnamed = [m.__name__ for m in plugin.settings if not m.names()]
    if unnamed:
        raise ValueError(f"settings without a name: Literal[...] field: {', '.join(unnamed)}")
    taken = {n for p in _PLUGINS for n in p.names}
    clash = sorted(taken & set(plugin.names))
    if clash:
        raise ValueError(f"algorithm names already registered: {', '.join(clash)}")
    _PLUGINS.append(plugin)
    register_algorithm(plugin.model_type, plugin.factory)


def unregister_algorithm_plugin(plugin: AlgorithmPlugin) -> None:
    """Remove a registered plug-in, both sides (a test's plug-in, when the test ends)."""
    _PLUGINS.remove(plugin)
    unregister_algorithm(plugin.model_type)


def algorithm_plugins() -> tuple[AlgorithmPlugin, ...]:
    """Every registered declaration, in registration order (the built-ins first).

    The composition root (:mod:`fedstrata.registry`) registers the built-in ones when
    imported; whatever validates scenarios imports it first (the scenario schema does).
    """
    return tuple(_PLUGINS)


def plugin_for(name: str) -> AlgorithmPlugin | None:
    """The registered plug-in with algorithm ``name``, or None."""
    return next((p for p in algorithm_plugins() if name in p.names), None)


def settings_models() -> list[type[AlgorithmSettings]]:
    """Every registered settings model, in registration order."""
    return [model for p in algorithm_plugins() for model in p.settings]


def needs_dims(name: str) -> bool:
    """Whether algorithm ``name``'s model needs the views' feature counts to be built."""
    plugin = plugin_for(name)
    return plugin is not None and plugin.needs_dims


def model_arrays_of(name: str, model: Any) -> dict[str, Any]:
    """The hyper-parameters ``model.npz`` records for algorithm ``name``'s built ``model``."""
    plugin = plugin_for(name)
    return {} if plugin is None else plugin.model_arrays(model)
