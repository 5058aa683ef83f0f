"""Messages between in-process nodes: the exact size and decoded form, never the bytes.

:func:`encode_unpacked` walks an envelope as :func:`fedstrata.wire.encode` does and
returns a :class:`~fedstrata.wire.Unpacked`: msgpack's exact size for the bytes
``encode`` would give (from msgpack's header rules and the array ext layout of
:mod:`fedstrata.wire`) and the message as :func:`fedstrata.wire.decode` would give
it back. It refuses what ``encode`` refuses, with the same errors. The simulator's
unsigned nodes send these: packing every update and parsing it again was a large
share of a simulated client's round, and a simulated network needs only the size.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from fedstrata.errors import WireError
from fedstrata.wire import (
    _ENVELOPE_KEYS,
    _HEADERS,
    _INT_MAX,
    _INT_MIN,
    _NATIVE,
    DEFAULT_MAX_SIZE,
    DTYPE_CODES,
    MAX_DEPTH,
    Envelope,
    Unpacked,
    _normalize,
    _pack_array,
    _tname,
)

__all__ = ["encode_unpacked"]


def encode_unpacked(env: Envelope, *, max_size: int = DEFAULT_MAX_SIZE) -> Unpacked:
    """:func:`encode` without the bytes: an :class:`Unpacked` of the same size.

    It accepts and refuses exactly what :func:`encode` does, with the same errors.
    """
    if not isinstance(env, Envelope):
        raise WireError(f"encode() needs an Envelope, got {_tname(env)}")
    size = 1 + _HEAD_KEYS_SIZE
    head = []
    for value in (env.v, env.kind, env.run, env.round, env.tier, env.sender):
        plain, n = _unpacked(value, 0)
        head.append(plain)
        size += n
    body, n = _unpacked_dict(env.body, 1)
    size += n
    if size > max_size:
        raise WireError(f"encoded message is {size} bytes, over the limit of {max_size}")
    return Unpacked(tuple(head), body, size)


# msgpack's encoded size of each key of the envelope map (all fixstr)
_HEAD_KEYS_SIZE: Final = sum(1 + len(k) for k in _ENVELOPE_KEYS)
# A run sends the same few array shapes and dict keys many times: their sizes, once.
# (dtype, shape) -> (msgpack size, the dtype decode gives, whether that is the dtype)
_ARRAYS: dict[tuple[np.dtype[Any], tuple[int, ...]], tuple[int, np.dtype[Any], bool]] = {}
_STRS: dict[str, int] = {}  # str -> msgpack size
_KNOWN_MAX: Final = 4096


def _unpacked(value: Any, depth: int) -> tuple[Any, int]:
    """``value`` as :func:`decode` gives it back, and its msgpack size (see _normalize)."""
    t = type(value)
    if t is np.ndarray:
        return _unpacked_array(value)
    if t is dict:
        return _unpacked_dict(value, depth + 1)
    if t is list or t is tuple:
        return _unpacked_list(value, depth + 1)
    size = _leaf_size(value, t)
    if size:
        return value, size
    if isinstance(value, dict):
        return _unpacked_dict(value, depth + 1)
    if isinstance(value, list | tuple):
        return _unpacked_list(value, depth + 1)
    return _unpacked(_normalize(value, depth), depth)  # other subclasses, numpy scalars


def _leaf_size(value: Any, t: type) -> int:
    """The msgpack size of a value of an exact built-in leaf type; 0 for anything else."""
    if value is None or value is True or value is False:
        return 1
    if t is float:
        return 9  # always float64
    if t is str:
        return _str_size(value)
    if t is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise WireError(f"int {value} is out of the 64-bit range")
        return _int_size(value)
    if t is bytes:
        n = len(value)
        return n + (2 if n < 0x100 else 3 if n < 0x10000 else 5)
    return 0


def _unpacked_dict(d: dict[Any, Any], depth: int) -> tuple[dict[str, Any], int]:
    if depth > MAX_DEPTH:
        raise WireError(f"body nests deeper than {MAX_DEPTH} levels")
    for key in d:
        if type(key) is not str and not isinstance(key, str):
            raise WireError(f"dict keys must be str, got {_tname(key)}")
    out = {}
    n = len(d)
    size = 1 if n < 16 else 3 if n < 0x10000 else 5
    arrays, strs = _ARRAYS, _STRS
    for k in sorted(d):
        v = d[k]
        t = type(v)
        if t is float:  # the common leaves first, without a call
            plain, m = v, 9
        elif t is np.ndarray and (info := arrays.get((v.dtype, v.shape))) and info[2]:
            plain, m = v.copy(), info[0]
        else:
            plain, m = _unpacked(v, depth)
        key_size = strs.get(k)
        if key_size is None or type(k) is not str:
            k = str.__str__(k)
            key_size = _str_size(k)
        out[k] = plain
        size += m + key_size
    return out, size


def _unpacked_list(items: list[Any] | tuple[Any, ...], depth: int) -> tuple[list[Any], int]:
    if depth > MAX_DEPTH:
        raise WireError(f"body nests deeper than {MAX_DEPTH} levels")
    out = []
    n = len(items)
    size = 1 if n < 16 else 3 if n < 0x10000 else 5
    arrays = _ARRAYS
    for v in items:
        if type(v) is np.ndarray and (info := arrays.get((v.dtype, v.shape))) and info[2]:
            out.append(v.copy())
            size += info[0]
        else:
            plain, m = _unpacked(v, depth)
            out.append(plain)
            size += m
    return out, size


def _unpacked_array(arr: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], int]:
    key = (arr.dtype, arr.shape)
    info = _ARRAYS.get(key)
    if info is None:
        known = _HEADERS.get(key)
        if known is None:  # checked as encode checks it (and its header remembered)
            data = _pack_array(arr).data
            header, wire_dtype = data[: 2 + 4 * arr.ndim], DTYPE_CODES[data[0]]
        else:
            header, wire_dtype = known
        native = _NATIVE[header[0]]  # the dtype decode gives for this dtype code
        n = len(header) + arr.size * wire_dtype.itemsize
        size = 2 + n if n in _FIXEXT else 3 + n if n < 0x100 else 4 + n if n < 0x10000 else 6 + n
        info = (size, native, arr.dtype == native)
        if len(_ARRAYS) < _KNOWN_MAX:
            _ARRAYS[key] = info
    if info[2]:
        return arr.copy(), info[0]  # a C-contiguous copy in the dtype decode gives
    return np.array(arr, dtype=info[1], order="C", copy=True), info[0]


_FIXEXT: Final = frozenset({1, 2, 4, 8, 16})


def _int_size(v: int) -> int:
    if v >= 0:
        return 1 if v < 0x80 else 2 if v < 0x100 else 3 if v < 0x10000 else 5 if v < 2**32 else 9
    return 1 if v >= -32 else 2 if v >= -0x80 else 3 if v >= -0x8000 else 5 if v >= -(2**31) else 9


def _str_size(s: str) -> int:
    known = _STRS.get(s)
    if known is not None and type(s) is str:
        return known
    if s.isascii():
        n = len(s)
    else:
        try:
            n = len(s.encode("utf-8"))
        except UnicodeEncodeError as exc:  # lone surrogates, as msgpack refuses them
            raise WireError(f"cannot encode message: {exc}") from exc
    size = n + (1 if n < 32 else 2 if n < 0x100 else 3 if n < 0x10000 else 5)
    if n < 32 and len(_STRS) < _KNOWN_MAX and type(s) is str:
        _STRS[s] = size
    return size
