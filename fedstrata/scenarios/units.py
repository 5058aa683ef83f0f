"""Explicit units in scenario files: ``40ms``, ``5Mbps``, ``10%``.

A scenario value that the schema takes in seconds, Mbit/s or as a fraction may be
written as a plain number (as always) or as a string with a unit:

=============  ==============================================  ======================
quantity       units                                           example -> stored as
=============  ==============================================  ======================
duration       ``ns``, ``us`` (``µs``), ``ms``, ``s``,         ``40ms`` -> ``0.04``
               ``sec``, ``min``, ``h``
bandwidth      ``bps``, ``kbps``, ``Mbps``, ``Gbps``           ``100kbps`` -> ``0.1``
               (case-insensitive)
fraction       ``%``                                           ``10%`` -> ``0.1``
=============  ==============================================  ======================

The converters are pydantic ``BeforeValidator`` functions used by the annotated types
of :mod:`fedstrata.scenarios.schema`. They touch strings only: a number passes through
unchanged, and so does a string that is a plain number (``"0.1"``), which the strict
schema then refuses exactly as before (quoted numbers are not numbers). Any other
string is refused with a message naming the quantity, e.g. ``'40 parsecs' is not a
duration (e.g. 40ms, 2s)``.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = [
    "BANDWIDTH_UNITS",
    "DURATION_UNITS",
    "parse_quantity",
    "to_fraction",
    "to_mbps",
    "to_seconds",
]

#: Duration units: name -> (multiplier, divisor) giving seconds. A divisor keeps
#: ``40ms`` exactly ``0.04`` (``40 * 0.001`` is not).
DURATION_UNITS: dict[str, tuple[float, float]] = {
    "ns": (1.0, 1e9),
    "us": (1.0, 1e6),
    "µs": (1.0, 1e6),
    "ms": (1.0, 1e3),
    "s": (1.0, 1.0),
    "sec": (1.0, 1.0),
    "min": (60.0, 1.0),
    "h": (3600.0, 1.0),
}
#: Bandwidth units (lower case; matched case-insensitively) -> (multiplier, divisor)
#: giving Mbit/s.
BANDWIDTH_UNITS: dict[str, tuple[float, float]] = {
    "bps": (1.0, 1e6),
    "kbps": (1.0, 1e3),
    "mbps": (1.0, 1.0),
    "gbps": (1e3, 1.0),
}
_PERCENT: dict[str, tuple[float, float]] = {"%": (1.0, 100.0)}

_NUMBER = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_PLAIN = re.compile(rf"\s*{_NUMBER}\s*")
_QUANTITY = re.compile(rf"\s*({_NUMBER})\s*([^\s0-9.+-][^\s]*)\s*")


def parse_quantity(
    text: str, units: dict[str, tuple[float, float]], *, fold_case: bool = False
) -> float | None:
    """The number of ``text`` (``"<number><unit>"``) in the base unit, or None.

    Parameters
    ----------
    text
        For example ``"40ms"`` or ``"1.5 min"``; blanks around the unit are allowed.
    units
        Unit name -> (multiplier, divisor) to the base unit.
    fold_case
        Match unit names case-insensitively (``units`` keys then are lower case).

    Returns
    -------
    float | None
        ``number * multiplier / divisor``; None when ``text`` is not a number
        followed by one of ``units``.

    """
    m = _QUANTITY.fullmatch(text)
    if m is None:
        return None
    unit = m.group(2).lower() if fold_case else m.group(2)
    factor = units.get(unit)
    if factor is None:
        return None
    mul, div = factor
    value = float(m.group(1))
    if mul != 1.0:
        value *= mul
    if div != 1.0:
        value /= div
    return value


def _convert(
    value: Any,
    units: dict[str, tuple[float, float]],
    what: str,
    *,
    fold_case: bool = False,
) -> Any:
    if not isinstance(value, str) or _PLAIN.fullmatch(value):
        return value  # numbers, and quoted numbers the strict schema refuses as before
    out = parse_quantity(value, units, fold_case=fold_case)
    if out is None:
        from fedstrata.scenarios.show import show

        raise ValueError(f"{show(value)} is not {what}")
    if not math.isfinite(out):
        from fedstrata.scenarios.show import show

        raise ValueError(f"must be a finite number, got {show(value)}")
    return out


def to_seconds(value: Any) -> Any:
    """A duration string (``40ms``, ``2s``, ``1.5min``) in seconds; anything else unchanged.

    Raises
    ------
    ValueError
        ``value`` is a string that is neither a plain number nor a duration.

    """
    return _convert(value, DURATION_UNITS, "a duration (e.g. 40ms, 2s)")


def to_mbps(value: Any) -> Any:
    """A bandwidth string (``5Mbps``, ``100kbps``, ``1Gbps``) in Mbit/s; else unchanged.

    Raises
    ------
    ValueError
        ``value`` is a string that is neither a plain number nor a bandwidth.

    """
    return _convert(value, BANDWIDTH_UNITS, "a bandwidth (e.g. 5Mbps, 100kbps)", fold_case=True)


def to_fraction(value: Any) -> Any:
    """A percentage string (``10%``) as a fraction (``0.1``); anything else unchanged.

    Raises
    ------
    ValueError
        ``value`` is a string that is neither a plain number nor a percentage.

    """
    return _convert(value, _PERCENT, "a fraction (e.g. 0.1 or 10%)")
