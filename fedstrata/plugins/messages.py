"""Message bodies of the clustering protocol, to and from algorithm objects.

Bodies are plain dicts for :mod:`fedstrata.wire`. Every reader checks the shapes
against the federation's :class:`Shape` and raises :class:`WireError`, so a node
counts and drops a malformed message instead of crashing on it.

Update bodies are *additive partials*: a middle-tier aggregator sums the partials
of its children into one partial of the same form, so any tree of aggregators gives
the same total as a flat one.

* ``mode="stats"``: summed sufficient statistics (exact rule ``"sum"``);
* ``mode="params"``: weight-premultiplied parameters Σ w A_ℓ, Σ w V_ℓ and the weight
  sums (rules ``"weighted"``, w = n(ℓ), and ``"mean"``, w = 1; Eq. 74/75/77);
* ``mode="items"``: a list of individual parameter updates, concatenated on the way up
  (rule ``"median"``, Eq. 76, which is no sum: the root needs every item).

Compressed uplink
-----------------
A client may compress its partial (:func:`compress_partial`, schemes of
:mod:`fedstrata.algorithms.compression`). The body then carries
``"compression": TAG`` (``float32``, ``float16``, ``qsgd2`` .. ``qsgd8``) and every float
array field of :data:`COMPRESSED_FIELDS` in that scheme's wire form; integers (``n``,
``counts``, ``contributors``) and the ``objective`` scalar stay exact. A body without
the key is plain float64, byte for byte what an uncompressed partial always was.
:func:`check_partial` decodes a compressed body *in place* (float64 arrays, the key
removed) before checking it like any other, so sums and aggregators only ever see
float64; aggregators forward float64 (they never re-compress).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstrata.algorithms import compression
from fedstrata.algorithms.combine import ParamUpdate, coordinate_median
from fedstrata.algorithms.kernels import KernelReference, merge_kernel_references
from fedstrata.algorithms.multiview import State, Stats
from fedstrata.errors import ValidationError, WireError

__all__ = [
    "COMPRESSED_FIELDS",
    "Shape",
    "add_partials",
    "check_partial",
    "compress_partial",
    "decompress_partial",
    "params_partial",
    "read_candidates",
    "read_choice",
    "read_int",
    "read_references",
    "read_state",
    "references_body",
    "solve_params",
    "state_body",
    "stats_partial",
    "sum_partials",
    "to_stats",
]


@dataclass(frozen=True)
class Shape:
    """Sizes every message of a federation must agree with."""

    n_clusters: int
    dims: tuple[int, ...]

    @property
    def n_views(self) -> int:
        """Number of views."""
        return len(self.dims)


_F64 = np.dtype(np.float64)
_MAX_WEIGHT = float(2**53)  # a count of samples is below this


def _check_array(
    value: Any, key: str, shape: tuple[int, ...], seen: list[np.ndarray] | None = None
) -> np.ndarray:
    """``value`` as a float64 array of ``shape``, finite.

    With ``seen``, the array is added there and the caller checks its finiteness.
    """
    if type(value) is np.ndarray and value.dtype == _F64 and value.shape == shape:
        arr = value  # the common case: float64 straight off the wire
    else:
        if not isinstance(value, np.ndarray):
            raise WireError(f"body field {key!r} must be an array")
        if value.shape != shape:
            raise WireError(f"body field {key!r} has shape {value.shape}, expected {shape}")
        if value.dtype.kind not in "fiu":
            raise WireError(f"body field {key!r} must be numeric, got {value.dtype}")
        arr = value.astype(np.float64, copy=False)
    if seen is not None:
        seen.append(arr)
    elif not np.isfinite(arr).all():
        raise WireError(f"body field {key!r} holds NaN or infinite values")
    return arr


def _array(
    body: dict[str, Any], key: str, shape: tuple[int, ...], seen: list[np.ndarray] | None = None
) -> np.ndarray:
    return _check_array(body.get(key), key, shape, seen)


def _arrays(
    body: dict[str, Any],
    key: str,
    shapes: Sequence[tuple[int, ...]],
    optional: bool = False,
    seen: list[np.ndarray] | None = None,
) -> list[Any]:
    value = body.get(key)
    if not isinstance(value, list) or len(value) != len(shapes):
        raise WireError(f"body field {key!r} must be a list of {len(shapes)} arrays")
    out: list[Any] = []
    for h, (item, shape) in enumerate(zip(value, shapes, strict=True)):
        if item is None and optional:
            out.append(None)
            continue
        out.append(_check_array(item, f"{key}[{h}]", shape, seen))
    return out


def read_int(body: dict[str, Any], key: str, minimum: int = 0) -> int:
    """Body field ``key`` as an int >= ``minimum`` (WireError otherwise; bools refused)."""
    value = body.get(key) if isinstance(body, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise WireError(f"body field {key!r} must be an int >= {minimum}")
    return value


def read_choice(body: dict[str, Any], key: str, choices: Sequence[str]) -> str:
    """Body field ``key`` as one of the strs ``choices`` (WireError for anything else).

    The type is checked before the value is compared: an array, list or map in a
    field the code compares with ``==``/``in`` must be refused, not compared.
    """
    if not isinstance(body, dict):
        raise WireError("a body must be a map")
    value = body.get(key)
    if not isinstance(value, str) or value not in choices:
        shown = value if isinstance(value, str) else type(value).__name__
        raise WireError(f"body field {key!r} must be one of {list(choices)}, got {shown!r:.60}")
    return value


def state_body(state: State) -> dict[str, Any]:
    """Body fields of a global state (unbatched); ``view_scale`` only when it has one."""
    body: dict[str, Any] = {"centers": list(state.centers), "view_weights": state.view_weights}
    if state.view_scale is not None:
        body["view_scale"] = state.view_scale
    return body


def read_state(body: dict[str, Any], shape: Shape) -> State:
    """Parse and check a global state from a model body."""
    centers = _arrays(body, "centers", [(shape.n_clusters, d) for d in shape.dims])
    v = _array(body, "view_weights", (shape.n_views,))
    if (v < 0).any() or abs(v.sum() - 1.0) > 1e-6:
        raise WireError("view_weights must be non-negative and sum to 1")
    scale = None
    if "view_scale" in body:
        scale = _array(body, "view_scale", (shape.n_views,))
        if (scale < 0).any():
            raise WireError("view_scale must be non-negative")
    return State(tuple(centers), v, scale)


def references_body(refs: Sequence[KernelReference | None]) -> dict[str, Any]:
    """Body field for per-view kernel references; None: view not held.

    Each holds the per-feature ``min``, ``max``, ``sum``, the ``count`` and, when known,
    ``sq_dev`` (Σ (x − mean)², which the heat-kernel bandwidth needs; merged exactly).
    """

    def item(r: KernelReference) -> dict[str, Any]:
        out = {"min": r.minimum, "max": r.maximum, "sum": r.total, "count": int(r.count)}
        if r.sq_dev is not None:
            out["sq_dev"] = r.sq_dev
        return out

    return {"refs": [None if r is None else item(r) for r in refs]}


def read_references(body: dict[str, Any], shape: Shape) -> list[KernelReference | None]:
    """Parse per-view kernel references (None for a view nobody below holds)."""
    refs = body.get("refs")
    if not isinstance(refs, list) or len(refs) != shape.n_views:
        raise WireError(f"body field 'refs' must be a list of {shape.n_views} maps")
    out: list[KernelReference | None] = []
    for h, (item, d) in enumerate(zip(refs, shape.dims, strict=True)):
        if item is None:
            out.append(None)
            continue
        if not isinstance(item, dict):
            raise WireError(f"refs[{h}] must be a map")
        sq_dev = _array(item, "sq_dev", (d,)) if "sq_dev" in item else None
        if sq_dev is not None and (sq_dev < 0).any():
            raise WireError(f"refs[{h}].sq_dev must be non-negative")
        out.append(
            KernelReference(
                _array(item, "min", (d,)),
                _array(item, "max", (d,)),
                _array(item, "sum", (d,)),
                read_int(item, "count", 1),
                sq_dev=sq_dev,
            )
        )
    return out


def read_candidates(
    body: dict[str, Any], shape: Shape
) -> tuple[list[np.ndarray], np.ndarray] | None:
    """Parse initialisation candidates: per view (k, d_h) centres and (k,) weights.

    None when the body carries none (a client holding only some views cannot propose
    centres aligned across all views).
    """
    if "init_w" not in body and "init" not in body:
        return None
    w = body.get("init_w")
    if not isinstance(w, np.ndarray) or w.ndim != 1 or w.size == 0:
        raise WireError("body field 'init_w' must be a non-empty 1-D array")
    k = w.size
    centers = _arrays(body, "init", [(k, d) for d in shape.dims])
    weights = _array(body, "init_w", (k,))
    if (weights <= 0).any() or (weights > _MAX_WEIGHT).any():
        # sizes of candidate clusters: counts of samples, so bounded; an unbounded
        # weight would overflow the k-means++ draw's normalisation
        raise WireError(f"initialisation weights must lie in (0, 2**53], got {weights.max():g}")
    return centers, weights


def stats_partial(stats: Stats, objective: float = 0.0) -> dict[str, Any]:
    """An additive ``stats`` partial from (unbatched) statistics."""
    return {
        "mode": "stats",
        "num": list(stats.center_num),
        "den": list(stats.center_den),
        "costs": stats.view_costs,
        "mass": stats.cluster_mass,
        "counts": stats.view_counts.astype(np.int64),
        "n": int(stats.n_samples),
        "contributors": 1,
        "objective": float(objective),
    }


def to_stats(body: dict[str, Any], shape: Shape) -> Stats:
    """Read a ``stats`` partial back into :class:`Stats`."""
    cd = [(shape.n_clusters, d) for d in shape.dims]
    return Stats(
        center_num=tuple(_arrays(body, "num", cd)),
        center_den=tuple(_arrays(body, "den", cd)),
        view_costs=_array(body, "costs", (shape.n_views,)),
        cluster_mass=_array(body, "mass", (shape.n_clusters,)),
        view_counts=_array(body, "counts", (shape.n_views,)).astype(np.int64),
        n_samples=read_int(body, "n"),
    )


def params_partial(update: ParamUpdate, rule: str) -> dict[str, Any]:
    """An additive partial for a parameter update under ``rule``.

    ``weighted``/``mean`` pre-multiply by the client's weight (n(ℓ) or 1), which is
    what lets sums travel through aggregators and secure aggregation. ``median``
    wraps the update as a one-item list.
    """
    held = update.held.astype(np.float64)
    item = {
        "centers": [a for a in update.centers],
        "view_weights": update.view_weights,
        "n": int(update.n_samples),
        "objective": float(update.objective or 0.0),
    }
    if rule == "median":
        return {
            "mode": "items",
            "items": [item],
            "contributors": 1,
            "n": int(update.n_samples),
            "objective": float(update.objective or 0.0),
        }
    w = float(update.n_samples) if rule == "weighted" else 1.0
    return {
        "mode": "params",
        "wcenters": [None if a is None else w * a for a in update.centers],
        "wviews": w * update.view_weights,
        "wheld": w * held,
        "n": int(update.n_samples),
        "contributors": 1,
        "objective": float(update.objective or 0.0),
    }


def check_partial(body: dict[str, Any], shape: Shape) -> str:
    """Validate an update partial against ``shape``; return its mode. Raises WireError.

    A compressed partial (with a ``"compression"`` key) is decoded first and, once
    valid, replaced *in place* by its float64 form (see :func:`decompress_partial`);
    on error ``body`` is left as it was.
    """
    if "compression" in body:
        plain = decompress_partial(body, shape)
        mode = _check_plain(plain, shape)
        body.clear()
        body.update(plain)
        return mode
    return _check_plain(body, shape)


def _check_plain(body: dict[str, Any], shape: Shape) -> str:
    # One finiteness check over every array (a partial holds a dozen small ones); only
    # a partial that fails it is checked again in order, for the first problem's error.
    seen: list[np.ndarray] = []
    try:
        mode = _check_fields(body, shape, seen)
    except WireError:
        return _check_fields(body, shape, None)  # raises the first problem, in order
    if seen and not np.isfinite(np.concatenate([a.ravel() for a in seen])).all():
        _check_fields(body, shape, None)
    return mode


def _check_fields(body: dict[str, Any], shape: Shape, seen: list[np.ndarray] | None) -> str:
    mode = read_choice(body, "mode", ("stats", "params", "items"))
    read_int(body, "n")
    read_int(body, "contributors", 1)
    J = body.get("objective")
    if not isinstance(J, float) or not math.isfinite(J):
        raise WireError("body field 'objective' must be a finite float")
    cd = [(shape.n_clusters, d) for d in shape.dims]
    if mode == "stats":  # the fields of to_stats, in its order
        _arrays(body, "num", cd, seen=seen)
        _arrays(body, "den", cd, seen=seen)
        _array(body, "costs", (shape.n_views,), seen)
        _array(body, "mass", (shape.n_clusters,), seen)
        _array(body, "counts", (shape.n_views,), seen)
        read_int(body, "n")
    elif mode == "params":
        _arrays(body, "wcenters", cd, optional=True, seen=seen)
        _array(body, "wviews", (shape.n_views,), seen)
        _array(body, "wheld", (shape.n_views,), seen)
    else:
        items = body.get("items")
        if not isinstance(items, list) or not items:
            raise WireError("body field 'items' must be a non-empty list")
        for item in items:
            if not isinstance(item, dict):
                raise WireError("each item must be a map")
            _arrays(item, "centers", cd, optional=True, seen=seen)
            _array(item, "view_weights", (shape.n_views,), seen)
            read_int(item, "n")
    return mode


COMPRESSED_FIELDS: dict[str, tuple[str, ...]] = {
    "stats": ("num", "den", "costs", "mass"),
    "params": ("wcenters", "wviews", "wheld"),
    "items": ("centers", "view_weights"),  # of each item
}
"""The float array fields compressed in a partial of each mode (lists: per element)."""

_LIST_FIELDS = frozenset({"num", "den", "wcenters", "centers"})


def compress_partial(
    body: dict[str, Any],
    scheme: str,
    *,
    bits: int = 8,
    rng: np.random.Generator | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Compress the float arrays of a partial for the uplink.

    Parameters
    ----------
    body
        A partial from :func:`stats_partial` or :func:`params_partial` (not modified).
    scheme, bits, rng
        See :func:`fedstrata.algorithms.compression.encode`; ``rng`` only for ``qsgd``.

    Returns
    -------
    (dict, dict)
        The body to send (``body`` itself for ``none``) and what the compression cost:
        ``rel_error``, the largest ``||decode(encode(x)) - x|| / ||x||`` over the
        compressed arrays (what the receiver will decode, measured by the sender), and
        ``fallbacks``, how many arrays went in a wider float because the downcast would
        have overflowed.

    """
    if scheme == "none":
        return body, {"rel_error": 0.0, "fallbacks": 0}
    tag = compression.tag(scheme, bits)
    worst, fallbacks = 0.0, 0

    def one(x: np.ndarray | None) -> Any:
        nonlocal worst, fallbacks
        if x is None:
            return None
        value = compression.encode(x, scheme, bits=bits, rng=rng)
        if np.isfinite(x).all():  # a non-finite partial is dropped by its receiver anyway
            approx = compression.decode(value, scheme, np.shape(x), bits=bits)
            worst = max(worst, compression.relative_error(x, approx))
        fallbacks += compression.is_fallback(value, scheme)
        return value

    def fields(d: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
        out = dict(d)
        for key in names:
            out[key] = [one(a) for a in d[key]] if key in _LIST_FIELDS else one(d[key])
        return out

    mode = body["mode"]
    if mode == "items":
        out = dict(body)
        out["items"] = [fields(item, COMPRESSED_FIELDS["items"]) for item in body["items"]]
    else:
        out = fields(body, COMPRESSED_FIELDS[mode])
    out["compression"] = tag
    return out, {"rel_error": worst, "fallbacks": fallbacks}


def decompress_partial(body: dict[str, Any], shape: Shape) -> dict[str, Any]:
    """A compressed partial as plain float64 (a new dict, without the ``compression`` key).

    Only the compressed fields are read here (checked against ``shape`` and the
    scheme's wire form); :func:`check_partial` checks the rest. Raises WireError.
    """
    tag = body.get("compression")
    if not isinstance(tag, str):
        raise WireError("body field 'compression' must be a str tag")
    try:
        scheme, bits = compression.parse_tag(tag)
    except ValidationError as exc:
        raise WireError(f"body field 'compression': {exc}") from exc
    mode = read_choice(body, "mode", tuple(COMPRESSED_FIELDS))
    H = shape.n_views
    cd = [(shape.n_clusters, d) for d in shape.dims]
    expected: dict[str, Any] = {
        "num": cd,
        "den": cd,
        "wcenters": cd,
        "centers": cd,
        "costs": (H,),
        "wviews": (H,),
        "wheld": (H,),
        "view_weights": (H,),
        "mass": (shape.n_clusters,),
    }

    def one(value: Any, name: str, want: tuple[int, ...], optional: bool) -> Any:
        if value is None and optional:
            return None
        try:
            return compression.decode(value, scheme, want, bits=bits)
        except ValidationError as exc:
            raise WireError(f"body field {name!r}: {exc}") from exc

    def fields(d: dict[str, Any], names: tuple[str, ...], where: str) -> dict[str, Any]:
        out = dict(d)
        for key in names:
            want = expected[key]
            if key in _LIST_FIELDS:
                value = d.get(key)
                if not isinstance(value, list) or len(value) != len(want):
                    raise WireError(f"body field '{where}{key}' must be a list of {len(want)}")
                optional = key in ("wcenters", "centers")
                out[key] = [
                    one(v, f"{where}{key}[{h}]", w, optional)
                    for h, (v, w) in enumerate(zip(value, want, strict=True))
                ]
            else:
                out[key] = one(d.get(key), f"{where}{key}", want, False)
        return out

    if mode == "items":
        items = body.get("items")
        if not isinstance(items, list) or not items:
            raise WireError("body field 'items' must be a non-empty list")
        out = dict(body)
        out["items"] = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise WireError("each item must be a map")
            out["items"].append(fields(item, COMPRESSED_FIELDS["items"], f"items[{i}]."))
    else:
        out = fields(body, COMPRESSED_FIELDS[mode], "")
    del out["compression"]
    return out


def add_partials(partials: Sequence[dict[str, Any]], shape: Shape) -> dict[str, Any]:
    """Validate partials, then sum them (see :func:`sum_partials`)."""
    if not partials:
        raise WireError("nothing to add")
    for p in partials:
        check_partial(p, shape)
    return sum_partials(partials)


def sum_partials(partials: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Sum already validated partials of one mode (concatenate for ``items``)."""
    if not partials:
        raise WireError("nothing to add")
    modes = {p["mode"] for p in partials}
    if len(modes) != 1:
        raise WireError(f"cannot add partials of different modes {sorted(modes)}")
    mode = modes.pop()
    out: dict[str, Any] = {
        "mode": mode,
        "n": sum(p["n"] for p in partials),
        "contributors": sum(p["contributors"] for p in partials),
        "objective": float(sum(p["objective"] for p in partials)),
    }
    if mode == "items":
        out["items"] = [item for p in partials for item in p["items"]]
        return out
    keys = (
        ("num", "den", "costs", "mass", "counts")
        if mode == "stats"
        else ("wcenters", "wviews", "wheld")
    )
    for key in keys:
        first = partials[0][key]
        if isinstance(first, list):
            out[key] = [_sum_optional([p[key][h] for p in partials]) for h in range(len(first))]
        else:
            out[key] = sum(p[key] for p in partials)
    return out


def _sum_optional(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def solve_params(body: dict[str, Any], shape: Shape, previous: State) -> State:
    """Root step for parameter partials: divide the weighted sums, or take the median.

    A view no contributor holds keeps its previous centres.
    """
    if body["mode"] == "items":
        updates = [
            ParamUpdate(tuple(item["centers"]), np.asarray(item["view_weights"], float), item["n"])
            for item in body["items"]
        ]
        return coordinate_median(updates)
    wheld = np.asarray(body["wheld"], dtype=np.float64)
    centers = []
    for h, wc in enumerate(body["wcenters"]):
        centers.append(previous.centers[h] if wc is None or wheld[h] <= 0 else wc / wheld[h])
    v = np.where(wheld > 0, np.asarray(body["wviews"]) / np.where(wheld > 0, wheld, 1.0), 0.0)
    v = np.clip(v, 0.0, None)
    v = v / v.sum() if v.sum() > 0 else previous.view_weights
    return State(tuple(centers), v)


def merge_reference_bodies(bodies: Sequence[dict[str, Any]], shape: Shape) -> dict[str, Any]:
    """Merge children's kernel references (min of mins, max of maxes, sums)."""
    per_client = [read_references(b, shape) for b in bodies]
    merged: list[KernelReference | None] = []
    for h in range(shape.n_views):
        held = [refs[h] for refs in per_client if refs[h] is not None]
        merged.append(merge_kernel_references(held) if held else None)  # type: ignore[arg-type]
    return references_body(merged)
