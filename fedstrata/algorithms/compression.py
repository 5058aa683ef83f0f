"""Lossy compression of float64 arrays for the uplink: downcasts and stochastic quantisation.

Pure and vectorised (numpy only, no I/O). :func:`encode` turns one float64 array into
a value :mod:`fedstrata.wire` can carry, :func:`decode` checks such a value against the
expected shape and turns it back into float64, raising
:class:`~fedstrata.errors.ValidationError` for anything malformed. Which arrays of a
message are compressed, and how a message says so, is
:mod:`fedstrata.plugins.messages`' business.

Schemes
-------
``none``
    The float64 array itself (8 bytes an element, exact).
``float32``
    ``x.astype(float32)``, round to nearest: relative error at most ``2**-24`` per
    element in float32's normal range.
``float16``
    The IEEE binary16 bit patterns of ``x.astype(float16)`` as a ``uint16`` array
    (the wire has no float16 dtype). Relative error at most ``2**-11`` per element for
    ``6.1e-5 <= |x| <= 65504``; smaller magnitudes lose precision (subnormals) and
    ``|x| < 3e-8`` becomes 0.
``qsgd`` with ``bits`` b in ``2 .. 8``
    QSGD-style unbiased stochastic quantisation with a per-array scale. With
    ``L = 2**(b-1) - 1`` levels per sign and ``s = max|x|``: ``y = x / s * L`` lies in
    ``[-L, L]``; the level is ``l = floor(y) + Bernoulli(y - floor(y))`` (drawn from
    the caller's generator), so ``E[l] = y`` and ``E[decode(encode(x))] = x``; the
    code ``l + L`` lies in ``0 .. 2L = 2**b - 2`` and is packed in b bits
    (little-endian bit order, element 0 first; the padding bits of the last byte are
    0). The wire value is the map ``{"q": uint8 array of ceil(n b / 8) bytes,
    "s": s as float64}`` and decodes to ``s * (code - L) / L``. Every element is off by
    less than ``s / L``, with variance ``(s / L)**2 p (1 - p) <= (s / L)**2 / 4``
    (``p`` the fractional part of ``y``). An all-zero array has ``s = 0`` and decodes
    exactly.

Nothing is ever clipped and no finite input becomes infinite: an array a downcast
cannot hold finitely (``|x| >= 65520`` for float16, ``>= 3.4e38`` for float32) is sent
in the next wider float instead (float16 -> float32 -> float64) and decoded as such;
:func:`is_fallback` tells. A non-finite input stays non-finite (``qsgd`` sends a
non-finite scale), and :func:`decode` rejects it, as receivers reject non-finite
float64 arrays.

Bytes
-----
:func:`encoded_size` gives the exact msgpack size of an encoded value of ``n``
elements and ``D`` dimensions. Arrays are :mod:`fedstrata.wire`'s ext type: a
``2 + 4 D`` byte header plus the data, behind msgpack's ext header ``h(m)`` of 2
bytes for a payload of m = 1, 2, 4, 8 or 16 bytes, 3 up to 255, 4 up to 65535,
6 beyond::

    none     m = 2 + 4 D + 8 n                              bytes m + h(m)
    float32  m = 2 + 4 D + 4 n                              bytes m + h(m)
    float16  m = 2 + 4 D + 2 n                              bytes m + h(m)
    qsgd b   m = 6 + ceil(n b / 8)  (a 1-D array of codes)  bytes m + h(m) + 14

where 14 is the map's framing: 1 (fixmap) + 2 (``"q"``) + 2 (``"s"``) + 9 (float64).
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np

from fedstrata.errors import ValidationError

__all__ = [
    "MAX_BITS",
    "MIN_BITS",
    "SCHEMES",
    "decode",
    "encode",
    "encoded_size",
    "is_fallback",
    "levels",
    "parse_tag",
    "relative_error",
    "tag",
]

SCHEMES: Final = ("none", "float32", "float16", "qsgd")
"""The compression schemes."""
MIN_BITS: Final = 2
"""Fewest bits per element with ``qsgd``."""
MAX_BITS: Final = 8
"""Most bits per element with ``qsgd`` (one byte per element)."""

_F16: Final = np.dtype(np.float16)
_F32: Final = np.dtype("<f4")
_F64: Final = np.dtype("<f8")
_U16: Final = np.dtype("<u2")
_U8: Final = np.dtype(np.uint8)
# The wire dtypes a scheme may use: its own first, then its fallbacks.
_WIRE_DTYPES: Final = {
    "none": (_F64,),
    "float32": (_F32, _F64),
    "float16": (_U16, _F32, _F64),
}
_BIT_NAMES: Final = frozenset(str(b) for b in range(MIN_BITS, MAX_BITS + 1))


def _check_scheme(scheme: str, bits: int) -> None:
    if scheme not in SCHEMES:
        raise ValidationError(f"unknown compression scheme {scheme!r}; known: {SCHEMES}")
    if scheme == "qsgd" and (
        not isinstance(bits, int) or isinstance(bits, bool) or not MIN_BITS <= bits <= MAX_BITS
    ):
        raise ValidationError(f"qsgd bits must be an int in {MIN_BITS} .. {MAX_BITS}, got {bits!r}")


def levels(bits: int) -> int:
    """``L = 2**(bits - 1) - 1``: the quantisation levels per sign of ``qsgd``."""
    _check_scheme("qsgd", bits)
    return 2 ** (bits - 1) - 1


def tag(scheme: str, bits: int = 8) -> str:
    """The name of a scheme on the wire: ``float32``, ``float16``, ``qsgd2`` .. ``qsgd8``.

    ``none`` has no tag in messages (an uncompressed message carries none) but is
    returned as ``"none"``.
    """
    _check_scheme(scheme, bits)
    return f"qsgd{bits}" if scheme == "qsgd" else scheme


def parse_tag(value: Any) -> tuple[str, int]:
    """``(scheme, bits)`` of a wire tag (see :func:`tag`); ``none`` is not a wire tag.

    Raises
    ------
    ValidationError
        If ``value`` is not one of the tags.

    """
    if value in ("float32", "float16"):
        return str(value), MAX_BITS
    if isinstance(value, str) and value.startswith("qsgd") and value[4:] in _BIT_NAMES:
        return "qsgd", int(value[4:])
    raise ValidationError(
        f"unknown compression {value!r}; known: float32, float16, qsgd{MIN_BITS} .. qsgd{MAX_BITS}"
    )


# ------------------------------------------------------------------------------ encode


def encode(
    x: np.ndarray, scheme: str, *, bits: int = 8, rng: np.random.Generator | None = None
) -> np.ndarray | dict[str, Any]:
    """Compress one array for the wire.

    Parameters
    ----------
    x
        Any real array (converted to float64).
    scheme
        One of :data:`SCHEMES`.
    bits
        ``qsgd`` only: bits per element, ``2 .. 8``.
    rng
        ``qsgd`` only: the generator of the stochastic rounding (``x.size`` uniforms
        are drawn from it, whatever ``x`` holds).

    Returns
    -------
    numpy.ndarray or dict
        ``none``: the float64 array; ``float32``: a float32 array; ``float16``: a uint16
        array of binary16 bit patterns; both with ``x``'s shape, or a wider float
        array when the downcast would overflow (:func:`is_fallback`). ``qsgd``:
        ``{"q": packed codes, "s": scale}`` (see the module docstring).

    """
    _check_scheme(scheme, bits)
    arr = np.asarray(x, dtype=np.float64)
    if scheme == "none":
        return np.ascontiguousarray(arr)
    if scheme == "qsgd":
        if rng is None:
            raise ValidationError("qsgd needs a random generator (rng)")
        return _quantise(arr, bits, rng)
    finite = np.isfinite(arr)
    if scheme == "float16":
        with np.errstate(over="ignore"):
            half = arr.astype(_F16)
        if not (np.isinf(half) & finite).any():
            return half.view(_U16)
    with np.errstate(over="ignore"):
        single = arr.astype(_F32)
    if not (np.isinf(single) & finite).any():
        return single
    return np.ascontiguousarray(arr)


def _quantise(arr: np.ndarray, bits: int, rng: np.random.Generator) -> dict[str, Any]:
    L = 2 ** (bits - 1) - 1
    u = rng.random(arr.shape)
    scale = float(np.max(np.abs(arr))) if arr.size else 0.0
    codes = np.full(arr.size, L, dtype=_U8)
    if math.isfinite(scale) and scale > 0.0:
        y = (arr / scale) * L  # |arr / scale| <= 1 exactly (rounding is monotone)
        low = np.floor(y)
        level = low + (u < y - low)
        codes = (level + L).astype(_U8).ravel()
    return {"q": _pack(codes, bits), "s": scale}


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack uint8 codes (< 2**bits) into ``bits`` bits each, little-endian bit order."""
    if bits == 8:
        return codes
    planes = np.unpackbits(codes[:, None], axis=1, count=bits, bitorder="little")
    return np.packbits(planes.ravel(), bitorder="little")


# ------------------------------------------------------------------------------ decode


def decode(value: Any, scheme: str, shape: tuple[int, ...], *, bits: int = 8) -> np.ndarray:
    """Check an encoded value against ``shape`` and return it as a float64 array.

    Parameters
    ----------
    value
        What :func:`encode` produced, as :func:`fedstrata.wire.decode` returns it.
    scheme, bits
        The scheme it was encoded with.
    shape
        The shape the array must have.

    Returns
    -------
    numpy.ndarray
        A fresh, finite float64 array of ``shape``.

    Raises
    ------
    ValidationError
        For a value of the wrong type, dtype or size, a qsgd map with other keys, a
        scale that is not a finite float >= 0, a code above ``2**bits - 2``, non-zero
        padding bits, or a non-finite element.

    """
    _check_scheme(scheme, bits)
    if scheme == "qsgd":
        return _dequantise(value, shape, bits)
    if not isinstance(value, np.ndarray):
        raise ValidationError(f"must be an array ({scheme}), got {type(value).__name__}")
    allowed = _WIRE_DTYPES[scheme]
    if value.dtype not in allowed:
        names = ", ".join(_dtype_name(d) for d in allowed)
        raise ValidationError(f"must have dtype {names} with {scheme}, got {value.dtype}")
    if value.shape != tuple(shape):
        raise ValidationError(f"has shape {value.shape}, expected {tuple(shape)}")
    out = (value.view(_F16) if value.dtype == _U16 else value).astype(np.float64)
    if not np.isfinite(out).all():
        raise ValidationError("holds NaN or infinite values")
    return out


def _dtype_name(dt: np.dtype[Any]) -> str:
    return "uint16 (float16 bits)" if dt == _U16 else dt.name


def _dequantise(value: Any, shape: tuple[int, ...], bits: int) -> np.ndarray:
    if not isinstance(value, dict) or set(value) != {"q", "s"}:
        raise ValidationError('must be a map with exactly the keys "q" and "s" (qsgd)')
    scale, packed = value["s"], value["q"]
    if type(scale) is not float or not math.isfinite(scale) or scale < 0.0:
        raise ValidationError(f"qsgd scale must be a finite float >= 0, got {scale!r}")
    n = math.prod(shape)
    size = -(-n * bits // 8)
    if not isinstance(packed, np.ndarray) or packed.dtype != _U8 or packed.shape != (size,):
        got = (
            f"{packed.dtype} array of shape {packed.shape}"
            if isinstance(packed, np.ndarray)
            else type(packed).__name__
        )
        raise ValidationError(f"qsgd codes must be a uint8 array of shape ({size},), got {got}")
    L = 2 ** (bits - 1) - 1
    if bits == 8:
        codes = packed
    else:
        planes = np.unpackbits(packed, bitorder="little")
        if planes[n * bits :].any():
            raise ValidationError("qsgd padding bits are not zero")
        codes = np.packbits(planes[: n * bits].reshape(n, bits), axis=1, bitorder="little")
        codes = codes.reshape(n)
    if n and int(codes.max()) > 2 * L:
        raise ValidationError(f"qsgd code {int(codes.max())} is above {2 * L} ({bits} bits)")
    out = scale * ((codes.astype(np.float64) - L) / L)
    if not np.isfinite(out).all():  # cannot happen for a finite scale; kept as a guard
        raise ValidationError("holds NaN or infinite values")
    return out.reshape(shape)


# ------------------------------------------------------------------------------ measures


def is_fallback(value: Any, scheme: str) -> bool:
    """Whether ``value`` went in a wider float than ``scheme`` (its downcast overflowed)."""
    return (
        scheme in ("float32", "float16")
        and isinstance(value, np.ndarray)
        and value.dtype != _WIRE_DTYPES[scheme][0]
    )


def relative_error(x: np.ndarray, approx: np.ndarray) -> float:
    """``||approx - x|| / ||x||`` (Frobenius); 0 when both are 0, inf when only ``x`` is."""
    x = np.asarray(x, dtype=np.float64)
    diff = float(np.linalg.norm((np.asarray(approx, dtype=np.float64) - x).ravel()))
    norm = float(np.linalg.norm(x.ravel()))
    if norm == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / norm


def _ext(m: int) -> int:
    """Size of a msgpack ext value with an m-byte payload."""
    if m in (1, 2, 4, 8, 16):
        return m + 2
    return m + (3 if m <= 0xFF else 4 if m <= 0xFFFF else 6)


def encoded_size(shape: tuple[int, ...], scheme: str, *, bits: int = 8) -> int:
    """Exact msgpack bytes of an array of ``shape`` encoded with ``scheme`` (no fallback).

    A float16 array that falls back to float32 has the ``float32`` size, one that
    falls back to float64 the ``none`` size.
    """
    _check_scheme(scheme, bits)
    n, ndim = math.prod(shape), len(shape)
    if scheme == "qsgd":
        return _ext(6 + -(-n * bits // 8)) + 14
    itemsize = {"none": 8, "float32": 4, "float16": 2}[scheme]
    return _ext(2 + 4 * ndim + itemsize * n)
