"""Fixed-point encoding of float64 arrays as integers modulo 2**k, for masked sums.

Secure aggregation adds vectors in the ring Z/2**k Z: masks are uniform there, and
they cancel exactly. This module maps float64 values into that ring and maps a
*sum* of encodings back to floats.

Encoding
--------
``encode`` clips each value to ``[-clip, clip]``, scales it by ``2**scale_bits`` and
rounds it to the nearest integer ``q``. It stores ``q mod 2**k`` (two's complement)
in a ``uint64`` array. The resolution is ``2**-scale_bits``, and every ``|q|`` is at
most ``Q = rint(clip * 2**scale_bits)`` (:func:`max_abs_encoding`).

Modulus
-------
``k = modulus_bits`` lies in 2..64. The default, 64, is numpy's native ``uint64``
arithmetic: additions and subtractions wrap modulo 2**64 by themselves, with no
reductions and no Python ints. A smaller ``k`` works the same way, because 2**k
divides 2**64: compute modulo 2**64 and reduce once with :func:`wrap` (``& (2**k-1)``).

Headroom rule
-------------
A sum of ``n`` encodings lies in ``[-n*Q, n*Q]``. It decodes correctly when it fits
in the signed range of k bits, that is, when ``n * Q <= 2**(k-1) - 1``. For floats:
``n * clip < 2**(k-1) * 2**-scale_bits``, up to the rounding of ``Q``.
:func:`check_headroom` tests this rule with the group size it is given and raises
:class:`FixedPointOverflowError` if it fails. :func:`encode` and :func:`decode` both
call it, so a configuration whose sum could wrap is refused before any value is
masked. No valid sum can wrap silently.

:func:`decode` also checks that every decoded coordinate lies within ``±n*Q``. A
value outside that range is not a sum of ``n`` clipped encodings (a wrong ``n``, an
unclipped or corrupted summand, leftover masks), so it raises
:class:`FixedPointOverflowError` instead of returning a wrong sum. The check catches
a garbage coordinate (uniform modulo 2**k) with probability ``1 - n*Q / 2**(k-1)``.
It cannot catch one that lands inside the range, and with the widest range a group
allows (``n*Q`` close to ``2**(k-1)``) it catches almost nothing: secure aggregation
therefore also masks a check tag with every input (:func:`fedstrata.privacy.secagg.
check_tag`), which a random or corrupted masked vector fails with probability
``1 - 2**-k``.

Precision
---------
With rounding to nearest, ``|decode(Σ encode(x_i)) - Σ clip(x_i)| <= n * 2**-(scale_bits+1)``
in exact arithmetic. Converting the integer sum to float64 adds a relative error of
at most 2**-53. With the default ``k = 64`` and ``scale_bits = 24``, a clip of 1000
(about 2**10) leaves room for ``n`` up to about 2**29 summands.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedstrata.errors import PrivacyError, ValidationError

__all__ = [
    "DEFAULT_MODULUS_BITS",
    "DEFAULT_SCALE_BITS",
    "FixedPointOverflowError",
    "check_headroom",
    "decode",
    "encode",
    "max_abs_encoding",
    "max_summands",
    "wrap",
]

DEFAULT_MODULUS_BITS: Final = 64
"""The default ring size exponent ``k``: native ``uint64`` wrap-around."""

DEFAULT_SCALE_BITS: Final = 24
"""A reasonable default resolution, 2**-24 (about 6e-8)."""


class FixedPointOverflowError(PrivacyError, OverflowError):
    """A sum could leave, or has left, the representable range of the ring."""


def _check_modulus_bits(modulus_bits: int) -> int:
    if isinstance(modulus_bits, bool) or not isinstance(modulus_bits, int | np.integer):
        raise ValidationError(f"modulus_bits must be an int, got {modulus_bits!r}")
    if not 2 <= modulus_bits <= 64:
        raise ValidationError(f"modulus_bits must be in 2..64, got {modulus_bits}")
    return int(modulus_bits)


def _check_scale_bits(scale_bits: int) -> int:
    if isinstance(scale_bits, bool) or not isinstance(scale_bits, int | np.integer):
        raise ValidationError(f"scale_bits must be an int, got {scale_bits!r}")
    if not 0 <= scale_bits <= 1000:
        raise ValidationError(f"scale_bits must be in 0..1000, got {scale_bits}")
    return int(scale_bits)


def _check_n(n_summands: int) -> int:
    if isinstance(n_summands, bool) or not isinstance(n_summands, int | np.integer):
        raise ValidationError(f"n_summands must be an int, got {n_summands!r}")
    if n_summands < 1:
        raise ValidationError(f"n_summands must be at least 1, got {n_summands}")
    return int(n_summands)


def _mask(modulus_bits: int) -> np.uint64:
    return np.uint64((1 << modulus_bits) - 1)


def max_abs_encoding(*, scale_bits: int, clip: float) -> int:
    """The largest ``|q|`` an encoding can hold: ``Q = rint(clip * 2**scale_bits)``.

    Raises :class:`~fedstrata.errors.ValidationError` if ``clip`` is not a positive
    finite number or lies below the resolution (``Q`` would be 0).
    """
    scale_bits = _check_scale_bits(scale_bits)
    try:
        clip_f = float(clip)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"clip must be a number, got {clip!r}") from exc
    if not (np.isfinite(clip_f) and clip_f > 0):
        raise ValidationError(f"clip must be positive and finite, got {clip!r}")
    scaled = np.ldexp(clip_f, scale_bits)
    if not np.isfinite(scaled):
        raise ValidationError(f"clip * 2**{scale_bits} overflows float64")
    bound = int(np.rint(scaled))
    if bound < 1:
        raise ValidationError(f"clip {clip_f} is below the resolution 2**-{scale_bits}")
    return bound


def max_summands(*, scale_bits: int, clip: float, modulus_bits: int = DEFAULT_MODULUS_BITS) -> int:
    """The largest ``n`` for which a sum of ``n`` encodings cannot wrap (may be 0)."""
    modulus_bits = _check_modulus_bits(modulus_bits)
    bound = max_abs_encoding(scale_bits=scale_bits, clip=clip)
    return ((1 << (modulus_bits - 1)) - 1) // bound


def check_headroom(
    *, n_summands: int, scale_bits: int, clip: float, modulus_bits: int = DEFAULT_MODULUS_BITS
) -> None:
    """Raise :class:`FixedPointOverflowError` unless ``n_summands * Q <= 2**(k-1) - 1``."""
    n_summands = _check_n(n_summands)
    limit = max_summands(scale_bits=scale_bits, clip=clip, modulus_bits=modulus_bits)
    if n_summands > limit:
        raise FixedPointOverflowError(
            f"a sum of {n_summands} values clipped at {clip} with scale 2**-{scale_bits} "
            f"can overflow the signed {modulus_bits}-bit range (at most {limit} summands fit); "
            "lower scale_bits or clip"
        )


def wrap(values: ArrayLike, *, modulus_bits: int = DEFAULT_MODULUS_BITS) -> NDArray[np.uint64]:
    """``values mod 2**modulus_bits`` as ``uint64`` (a copy; values must be ``uint64``)."""
    modulus_bits = _check_modulus_bits(modulus_bits)
    arr = np.asarray(values)
    if arr.dtype != np.uint64:
        raise ValidationError(f"expected a uint64 array, got dtype {arr.dtype}")
    return arr & _mask(modulus_bits)


def encode(
    x: ArrayLike,
    *,
    scale_bits: int,
    clip: float,
    n_summands: int,
    modulus_bits: int = DEFAULT_MODULUS_BITS,
) -> NDArray[np.uint64]:
    """Encode floats as fixed-point integers modulo ``2**modulus_bits``.

    Parameters
    ----------
    x
        Real values of any shape; converted to float64.
    scale_bits
        ``f``: values are rounded to multiples of ``2**-f``.
    clip
        Values are clipped to ``[-clip, clip]`` before scaling.
    n_summands
        How many encodings will be added together (the group size). The headroom
        rule is checked for it (:func:`check_headroom`).
    modulus_bits
        ``k``: the ring is Z/2**k Z.

    Returns
    -------
    numpy.ndarray
        ``uint64`` array, same shape as ``x``, every entry below ``2**k``.

    Raises
    ------
    ValidationError
        ``x`` is not real or holds NaN or infinity, or a parameter is invalid.
    FixedPointOverflowError
        A sum of ``n_summands`` encodings could overflow.
    """
    modulus_bits = _check_modulus_bits(modulus_bits)
    check_headroom(
        n_summands=n_summands, scale_bits=scale_bits, clip=clip, modulus_bits=modulus_bits
    )
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise ValidationError(f"cannot encode values of dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if not np.isfinite(arr).all():
        raise ValidationError("cannot encode NaN or infinite values")
    scaled = np.ldexp(np.clip(arr, -float(clip), float(clip)), scale_bits)
    ints = np.rint(scaled).astype(np.int64)
    return ints.view(np.uint64) & _mask(modulus_bits)


def _as_ring(total: ArrayLike) -> NDArray[np.uint64]:
    arr = np.asarray(total)
    if arr.dtype == np.uint64:
        return arr
    if arr.dtype.kind == "O" and all(type(v) is int for v in arr.flat):
        ok = all(0 <= v < 1 << 64 for v in arr.flat)
    elif arr.dtype.kind in "iu":
        ok = arr.size == 0 or int(arr.min()) >= 0
    else:
        ok = False
    if not ok:
        raise ValidationError(f"a masked sum must hold integers in 0..2**64-1 (dtype {arr.dtype})")
    return arr.astype(np.uint64)


def decode(
    total: ArrayLike,
    *,
    n_summands: int,
    scale_bits: int,
    clip: float,
    modulus_bits: int = DEFAULT_MODULUS_BITS,
) -> NDArray[np.float64]:
    """Decode the sum of ``n_summands`` encodings (already unmasked) to float64.

    ``total`` is reduced modulo ``2**modulus_bits``, read as a signed k-bit integer and
    scaled by ``2**-scale_bits``. The result lies within ``n_summands * 2**-(scale_bits+1)``
    (plus float64 rounding) of the sum of the clipped inputs.

    Raises
    ------
    FixedPointOverflowError
        The configuration fails the headroom rule for ``n_summands``, or a coordinate
        lies outside ``±n_summands * Q``. Such a value is not a valid sum.
    ValidationError
        ``total`` is not an array of integers in ``0..2**64-1``, or a parameter is invalid.
    """
    modulus_bits = _check_modulus_bits(modulus_bits)
    n_summands = _check_n(n_summands)
    check_headroom(
        n_summands=n_summands, scale_bits=scale_bits, clip=clip, modulus_bits=modulus_bits
    )
    ring = _as_ring(total) & _mask(modulus_bits)
    shift = np.uint64(64 - modulus_bits)
    signed = (ring << shift).view(np.int64) >> np.int64(64 - modulus_bits)
    limit = n_summands * max_abs_encoding(scale_bits=scale_bits, clip=clip)
    bad = np.count_nonzero((signed > limit) | (signed < -limit))  # no abs: -2**63 stays negative
    if bad:
        raise FixedPointOverflowError(
            f"{bad} coordinate(s) lie outside ±{limit} (= {n_summands} x the clip bound): "
            "not a sum of that many encodings (wrong count, unclipped summand or leftover mask)"
        )
    return np.ldexp(signed.astype(np.float64), -scale_bits)
