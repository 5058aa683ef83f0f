"""How a scenario's error messages echo what a user wrote: clipped, YAML-flavoured.

The schema, the loader and the unit parsers (:mod:`fedstrata.scenarios.units`) share
these; they import nothing of the scenario package, so any of its modules may use them.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["clip", "show"]

_CLIP = 80


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
