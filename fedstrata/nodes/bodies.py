"""The declared schema of every message body kind, checked once at decode.

A node reads a received envelope's body only after :func:`check_body` accepted it.
Each body kind has one schema here: which fields the node core and secure
aggregation read, of which type, with which bounds, values or sizes. A body that
fails is refused with :class:`MalformedBodyError` (a :class:`~fedstrata.errors.WireError`),
which the node records as ``dropped`` with category ``malformed``
(:func:`dropped`) and never raises further. So every routing scalar the nodes
compare (``phase``, ``mode``, ``type``, ``session``, ``sub``, ``ask``, ``config``,
``compression``, ``quorum``, the ``secagg`` fields) has its declared type before any
node logic touches it: an array, a list or a map in their place is a dropped message,
not an exception.

=====================  ===============================================================
body kind              schema
=====================  ===============================================================
``model``              :data:`MODEL`, and :data:`SECAGG_TYPES` ``secagg/setup`` for
                       its ``secagg`` map
``update``             :data:`UPDATE`
``control``            :data:`CONTROL` (the run's configuration)
``secagg``             :data:`SECAGG` and the fields of its ``type``
                       (:data:`SECAGG_TYPES`)
=====================  ===============================================================

The *algorithm's* fields (centres, statistics, network weights, ...) have shapes
that only the plug-in knows; its readers (:mod:`fedstrata.plugins.messages`,
``Algorithm.check_partial``/``check_setup``/``read_model``, ``Learner.update``) are
their schema and raise only WireError. Fields a schema does not name are left to
them.

Why not msgspec ``Struct`` decoding: the wire format is canonical msgpack with numpy
arrays as an ext type (:mod:`fedstrata.wire`), every body is an open map whose
algorithm fields depend on the federation's shapes, and the signature covers the
exact bytes. Typed decoding would mean a second decoder beside the one whose bytes
are fixed and tested (simulator and MQTT runs byte-identical), for a check that is a
few dozen lines of declarations here.

Drop categories
---------------
Every record of a message a node refuses carries a short, stable ``category``
(:data:`CATEGORIES`): ``garbage`` (not an envelope), ``malformed`` (a body that
fails its schema or the plug-in's readers), ``unsigned``, ``forged``,
``unknown_sender``, ``wrong_run``, ``wrong_topic``, ``replay``, ``late`` and
``duplicate``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from fedstrata import wire
from fedstrata.errors import WireError
from fedstrata.nodes.events import Record

__all__ = [
    "CATEGORIES",
    "CONTROL",
    "MODEL",
    "SECAGG",
    "SECAGG_TYPES",
    "UPDATE",
    "Field",
    "MalformedBodyError",
    "check_body",
    "check_fields",
    "dropped",
]

CATEGORIES: Final = (
    "garbage",
    "malformed",
    "unsigned",
    "forged",
    "unknown_sender",
    "wrong_run",
    "wrong_topic",
    "replay",
    "late",
    "duplicate",
)
"""The categories a refused message is counted under (``Record.fields["category"]``)."""

#: Largest sub-round, roster or id list a body may name: far above any run, far below
#: what would cost memory or time to hold.
MAX_SUB: Final = 2**31 - 1
MAX_IDS: Final = 1_000_000
MAX_ID_CHARS: Final = 1024


class MalformedBodyError(WireError):
    """A body fails its declared schema (the message is dropped as ``malformed``)."""


@dataclass(frozen=True, slots=True)
class Field:
    """One declared body field.

    Parameters
    ----------
    kind
        ``"str"``, ``"int"`` (bools refused), ``"number"`` (int or float, finite, no
        bool), ``"bytes"``, ``"map"``, ``"ids"`` (a list of non-empty strs, no
        repeats), ``"idmap"`` (str keys, ``bytes`` values of ``size``), ``"array"``
        (a numpy array of ``dtype`` and ``ndim``) or ``"any"``.
    required
        Whether the field must be present.
    choices
        The values a ``str`` field may take (None: any).
    low, high
        Inclusive bounds of an ``int`` or ``number`` (``low_open``: ``low`` excluded).
    size
        The exact length of ``bytes`` (or of each ``idmap`` value).
    nullable
        Whether ``None`` is accepted in place of a value.
    dtype, ndim
        For ``array``: the numpy dtype kind letters accepted and the rank.
    """

    kind: str
    required: bool = False
    choices: frozenset[str] | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    size: int | None = None
    nullable: bool = False
    dtype: str = ""
    ndim: int | None = None
    max_len: int = MAX_ID_CHARS


Schema = Mapping[str, Field]


def _fail(where: str, name: str, what: str) -> MalformedBodyError:
    return MalformedBodyError(f"{where} field {name!r} {what}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_value(value: Any, spec: Field, name: str, where: str) -> None:
    kind = spec.kind
    if value is None:
        if spec.nullable:
            return
        raise _fail(where, name, f"must be a {kind}, got None")
    if kind == "str":
        if not isinstance(value, str):
            raise _fail(where, name, f"must be a str, got {type(value).__name__}")
        if spec.choices is not None and value not in spec.choices:
            raise _fail(where, name, f"must be one of {sorted(spec.choices)}, got {value[:40]!r}")
        if len(value) > spec.max_len:
            raise _fail(where, name, f"is longer than {spec.max_len} characters")
    elif kind in ("int", "number"):
        ok = _is_int(value) if kind == "int" else _is_int(value) or isinstance(value, float)
        if not ok:
            raise _fail(where, name, f"must be an {kind}, got {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise _fail(where, name, "must be finite")
        if spec.low is not None and (value <= spec.low if spec.low_open else value < spec.low):
            raise _fail(where, name, f"must be {'>' if spec.low_open else '>='} {spec.low:g}")
        if spec.high is not None and value > spec.high:
            raise _fail(where, name, f"must be <= {spec.high:g}")
    elif kind == "bytes":
        if not isinstance(value, bytes):
            raise _fail(where, name, f"must be bytes, got {type(value).__name__}")
        if spec.size is not None and len(value) != spec.size:
            raise _fail(where, name, f"must be {spec.size} bytes, got {len(value)}")
    elif kind == "map":
        if not isinstance(value, dict):
            raise _fail(where, name, f"must be a map, got {type(value).__name__}")
    elif kind == "ids":
        if not isinstance(value, list) or len(value) > MAX_IDS:
            raise _fail(where, name, "must be a list of node ids")
        if not all(isinstance(v, str) and 0 < len(v) <= MAX_ID_CHARS for v in value):
            raise _fail(where, name, "must hold non-empty str node ids only")
        if len(set(value)) != len(value):
            raise _fail(where, name, "names a node twice")
    elif kind == "idmap":
        if not isinstance(value, dict) or len(value) > MAX_IDS:
            raise _fail(where, name, "must be a map of node id to bytes")
        for v in value.values():
            if not isinstance(v, bytes) or (spec.size is not None and len(v) != spec.size):
                raise _fail(where, name, f"must map node ids to {spec.size} bytes")
    elif kind == "array":
        if not isinstance(value, np.ndarray):
            raise _fail(where, name, f"must be an array, got {type(value).__name__}")
        if spec.dtype and value.dtype.kind not in spec.dtype:
            raise _fail(where, name, f"has dtype {value.dtype}")
        if spec.ndim is not None and value.ndim != spec.ndim:
            raise _fail(where, name, f"must have {spec.ndim} dimension(s)")
    elif kind != "any":  # a declaration error, found by the tests of this module
        raise ValueError(f"unknown field kind {kind!r}")


def check_fields(body: Any, schema: Schema, where: str) -> None:
    """Check ``body`` against ``schema`` (fields it does not name are not looked at).

    Raises :class:`MalformedBodyError` naming the first field that fails.
    """
    if not isinstance(body, dict):
        raise MalformedBodyError(f"{where} must be a map")
    for name, spec in schema.items():
        if name not in body:
            if spec.required:
                raise _fail(where, name, "is missing")
            continue
        _check_value(body[name], spec, name, where)


def _choices(*values: str) -> frozenset[str]:
    return frozenset(values)


_SUB = Field("int", low=0, high=MAX_SUB)

MODEL: Final[Schema] = {
    "phase": Field("str", required=True, choices=_choices("setup", "iter", "final")),
    "sub": _SUB,
    "ask": Field("ids"),
    "config": Field("str", max_len=64),
    "compression": Field("str", choices=_choices("none", "float32", "float16", "qsgd")),
    "quorum": Field("number", low=0.0, low_open=True, high=1.0),
    "secagg": Field("map"),
    "kernel_scale": Field("map"),
}
"""A model (``kind: model``): the node-core fields of :doc:`architecture` § Messages."""

UPDATE: Final[Schema] = {
    # a plug-in's field (docs/architecture.md § Messages): typed when present, not required,
    # so a plug-in whose partials have no modes (the documented k-means example) still works
    "mode": Field("str", max_len=64),
    "sub": _SUB,
    "compression": Field("str", max_len=16),
    "n": Field("int", low=0),
    "contributors": Field("int", low=1),
}
"""An update (``kind: update``): the partial's mode, sub-round and compression tag."""

CONTROL: Final[Schema] = {
    "config": Field("str", required=True, max_len=64),
    "extras": Field("map", required=True),
}
"""The run's configuration (``kind: control``, :mod:`fedstrata.nodes.runconfig`)."""

_SECAGG_KINDS = _choices(
    "secagg/setup",
    "secagg/keys",
    "secagg/key_list",
    "secagg/shares",
    "secagg/collect",
    "secagg/masked",
    "secagg/check",
    "secagg/signed",
    "secagg/unmask",
    "secagg/reveal",
)
_SESSION = Field("bytes", required=True, size=16)
_KEY = Field("bytes", required=True, size=32)

SECAGG: Final[Schema] = {
    "type": Field("str", required=True, choices=_SECAGG_KINDS),
    "session": _SESSION,
    "sub": _SUB,
}
"""Every secure-aggregation message (``kind: secagg``, and a model's ``secagg`` map)."""

SECAGG_TYPES: Final[Mapping[str, Schema]] = {
    "secagg/setup": {
        "roster": Field("ids", required=True),
        "graph_seed": _KEY,
        "vector_length": Field("int", required=True, low=1),
        "clip": Field("number", required=True, low=0.0, low_open=True),
        "threshold": Field("int", required=True, nullable=True, low=1),
        "scale_bits": Field("int", required=True, low=0),
        "modulus_bits": Field("int", required=True, low=1),
        "degree": Field("int", required=True, nullable=True, low=1),
    },
    "secagg/keys": {"c_pk": _KEY, "s_pk": _KEY, "v_pk": _KEY},
    "secagg/key_list": {
        "c_pks": Field("idmap", required=True, size=32),
        "s_pks": Field("idmap", required=True, size=32),
        "v_pks": Field("idmap", required=True, size=32),
    },
    "secagg/shares": {
        "ciphertexts": Field("idmap", required=True),
        "b_commitment": _KEY,
    },
    "secagg/collect": {"ciphertexts": Field("idmap", required=True)},
    "secagg/masked": {"masked": Field("array", required=True, dtype="u", ndim=1)},
    "secagg/check": {"survivors": Field("bytes", required=True)},
    "secagg/signed": {"signature": Field("bytes", required=True, size=64)},
    "secagg/unmask": {
        "survivors": Field("ids", required=True),
        "dropped": Field("ids", required=True),
        "signatures": Field("idmap", required=True, size=64),
    },
    "secagg/reveal": {
        "b_shares": Field("idmap", required=True),
        "sk_shares": Field("idmap", required=True),
    },
}
"""The fields of each secure-aggregation message type (:mod:`fedstrata.privacy.secagg`)."""


def _check_secagg(message: Any, where: str) -> None:
    check_fields(message, SECAGG, where)
    check_fields(message, SECAGG_TYPES[message["type"]], f"{where} ({message['type']})")


_BY_KIND: Final[Mapping[str, Schema]] = {"model": MODEL, "update": UPDATE, "control": CONTROL}


def check_body(env: wire.Envelope) -> wire.Envelope:
    """``env`` if its body passes the schema of its kind; :class:`MalformedBodyError` if not."""
    kind = env.kind
    if kind == "secagg":
        _check_secagg(env.body, "secagg body")
        return env
    schema = _BY_KIND.get(kind)
    if schema is None:  # presence and other kinds carry nothing a node reads
        check_fields(env.body, {}, f"{kind} body")
        return env
    check_fields(env.body, schema, f"{kind} body")
    if kind == "model" and "secagg" in env.body:
        setup = env.body["secagg"]
        check_fields(setup, SECAGG, "model body's secagg")
        if setup["type"] != "secagg/setup":
            raise MalformedBodyError("a model body's secagg must be a secagg/setup message")
        check_fields(setup, SECAGG_TYPES["secagg/setup"], "model body's secagg")
    return env


def dropped(node: str, reason: str, category: str, **fields: Any) -> Record:
    """The record of a message (or an input) a node drops, with its ``category``."""
    if category not in CATEGORIES:  # a programming error: the summary counts by these
        raise ValueError(f"unknown drop category {category!r}")
    return Record(
        kind="dropped", fields={"node": node, **fields, "reason": reason, "category": category}
    )
