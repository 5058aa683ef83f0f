"""Field types and bounds that several scenario sections share.

Numbers with units (:mod:`fedstrata.scenarios.units`): each type also takes a string
with a unit, converted before the strict number check, and the JSON schema offers both
spellings. The sections (:mod:`fedstrata.scenarios.schema`,
:mod:`fedstrata.scenarios.protocol_schema`) import them from here, so that a section
module need not import the schema that assembles them.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema

from fedstrata.scenarios.units import to_fraction, to_seconds

__all__ = [
    "MAX_LOCAL_ITERS",
    "MAX_ROUNDS",
    "MAX_SECONDS",
    "PositiveSeconds",
    "Probability",
    "Seconds",
    "unit_schema",
]

MAX_ROUNDS = 100_000
"""Largest ``protocol.rounds``."""
MAX_LOCAL_ITERS = 10_000
"""Largest ``protocol.local_iters``."""
MAX_SECONDS = 1e9
"""Largest duration or time, in (virtual) seconds: deadlines, latencies, fault times."""

_NUM_RE = r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?"


def unit_schema(number: dict[str, Any], units: str, example: str) -> WithJsonSchema:
    """The JSON schema of a number that may also be a string with one of ``units``."""
    text = {"type": "string", "pattern": rf"^\s*{_NUM_RE}\s*({units})\s*$", "examples": [example]}
    return WithJsonSchema({"anyOf": [{"type": "number", **number}, text]})


_DURATION_UNITS = "ns|us|µs|ms|s|sec|min|h"
_SECONDS_SCHEMA = unit_schema({"minimum": 0, "maximum": MAX_SECONDS}, _DURATION_UNITS, "40ms")
Probability = Annotated[
    float,
    BeforeValidator(to_fraction),
    Field(ge=0.0, le=1.0),
    unit_schema({"minimum": 0, "maximum": 1}, "%", "10%"),
]
"""A probability in ``[0, 1]``; also ``10%``."""
Seconds = Annotated[
    float, BeforeValidator(to_seconds), Field(ge=0.0, le=MAX_SECONDS), _SECONDS_SCHEMA
]
"""Seconds in ``[0, 1e9]``; also ``40ms``, ``1.5min``."""
PositiveSeconds = Annotated[
    float,
    BeforeValidator(to_seconds),
    Field(gt=0.0, le=MAX_SECONDS),
    unit_schema({"exclusiveMinimum": 0, "maximum": MAX_SECONDS}, _DURATION_UNITS, "2s"),
]
"""Seconds in ``(0, 1e9]``; also ``2s``."""
