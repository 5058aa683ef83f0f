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

import inspect
import math
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError

from fedstrata.algorithms import deep as _deep
from fedstrata.algorithms.deep.config import DEEP_METHODS, DeepModel
from fedstrata.errors import ScenarioError
from fedstrata.scenarios.datasets import DATASETS
from fedstrata.scenarios.units import to_fraction, to_mbps, to_seconds

__all__ = [
    "DATASET_PARAM_BOUNDS",
    "DEEP_EXTRA_ROUNDS",
    "DIMS_METHODS",
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
    "clip",
    "describe_error",
    "show",
]

# ------------------------------------------------------------------------------ bounds

MAX_ROUNDS = 100_000
"""Largest ``protocol.rounds``."""
MAX_LOCAL_ITERS = 10_000
"""Largest ``protocol.local_iters``."""
MAX_CLIENTS = 100_000
"""Largest ``topology.clients.count``."""
MAX_TIER_NODES = 100_000
"""Largest ``count`` of a middle tier."""
MAX_TIERS = 16
"""Most middle tiers under ``topology.tiers``."""
MAX_CLUSTERS = 1000
"""Largest ``algorithm.n_clusters``."""
MAX_SECONDS = 1e9
"""Largest duration or time, in (virtual) seconds: deadlines, latencies, fault times."""
MAX_SAMPLES = 2_000_000
"""Most samples a scenario's dataset may have (``data.params`` are bounded to keep it)."""
MAX_TRACE_BYTES = 16 * 1024 * 1024
"""Largest latency trace file (``dist: empirical``) read, in bytes."""
SEED_LIMIT = 2**32
"""Seeds lie in ``[0, SEED_LIMIT)``."""
ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
"""Scenario name, cloud id and tier names: MQTT topic levels usable as node ids."""
RESERVED_TIER_NAMES = frozenset({"cloud", "edge", "client"})
"""Tier names taken by the cloud, the edge tier and the client ids ``client-N``."""

DATASET_PARAM_BOUNDS: dict[str, dict[str, tuple[int, int]]] = {
    "heat-kernel-synthetic": {"n_per_cluster": (1, MAX_SAMPLES // 4)},
}
"""Inclusive integer ranges of dataset parameters (``data.params``), by dataset."""

_ID = re.compile(ID_PATTERN)
_CLIP = 80

# Units (see fedstrata.scenarios.units): each type also takes a string with a unit,
# converted before the strict number check; the JSON schema offers both spellings.
_NUM_RE = r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?"


def _unit_schema(number: dict[str, Any], units: str, example: str) -> WithJsonSchema:
    text = {"type": "string", "pattern": rf"^\s*{_NUM_RE}\s*({units})\s*$", "examples": [example]}
    return WithJsonSchema({"anyOf": [{"type": "number", **number}, text]})


_DURATION_UNITS = "ns|us|µs|ms|s|sec|min|h"
_SECONDS_SCHEMA = _unit_schema({"minimum": 0, "maximum": MAX_SECONDS}, _DURATION_UNITS, "40ms")
Probability = Annotated[
    float,
    BeforeValidator(to_fraction),
    Field(ge=0.0, le=1.0),
    _unit_schema({"minimum": 0, "maximum": 1}, "%", "10%"),
]
Seconds = Annotated[
    float, BeforeValidator(to_seconds), Field(ge=0.0, le=MAX_SECONDS), _SECONDS_SCHEMA
]
PositiveSeconds = Annotated[
    float,
    BeforeValidator(to_seconds),
    Field(gt=0.0, le=MAX_SECONDS),
    _unit_schema({"exclusiveMinimum": 0, "maximum": MAX_SECONDS}, _DURATION_UNITS, "2s"),
]
Mbps = Annotated[
    float,
    BeforeValidator(to_mbps),
    Field(ge=1e-9, le=1e9),
    _unit_schema({"minimum": 1e-9, "maximum": 1e9}, "[bB][pP][sS]|[kKmMgG][bB][pP][sS]", "5Mbps"),
]
"""Mbit/s in ``[1e-9, 1e9]``; also ``5Mbps``, ``100kbps``, ``1Gbps``."""
Speed = Annotated[float, Field(gt=0.0, le=1e6, description="GFLOP/s, (0, 1e6]")]
Seed = Annotated[int, Field(ge=0, lt=SEED_LIMIT, description="0 <= seed < 2**32")]


# ------------------------------------------------------------------------------ messages


def clip(text: str, limit: int = _CLIP) -> str:
    """Shorten ``text`` to at most ``limit`` characters, ending in ``...`` when cut.

    Parameters
    ----------
    text
        Any text echoed from a user's file.
    limit
        Largest length returned.

    Returns
    -------
    str
        ``text`` itself or its first ``limit - 3`` characters followed by ``...``.

    """
    return text if len(text) <= limit else text[: limit - 3] + "..."


def show(value: Any) -> str:
    """A short, YAML-flavoured rendering of a value for an error message.

    Booleans and null print as YAML spells them (``true``, ``null``), non-finite floats
    as ``.inf``/``-.inf``/``.nan``, strings quoted, containers by their kind only; the
    result is never longer than 80 characters.

    Parameters
    ----------
    value
        The offending input.

    Returns
    -------
    str
        The rendering.

    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return clip(repr(value))
    if isinstance(value, int):
        if value.bit_length() > 256:
            return f"an integer of {value.bit_length()} bits"
        return clip(str(value))
    if isinstance(value, str):
        return clip(repr(value))
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def _num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return show(value)


_PLAIN = {
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "int_parsing": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
}
_BOUND = {
    "greater_than": (">", "gt"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "less_than_equal": ("<=", "le"),
}


def describe_error(err: dict[str, Any]) -> str:
    """Turn one pydantic error into a reason a user can act on.

    Parameters
    ----------
    err
        An entry of :meth:`pydantic.ValidationError.errors`.

    Returns
    -------
    str
        For example ``must be an integer, got true`` or ``must be <= 100000, got
        250000``; inputs are rendered with :func:`show`.

    """
    kind = str(err.get("type", ""))
    ctx = err.get("ctx") or {}
    got = show(err.get("input"))
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "invalid_key":
        return f"not a valid key (keys are names), got {got}"
    if kind in ("model_type", "dict_type") and err.get("input") is None:
        return "has no value; give it a mapping of settings or remove the key"
    if kind in _PLAIN:
        return f"{_PLAIN[kind]}, got {got}"
    if kind in _BOUND:
        op, key = _BOUND[kind]
        return f"must be {op} {_num(ctx.get(key))}, got {got}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}, got {got}"
    if kind == "too_short":
        if ctx.get("min_length") == 1:
            return "must not be empty"
        return f"must have at least {ctx.get('min_length')} entries"
    if kind == "too_long":
        return f"must have at most {ctx.get('max_length')} entries"
    msg = str(err.get("msg", "invalid value"))
    msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return clip(msg, 300) if kind in ("value_error", "assertion_error") else f"{msg}, got {got}"


class ScenarioErrors(ScenarioError):  # noqa: N818 - a ScenarioError holding several
    """Several located problems in one file; ``errors`` lists them, the message joins them.

    Parameters
    ----------
    errors
        The problems, each a :class:`~fedstrata.errors.ScenarioError`.
    """

    def __init__(self, errors: list[ScenarioError]) -> None:
        self.errors = errors
        super().__init__("; ".join(e.located() for e in errors))

    def located(self) -> str:
        """All problems, one per line."""
        return "\n".join(e.located() for e in self.errors)


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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


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
    tiers: list[TierSpec] = Field(default_factory=list, max_length=MAX_TIERS)
    clients: ClientsSpec = ClientsSpec()


# ------------------------------------------------------------------------------ data


class PartitionSpec(_Strict):
    """How samples are split over clients.

    ``alpha`` (``0 < alpha <= 1e6``) is the Dirichlet concentration of ``dirichlet``
    (required) and ``quantity`` (default 1); ``fractions`` (one per client, each > 0,
    summing to 1) belong to ``stratified`` only. Every client must get at least one
    sample.
    """

    kind: Literal["iid", "dirichlet", "quantity", "stratified", "paper"] = "iid"
    alpha: Annotated[float, Field(gt=0.0, le=1e6)] | None = Field(None, description="(0, 1e6]")
    fractions: list[Probability] | None = None

    @model_validator(mode="after")
    def _used(self) -> PartitionSpec:
        errors = []
        if self.alpha is not None and self.kind not in ("dirichlet", "quantity"):
            errors.append(
                ScenarioError(
                    f"not used by kind {self.kind!r} (only dirichlet and quantity take alpha)",
                    path="data.partition.alpha",
                )
            )
        if self.fractions is not None and self.kind != "stratified":
            errors.append(
                ScenarioError(
                    f"not used by kind {self.kind!r} (only stratified takes fractions)",
                    path="data.partition.fractions",
                )
            )
        if self.kind == "dirichlet" and self.alpha is None:
            errors.append(
                ScenarioError(
                    "kind 'dirichlet' needs alpha (the concentration, > 0)",
                    path="data.partition.alpha",
                )
            )
        if errors:
            raise ScenarioErrors(errors)
        return self


@cache
def _param_adapter(dataset: str, param: str) -> TypeAdapter[Any] | None:
    """A strict validator for one keyword of a dataset loader, from its signature."""
    sig = inspect.signature(DATASETS[dataset], eval_str=True)
    ann = sig.parameters[param].annotation
    if ann is inspect.Parameter.empty:
        return None
    return TypeAdapter(ann, config=ConfigDict(strict=True, allow_inf_nan=False))


def _dataset_params(dataset: str) -> dict[str, inspect.Parameter]:
    sig = inspect.signature(DATASETS[dataset])
    return {
        k: p
        for k, p in sig.parameters.items()
        if k != "random_state"
        and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    }


MAX_VIEW_FILES = 64
"""Most view files under ``data.files.views``."""


class DataFile(_Strict):
    """One data file: ``path`` and, for an ``.npz`` archive of several arrays, ``key``.

    A relative ``path`` is read from the scenario file's folder. The formats are
    those of ``fedstrata node`` (``.npz``, ``.csv``) and ``.parquet`` (with pyarrow).
    """

    path: str = Field(description="a .npz, .csv or .parquet file")
    key: str | None = Field(None, description="the array of an .npz archive")


class DataFilesSpec(_Strict):
    """Your own data: one file per view and a label file, row ``i`` of each is sample ``i``.

    Each item of ``views`` and ``labels`` is a path or ``{path, key}``. A view file
    holds an ``(n_samples, n_features)`` table of finite numbers: ``.npz`` (``key``
    names the array when the archive holds several), ``.csv`` (a header line is
    skipped) or ``.parquet`` (every column a feature; needs pyarrow). The optional
    label file holds one whole number per sample (an ``.npz`` array may be 1-D);
    without it a run has no ACC/NMI/ARI and the label-based partitions (``dirichlet``,
    ``stratified``, ``paper``) and ``protocol.personalization`` are refused. Every
    file is read by ``fedstrata validate``, which names the file and where in it a
    problem is.
    """

    views: Annotated[
        list[str | DataFile],
        Field(min_length=1, max_length=MAX_VIEW_FILES, description=f"1 .. {MAX_VIEW_FILES}"),
    ]
    labels: str | DataFile | None = None


def _resolve(path: str, base: Path | None) -> Path:
    p = Path(path)
    return p if base is None or p.is_absolute() else base / p


def _check_files(files: DataFilesSpec, base: Path | None) -> DataFilesSpec:
    """Read every file of ``files``; return it with absolute paths, or raise located errors.

    Errors are at ``data.files.views.<i>.path`` (``.key`` for a missing array,
    without ``.path`` when the item is a bare path), ``data.files.labels...``.
    """
    from fedstrata.device.data import DataFileError
    from fedstrata.scenarios.datasets import load_files

    def item(entry: str | DataFile) -> tuple[str, str | None]:
        return (entry, None) if isinstance(entry, str) else (entry.path, entry.key)

    def where(prefix: str, entry: str | DataFile, field: str) -> str:
        return prefix if isinstance(entry, str) else f"{prefix}.{field}"

    entries = [("data.files.views." + str(i), e) for i, e in enumerate(files.views)]
    if files.labels is not None:
        entries.append(("data.files.labels", files.labels))
    for prefix, entry in entries:
        path, _ = item(entry)
        if not path or "\x00" in path:
            raise ScenarioErrors(
                [
                    ScenarioError(
                        f"must be a file name, got {show(path)}", path=where(prefix, entry, "path")
                    )
                ]
            )
    resolved = [(str(_resolve(p, base)), k) for p, k in map(item, files.views)]
    label_item = None
    if files.labels is not None:
        lp, lk = item(files.labels)
        label_item = (str(_resolve(lp, base)), lk)
    try:
        load_files(resolved, label_item)
    except DataFileError as exc:
        h = getattr(exc, "view", None)
        prefix, entry = entries[-1] if h is None else entries[h]
        shown, _ = item(entry)
        rel = ""  # where a relative path was looked for, when it was not found
        if exc.reason == "does not exist" and base is not None and not Path(shown).is_absolute():
            rel = " (relative to the scenario file)"
        msg = f"{show(shown)}{rel} {exc.reason}" if exc.field == "path" else exc.reason
        raise ScenarioErrors([ScenarioError(msg, path=where(prefix, entry, exc.field))]) from None

    def absolute(entry: str | DataFile) -> str | DataFile:
        path, key = item(entry)
        full = str(_resolve(path, base).absolute())
        return full if isinstance(entry, str) else DataFile(path=full, key=key)

    return DataFilesSpec(
        views=[absolute(e) for e in files.views],
        labels=None if files.labels is None else absolute(files.labels),
    )


class DataSpec(_Strict):
    """Dataset, its parameters, the partition and the hybrid view assignment.

    ``dataset`` is a key of :data:`~fedstrata.scenarios.datasets.DATASETS`; ``params``
    are keyword arguments of its loader, checked against the loader's signature and
    types (``random_state`` comes from ``seed``) and against
    :data:`DATASET_PARAM_BOUNDS` (``heat-kernel-synthetic``: ``n_per_cluster`` in
    ``1 .. 500000``). ``files`` reads your own views and labels from files instead
    (:class:`DataFilesSpec`; then neither ``dataset`` nor ``params`` is given); every
    ``partition`` kind applies to them as to a built-in dataset. ``views`` gives the
    shares of full-view (``all``, > 0), partial-view (``some``) and single-view
    (``single``) clients, summing to 1.
    """

    dataset: str = "heat-kernel-synthetic"
    params: dict[str, Any] = Field(default_factory=dict)
    files: DataFilesSpec | None = None
    partition: PartitionSpec = PartitionSpec()
    views: dict[Literal["all", "some", "single"], Probability] | None = None

    @field_validator("files")
    @classmethod
    def _read_files(cls, value: DataFilesSpec | None, info: ValidationInfo) -> DataFilesSpec | None:
        if value is None:
            return value
        base = (info.context or {}).get("base_dir")
        return _check_files(value, None if base is None else Path(base))

    @field_validator("dataset")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in DATASETS:
            raise ValueError(
                f"unknown dataset {show(value)}; known datasets: {', '.join(sorted(DATASETS))}"
            )
        return value

    @model_validator(mode="after")
    def _params(self) -> DataSpec:
        if self.files is not None:
            clash = [k for k in ("dataset", "params") if k in self.model_fields_set]
            if clash:
                raise ScenarioErrors(
                    [
                        ScenarioError(
                            "data.files gives the data: remove this (or files)", path=f"data.{k}"
                        )
                        for k in clash
                    ]
                )
            return self
        allowed = _dataset_params(self.dataset)
        bounds = DATASET_PARAM_BOUNDS.get(self.dataset, {})
        errors = []
        for key, value in self.params.items():
            path = f"data.params.{clip(str(key))}"
            if key == "random_state":
                errors.append(
                    ScenarioError("is set from the scenario's seed; remove it", path=path)
                )
                continue
            if key not in allowed:
                takes = ", ".join(allowed) or "no parameters"
                errors.append(
                    ScenarioError(
                        f"unknown parameter of dataset {self.dataset!r} (it takes {takes})",
                        path=path,
                    )
                )
                continue
            adapter = _param_adapter(self.dataset, key)
            if adapter is not None:
                try:
                    adapter.validate_python(value)
                except PydanticValidationError as exc:
                    errors.append(ScenarioError(describe_error(exc.errors()[0]), path=path))
                    continue
            if key in bounds:
                low, high = bounds[key]
                if value < low:
                    errors.append(ScenarioError(f"must be >= {low}, got {show(value)}", path=path))
                elif value > high:
                    errors.append(
                        ScenarioError(
                            f"must be <= {high} (at most {MAX_SAMPLES} samples), got {show(value)}",
                            path=path,
                        )
                    )
        if errors:
            raise ScenarioErrors(errors)
        return self


# ------------------------------------------------------------------------------ algorithm


TENSOR_METHODS = ("e-fkmvc", "fedhk-parafac2", "fedhk-tucker", "fedhk-mvc-person")

# the tensor family's own keys, and which method reads each (the others refuse them)
_TENSOR_KEYS: dict[str, frozenset[str]] = {
    "local_epochs": frozenset(TENSOR_METHODS + DEEP_METHODS),
    "eps_a": frozenset({"e-fkmvc"}),
    "eps_v": frozenset({"e-fkmvc"}),
    "rank": frozenset({"fedhk-parafac2", "fedhk-mvc-person"}),
    "ranks": frozenset({"fedhk-tucker", "fedhk-mvc-person"}),
    "lam": frozenset({"fedhk-parafac2", "fedhk-tucker", "fedhk-mvc-person"}),
    "tau": frozenset({"fedhk-parafac2", "fedhk-tucker", "fedhk-mvc-person"}),
    "rho": frozenset({"fedhk-mvc-person"}),
    "beta": frozenset({"fedhk-mvc-person"}),
    "decomposition": frozenset({"fedhk-mvc-person"}),
}

# the deep family's own keys (local_epochs is shared with the tensor family, above)
_DEEP_KEYS: dict[str, frozenset[str]] = {
    "hidden": frozenset(DEEP_METHODS),
    "latent": frozenset(DEEP_METHODS),
    "head": frozenset(DEEP_METHODS),
    "pretrain_rounds": frozenset(DEEP_METHODS),
    "train_rounds": frozenset(DEEP_METHODS),
    "pretrain_epochs": frozenset(DEEP_METHODS),
    "copy_epochs": frozenset({"fmcsc"}),
    "batch_size": frozenset(DEEP_METHODS),
    "lr": frozenset(DEEP_METHODS),
    "temperature": frozenset(DEEP_METHODS),
    "contrast_weight": frozenset({"efd-mvc"}),
    "mu": frozenset({"efd-mvc"}),
    "noise": frozenset({"efd-mvc"}),
    "kmeans_rounds": frozenset(DEEP_METHODS),
    "mi_bins": frozenset({"fmcsc"}),
}

DIMS_METHODS = TENSOR_METHODS + DEEP_METHODS
"""Algorithms whose model needs the views' feature counts (``model_of(sc, dims)``)."""

DEEP_EXTRA_ROUNDS = 2
"""Rounds a deep run takes besides ``pretrain_rounds`` and ``train_rounds``: the k-means
candidates and at least one Lloyd round."""


def _and(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


class AlgorithmSpec(_Strict):
    """Clustering algorithm and its hyper-parameters.

    ``n_clusters`` lies in ``2 .. 1000``, the fuzzifier ``m`` in ``(1, 50]``, the
    view-weight exponent ``alpha`` in ``(1, 1000]``. ``mvfcm`` has no heat kernel and
    always uses the exact centre update, so ``kernel`` and ``center_update`` may not be
    set to anything else with it. ``mvkm-ed`` (hard memberships, its own β schedule)
    takes neither ``m``, ``kernel`` nor ``center_update``, and runs with ``protocol.rule:
    sum`` (the parameter rules do not carry its β yet).

    The tensor family (``e-fkmvc``, ``fedhk-parafac2``, ``fedhk-tucker``,
    ``fedhk-mvc-person``; "Personalized Federated Heat-Kernel Enhanced Multi-View
    Clustering via Advanced Tensor Decomposition") takes ``m``, ``alpha`` (default 2
    there) and its own keys, each read by some of the four only: ``local_epochs`` (all),
    ``eps_a``/``eps_v`` (e-fkmvc's personalisation steps), ``rank`` (PARAFAC2 or CP),
    ``ranks`` (Tucker's three ranks), ``lam`` (λ, the weight of the global factors in a
    client's blend), ``tau`` (τ of the clients' softmax weights), ``rho`` and ``beta``
    (fedhk-mvc-person's view-weight blend and λ step) and ``decomposition``
    (fedhk-mvc-person: parafac2, tucker or cp). Unset keys take the method's defaults.

    ``hk-mvfc`` takes a ``preset``: unset or ``paper`` is the FedHK-MVFC paper's
    Algorithm 1 (m 2, alpha 5, type1, paper centres: what scenario files have always
    meant); ``real-data`` is what holds up on real multi-view data, the ``HKMVFC``
    estimator's defaults (m ``auto``, alpha 50, no per-sample coefficients but a
    Gaussian heat kernel of ``bandwidth`` 8 in units of the pooled feature variances,
    ``standardize`` true, ``view_balance`` dimension, exact centres). Keys set
    explicitly win over the preset. With ``real-data`` and no ``m``, m is Schwämmle
    and Jensen's fuzzifier for the federation's size (capped at 1.3).

    The deep hybrid-view family (the ``[deep]`` extra, PyTorch: ``pip install
    "fedstrata[deep]"``) is for federations whose clients hold different subsets of the
    views: ``fmcsc`` is "Bridging Gaps: Federated Multi-View Clustering in
    Heterogeneous Hybrid Views" (NeurIPS 2024: per-view autoencoders, feature and model
    contrasts, V+1 global models aggregated by mutual-information weights), ``efd-mvc``
    "Enhanced Federated Deep Multi-View Clustering under Uncertainty Scenario" (AAAI
    2026: one global model, hierarchical contrast, a view-adaptive drift module and
    balanced aggregation weights). Both cluster the final embeddings with federated
    k-means, so ``m``, ``alpha``, ``kernel`` and ``center_update`` are refused. Their
    keys: ``hidden`` (each view's encoder layer widths; the decoder mirrors them),
    ``latent`` (per-view code size), ``head`` (projection and fusion head width),
    ``pretrain_rounds`` (consensus pre-training rounds: reconstruction only, averaged),
    ``train_rounds`` (training rounds after them), ``pretrain_epochs`` (epochs per
    pre-training round), ``local_epochs`` (epochs per training
    round), ``copy_epochs`` (fmcsc: epochs a multi-view client fits each single-view
    global model, Eq. 6), ``batch_size``, ``lr`` (the optimiser's step size),
    ``temperature`` (τ of every contrastive loss), ``contrast_weight`` (efd-mvc: α of
    Eq. 11), ``mu`` (efd-mvc: the FedProx μ of its drift module), ``noise`` (efd-mvc:
    σ of the single-view clients' augmentation, on [0, 1]-scaled inputs),
    ``kmeans_rounds`` (most Lloyd rounds of the final k-means) and ``mi_bins`` (fmcsc:
    histogram bins of its mutual-information weights). A run takes at least
    ``pretrain_rounds + train_rounds + 2`` protocol rounds (pre-training, training,
    k-means candidates, one Lloyd round), with rule ``sum`` and synchronous rounds. Unset keys take
    CPU-friendly defaults (hidden [256, 256], latent 20, head 256, pretrain_rounds 4,
    train_rounds 5,
    pretrain_epochs 50, local_epochs 10, copy_epochs 5, batch_size 256, lr 0.001,
    temperature 0.5, contrast_weight 0.5, mu 0.01, noise 0.1, kmeans_rounds 20, mi_bins
    10); the papers' settings are hidden [500, 500, 2000], pretrain_epochs 250,
    local_epochs 25 and lr 0.0003. The networks' initial weights come from the
    scenario's ``seed``.
    """

    name: Literal[
        "hk-mvfc",
        "mvfcm",
        "mvkm-ed",
        "e-fkmvc",
        "fedhk-parafac2",
        "fedhk-tucker",
        "fedhk-mvc-person",
        "fmcsc",
        "efd-mvc",
    ] = "hk-mvfc"
    n_clusters: Annotated[int, Field(ge=2, le=MAX_CLUSTERS, description="2 .. 1000")] = 4
    m: Annotated[float, Field(gt=1.0, le=50.0, description="(1, 50]")] = 2.0
    alpha: Annotated[float, Field(gt=1.0, le=1000.0, description="(1, 1000]")] = 5.0
    kernel: Literal["type1", "type2", "none"] = "type1"
    center_update: Literal["paper", "exact", "derivation"] = "paper"
    preset: Literal["paper", "real-data"] | None = None
    bandwidth: Annotated[float, Field(gt=0.0, le=1e6, description="(0, 1e6]")] | None = None
    standardize: bool | None = None
    view_balance: Literal["dimension", "equal"] | None = None
    local_epochs: Annotated[int, Field(ge=1, le=1000, description="1 .. 1000")] | None = None
    eps_a: Annotated[float, Field(ge=0.0, le=10.0, description="[0, 10]")] | None = None
    eps_v: Annotated[float, Field(ge=0.0, le=10.0, description="[0, 10]")] | None = None
    rank: Annotated[int, Field(ge=1, le=10_000, description="1 .. 10000")] | None = None
    ranks: (
        Annotated[
            list[Annotated[int, Field(ge=1, le=10_000)]],
            Field(min_length=3, max_length=3, description="three ranks, each 1 .. 10000"),
        ]
        | None
    ) = None
    lam: Annotated[float, Field(ge=0.0, le=1.0, description="[0, 1]")] | None = None
    tau: Annotated[float, Field(ge=0.0, le=1e6, description="[0, 1e6]")] | None = None
    rho: Annotated[float, Field(ge=0.0, le=1.0, description="[0, 1]")] | None = None
    beta: Annotated[float, Field(ge=0.0, le=1e3, description="[0, 1000]")] | None = None
    decomposition: Literal["parafac2", "tucker", "cp"] | None = None
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
    copy_epochs: Annotated[int, Field(ge=0, le=100_000, description="0 .. 100000")] | None = None
    batch_size: Annotated[int, Field(ge=2, le=1_000_000, description="2 .. 1000000")] | None = None
    lr: Annotated[float, Field(gt=0.0, le=10.0, description="(0, 10]")] | None = None
    temperature: Annotated[float, Field(gt=0.0, le=100.0, description="(0, 100]")] | None = None
    contrast_weight: Annotated[float, Field(ge=0.0, le=1.0, description="[0, 1]")] | None = None
    mu: Annotated[float, Field(ge=0.0, le=1e6, description="[0, 1e6]")] | None = None
    noise: Annotated[float, Field(ge=0.0, le=100.0, description="[0, 100]")] | None = None
    kmeans_rounds: Annotated[int, Field(ge=1, le=10_000, description="1 .. 10000")] | None = None
    mi_bins: Annotated[int, Field(ge=2, le=1000, description="2 .. 1000")] | None = None

    @model_validator(mode="after")
    def _used(self) -> AlgorithmSpec:
        hk_only = ("preset", "bandwidth", "standardize", "view_balance")
        errors = [
            ScenarioError(
                f"{k} is for hk-mvfc only (name is {self.name!r}); remove it",
                path=f"algorithm.{k}",
            )
            for k in hk_only
            if k in self.model_fields_set and self.name != "hk-mvfc"
        ]
        errors += [
            ScenarioError(
                f"{k} is for {_and(sorted(users))} only (name is {self.name!r}); remove it",
                path=f"algorithm.{k}",
            )
            for k, users in (*_TENSOR_KEYS.items(), *_DEEP_KEYS.items())
            if k in self.model_fields_set and self.name not in users
        ]
        if self.name in DEEP_METHODS:
            errors += [
                ScenarioError(
                    f"{self.name} clusters its networks' embeddings with k-means (no "
                    f"fuzzifier, view-weight exponent, heat kernel or centre update); remove {k}",
                    path=f"algorithm.{k}",
                )
                for k in ("m", "alpha", "kernel", "center_update")
                if k in self.model_fields_set
            ]
        elif self.name in TENSOR_METHODS:
            errors += [
                ScenarioError(
                    f"{self.name} has its own heat kernel (min-max coefficients) and "
                    f"centre steps; remove {k}",
                    path=f"algorithm.{k}",
                )
                for k in ("kernel", "center_update")
                if k in self.model_fields_set
            ]
            if self.name == "fedhk-mvc-person":
                tucker = (self.decomposition or "parafac2") == "tucker"
                wrong = "rank" if tucker else "ranks"
                if wrong in self.model_fields_set:
                    errors.append(
                        ScenarioError(
                            f"{wrong} does not fit decomposition "
                            f"{self.decomposition or 'parafac2'!r} (Tucker takes ranks, "
                            "PARAFAC2 and CP take rank); remove it",
                            path=f"algorithm.{wrong}",
                        )
                    )
        elif self.name == "mvkm-ed":
            errors += [
                ScenarioError(
                    "mvkm-ed has hard memberships, no heat kernel and the exact "
                    f"centre update; remove {k}",
                    path=f"algorithm.{k}",
                )
                for k in ("m", "kernel", "center_update")
                if k in self.model_fields_set
            ]
        elif self.name == "mvfcm":
            if "kernel" in self.model_fields_set and self.kernel != "none":
                errors.append(
                    ScenarioError(
                        "mvfcm uses no heat kernel; remove kernel", path="algorithm.kernel"
                    )
                )
            if "center_update" in self.model_fields_set and self.center_update != "exact":
                errors.append(
                    ScenarioError(
                        "mvfcm always uses the exact centre update; remove center_update",
                        path="algorithm.center_update",
                    )
                )
        if errors:
            raise ScenarioErrors(errors)
        return self


class CompressionSpec(_Strict):
    """Uplink compression of the clients' partials (:mod:`fedstrata.algorithms.compression`).

    ``scheme``: ``none`` (float64, exact), ``float32``, ``float16`` (an array beyond
    float16's range goes as float32) or ``qsgd`` (unbiased stochastic quantisation with
    a per-array scale); ``bits`` (``2 .. 8``, default 8) is for ``qsgd`` only.
    """

    scheme: Literal["none", "float32", "float16", "qsgd"] = "none"
    bits: Annotated[int, Field(ge=2, le=8, description="2 .. 8")] | None = None

    @model_validator(mode="after")
    def _bits_for_qsgd(self) -> CompressionSpec:
        if self.bits is not None and self.scheme != "qsgd":
            raise ScenarioErrors(
                [
                    ScenarioError(
                        f"bits is for scheme qsgd only (scheme is {self.scheme!r}); remove it",
                        path="protocol.compression.bits",
                    )
                ]
            )
        return self


class StalenessSpec(_Strict):
    """Staleness function of the asynchronous kinds ("Asynchronous Federated Optimization").

    ``function``: ``constant`` s = 1, ``polynomial`` s = (τ + 1)^(−a), ``hinge`` s = 1
    for τ ≤ b else 1 / (a (τ − b) + 1); ``a`` > 0 (``polynomial`` and ``hinge``), ``b``
    >= 0 (``hinge``). Unset parameters take the paper's values (a = 0.5; a = 10, b = 4).
    """

    function: Literal["constant", "polynomial", "hinge"] = "polynomial"
    a: Annotated[float, Field(gt=0.0, le=1e6, description="(0, 1e6]")] | None = None
    b: Annotated[float, Field(ge=0.0, le=1e6, description="[0, 1e6]")] | None = None

    @model_validator(mode="after")
    def _params_used(self) -> StalenessSpec:
        takes = {"constant": (), "polynomial": ("a",), "hinge": ("a", "b")}[self.function]
        extra = [k for k in ("a", "b") if getattr(self, k) is not None and k not in takes]
        if extra:
            raise ScenarioErrors(
                [
                    ScenarioError(
                        f"the {self.function} staleness function takes no {k}; remove it",
                        path=f"protocol.staleness.{k}",
                    )
                    for k in extra
                ]
            )
        return self


class NetworkKernelSpec(_Strict):
    """Network-aware heat-kernel coefficients (FedHK-MVFC Eq. 138), experimental.

    The adaptive root scales each client's coefficients δ by f(delay) = exp(−delay /
    ``tau_s``) (``tau_s`` in ``(0, 1e6]`` s), with ``delay`` the client's reply delay as
    the root observed it: slow clients' distances count less.
    """

    f: Literal["exp"] = "exp"
    tau_s: Annotated[float, Field(gt=0.0, le=1e6, description="(0, 1e6] s")] = 1.0


class MixingSpec(_Strict):
    """A client's personalization weights: γ_ℓ (centres, Eq. 78), ρ_ℓ (view weights, Eq. 79)."""

    gamma: Probability | None = None
    rho: Probability | None = None


class PersonalizationSpec(_Strict):
    """Personalized models next to the global one (FedHK-MVFC Eq. 78/79).

    On the final model every client fits ``local_iters`` (``1 .. 10000``) local
    iterations from the global model (rule ``sum``; the parameter rules already hold a
    local model), blends it with the global one, A_ℓ = γ_ℓ A_global + (1 − γ_ℓ) A_ℓ and
    V_ℓ = ρ_ℓ V_global + (1 − ρ_ℓ) V_ℓ, and labels its samples under the blend.
    γ_ℓ and ρ_ℓ are ``protocol.gamma``/``rho`` unless ``clients`` overrides them for a
    client id. The run reports per-client metrics of both models (``clients.csv``).
    """

    local_iters: Annotated[int, Field(ge=1, le=MAX_LOCAL_ITERS, description="1 .. 10000")] = 5
    clients: dict[str, MixingSpec] = Field(default_factory=dict)


#: Protocol fields that only some kinds use (the others refuse them).
_KIND_FIELDS = {
    "mixing": ("async", "buffered"),
    "staleness": ("async", "buffered"),
    "max_staleness": ("async", "buffered"),
    "buffer_size": ("buffered",),
    "lambda_net": ("adaptive",),
    "network_kernel": ("adaptive",),
}


class ProtocolSpec(_Strict):
    """Aggregation protocol.

    ``kind`` picks the root's protocol: ``sync`` (rounds), ``async`` (FedAsync: every
    arriving contribution is mixed at once, staleness-weighted), ``buffered`` (FedBuff:
    every ``buffer_size`` arrivals) or ``adaptive`` (a network-aware plan per round,
    FedHK-MVFC §7.3, experimental); middle tiers always run synchronous rounds.
    ``rounds`` lies in ``1 .. 100000`` (model versions for the asynchronous kinds),
    ``local_iters`` in ``1 .. 10000`` (1 with rule ``sum``), ``deadline_s`` in
    ``(0, 1e9]``, ``tol`` in ``[0, 1e9]``; ``quorum``, ``gamma`` and ``rho`` are
    probabilities; ``qos`` is 0 or 1; ``patience`` lies in ``1 .. 100000``;
    ``compression`` is a :class:`CompressionSpec`, ``staleness`` a
    :class:`StalenessSpec`.
    """

    kind: Literal["sync", "async", "buffered", "adaptive"] = "sync"
    rule: Literal["sum", "weighted", "mean", "median"] = "sum"
    rounds: Annotated[int, Field(ge=1, le=MAX_ROUNDS, description="1 .. 100000")] = 50
    local_iters: Annotated[int, Field(ge=1, le=MAX_LOCAL_ITERS, description="1 .. 10000")] = 1
    tol: Annotated[float, Field(ge=0.0, le=1e9, description="0 .. 1e9")] = 1e-6
    deadline_s: PositiveSeconds = 60.0
    quorum: Probability = 1.0
    qos: Annotated[int, Field(ge=0, le=1, description="MQTT QoS, 0 or 1")] = 1
    kernel_scope: Literal["global", "local"] | None = None
    gamma: Probability = 0.7
    rho: Probability = 0.7
    #: Consecutive root rounds (setup included) below quorum after which the run stops
    #: with status ``stalled`` instead of waiting out ``rounds``.
    patience: Annotated[int, Field(ge=1, le=MAX_ROUNDS, description="1 .. 100000")] = 10
    #: How ``tol`` is read: ``absolute`` |ΔJ| (or Eq. 86), ``relative`` to the previous
    #: value, ``per_sample`` |Δ(J/n)| with n the contributing samples (rule ``sum``).
    tol_mode: Literal["absolute", "relative", "per_sample"] = "absolute"
    #: Also end ``converged`` once J/n has not improved on its best by more than
    #: ``plateau_tol`` (relative) for this many successful rounds; ``null``: off.
    plateau: Annotated[int, Field(ge=1, le=MAX_ROUNDS, description="1 .. 100000")] | None = None
    plateau_tol: Annotated[float, Field(ge=0.0, lt=1.0, description="0 <= tol < 1")] = 1e-3
    #: How clients compress their partials on the uplink (aggregators send float64).
    compression: CompressionSpec = CompressionSpec()
    #: Synchronous rounds: ``wait`` for the wanted replies (or the deadline), ``drop``
    #: the rest once the quorum replied, or ``use_last`` partials of those missing.
    stragglers: Literal["wait", "drop", "use_last"] = "wait"
    #: Fraction of an aggregator's clients a round wants (client sampling).
    sample: Annotated[float, Field(gt=0.0, le=1.0, description="(0, 1]")] = 1.0
    #: Over-selection: ask ceil(k · (1 + over_select)) clients, use the first k.
    over_select: Annotated[float, Field(ge=0.0, le=100.0, description="[0, 100]")] = 0.0
    #: Asynchronous kinds: mixing weight α of a fresh contribution.
    mixing: Annotated[float, Field(gt=0.0, le=1.0, description="(0, 1]")] = 1.0
    staleness: StalenessSpec = StalenessSpec()
    #: Asynchronous kinds: replies more model versions behind are dropped.
    max_staleness: Annotated[int, Field(ge=0, le=MAX_ROUNDS, description="0 .. 100000")] = 1000
    #: ``buffered``: K, arrivals per model step.
    buffer_size: Annotated[int, Field(ge=1, le=MAX_CLIENTS, description="1 .. 100000")] = 2
    #: ``adaptive``: λ_net of Eq. 139, per second of expected round time.
    lambda_net: Annotated[float, Field(ge=0.0, le=1e6, description="[0, 1e6]")] = 1.0
    #: ``adaptive``, experimental: Eq. 138's network-aware heat-kernel coefficients.
    network_kernel: NetworkKernelSpec | None = None
    #: Per-client personalized models next to the global one; ``null``: off.
    personalization: PersonalizationSpec | None = None

    def unused_fields(self) -> list[str]:
        """The kind-specific fields this protocol's kind does not use."""
        return [name for name, kinds in _KIND_FIELDS.items() if self.kind not in kinds]

    @model_validator(mode="after")
    def _kind_fields(self) -> ProtocolSpec:
        errors = [
            ScenarioError(
                f"is for protocol kind {' or '.join(kinds)} (kind is {self.kind!r}); remove it",
                path=f"protocol.{name}",
            )
            for name, kinds in _KIND_FIELDS.items()
            if name in self.model_fields_set and self.kind not in kinds
        ]
        if self.network_kernel is not None and self.rule != "sum":
            errors.append(
                ScenarioError(
                    "scales the clients' heat-kernel coefficients of summed statistics: it "
                    f"needs rule: sum (rule is {self.rule!r})",
                    path="protocol.network_kernel",
                )
            )
        if self.kind in ("async", "buffered") and self.rule == "median":
            errors.append(
                ScenarioError(
                    f"protocol kind {self.kind!r} mixes each child's share of a sum; rule "
                    "'median' is not a sum (use sum, weighted or mean)",
                    path="protocol.rule",
                )
            )
        if errors:
            raise ScenarioErrors(errors)
        return self

    @model_validator(mode="after")
    def _per_sample_needs_sum(self) -> ProtocolSpec:
        if self.tol_mode == "per_sample" and self.rule != "sum":
            raise ScenarioErrors(
                [
                    ScenarioError(
                        "per_sample tests the objective of summed statistics: it needs "
                        f"rule: sum (rule is {self.rule!r}); use relative",
                        path="protocol.tol_mode",
                    )
                ]
            )
        return self


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
            raise ValueError(f"end ({_num(self.end)}) must be after start ({_num(self.start)})")
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
            raise ValueError(f"end ({_num(self.end)}) must be after start ({_num(self.start)})")
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


_Bound = Annotated[float, Field(gt=0.0, le=1e12, description="(0, 1e12]")]


class DPBlockClips(_Strict):
    """Per-block L2 bounds of a client's statistics (``privacy.dp.clip`` as a mapping)."""

    num: _Bound
    den: _Bound
    costs: _Bound
    mass: _Bound

    def bounds(self) -> tuple[float, float, float, float]:
        """The four bounds in the order the statistics are sent."""
        return (self.num, self.den, self.costs, self.mass)


class DPSpec(_Strict):
    """Differential privacy of each client's statistics (the Gaussian mechanism).

    Every round each client clips its whole statistics partial to L2 norm ``clip``
    (``> 0``, in the units of the statistics: sums over its samples) and adds Gaussian
    noise of std z·clip, with the noise multiplier z chosen so that ``protocol.rounds``
    releases spend at most ``epsilon`` (``(0, 1000]``) at ``delta`` (``(0, 0.1]``) under
    the RDP accountant. Without secure aggregation every release is seen by the
    aggregator, so this is local (per-client, per-release) DP. Needs ``rule: sum``.

    ``clip`` is one bound on the whole statistics vector, or a mapping of one bound per
    block (``num``: the centre numerators, ``den``: the denominators, ``costs``: the
    view costs, ``mass``: the cluster mass): each block is then clipped to its bound
    and noised with std z·2·bound (2 = √4 blocks), which is the same privacy, and
    keeps the small denominators from drowning in noise sized for the numerators.

    ``schedule``: ``constant`` (the same noise every round, from the accountant);
    ``eq93``, the adaptive budget of the FedHK-MVFC paper (Eq. 93),
    ε_t = ε/√T · 1/√(t+1), each round noised by the paper's Eq. 89 with its ε_t (no
    composition theorem backs it: the summary reports what the accountant says was
    spent, which can differ from ``epsilon`` either way); ``eq93-normalised``: the
    same shape, rescaled so that the accountant's total is ``epsilon``.

    With secure aggregation on, the noise is distributed: each client adds a share
    (variance σ²/t, t the smallest unmasking threshold of the client groups), so
    every sum an aggregator can unmask carries at least σ².
    """

    epsilon: Annotated[float, Field(gt=0.0, le=1000.0, description="(0, 1000]")]
    delta: Annotated[float, Field(gt=0.0, le=0.1, description="(0, 0.1]")] = 1e-5
    clip: _Bound | DPBlockClips
    schedule: Literal["constant", "eq93", "eq93-normalised"] = "constant"


class PrivacySpec(_Strict):
    """Privacy settings: secure aggregation at every tier, differential privacy, signing.

    ``secure_aggregation`` masks every partial so each aggregator learns only the sum
    of its children's: ``secagg`` (Bonawitz et al., CCS 2017) or ``secagg+`` (Bell et
    al., CCS 2020, each member paired with ``neighbours`` others on a random regular
    graph). ``threshold`` is how many share holders must answer to unmask: an integer,
    or a fraction in (0.5, 1] of the holders; by default the smallest safe value,
    h // 2 + 1. ``precision_bits`` is the fixed-point resolution of masked values
    (2**-bits). ``true``/``false`` are read as ``secagg``/``none``.

    ``sign`` signs every message with the sender's Ed25519 key (64 bytes each) and
    makes every node refuse unsigned, forged and replayed messages (counted by
    reason). It is for the simulator, whose keys are derived from the seed (they
    protect nothing). Runs over a real broker sign whatever it says: ``fedstrata run
    --transport mqtt`` with fresh per-run keys (``--insecure`` to send unsigned, which
    ``sign: true`` refuses), devices with the key files of ``fedstrata keys``.
    """

    secure_aggregation: Literal["none", "secagg", "secagg+"] = "none"
    threshold: int | Annotated[float, Field(gt=0.5, le=1.0)] | None = None
    neighbours: Annotated[int, Field(ge=2, le=1_000_000)] | None = None
    precision_bits: Annotated[int, Field(ge=8, le=40, description="8 .. 40")] = 24
    #: Ed25519 signatures on every message; forged, replayed and unsigned ones are refused.
    sign: bool = False
    #: Gaussian-mechanism noise on the clients' statistics, with accounting.
    dp: DPSpec | None = None

    @field_validator("secure_aggregation", mode="before")
    @classmethod
    def _booleans(cls, value: Any) -> Any:
        if value is True:
            return "secagg"
        if value is False or value is None:
            return "none"
        return value

    @field_validator("threshold")
    @classmethod
    def _threshold(cls, value: int | float | None) -> int | float | None:
        if isinstance(value, int) and not isinstance(value, bool) and value < 2:
            raise ValueError("an absolute threshold must be >= 2 (one share reveals a secret)")
        return value

    @field_validator("neighbours")
    @classmethod
    def _even(cls, value: int | None) -> int | None:
        if value is not None and value % 2:
            raise ValueError(f"must be even (a regular ring graph), got {value}")
        return value


class OutputSpec(_Strict):
    """What a run writes besides summary.json and rounds.csv."""

    events: bool = False
    plots: bool = True


# ------------------------------------------------------------------------------ scenario


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
    algorithm: AlgorithmSpec = AlgorithmSpec()
    protocol: ProtocolSpec = ProtocolSpec()
    faults: FaultsSpec = FaultsSpec()
    privacy: PrivacySpec = PrivacySpec()
    output: OutputSpec = OutputSpec()

    def resolved_yaml(self, seed: int | None = None) -> str:
        """The scenario as it runs (defaults filled in, ``seed`` applied), as YAML text.

        Fields the protocol's kind does not use are left out (they would be refused on
        reading it back). Its SHA-256 is a run record's ``scenario_hash``.
        """
        import yaml

        data = self.model_dump(mode="json", exclude_none=True)
        for name in self.protocol.unused_fields():
            data["protocol"].pop(name, None)
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

    def _check_tensor(self, fail: Callable[[str, str], None]) -> None:
        """What the tensor family runs with: sums, pooled ranges, no fog periods."""
        p, name = self.protocol, self.algorithm.name
        if p.rule != "sum":
            fail(
                "protocol.rule",
                f"{name} runs with rule 'sum' (its clients send pre-weighted sums; the "
                f"server rule is the paper's), not {p.rule!r}",
            )
        if p.kernel_scope == "local":
            fail(
                "protocol.kernel_scope",
                f"{name} scales every client's views with the pooled ranges: kernel_scope "
                "must be global",
            )
        if p.compression.scheme != "none":
            fail(
                "protocol.compression",
                f"{name}'s messages are factor sums; compression is for the multi-view "
                "statistics only",
            )
        if self.privacy.dp is not None:
            fail(
                "privacy.dp",
                f"differential privacy is calibrated for the multi-view statistics; {name}'s "
                "factor sums have no clipping bound yet",
            )
        if p.personalization is not None:
            fail(
                "protocol.personalization",
                f"{name} personalises with its own λ blend (algorithm.lam); remove "
                "protocol.personalization",
            )
        for i, t in enumerate(self.topology.tiers):
            if t.max_period() > 1:
                fail(
                    f"topology.tiers.{i}.period",
                    f"{name}: a middle tier cannot turn a tensor model back into client "
                    "sums, so tier periods must be 1",
                )

    def _check_deep(self, fail: Callable[[str, str], None]) -> None:
        """What the deep family runs with: PyTorch, sums, pooled ranges, synchronous rounds."""
        p, a = self.protocol, self.algorithm
        name = a.name
        if not _deep.torch_available():
            fail(
                "algorithm.name",
                f'{name} needs PyTorch, the [deep] extra: pip install "fedstrata[deep]"',
            )
        if p.rule != "sum":
            fail(
                "protocol.rule",
                f"{name} runs with rule 'sum' (the server weighs the clients' networks as "
                f"the paper does), not {p.rule!r}",
            )
        if p.kernel_scope == "local":
            fail(
                "protocol.kernel_scope",
                f"{name} min-max scales every client's views with the pooled ranges: "
                "kernel_scope must be global",
            )
        if p.compression.scheme != "none":
            fail(
                "protocol.compression",
                f"{name}'s messages are network weights; compression is for the multi-view "
                "statistics only",
            )
        if self.privacy.dp is not None:
            fail(
                "privacy.dp",
                f"differential privacy is calibrated for the multi-view statistics; {name}'s "
                "network weights have no clipping bound yet",
            )
        if self.privacy.secure_aggregation != "none":
            fail(
                "privacy.secure_aggregation",
                f"masking {name}'s float32 network weights is not implemented yet; set "
                "secure_aggregation: none",
            )
        if p.personalization is not None:
            fail(
                "protocol.personalization",
                f"{name} has no personalised models; remove protocol.personalization",
            )
        for i, t in enumerate(self.topology.tiers):
            if t.max_period() > 1:
                fail(
                    f"topology.tiers.{i}.period",
                    f"{name}: every phase (pre-training, training, k-means) takes one root "
                    "round, so tier periods must be 1",
                )
        if p.kind in ("async", "buffered"):
            fail(
                "protocol.kind",
                f"{name}'s pre-training, training and k-means phases need synchronous "
                f"rounds: kind must be sync or adaptive, not {p.kind!r}",
            )
        pre = DeepModel.pretrain_rounds if a.pretrain_rounds is None else a.pretrain_rounds
        train = DeepModel.train_rounds if a.train_rounds is None else a.train_rounds
        need = pre + train + DEEP_EXTRA_ROUNDS
        if p.rounds < need:
            fail(
                "protocol.rounds",
                f"{name} needs at least pretrain_rounds + train_rounds + {DEEP_EXTRA_ROUNDS} = "
                f"{need} rounds ({pre} of consensus pre-training, {train} of training, 1 of "
                f"k-means candidates and at least 1 Lloyd round), got {p.rounds}",
            )

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
        if p.kind != "sync":
            fail("protocol.kind", f"{why}: kind {p.kind!r} needs each child's own partial")
        if p.stragglers != "wait":
            fail("protocol.stragglers", f"{why}: only 'wait' (a dropout's masks are recovered)")
        if p.over_select > 0:
            fail("protocol.over_select", f"{why}: a masked round uses every reply it gets")
        if p.compression.scheme != "none":
            fail("protocol.compression.scheme", f"{why}: masked values are fixed-point already")

    @model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        errors: list[ScenarioError] = []

        def fail(path: str, reason: str) -> None:
            errors.append(ScenarioError(reason, path=path))

        p, topo = self.protocol, self.topology
        names = [t.name for t in topo.tiers]
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
        if errors:  # the node ids below depend on unique, unreserved tier names
            raise ScenarioErrors(errors)
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
        if self.algorithm.name == "mvkm-ed":
            if p.rule != "sum":
                fail(
                    "protocol.rule",
                    "mvkm-ed runs with rule 'sum' (its β schedule travels with the summed "
                    "statistics' model; the parameter rules do not carry it yet)",
                )
            elif p.kernel_scope == "local":
                fail(
                    "protocol.kernel_scope",
                    "mvkm-ed's β comes from the pooled feature means: kernel_scope must be global",
                )
        if self.algorithm.name in TENSOR_METHODS:
            self._check_tensor(fail)
        if self.algorithm.name in DEEP_METHODS:
            self._check_deep(fail)
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
        counts = [t.count for t in topo.tiers] + [topo.clients.count]
        for i, t in enumerate(topo.tiers):
            if counts[i + 1] < t.count:
                below = names[i + 1] if i + 1 < len(names) else "edge"
                fail(
                    f"topology.tiers.{i}.count",
                    f"tier {t.name!r} has more nodes ({t.count}) than the tier below it "
                    f"({below}, {counts[i + 1]})",
                )
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
        if errors:
            raise ScenarioErrors(errors)
        return self
