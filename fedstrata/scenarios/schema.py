"""The scenario schema: pydantic models for one federation study.

A scenario file (YAML) has the top-level keys ``name``, ``seed`` and the sections
``data``, ``topology``, ``algorithm``, ``protocol``, ``faults``, ``privacy`` and
``output``; every section has defaults, unknown keys are errors. Cross-field rules (a
client attached to a fog node that does not exist, a median where a sum is required,
...) are checked in :meth:`Scenario._cross_checks`. See ``scenarios/*.yaml`` for
complete examples.

Types are strict: ``true`` is not a number, ``"5"`` is not an integer, an integer is
accepted where a float is expected, and no number may be infinite or NaN (``.inf``,
``.nan``, ``1e400``). No option is accepted and ignored: a key that the chosen variant
does not use (``mean`` for a constant latency, ``alpha`` for an IID split, ...) is an
error, as are features that are not implemented yet.

Units: the :data:`Seconds`, :data:`PositiveSeconds`, :data:`Mbps` and
:data:`Probability` types also take a string with a unit (``40ms``, ``1.5min``,
``5Mbps``, ``100kbps``, ``10%``), converted by :mod:`fedstrata.scenarios.units` before
the strict check; a quoted plain number (``"0.1"``) is still refused.

Bounds
------
Every bound is stated once, in the field descriptions below; in short:

=======================================  ============================================
field                                    allowed values
=======================================  ============================================
``name``, ``topology.cloud_id``,         identifiers: 1-64 letters, digits, ``_``,
``topology.tiers[].name``                ``.``, ``-``, starting with a letter or
                                         digit (they are MQTT topic levels and ids)
``seed``                                 integer, ``0 <= seed < 2**32``
``data.params.n_per_cluster``            ``1 .. 500000`` (at most 2,000,000 samples)
``data.partition.alpha``                 ``0 < alpha <= 1e6``
``topology.tiers``                       at most 16 tiers; ``count`` ``1 .. 100000``,
                                         ``period`` ``1 .. 1000``
``topology.clients.count``               ``1 .. 100000``
``*.deadline_s``                         ``0 < s <= 1e9``
latency ``value``/``mean``/``std``       ``0 .. 1e9`` seconds (``median``, ``scale``
                                         ``> 0``); ``sigma`` ``0 .. 10``; Pareto
                                         ``shape`` ``0.1 .. 1000``
``bandwidth_mbps``                       ``1e-9 .. 1e9``
``speed_gflops``                         ``0 < speed <= 1e6``
``algorithm.n_clusters``                 ``2 .. 1000``
``algorithm.m``                          ``1 < m <= 50``
``algorithm.alpha``                      ``1 < alpha <= 1000``
``protocol.rounds``                      ``1 .. 100000``
``protocol.local_iters``                 ``1 .. 10000``
``protocol.patience``                    ``1 .. 100000``
``protocol.plateau``                     ``1 .. 100000`` rounds, or ``null``
``protocol.plateau_tol``                 ``0 <= tol < 1`` (relative)
``protocol.compression``                 ``scheme`` ``none``, ``float32``, ``float16``
                                         or ``qsgd``; ``bits`` ``2 .. 8`` (default 8),
                                         with ``qsgd`` only
fault times (``at``, ``start``, ``end``) ``0 .. 1e9`` seconds
``faults.availability.step_s``           ``0 < s <= 1e9`` seconds
probabilities                            ``0 .. 1``
=======================================  ============================================

Errors raised by cross-field checks are :class:`~fedstrata.errors.ScenarioError`
objects carrying their own dotted path; several of them travel together as
:class:`ScenarioErrors`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    SerializeAsAny,
    ValidationInfo,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError

import fedstrata.registry  # noqa: F401  (the composition root registers the plug-ins)
from fedstrata.errors import ScenarioError
from fedstrata.plugins.spec import AlgorithmSettings, Capabilities, plugin_for, settings_models
from fedstrata.scenarios.data_schema import (
    DATASET_PARAM_BOUNDS,
    MAX_SAMPLES,
    DataSpec,
    PartitionSpec,
)
from fedstrata.scenarios.fields import (
    MAX_LOCAL_ITERS,
    MAX_ROUNDS,
    MAX_SECONDS,
    PositiveSeconds,
    Probability,
    Seconds,
    unit_schema,
)
from fedstrata.scenarios.network_schema import NetworkSpec, check_access
from fedstrata.scenarios.privacy_schema import DPBlockClips, DPSpec, PrivacySpec, ViewBounds
from fedstrata.scenarios.protocol_schema import CompressionSpec, ProtocolSpec
from fedstrata.scenarios.show import clip, describe_error, show, show_number
from fedstrata.scenarios.units import to_mbps, to_seconds
from fedstrata.settings import MAX_CLUSTERS, ScenarioErrors, Strict, and_list

__all__ = [
    "DATASET_PARAM_BOUNDS",
    "ID_PATTERN",
    "MAX_CLIENTS",
    "MAX_CLUSTERS",
    "MAX_LOCAL_ITERS",
    "MAX_ROUNDS",
    "MAX_SAMPLES",
    "MAX_SECONDS",
    "MAX_TIERS",
    "MAX_TIER_NODES",
    "MAX_TRACE_BYTES",
    "RESERVED_TIER_NAMES",
    "SEED_LIMIT",
    "AlgorithmSpec",
    "AvailabilitySpec",
    "ClientsSpec",
    "CompressionSpec",
    "CrashSpec",
    "DPBlockClips",
    "DPSpec",
    "DataSpec",
    "DegradationSpec",
    "FaultsSpec",
    "LatencySpec",
    "LinkSpec",
    "OutputSpec",
    "PartitionFaultSpec",
    "PartitionSpec",
    "PrivacySpec",
    "ProtocolSpec",
    "Scenario",
    "ScenarioErrors",
    "TierSpec",
    "TopologySpec",
    "ViewBounds",
    "clip",
    "describe_error",
    "show",
]

# ------------------------------------------------------------------------------ bounds

MAX_CLIENTS = 100_000
"""Largest ``topology.clients.count``."""
MAX_TIER_NODES = 100_000
"""Largest ``count`` of a middle tier."""
MAX_TIERS = 16
"""Most middle tiers under ``topology.tiers``."""
MAX_TRACE_BYTES = 16 * 1024 * 1024
"""Largest latency trace file (``dist: empirical``) read, in bytes."""
SEED_LIMIT = 2**32
"""Seeds lie in ``[0, SEED_LIMIT)``."""
ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
"""Scenario name, cloud id and tier names: MQTT topic levels usable as node ids."""
RESERVED_TIER_NAMES = frozenset({"cloud", "edge", "client"})
"""Tier names taken by the cloud, the edge tier and the client ids ``client-N``."""

_ID = re.compile(ID_PATTERN)

# Units (see fedstrata.scenarios.units): each type also takes a string with a unit,
# converted before the strict number check; the JSON schema offers both spellings.
Mbps = Annotated[
    float,
    BeforeValidator(to_mbps),
    Field(ge=1e-9, le=1e9),
    unit_schema({"minimum": 1e-9, "maximum": 1e9}, "[bB][pP][sS]|[kKmMgG][bB][pP][sS]", "5Mbps"),
]
"""Mbit/s in ``[1e-9, 1e9]``; also ``5Mbps``, ``100kbps``, ``1Gbps``."""
Speed = Annotated[float, Field(gt=0.0, le=1e6, description="GFLOP/s, (0, 1e6]")]
Seed = Annotated[int, Field(ge=0, lt=SEED_LIMIT, description="0 <= seed < 2**32")]


def _fail(path: str, reason: str) -> None:
    """Cross-field errors carry their own path (pydantic would report them at the root)."""
    raise ScenarioError(reason, path=path)


def _check_id(value: str) -> str:
    if not _ID.fullmatch(value):
        raise ValueError(
            "must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit "
            f"(it is an MQTT topic level and a node id), got {show(value)}"
        )
    return value


Ident = Annotated[str, AfterValidator(_check_id)]


_Strict = Strict  # the sections' base (fedstrata.settings: plug-ins' settings share it)


# ------------------------------------------------------------------------------ links

_DIST_KEYS: dict[str, tuple[str, ...]] = {
    "constant": ("value",),
    "normal": ("mean", "std"),
    "lognormal": ("median", "sigma"),
    "pareto": ("scale", "shape"),
    "empirical": ("file",),
}


class LatencySpec(_Strict):
    """A latency distribution in seconds.

    ``constant`` (value), ``normal`` (mean, std; truncated at 0), ``lognormal``
    (median, sigma of the log), ``pareto`` (scale, shape), ``empirical`` (file: a CSV
    trace of seconds, one per line or first column, at most 16 MiB; a relative path is
    read from the scenario file's folder and stored resolved). Keys of another
    distribution are errors.
    """

    dist: Literal["constant", "normal", "lognormal", "pareto", "empirical"] = "constant"
    value: Seconds | None = Field(None, description="constant latency, 0 .. 1e9 s")
    mean: Seconds | None = Field(None, description="normal mean, 0 .. 1e9 s")
    std: Seconds | None = Field(None, description="normal standard deviation, 0 .. 1e9 s")
    median: PositiveSeconds | None = Field(None, description="lognormal median, (0, 1e9] s")
    sigma: Annotated[float, Field(ge=0.0, le=10.0)] | None = Field(
        None, description="lognormal sigma of the log, 0 .. 10"
    )
    scale: PositiveSeconds | None = Field(None, description="Pareto scale, (0, 1e9] s")
    shape: Annotated[float, Field(ge=0.1, le=1000.0)] | None = Field(
        None, description="Pareto shape, 0.1 .. 1000"
    )
    file: str | None = Field(None, description="CSV trace of seconds (dist: empirical)")

    @field_validator("file")
    @classmethod
    def _trace(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or info.data.get("dist") != "empirical":
            return value  # unused keys are reported by _needs
        base = (info.context or {}).get("base_dir")
        return _check_trace(value, None if base is None else Path(base))

    @model_validator(mode="after")
    def _needs(self) -> LatencySpec:
        need = _DIST_KEYS[self.dist]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"latency dist {self.dist!r} needs {', '.join(missing)}")
        unused = [k for k in self.model_fields_set if k != "dist" and k not in need]
        if unused:
            keys = ", ".join(sorted(unused))
            raise ValueError(f"{keys} not used by dist {self.dist!r} (it takes {', '.join(need)})")
        return self


def _check_trace(value: str, base: Path | None) -> str:
    """Resolve a trace path against ``base`` and check that it reads as a latency trace."""
    from fedstrata.sim.links import Empirical

    if not value or "\x00" in value:
        raise ValueError(f"must be a file name, got {show(value)}")
    p = Path(value)
    if base is not None and not p.is_absolute():
        p = base / p
    where = " (relative paths are read from the scenario file's folder)"
    try:
        st = p.stat()
    except OSError:
        raise ValueError(f"latency trace {show(value)} does not exist{where}") from None
    if not p.is_file():
        raise ValueError(f"latency trace {show(value)} is not a regular file")
    if st.st_size > MAX_TRACE_BYTES:
        raise ValueError(
            f"latency trace {show(value)} is larger than {MAX_TRACE_BYTES // (1024 * 1024)} MiB"
        )
    try:
        Empirical.from_csv(p)
    except UnicodeDecodeError:
        raise ValueError(f"latency trace {show(value)} is not UTF-8 text") from None
    except Exception as exc:  # OSError, ValueError, csv.Error: a trace that does not read
        detail = str(exc).removeprefix(f"{p}: ")
        raise ValueError(f"latency trace {show(value)} does not parse: {clip(detail)}") from None
    return str(p)


class LinkSpec(_Strict):
    """A link between a node and its parent's broker.

    ``latency`` and ``jitter`` are a number of seconds (a constant) or a
    :class:`LatencySpec` mapping; ``bandwidth_mbps`` lies in ``[1e-9, 1e9]`` (unlimited
    when absent); ``loss`` is a probability.
    """

    latency: LatencySpec = LatencySpec(value=0.0)
    jitter: LatencySpec | None = None
    bandwidth_mbps: Mbps | None = Field(
        None, description="Mbit/s, 1e-9 .. 1e9; unlimited when absent"
    )
    loss: Probability = 0.0

    @field_validator("latency", "jitter", mode="before")
    @classmethod
    def _number_is_constant(cls, value: Any) -> Any:
        raw, value = value, to_seconds(value)  # "40ms" is the constant 0.04 s
        if isinstance(value, bool):
            raise ValueError(
                f"must be a number of seconds or a mapping like {{dist: lognormal, median: 0.05, "
                f"sigma: 0.5}}, got {show(raw)}"
            )
        if isinstance(value, int | float):
            if not math.isfinite(value):
                raise ValueError(f"must be a finite number of seconds, got {show(raw)}")
            if value < 0:
                raise ValueError(f"latency must be >= 0 seconds, got {show(raw)}")
            if value > MAX_SECONDS:
                raise ValueError(f"must be <= 1e9 seconds, got {show(raw)}")
            return {"dist": "constant", "value": value}
        return value


# ------------------------------------------------------------------------------ topology


class TierSpec(_Strict):
    """One middle tier (fog, regional...), listed top-down under ``topology.tiers``.

    Its nodes are ``{name}-0 .. {name}-{count-1}``; ``name`` is an identifier
    (:data:`ID_PATTERN`) other than ``cloud``, ``edge`` and ``client``.
    """

    name: Ident = "fog"
    count: Annotated[int, Field(ge=1, le=MAX_TIER_NODES, description="1 .. 100000")] = 1
    period: Annotated[int, Field(ge=1, le=1000, description="1 .. 1000")] = 1
    #: Per-node periods overriding ``period`` (HierFAVG per fog group), by node id.
    periods: dict[str, Annotated[int, Field(ge=1, le=1000, description="1 .. 1000")]] = Field(
        default_factory=dict
    )
    deadline_s: PositiveSeconds | None = Field(None, description="(0, 1e9] s")
    link: LinkSpec = LinkSpec()
    #: Each node's site access, shared by its children's links (``network.model: tcp``).
    access_mbps: Mbps | None = None
    speed_gflops: Speed = 10.0

    def max_period(self) -> int:
        """The longest period of any node of the tier."""
        return max([self.period, *self.periods.values()])


class ClientsSpec(_Strict):
    """The edge clients, spread evenly over the lowest tier unless ``attach`` says otherwise.

    Client ids are ``client-0 .. client-{count-1}``; ``count`` lies in ``1 .. 100000``.
    """

    count: Annotated[int, Field(ge=1, le=MAX_CLIENTS, description="1 .. 100000")] = 2
    link: LinkSpec = LinkSpec()
    speed_gflops: Speed = 1.0
    attach: dict[str, str] = Field(default_factory=dict)


class TopologySpec(_Strict):
    """Cloud, middle tiers top-down (at most 16), clients."""

    cloud_id: Ident = "cloud"
    cloud_access_mbps: Mbps | None = None  # the cloud site's shared access, as a tier's
    tiers: list[TierSpec] = Field(default_factory=list, max_length=MAX_TIERS)
    clients: ClientsSpec = ClientsSpec()


# ------------------------------------------------------------------------------ algorithm


AlgorithmSpec = AlgorithmSettings
"""The ``algorithm`` section: validated by the settings model of the registered plug-in
that ``algorithm.name`` names (:mod:`fedstrata.plugins.spec`)."""


def _choices(names: list[str]) -> str:
    """``'a'``, ``'a' or 'b'``, ``'a', 'b' or 'c'`` (as pydantic words a literal error)."""
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def default_algorithm() -> AlgorithmSettings:
    """The ``algorithm`` section of a file without one: the first registered algorithm."""
    return settings_models()[0].model_validate({})


def _foreign_key(key: str, name: str, own: type[AlgorithmSettings]) -> str:
    """Why ``key`` is refused for algorithm ``name``: the plug-in's words, who takes it, or none."""
    plugin = plugin_for(name)
    template = None if plugin is None else plugin.refusals.get(key)
    if template is not None:
        return template.format(name=name, key=key)
    users = sorted(n for m in settings_models() if key in m.model_fields for n in m.names())
    if users:
        return f"{key} is for {and_list(users)} only (name is {name!r}); remove it"
    return f"unknown key; known keys: {', '.join(own.model_fields)}"


def _settings_errors(
    exc: PydanticValidationError, name: str, model: type[AlgorithmSettings]
) -> list[ScenarioError]:
    """A settings model's errors, located under ``algorithm``."""
    errors: list[ScenarioError] = []
    for err in exc.errors(include_url=False):
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, ScenarioErrors):  # the settings' own cross-key checks
            errors += inner.errors
            continue
        if isinstance(inner, ScenarioError):
            errors.append(inner)
            continue
        loc = [str(p) for p in err["loc"] if not str(p).startswith("function-")]
        if err["type"] == "extra_forbidden" and len(loc) == 1:
            reason = _foreign_key(loc[0], name, model)
        else:
            reason = describe_error(dict(err))
        errors.append(ScenarioError(reason, path=".".join(["algorithm", *map(clip, loc)])))
    return errors


def _algorithm(value: Any, handler: Callable[[Any], Any]) -> AlgorithmSettings:
    """Validate the ``algorithm`` section with the settings model its ``name`` selects.

    The plug-ins are looked up now, not when the schema was built, so a plug-in
    registered later (by a test, say) is validated like the built-in ones.
    """
    if isinstance(value, AlgorithmSettings) or not isinstance(value, dict):
        return handler(value)  # an instance passes; a non-mapping gets pydantic's words
    name = value.get("name", default_algorithm().name)
    plugin = plugin_for(name) if isinstance(name, str) else None
    if plugin is None:
        names = [n for m in settings_models() for n in m.names()]
        raise ScenarioErrors(
            [ScenarioError(f"must be {_choices(names)}, got {show(name)}", path="algorithm.name")]
        )
    model = plugin.settings_model(name)
    try:
        return model.model_validate(value)
    except PydanticValidationError as exc:
        raise ScenarioErrors(_settings_errors(exc, name, model)) from None


AlgorithmField = Annotated[SerializeAsAny[AlgorithmSettings], WrapValidator(_algorithm)]
"""The type of :attr:`Scenario.algorithm`: any registered plug-in's settings."""


# ------------------------------------------------------------------------------ faults


class CrashSpec(_Strict):
    """A node crash at ``at`` seconds (``0 .. 1e9``), restarting after ``restart_after``."""

    node: str
    at: Seconds
    restart_after: PositiveSeconds | None = None


class PartitionFaultSpec(_Strict):
    """A network partition: the listed nodes' uplinks are down in [start, end) (``0 .. 1e9``)."""

    nodes: Annotated[list[str], Field(min_length=1)]
    start: Seconds
    end: PositiveSeconds

    @model_validator(mode="after")
    def _order(self) -> PartitionFaultSpec:
        if self.end <= self.start:
            end, start = show_number(self.end), show_number(self.start)
            raise ValueError(f"end ({end}) must be after start ({start})")
        return self


class DegradationSpec(_Strict):
    """A window in which the listed nodes' uplinks are slower or lossier.

    ``latency_factor`` and ``bandwidth_factor`` lie in ``(0, 1e6]``,
    ``extra_latency_s`` in ``[0, 1e9]``; ``loss`` (a probability) replaces the link's.
    """

    nodes: Annotated[list[str], Field(min_length=1)]
    start: Seconds
    end: PositiveSeconds
    latency_factor: Annotated[float, Field(gt=0.0, le=1e6)] = 1.0
    extra_latency_s: Seconds = 0.0
    bandwidth_factor: Annotated[float, Field(gt=0.0, le=1e6)] = 1.0
    loss: Probability | None = None

    @model_validator(mode="after")
    def _order(self) -> DegradationSpec:
        if self.end <= self.start:
            end, start = show_number(self.end), show_number(self.start)
            raise ValueError(f"end ({end}) must be after start ({start})")
        return self


class AvailabilitySpec(_Strict):
    """Client availability: an on/off Markov chain stepped every ``step_s`` seconds.

    ``step_s`` lies in ``(0, 1e9]``. ``kind: trace`` (availability from a file) is
    not implemented yet and is rejected, as is ``file``.
    """

    kind: Literal["markov", "trace"] = "markov"
    p_off: Probability = 0.0
    p_on: Probability = 1.0
    step_s: Annotated[float, Field(gt=0.0, le=MAX_SECONDS, description="(0, 1e9] s")] = 1.0
    file: str | None = None

    @field_validator("kind")
    @classmethod
    def _wired(cls, value: str) -> str:
        if value == "trace":
            raise ValueError(
                "availability traces from files are not implemented yet; use kind: markov "
                "(p_off, p_on, step_s)"
            )
        return value

    @field_validator("file")
    @classmethod
    def _no_file(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError(
                "availability trace files are not implemented yet; remove file (kind: markov "
                "takes p_off, p_on and step_s)"
            )
        return value


class FaultsSpec(_Strict):
    """Faults injected by the simulator."""

    dropout: Probability = 0.0
    crashes: list[CrashSpec] = Field(default_factory=list)
    partitions: list[PartitionFaultSpec] = Field(default_factory=list)
    degradations: list[DegradationSpec] = Field(default_factory=list)
    availability: AvailabilitySpec | None = None

    def kinds(self) -> list[str]:
        """The kinds of fault this scenario asks for, in a fixed order."""
        return [
            name
            for name, on in (
                ("dropout", self.dropout > 0),
                ("crashes", bool(self.crashes)),
                ("partitions", bool(self.partitions)),
                ("degradations", bool(self.degradations)),
                ("availability", self.availability is not None),
            )
            if on
        ]


class OutputSpec(_Strict):
    """What a run writes besides summary.json and rounds.csv."""

    events: bool = False
    plots: bool = True


# ------------------------------------------------------------------------------ scenario


def _refuse_protocol(
    caps: Capabilities, name: str, p: Any, fail: Callable[[str, str], None]
) -> None:
    """The protocol settings an algorithm's capabilities refuse (rule, scope, kind, ...)."""
    for key, label, allowed, value in (
        ("rule", "rule", caps.rules, p.rule),
        ("kernel_scope", "kernel_scope", caps.kernel_scopes, p.kernel_scope),
        ("protocol_kind", "kind", caps.protocol_kinds, p.kind),
    ):
        if allowed is None or value is None or value in allowed:
            continue
        fail(
            f"protocol.{label}",
            caps.reason(
                key,
                f"{name} runs with {label} {_choices(list(allowed))} only, not {value!r}",
                name=name,
                value=value,
            ),
        )
    scheme = p.compression.scheme
    if scheme != "none" and scheme not in caps.compressions:
        have = _choices(["none", *caps.compressions])
        fail(
            "protocol.compression",
            caps.reason(
                "compression",
                f"{name} has no uplink compression {scheme!r} (it takes scheme {have})",
                name=name,
                value=scheme,
            ),
        )
    if p.personalization is not None and not caps.personalization:
        fail(
            "protocol.personalization",
            caps.reason(
                "personalization",
                f"{name} has no personalised models; remove protocol.personalization",
                name=name,
            ),
        )


def _generated(node: str) -> tuple[str, int] | None:
    """Split a generated node id ``{prefix}-{i}`` into its prefix and index."""
    prefix, sep, index = node.rpartition("-")
    if not sep or not index.isascii() or not index.isdigit() or str(int(index)) != index:
        return None
    return prefix, int(index)


class Scenario(_Strict):
    """A complete federation study.

    ``name`` is an identifier (:data:`ID_PATTERN`; it becomes the run's MQTT topic
    level) and ``seed`` lies in ``[0, 2**32)``.
    """

    name: Ident = "scenario"
    seed: Seed = 0
    data: DataSpec = DataSpec()
    topology: TopologySpec = TopologySpec()
    algorithm: AlgorithmField = Field(default_factory=default_algorithm)
    protocol: ProtocolSpec = Field(default_factory=ProtocolSpec)
    faults: FaultsSpec = FaultsSpec()
    network: NetworkSpec = NetworkSpec()
    privacy: PrivacySpec = PrivacySpec()
    output: OutputSpec = OutputSpec()

    def resolved_yaml(self, seed: int | None = None) -> str:
        """The scenario as it runs (defaults filled in, ``seed`` applied), as YAML text.

        The protocol holds only its kind's own keys (another kind's would be refused on
        reading it back). Its SHA-256 is a run record's ``scenario_hash``.
        """
        import yaml

        data = self.model_dump(mode="json", exclude_none=True)
        if seed is not None:
            data["seed"] = seed
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)

    def node_ids(self) -> dict[str, list[str]]:
        """Node ids by tier name: cloud, each middle tier, and ``edge``."""
        ids: dict[str, list[str]] = {"cloud": [self.topology.cloud_id]}
        for tier in self.topology.tiers:
            ids[tier.name] = [f"{tier.name}-{i}" for i in range(tier.count)]
        ids["edge"] = [f"client-{i}" for i in range(self.topology.clients.count)]
        return ids

    def tier_of(self, node: str) -> str | None:
        """The tier of ``node`` (``cloud``, a middle tier's name or ``edge``), or None.

        Constant time and memory: generated ids are parsed, not listed.
        """
        topo = self.topology
        if node == topo.cloud_id:
            return "cloud"
        parsed = _generated(node)
        if parsed is None:
            return None
        prefix, index = parsed
        if prefix == "client":
            return "edge" if index < topo.clients.count else None
        for tier in topo.tiers:
            if tier.name == prefix and index < tier.count:
                return tier.name
        return None

    def _check_algorithm(self, fail: Callable[[str, str], None]) -> None:
        """What the algorithm runs with, as its plug-in declares (:class:`Capabilities`)."""
        a, p, pv = self.algorithm, self.protocol, self.privacy
        plugin = plugin_for(a.name)
        if plugin is None:  # a plug-in unregistered after validating its settings
            fail("algorithm.name", f"no algorithm plug-in {a.name!r} is registered")
            return
        caps, name = plugin.capabilities_of(a.name), a.name
        missing = [extra.what for extra in caps.extras if not extra.available()]
        for what in missing:
            fail("algorithm.name", f"{name} needs {what}")
        _refuse_protocol(caps, name, p, fail)
        if pv.dp is not None and not caps.dp:
            fail(
                "privacy.dp",
                caps.reason("dp", f"{name} does not support differential privacy", name=name),
            )
        if pv.secure_aggregation != "none" and not caps.secure_aggregation:
            why = "its partials are not additive" if not caps.additive else "it does not declare it"
            fail(
                "privacy.secure_aggregation",
                caps.reason(
                    "secure_aggregation",
                    f"{name} cannot run with secure aggregation ({why}); set "
                    "secure_aggregation: none",
                    name=name,
                ),
            )
        views = self.data.views or {}
        if not caps.hybrid_views and (views.get("some", 0.0) > 0 or views.get("single", 0.0) > 0):
            fail(
                "data.views",
                caps.reason(
                    "hybrid_views",
                    f"{name} needs every client to hold every view (no hybrid views); "
                    "remove data.views",
                    name=name,
                ),
            )
        if not caps.tier_periods:
            for i, t in enumerate(self.topology.tiers):
                if t.max_period() > 1:
                    fail(
                        f"topology.tiers.{i}.period",
                        caps.reason(
                            "tier_periods",
                            f"{name} runs its middle tiers once per root round: tier periods "
                            "must be 1",
                            name=name,
                        ),
                    )
        if plugin.check is not None:
            plugin.check(self, a, fail)

    def _check_privacy(self, fail: Callable[[str, str], None]) -> None:
        """Secure aggregation sums synchronous rounds of additive partials."""
        pv, p = self.privacy, self.protocol
        if pv.secure_aggregation == "none":
            for key in ("threshold", "neighbours"):
                if getattr(pv, key) is not None:
                    fail(f"privacy.{key}", "is for secure aggregation, which is off")
            return
        if pv.neighbours is not None and pv.secure_aggregation != "secagg+":
            fail("privacy.neighbours", "is for secure_aggregation: secagg+ only")
        why = "secure aggregation sums each round's masked partials"
        if p.rule == "median":
            fail("protocol.rule", f"{why}: rule 'median' is no sum (use sum, weighted or mean)")
        if not p.capabilities.secure_aggregation:
            fail("protocol.kind", f"{why}: {p.capabilities.secure_refusal(p.kind)}")
        if p.stragglers != "wait":
            fail("protocol.stragglers", f"{why}: only 'wait' (a dropout's masks are recovered)")
        if p.over_select > 0:
            fail("protocol.over_select", f"{why}: a masked round uses every reply it gets")
        if p.compression.scheme != "none":
            fail("protocol.compression.scheme", f"{why}: masked values are fixed-point already")

    def _check_tier_names(self, fail: Callable[[str, str], None]) -> None:
        """Tier names are unique and not reserved (the node ids depend on them)."""
        names = [t.name for t in self.topology.tiers]
        first: dict[str, int] = {}
        for i, name in enumerate(names):
            if name in RESERVED_TIER_NAMES:
                fail(
                    f"topology.tiers.{i}.name",
                    f"{name!r} is reserved (cloud, edge and client name the other levels)",
                )
            elif name in first:
                fail(
                    f"topology.tiers.{i}.name",
                    f"tier name {name!r} is used twice (also topology.tiers.{first[name]}.name)",
                )
            else:
                first[name] = i

    def _check_cloud_id(self, fail: Callable[[str, str], None]) -> None:
        """The cloud's id is not the generated id of another node."""
        topo = self.topology
        cloud = _generated(topo.cloud_id)
        if cloud is not None:
            prefix, index = cloud
            if prefix == "client" and index < topo.clients.count:
                owner = "a client"
            elif any(t.name == prefix and index < t.count for t in topo.tiers):
                owner = f"a node of tier {prefix!r}"
            else:
                owner = ""
            if owner:
                fail(
                    "topology.cloud_id",
                    f"{topo.cloud_id!r} is also the id of {owner}; choose another cloud_id",
                )

    def _check_protocol_rules(self, fail: Callable[[str, str], None]) -> None:
        """What protocol settings need: DP a sum, secure aggregation, client ids, local iters."""
        p = self.protocol
        topo = self.topology
        if self.privacy.dp is not None and p.rule != "sum":
            fail(
                "privacy.dp",
                f"noise is added to summed statistics: it needs protocol.rule: sum "
                f"(rule is {p.rule!r})",
            )
        self._check_privacy(fail)
        if p.personalization is not None:
            for cid in p.personalization.clients:
                if self.tier_of(cid) != "edge":
                    fail(
                        f"protocol.personalization.clients.{clip(str(cid))}",
                        f"{show(cid)} is not a client id (client-0 .. "
                        f"client-{topo.clients.count - 1})",
                    )
        if p.rule == "sum" and p.local_iters != 1:
            fail(
                "protocol.local_iters", "must be 1 with rule 'sum' (it aggregates every iteration)"
            )

    def _check_periods(self, fail: Callable[[str, str], None]) -> None:
        """Tier periods: of real nodes, with a summable rule, in a single middle tier."""
        p = self.protocol
        topo = self.topology
        for i, t in enumerate(topo.tiers):
            for nid in t.periods:
                parsed = _generated(nid)
                if parsed is None or parsed[0] != t.name or parsed[1] >= t.count:
                    fail(
                        f"topology.tiers.{i}.periods.{clip(str(nid))}",
                        f"{show(nid)} is not a node of tier {t.name!r} "
                        f"({t.name}-0 .. {t.name}-{t.count - 1})",
                    )
        if p.rule == "median" and any(t.max_period() > 1 for t in topo.tiers):
            fail(
                "protocol.rule",
                "a tier period > 1 forwards weighted sums; rule 'median' is not a sum",
            )
        if len(topo.tiers) > 1:
            for i, t in enumerate(topo.tiers):
                if t.max_period() > 1:
                    fail(
                        f"topology.tiers.{i}.period",
                        "tier periods > 1 are supported with a single middle tier only",
                    )

    def _check_attach(self, fail: Callable[[str, str], None]) -> None:
        """Clients attached by id exist and go to the lowest tier."""
        topo = self.topology
        names = [t.name for t in self.topology.tiers]
        lowest = names[-1] if names else "cloud"
        for client, target in topo.clients.attach.items():
            path = f"topology.clients.attach.{clip(client)}"
            if self.tier_of(client) != "edge":
                fail(
                    path,
                    f"no client {show(client)} (ids are client-0 .. "
                    f"client-{topo.clients.count - 1})",
                )
            elif self.tier_of(target) is None:
                fail(path, f"{client} attached to {show(target)}, which does not exist")
            elif self.tier_of(target) != lowest:
                fail(
                    path,
                    f"{client} attached to {show(target)}, which is not in the lowest tier "
                    f"({lowest})",
                )

    def _check_fault_nodes(self, fail: Callable[[str, str], None]) -> None:
        """Faults name existing nodes, and only nodes with an uplink where one is faulted."""
        for kind, items in (
            ("crashes", self.faults.crashes),
            ("partitions", self.faults.partitions),
            ("degradations", self.faults.degradations),
        ):
            for i, item in enumerate(items):
                nodes = (
                    [("node", item.node)]
                    if isinstance(item, CrashSpec)
                    else [(f"nodes.{k}", n) for k, n in enumerate(item.nodes)]
                )
                for sub, node in nodes:
                    tier = self.tier_of(node)
                    if tier is None:
                        fail(f"faults.{kind}.{i}.{sub}", f"no node {show(node)}")
                    elif tier == "cloud" and kind != "crashes":
                        fail(
                            f"faults.{kind}.{i}.{sub}",
                            f"{node} has no uplink to fault (it is the cloud); list its "
                            "children instead",
                        )

    def _check_tier_counts(self, fail: Callable[[str, str], None]) -> None:
        """No tier has more nodes than the tier below it."""
        topo = self.topology
        names = [t.name for t in self.topology.tiers]
        counts = [t.count for t in topo.tiers] + [topo.clients.count]
        for i, t in enumerate(topo.tiers):
            if counts[i + 1] < t.count:
                below = names[i + 1] if i + 1 < len(names) else "edge"
                fail(
                    f"topology.tiers.{i}.count",
                    f"tier {t.name!r} has more nodes ({t.count}) than the tier below it "
                    f"({below}, {counts[i + 1]})",
                )

    def _check_views(self, fail: Callable[[str, str], None]) -> None:
        """Hybrid-view ratios sum to 1 and some clients hold all views."""
        views = self.data.views
        if views is not None:
            total = sum(views.values())
            if abs(total - 1.0) > 1e-9:
                fail("data.views", f"the ratios of all/some/single must sum to 1, got {total:g}")
            if views.get("all", 0.0) <= 0.0:
                fail(
                    "data.views",
                    "some clients must hold all views (they seed aligned centres): give all a "
                    "ratio > 0",
                )

    def _check_partition(self, fail: Callable[[str, str], None]) -> None:
        """A stratified split gives each client a fraction > 0; the paper split is two clients."""
        topo = self.topology
        part = self.data.partition
        if part.kind == "stratified":
            fr = part.fractions
            n = topo.clients.count
            if fr is None:
                fail(
                    "data.partition.fractions",
                    "kind 'stratified' needs fractions: one per client, summing to 1",
                )
            elif len(fr) != n:
                fail(
                    "data.partition.fractions",
                    f"has {len(fr)} entries but there are {n} clients; give one fraction per "
                    "client",
                )
            elif abs(sum(fr) - 1.0) > 1e-9:
                fail("data.partition.fractions", f"must sum to 1, got {sum(fr):g}")
            else:
                for k, f in enumerate(fr):
                    if f <= 0.0:
                        fail(
                            f"data.partition.fractions.{k}",
                            f"client-{k} would get no samples; every client needs at least "
                            "one, so its fraction must be > 0",
                        )
        if part.kind == "paper" and topo.clients.count != 2:
            fail(
                "data.partition.kind",
                "'paper' is the 85/15 split of two clients; topology.clients.count must be 2",
            )

    @model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        errors: list[ScenarioError] = []

        def fail(path: str, reason: str) -> None:
            errors.append(ScenarioError(reason, path=path))

        self._check_tier_names(fail)
        if errors:  # the node ids below depend on unique, unreserved tier names
            raise ScenarioErrors(errors)
        for check in (
            self._check_cloud_id,
            self._check_protocol_rules,
            self._check_algorithm,
            self._check_periods,
            self._check_attach,
            self._check_fault_nodes,
            self._check_tier_counts,
            self._check_views,
            self._check_partition,
        ):
            check(fail)
        check_access(self, fail)
        if errors:
            raise ScenarioErrors(errors)
        return self
