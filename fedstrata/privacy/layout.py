"""Additive message bodies as flat vectors, and back: what secure aggregation sums.

Secure aggregation adds one fixed-length vector per member. An algorithm's additive
partial is a dict of arrays, lists of arrays and scalars; a :class:`Layout` names
which of its fields are summed, in which order and with which shapes, so every
member of a group writes the same coordinates and the aggregator reads the sum back
into a partial of the same form.

The layout is the algorithm's (it knows the federation's shapes), never read from a
message: a member that holds only some views writes zeros for the others, so the
vector length does not depend on what a member holds, and the aggregator learns
nothing from it.

Integer fields (sample counts) travel as the same fixed-point numbers as the floats
and come back exactly (they are far below the encoding's 2**39 integer range). A
list field may be *optional by* a weight field: an entry that is ``None`` on the
wire (a view nobody held) is written as zeros and read back as ``None`` where that
weight's sum is zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedstrata.errors import WireError

__all__ = ["Layout", "SummedField", "flatten", "unflatten"]


@dataclass(frozen=True)
class SummedField:
    """One summed field of a partial.

    Parameters
    ----------
    name
        The body key.
    shapes
        One shape for an array (``()`` for a scalar), or a list of shapes for a list of
        arrays (``listed=True``).
    listed
        Whether the field is a list of arrays (one per view).
    integer
        Whether the values are integers (read back rounded, as ``int``/``int64``).
    optional_by
        For a listed field: entries may be ``None``; read back as ``None`` where the
        named (array) field's sum is zero at that entry's index.
    noised
        Whether differential-privacy noise applies to it (the statistics, not counts).
    """

    name: str
    shapes: tuple[tuple[int, ...], ...]
    listed: bool = False
    integer: bool = False
    optional_by: str | None = None
    noised: bool = False

    @property
    def size(self) -> int:
        """How many coordinates it takes."""
        return sum(int(np.prod(s, dtype=np.int64)) for s in self.shapes)


@dataclass(frozen=True)
class Layout:
    """The summed fields of an additive partial, and the fields every member sends alike.

    ``constants`` (e.g. ``{"mode": "stats"}``) must hold the same value in every
    partial; they are not summed and come back as they are.
    """

    fields: tuple[SummedField, ...]
    constants: Mapping[str, Any] = field(default_factory=dict)

    @property
    def length(self) -> int:
        """The vector length."""
        return sum(f.size for f in self.fields)

    def noised_mask(self) -> NDArray[np.bool_]:
        """Which coordinates are statistics that differential privacy noises."""
        return np.concatenate([np.full(f.size, f.noised) for f in self.fields])


def _put(out: NDArray[np.float64], at: int, value: Any, shape: tuple[int, ...], key: str) -> None:
    size = int(np.prod(shape, dtype=np.int64))
    if value is None:
        return  # zeros already
    if isinstance(value, bool) or not isinstance(value, int | float | np.ndarray | np.number):
        raise WireError(f"field {key!r} is not numeric")
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != shape:
        raise WireError(f"field {key!r} has shape {arr.shape}, expected {shape}")
    out[at : at + size] = arr.ravel()


def flatten(partial: Mapping[str, Any], layout: Layout, *, skip: Sequence[str] = ()) -> np.ndarray:
    """The summed fields of ``partial`` as one float64 vector (``None`` entries: zeros).

    Keys in ``skip`` (such as the round's ``sub``) are ignored; any other key the
    layout does not know, or a constant with another value, is a
    :class:`~fedstrata.errors.WireError`: it could not travel through the sum.
    """
    known = {f.name for f in layout.fields} | set(layout.constants) | set(skip)
    extra = sorted(set(partial) - known)
    if extra:
        raise WireError(f"fields {extra} cannot be securely aggregated")
    for key, value in layout.constants.items():
        if partial.get(key) != value:
            raise WireError(f"field {key!r} must be {value!r}, got {partial.get(key)!r}")
    out = np.zeros(layout.length, dtype=np.float64)
    at = 0
    for f in layout.fields:
        value = partial.get(f.name)
        if f.listed:
            if not isinstance(value, list) or len(value) != len(f.shapes):
                raise WireError(f"field {f.name!r} must be a list of {len(f.shapes)} arrays")
            for h, (item, shape) in enumerate(zip(value, f.shapes, strict=True)):
                if item is None and f.optional_by is None:
                    raise WireError(f"field {f.name}[{h}] must not be None")
                _put(out, at, item, shape, f"{f.name}[{h}]")
                at += int(np.prod(shape, dtype=np.int64))
        else:
            if value is None:
                raise WireError(f"field {f.name!r} is missing")
            _put(out, at, value, f.shapes[0], f.name)
            at += f.size
    return out


def _read(values: NDArray[np.float64], shape: tuple[int, ...], integer: bool) -> Any:
    arr = values.reshape(shape)
    if integer:
        arr = np.rint(arr).astype(np.int64)
        return int(arr) if shape == () else arr
    return float(arr) if shape == () else arr.copy()


def unflatten(vector: NDArray[np.float64], layout: Layout) -> dict[str, Any]:
    """The partial a summed vector stands for (constants included)."""
    vec = np.asarray(vector, dtype=np.float64)
    if vec.shape != (layout.length,):
        raise WireError(f"a summed vector must have length {layout.length}, got {vec.shape}")
    out: dict[str, Any] = dict(layout.constants)
    at = 0
    for f in layout.fields:
        if f.listed:
            items = []
            for shape in f.shapes:
                size = int(np.prod(shape, dtype=np.int64))
                items.append(_read(vec[at : at + size], shape, f.integer))
                at += size
            out[f.name] = items
        else:
            out[f.name] = _read(vec[at : at + f.size], f.shapes[0], f.integer)
            at += f.size
    for f in layout.fields:
        if f.listed and f.optional_by is not None:
            weight = np.asarray(out[f.optional_by])
            out[f.name] = [None if weight[h] == 0 else a for h, a in enumerate(out[f.name])]
    return out
