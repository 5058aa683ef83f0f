"""How a scenario's error messages echo what a user wrote: clipped, YAML-flavoured.

The schema, the loader and the unit parsers (:mod:`fedstrata.scenarios.units`) share
these; they import nothing of the scenario package, so any of its modules may use them.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["clip", "describe_error", "show", "show_number"]

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


def show_number(value: Any) -> str:
    """A bound as a user would write it: an integral float without its ``.0``."""
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
        return f"must be {op} {show_number(ctx.get(key))}, got {got}"
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
