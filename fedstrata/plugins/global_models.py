"""A client's view of the global model: read once per model body, then shared.

Every client of a federation receives the same model body each round. Parsing and
checking it (and freezing its arrays) once per distinct body, not once per client, is
most of what keeps a large simulated federation fast; :class:`GlobalModels` is that
cache, one per algorithm instance (so per federation: nothing is shared between
federations in one process).
"""

from __future__ import annotations

import threading
from typing import Any, TypeGuard

import numpy as np

from fedstrata.algorithms.multiview import State, view_powers
from fedstrata.plugins.messages import Shape, read_state

__all__ = ["GlobalModel", "GlobalModels", "read_global"]

_F64 = np.dtype(np.float64)


class GlobalModel:
    """A parsed global model and the constants every client step under it reuses.

    ``state`` is batched (one restart) and read-only: one object serves every reader
    of the same model in the federation (:class:`GlobalModels`).
    """

    __slots__ = ("_coefs", "_va", "state")

    def __init__(self, state: State) -> None:
        self.state = state
        self._coefs: tuple[np.ndarray, ...] | None = None
        self._va: dict[float, np.ndarray] = {}

    def coefs(self) -> tuple[np.ndarray, ...]:
        """Per view the rows [-a², 2a, -1] (times the view's scale) of the φ GEMM, (c, 2d+1).

        Built exactly as :func:`fedstrata.algorithms.multiview._neg_phi` builds them.
        """
        if self._coefs is None:
            out = []
            scale = self.state.view_scale
            for g, A in enumerate(self.state.centers):
                A = A[0]
                d = A.shape[-1]
                coef = np.empty((*A.shape[:-1], 2 * d + 1))
                np.multiply(A, A, out=coef[..., :d])
                np.negative(coef[..., :d], out=coef[..., :d])
                np.multiply(A, 2.0, out=coef[..., d : 2 * d])
                coef[..., 2 * d] = -1.0
                if scale is not None:
                    coef *= scale[0, g]
                coef.flags.writeable = False
                out.append(coef)
            self._coefs = tuple(out)
        return self._coefs

    def va(self, alpha: float) -> np.ndarray:
        """The view weights to the power α, (H,), as the engine's :func:`view_powers`."""
        got = self._va.get(alpha)
        if got is None:
            got = view_powers(self.state.view_weights[0], alpha)
            got.flags.writeable = False
            self._va[alpha] = got
        return got


def _is_f64(a: Any, shape: tuple[int, ...]) -> TypeGuard[np.ndarray]:
    return type(a) is np.ndarray and a.dtype == _F64 and a.shape == shape


def _model_key(body: dict[str, Any], shape: Shape) -> bytes | None:
    """The exact bytes of a model body's state fields (its cache key).

    None unless they are all float64 arrays of the right shapes: such a body is read
    and checked the long way.
    """
    centers = body.get("centers")
    if type(centers) is not list or len(centers) != shape.n_views:
        return None
    parts: list[bytes] = []
    for a, d in zip(centers, shape.dims, strict=True):
        if not _is_f64(a, (shape.n_clusters, d)):
            return None
        parts.append(a.tobytes())
    v = body.get("view_weights")
    if not _is_f64(v, (shape.n_views,)):
        return None
    parts.append(v.tobytes())
    if "view_scale" in body:
        scale = body["view_scale"]
        if not _is_f64(scale, (shape.n_views,)):
            return None
        parts += [b"s", scale.tobytes()]  # fixed sizes: with or without a scale never collide
    return b"".join(parts)


def _frozen(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    out.flags.writeable = False
    return out


def _global_model(body: dict[str, Any], shape: Shape) -> GlobalModel:
    """The body's global model, parsed and checked, with read-only arrays."""
    state = read_state(body, shape).batched()
    scale = None if state.view_scale is None else _frozen(state.view_scale)
    return GlobalModel(
        State(tuple(_frozen(a) for a in state.centers), _frozen(state.view_weights), scale)
    )


class GlobalModels:
    """Parsed global models by (shape, exact bytes of their arrays).

    Every client of a round reads the same model: one instance, held by the algorithm
    object a federation's clients share, parses and checks each model once (locked:
    the clients of an MQTT run read from threads). Its arrays are private, read-only
    copies, so no reader can change what the next one gets.
    """

    ENTRIES = 64

    def __init__(self) -> None:
        self._models: dict[tuple[Shape, bytes], GlobalModel] = {}
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[type, tuple[()]]:
        """A copy (a pickled node, a snapshot) starts with nothing remembered."""
        return GlobalModels, ()

    def read(self, body: dict[str, Any], shape: Shape) -> GlobalModel:
        """The body's global model (see :func:`read_global`) with its reusable constants."""
        key = _model_key(body, shape)
        if key is not None:
            hit = self._models.get((shape, key))
            if hit is not None:
                return hit
        got = _global_model(body, shape)
        if key is not None:
            with self._lock:
                if len(self._models) >= self.ENTRIES:
                    del self._models[next(iter(self._models))]
                self._models[(shape, key)] = got
        return got


def read_global(body: dict[str, Any], shape: Shape, models: GlobalModels | None = None) -> State:
    """The body's global model as a batch of one (:func:`read_state`, then ``batched``).

    With ``models``, cached there by the exact bytes of the state's arrays: a model
    already read is not checked again. The arrays are read-only (shared with every
    later reader). Raises WireError like :func:`read_state`.
    """
    return (_global_model(body, shape) if models is None else models.read(body, shape)).state
