"""The wire format: msgpack envelopes with numpy arrays as an ext type.

This is the only module in fedstrata that knows bytes. A message is an
:class:`Envelope`; :func:`encode` turns it into bytes and :func:`decode` turns
bytes back into an :class:`Envelope`, raising :class:`~fedstrata.errors.WireError`
for anything it cannot accept (and never any other exception).

Envelope
--------
A msgpack map with exactly these keys, always encoded in this order::

    {"v": 1, "kind": str, "run": str, "round": int, "tier": str,
     "sender": str, "body": map}

``kind`` is one of :data:`KINDS`. Body maps are encoded with their keys sorted
(recursively), floats always as float64, integers in msgpack's smallest form,
so equal envelopes give identical bytes in every process.

Body values
-----------
``None``, ``bool``, ``int`` in ``[-2**63, 2**64 - 1]``, ``float``, ``str``,
``bytes``, lists and tuples (decoded as lists), dicts with ``str`` keys (at most
:data:`MAX_DEPTH` nested containers) and ``numpy.ndarray``. Numpy scalars
(``bool_``, integer, float up to 64 bits, ``str_``, ``bytes_``) are converted
to the Python scalar on encode; subclasses of the built-in types (``IntEnum``,
``OrderedDict``, named tuples, ...) are encoded as their base type.

Arrays
------
An array is msgpack ext type :data:`EXT_NDARRAY` (code 1) whose data is::

    offset  size      field
    0       1         dtype code, a key of DTYPE_CODES (1 bool ... 11 float64)
    1       1         ndim, 0 <= ndim <= MAX_NDIM (8)
    2       4 * ndim  each dimension as uint32, little-endian
    2+4*nd  rest      the elements, little-endian, C order;
                      exactly prod(shape) * itemsize bytes

Any byte order and memory layout is accepted on encode (it is converted);
object, complex, structured, float16, datetime and other dtypes are rejected.
Nothing is ever pickled.

Future work
-----------
An optional ``sig`` envelope key (a signature over the canonical encoding of
the other keys) is reserved. This version neither writes nor accepts it: the
decoder rejects every envelope key it does not know, so adding ``sig`` will be
an explicit protocol change.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack
import numpy as np

from fedstrata.errors import WireError

__all__ = [
    "DEFAULT_MAX_SIZE",
    "DTYPE_CODES",
    "EXT_NDARRAY",
    "KINDS",
    "MAX_DEPTH",
    "MAX_NDIM",
    "VERSION",
    "Envelope",
    "Unpacked",
    "copy_body",
    "decode",
    "encode",
]

VERSION: Final = 1
"""The protocol version this module writes and the only one it reads."""

EXT_NDARRAY: Final = 1
"""The msgpack ext type code of a numpy array."""

MAX_NDIM: Final = 8
"""The largest number of dimensions an array on the wire may have."""

MAX_DEPTH: Final = 32
"""The deepest nesting of lists and dicts allowed inside a body."""

DEFAULT_MAX_SIZE: Final = 64 * 1024 * 1024
"""The default limit, in bytes, on an encoded message (64 MiB)."""

KINDS: dict[str, str] = {
    "update": "child -> parent: a client's statistics or parameters, "
    "or a middle tier's partial aggregate",
    "model": "parent -> children: the global state for a round",
    "presence": "online/offline announcements and last wills",
    "control": "start, stop or configure a run",
    "secagg": "secure-aggregation key and share exchange",
}
"""The registry of message kinds: kind -> what the message carries."""

DTYPE_CODES: dict[int, np.dtype[Any]] = {
    1: np.dtype("|b1"),
    2: np.dtype("|i1"),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    6: np.dtype("|u1"),
    7: np.dtype("<u2"),
    8: np.dtype("<u4"),
    9: np.dtype("<u8"),
    10: np.dtype("<f4"),
    11: np.dtype("<f8"),
}
"""The array dtypes allowed on the wire: code byte -> little-endian dtype."""

# (kind, itemsize) -> code; byte order is normalized separately.
_CODE_BY_KIND_SIZE: Final = {(dt.kind, dt.itemsize): code for code, dt in DTYPE_CODES.items()}
_ENVELOPE_KEYS: Final = ("v", "kind", "run", "round", "tier", "sender", "body")
_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1
_ROUND_MAX: Final = 2**63 - 1
_DIM_MAX: Final = 2**32 - 1
_SCALAR_KINDS: Final = frozenset("biuUS")
# What msgpack (and numpy while building an array) may raise on bad input.
_DECODE_ERRORS: Final = (
    ValueError,
    TypeError,
    OverflowError,
    BufferError,
    msgpack.UnpackException,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    """One message: routing fields plus a body.

    Parameters
    ----------
    v
        Protocol version; must be :data:`VERSION`.
    kind
        The message kind, a key of :data:`KINDS`.
    run
        The run identifier (non-empty).
    round
        The round number, ``0 <= round <= 2**63 - 1``.
    tier
        The sender's tier, e.g. ``"edge"``, ``"fog"``, ``"cloud"`` (non-empty).
    sender
        The sending node's identifier (non-empty).
    body
        The payload, a dict with ``str`` keys; see the module docstring for
        the values allowed. Its contents are checked by :func:`encode`, not on
        construction (the dict is mutable).

    Raises
    ------
    WireError
        If a field has the wrong type or value.

    Notes
    -----
    Envelopes compare field by field; comparing two whose bodies hold numpy
    arrays raises numpy's "truth value is ambiguous" error. A body holding a
    dict makes the envelope unhashable.

    """

    v: int = VERSION
    kind: str
    run: str
    round: int
    tier: str
    sender: str
    body: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _is_int(self.v):
            raise WireError(f"envelope field 'v' must be an int, got {_tname(self.v)}")
        if self.v != VERSION:
            raise WireError(f"unsupported protocol version {self.v} (this is version {VERSION})")
        if not isinstance(self.kind, str):
            raise WireError(f"envelope field 'kind' must be a str, got {_tname(self.kind)}")
        if self.kind not in KINDS:
            raise WireError(f"unknown message kind {self.kind!r}; known: {', '.join(KINDS)}")
        for name in ("run", "tier", "sender"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise WireError(f"envelope field {name!r} must be a str, got {_tname(value)}")
            if not value:
                raise WireError(f"envelope field {name!r} must not be empty")
        if not _is_int(self.round):
            raise WireError(f"envelope field 'round' must be an int, got {_tname(self.round)}")
        if not 0 <= self.round <= _ROUND_MAX:
            raise WireError(f"envelope field 'round' must be in [0, 2**63 - 1], got {self.round}")
        if not isinstance(self.body, dict):
            raise WireError(f"envelope field 'body' must be a dict, got {_tname(self.body)}")


def encode(env: Envelope, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """Serialize an envelope deterministically.

    Parameters
    ----------
    env
        The message to encode.
    max_size
        The largest result allowed, in bytes, so that a sender never publishes
        what receivers using the same limit in :func:`decode` would reject.

    Returns
    -------
    bytes
        The msgpack payload. Equal envelopes give identical bytes, whatever the
        insertion order of their body dicts and in every process.

    Raises
    ------
    WireError
        If `env` is not an :class:`Envelope`, the body holds a value that
        cannot go on the wire (see the module docstring), or the result is
        larger than `max_size`.

    """
    if not isinstance(env, Envelope):
        raise WireError(f"encode() needs an Envelope, got {_tname(env)}")
    message = {
        "v": env.v,
        "kind": env.kind,
        "run": env.run,
        "round": env.round,
        "tier": env.tier,
        "sender": env.sender,
        "body": _normalize_dict(env.body, 1),
    }
    try:
        payload = msgpack.packb(message, use_bin_type=True)
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. lone surrogates in a str
        raise WireError(f"cannot encode message: {exc}") from exc
    if len(payload) > max_size:
        raise WireError(f"encoded message is {len(payload)} bytes, over the limit of {max_size}")
    return payload


def decode(payload: bytes | Unpacked, *, max_size: int = DEFAULT_MAX_SIZE) -> Envelope:
    """Parse and validate a payload produced by :func:`encode`.

    Parameters
    ----------
    payload
        The message bytes (``bytes``, ``bytearray`` or ``memoryview``), or an
        :class:`Unpacked` message.
    max_size
        Payloads longer than this many bytes are rejected before parsing.

    Returns
    -------
    Envelope
        The message. Its body holds only ``None``, ``bool``, ``int``,
        ``float``, ``str``, ``bytes``, ``list``, ``dict`` and
        ``numpy.ndarray``. Arrays are fresh, writable, native-byte-order,
        C-contiguous copies that own their memory (not views of `payload`).

    Raises
    ------
    WireError
        For anything that is not exactly one valid envelope: bad or truncated
        msgpack, trailing bytes, a top level that is not a map, missing or
        unknown keys, duplicate or non-``str`` map keys, envelope fields of the
        wrong type or value, another protocol version, an unknown kind, an
        unknown ext type (including msgpack timestamps), a malformed array
        header, a disallowed dtype, data whose length does not match the
        shape, or nesting deeper than :data:`MAX_DEPTH`. No other exception
        escapes.

    """
    if type(payload) is Unpacked:
        return payload.envelope(max_size)
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise WireError(f"payload must be bytes, got {_tname(payload)}")
    size = memoryview(payload).nbytes
    if size > max_size:
        raise WireError(f"message is {size} bytes, over the limit of {max_size}")
    try:
        obj = msgpack.unpackb(
            payload,
            raw=False,
            strict_map_key=True,
            object_pairs_hook=_pairs_to_dict,
            ext_hook=_ext_hook,
            max_str_len=size,
            max_bin_len=size,
            max_array_len=size,
            max_map_len=size // 2,
            max_ext_len=size,
        )
    except WireError:
        raise
    except _DECODE_ERRORS as exc:
        raise WireError(f"malformed message: {str(exc) or type(exc).__name__}") from exc
    return _to_envelope(obj)


# --------------------------------------------------------------------- encoding


def _normalize(value: Any, depth: int) -> Any:
    """Return `value` as plain msgpack-ready data: exact types, sorted dicts."""
    if value is None or value is True or value is False:
        return value
    t = type(value)
    if t is str or t is bytes or t is float:
        return value
    if t is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise WireError(f"int {value} is out of the 64-bit range")
        return value
    if t is dict:
        return _normalize_dict(value, depth + 1)
    if t is list or t is tuple:
        return _normalize_list(value, depth + 1)
    if t is np.ndarray:
        return _pack_array(value)
    if isinstance(value, np.ndarray):
        raise WireError(f"cannot encode ndarray subclass {t.__qualname__}; pass np.asarray(x)")
    if isinstance(value, np.generic):
        kind, itemsize = value.dtype.kind, value.dtype.itemsize
        if kind in _SCALAR_KINDS or (kind == "f" and itemsize <= 8):
            return _normalize(value.item(), depth)
        raise WireError(f"cannot encode numpy scalar of dtype {value.dtype}")
    # Subclasses of the built-in types go on the wire as their base type.
    if isinstance(value, int):  # bool cannot be subclassed, so this is not a bool
        return _normalize(int(value), depth)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, dict):
        return _normalize_dict(value, depth + 1)
    if isinstance(value, list | tuple):
        return _normalize_list(value, depth + 1)
    raise WireError(f"cannot encode a value of type {t.__qualname__}")


def _normalize_dict(d: dict[Any, Any], depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise WireError(f"body nests deeper than {MAX_DEPTH} levels")
    for key in d:
        if not isinstance(key, str):
            raise WireError(f"dict keys must be str, got {_tname(key)}")
    return {str.__str__(k): _normalize(d[k], depth) for k in sorted(d)}


def _normalize_list(items: list[Any] | tuple[Any, ...], depth: int) -> list[Any]:
    if depth > MAX_DEPTH:
        raise WireError(f"body nests deeper than {MAX_DEPTH} levels")
    return [_normalize(item, depth) for item in items]


# Packed headers by (dtype, shape): a run sends the same few shapes many times.
_HEADERS: dict[tuple[np.dtype[Any], tuple[int, ...]], tuple[bytes, np.dtype[Any]]] = {}
_HEADERS_MAX = 4096
_new_ext = tuple.__new__  # ExtType's own __new__ re-checks a code and bytes we just made


def _pack_array(arr: np.ndarray[Any, Any]) -> msgpack.ExtType:
    known = _HEADERS.get((arr.dtype, arr.shape))
    if known is not None:
        header, wire_dtype = known
        data = np.ascontiguousarray(arr, dtype=wire_dtype)
        return _new_ext(msgpack.ExtType, (EXT_NDARRAY, b"".join((header, data.data))))
    ext = _pack_array_checked(arr)
    if len(_HEADERS) < _HEADERS_MAX:
        code = ext.data[0]
        _HEADERS[(arr.dtype, arr.shape)] = (ext.data[: 2 + 4 * arr.ndim], DTYPE_CODES[code])
    return ext


def _pack_array_checked(arr: np.ndarray[Any, Any]) -> msgpack.ExtType:
    dt = arr.dtype
    code = None if dt.fields is not None else _CODE_BY_KIND_SIZE.get((dt.kind, dt.itemsize))
    if code is None:
        raise WireError(f"cannot encode array of dtype {dt}; allowed: bool, (u)int8-64, float32/64")
    if arr.ndim > MAX_NDIM:
        raise WireError(f"cannot encode array with {arr.ndim} dimensions (at most {MAX_NDIM})")
    if any(n > _DIM_MAX for n in arr.shape):
        raise WireError(f"array dimension too large for the wire: shape {arr.shape}")
    header = struct.pack(f"<BB{arr.ndim}I", code, arr.ndim, *arr.shape)
    # Little-endian, C-contiguous; no copy when the array already is.
    data = np.ascontiguousarray(arr, dtype=DTYPE_CODES[code])
    # .data: the array's own buffer (a memoryview), which join reads without another copy
    return msgpack.ExtType(EXT_NDARRAY, b"".join((header, data.data)))


# --------------------------------------------------------------------- decoding


def _pairs_to_dict(pairs: list[tuple[Any, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise WireError("duplicate key in map")
    for key in d:
        if type(key) is not str:
            raise WireError(f"map keys must be str, got {_tname(key)}")
    return d


# Header parsers by ndim, and for each wire dtype the dtype decoded arrays get
# (native byte order: on little-endian hosts the wire dtype itself).
_SHAPE_STRUCTS: Final = tuple(struct.Struct(f"<{n}I") for n in range(MAX_NDIM + 1))
_NATIVE: Final = {code: dt.newbyteorder("=") for code, dt in DTYPE_CODES.items()}


def _ext_hook(code: int, data: bytes) -> np.ndarray[Any, Any]:
    if code != EXT_NDARRAY:
        raise WireError(f"unknown ext type code {code}")
    if len(data) < 2:
        raise WireError("truncated array header")
    dtype = DTYPE_CODES.get(data[0])
    if dtype is None:
        raise WireError(f"unknown dtype code {data[0]}")
    ndim = data[1]
    if ndim > MAX_NDIM:
        raise WireError(f"array has {ndim} dimensions (at most {MAX_NDIM})")
    offset = 2 + 4 * ndim
    if len(data) < offset:
        raise WireError("truncated array header")
    shape = _SHAPE_STRUCTS[ndim].unpack_from(data, 2)
    count = math.prod(shape)
    # Check the length before numpy allocates anything: the shape cannot make
    # us reserve more memory than the payload already occupies.
    if len(data) - offset != count * dtype.itemsize:
        raise WireError(
            f"array data is {len(data) - offset} bytes, "
            f"shape {shape} of {dtype.name} needs {count * dtype.itemsize}"
        )
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    if dtype.kind == "b" and count and flat.view(np.uint8).max() > 1:
        raise WireError("bool array holds a byte other than 0 or 1")
    try:
        shaped = flat.reshape(shape)
    except ValueError as exc:  # e.g. zero-size with dims whose product overflows intp
        raise WireError(f"cannot build array of shape {shape}: {exc}") from exc
    native = _NATIVE[data[0]]
    if native == dtype:  # a C-contiguous copy that owns its memory
        return shaped.copy()
    return shaped.astype(native, order="C", copy=True)


def _to_envelope(obj: Any) -> Envelope:
    if type(obj) is not dict:
        raise WireError(f"message must be a map, got {_tname(obj)}")
    if "v" not in obj:
        raise WireError("envelope is missing key 'v'")
    v = obj["v"]
    if _is_int(v) and v != VERSION:  # report the version before other key problems
        raise WireError(f"unsupported protocol version {v} (this is version {VERSION})")
    missing = [k for k in _ENVELOPE_KEYS if k not in obj]
    if missing:
        raise WireError(f"envelope is missing keys {missing}")
    extra = sorted(set(obj) - set(_ENVELOPE_KEYS))
    if extra:
        raise WireError(f"envelope has unknown keys {extra}")
    body = obj["body"]
    if type(body) is dict:
        _check_decoded(body, 1)
    # Field types and values are checked by Envelope.__post_init__.
    return Envelope(
        v=v,
        kind=obj["kind"],
        run=obj["run"],
        round=obj["round"],
        tier=obj["tier"],
        sender=obj["sender"],
        body=body,
    )


def _check_decoded(value: Any, depth: int) -> None:
    """Reject what msgpack decodes on its own (timestamps) and deep nesting."""
    t = type(value)
    if t is dict or t is list:
        if depth > MAX_DEPTH:
            raise WireError(f"body nests deeper than {MAX_DEPTH} levels")
        for item in value.values() if t is dict else value:
            ti = type(item)
            if ti is dict or ti is list:
                _check_decoded(item, depth + 1)
            elif item is not None and ti not in _DECODED_LEAF_TYPES:
                raise WireError(f"unsupported value of type {ti.__qualname__} in body")
    elif value is not None and t not in _DECODED_LEAF_TYPES:
        raise WireError(f"unsupported value of type {t.__qualname__} in body")


_DECODED_LEAF_TYPES: Final = frozenset({bool, int, float, str, bytes, np.ndarray})


# ------------------------------------------------ messages between in-process nodes


class Unpacked:
    """An encoded envelope that was never packed: its exact size and its decoded form.

    Where sender and receivers share a process and nothing reads the bytes themselves
    (the simulator, without signatures), :func:`fedstrata.wire_unpacked.encode_unpacked`
    replaces :func:`encode`: ``len()`` is exactly ``len(encode(env))``, :func:`decode` gives what
    it would give for those bytes (a fresh copy for each caller), and ``bytes()`` packs
    them on demand. Packing an update and parsing it again was most of the cost of a
    simulated client's round; its size is all a simulated network needs.
    """

    __slots__ = ("_body", "_head", "size")

    def __init__(self, head: tuple[Any, ...], body: dict[str, Any], size: int) -> None:
        self._head = head  # v, kind, run, round, tier, sender: as decode gives them
        self._body = body
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return True

    def __bytes__(self) -> bytes:
        return encode(self.envelope())

    def __repr__(self) -> str:
        return f"Unpacked({self._head[1]!r} from {self._head[5]!r}, {self.size} bytes)"

    def __reduce__(self) -> tuple[Any, ...]:
        return Unpacked, (self._head, self._body, self.size)

    def envelope(self, max_size: int = DEFAULT_MAX_SIZE) -> Envelope:
        """What :func:`decode` gives for the packed message: the caller's own copy."""
        if self.size > max_size:
            raise WireError(f"message is {self.size} bytes, over the limit of {max_size}")
        env = object.__new__(Envelope)  # fields checked when the sender built it
        for name, value in zip(_ENVELOPE_KEYS, (*self._head, copy_body(self._body)), strict=True):
            object.__setattr__(env, name, value)
        return env


def copy_body(value: Any) -> Any:
    """A copy of a decoded value: new dicts, lists and arrays (scalars are immutable)."""
    t = type(value)
    if t is dict:
        return {k: _copy(v) for k, v in value.items()}
    if t is list:
        return [_copy(v) for v in value]
    if t is np.ndarray:
        return value.copy()
    return value


def _copy(value: Any) -> Any:
    t = type(value)
    if t is np.ndarray:
        return value.copy()
    if t is dict or t is list:
        return copy_body(value)
    return value


# ---------------------------------------------------------------------- helpers


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tname(value: object) -> str:
    return type(value).__qualname__
