"""A complete algorithm plug-in that lives in the test suite: federated spherical k-means.

Every client L2-normalises each of its views, concatenates them (each view weighted by
``balance``: ``equal`` shares, or by its feature count) and sends, per cluster, the sum
of its unit rows and their count: additive sufficient statistics. The root's step is the
centralised one (centres are the normalised sums). This module is the whole plug-in:
the node-side :class:`Algorithm` and :class:`Learner`, and the declaration
:data:`SPHERICAL` (settings, capabilities, model builder, ``model.npz`` arrays).
:func:`register` is the one line a composition root would hold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from fedstrata.errors import WireError
from fedstrata.nodes.algorithm import Algorithm, Learner, Step
from fedstrata.plugins.spec import (
    AlgorithmPlugin,
    AlgorithmSettings,
    BuildInput,
    Capabilities,
    register_algorithm_plugin,
)


class SphericalSettings(AlgorithmSettings):
    """``spherical-kmeans``: cosine k-means over the L2-normalised, concatenated views.

    ``balance``: ``equal`` gives every view the same share of a row's norm,
    ``dimension`` a share proportional to its feature count.
    """

    name: Literal["spherical-kmeans"]
    balance: Literal["equal", "dimension"] = "equal"


@dataclass(frozen=True)
class SphericalModel:
    """The hyper-parameters: the type the node-side plug-in is registered for."""

    n_clusters: int
    dims: tuple[int, ...]
    balance: str


def embed(views: Sequence[np.ndarray], dims: Sequence[int], balance: str) -> np.ndarray:
    """Unit rows: each view normalised, weighted by ``balance``, concatenated."""
    share = np.ones(len(dims)) if balance == "equal" else np.asarray(dims, dtype=float)
    share = np.sqrt(share / share.sum())
    parts = []
    for X, w in zip(views, share, strict=True):
        norm = np.linalg.norm(X, axis=1, keepdims=True)
        parts.append(w * X / np.where(norm > 0, norm, 1.0))
    return np.hstack(parts)


def _array(body: dict[str, Any], key: str, shape: tuple[int | None, ...]) -> np.ndarray:
    a = body.get(key)
    ok = isinstance(a, np.ndarray) and a.dtype == np.float64 and a.ndim == len(shape)
    if not ok or any(s is not None and s != t for s, t in zip(shape, a.shape, strict=True)):
        raise WireError(f"body field {key!r} must be a float64 array of shape {shape}")
    if not np.isfinite(a).all():
        raise WireError(f"body field {key!r} holds NaN or infinite values")
    return a


class SphericalLearner(Learner):
    """A client's half: its unit rows."""

    def __init__(self, alg: SphericalKMeans, X: np.ndarray, rng: np.random.Generator) -> None:
        self.alg, self.X, self.rng, self.n_samples = alg, X, rng, X.shape[0]

    def setup(self) -> tuple[dict[str, Any], float]:
        rows = self.rng.choice(self.n_samples, size=min(self.alg.k, self.n_samples), replace=False)
        return {"mode": "setup", "candidates": self.X[np.sort(rows)], "n": self.n_samples}, 0.0

    def _assign(self, body: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        cos = self.X @ self.alg.read_model(body)[0].T
        return cos.argmax(axis=1), cos.max(axis=1)

    def update(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        labels, best = self._assign(body)
        sums = np.zeros((self.alg.k, self.X.shape[1]))
        np.add.at(sums, labels, self.X)
        counts = np.bincount(labels, minlength=self.alg.k).astype(np.float64)
        loss = float((1.0 - best).sum())
        partial = {"sums": sums, "counts": counts, "loss": loss, "n": self.n_samples}
        return {**partial, "contributors": 1}, 0.0

    def finish(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        return {"labels": self._assign(body)[0]}, 0.0


class SphericalKMeans(Algorithm):
    """The aggregators' half: sums of unit rows per cluster, normalised at the root."""

    additive = True

    def __init__(self, model: SphericalModel, protocol: Any, shape: Any) -> None:
        self.model, self.k, self.d = model, model.n_clusters, sum(model.dims)
        self.name = f"spherical-kmeans/k={self.k}"

    def learner(self, views, *, view_ids, rng, node_id) -> SphericalLearner:  # type: ignore[no-untyped-def]
        return SphericalLearner(self, embed(views, self.model.dims, self.model.balance), rng)

    def needs_setup(self, fixed_init: bool) -> bool:
        return not fixed_init

    def check_setup(self, body: dict[str, Any]) -> None:
        _array(body, "candidates", (None, self.d))

    def merge_setup(self, bodies, rng) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        pooled = np.vstack([b["candidates"] for b in bodies])
        rows = np.sort(rng.choice(len(pooled), size=min(self.k, len(pooled)), replace=False))
        return {"mode": "setup", "candidates": pooled[rows], "n": sum(b["n"] for b in bodies)}

    def after_setup(self, merged, state):  # type: ignore[no-untyped-def]
        if state is None and len(merged["candidates"]) == self.k:
            state = merged["candidates"]
        return state, {}, True

    def check_partial(self, body: dict[str, Any]) -> None:
        _array(body, "sums", (self.k, self.d))
        _array(body, "counts", (self.k,))
        if not isinstance(body.get("loss"), float):
            raise WireError("body field 'loss' must be a float")
        if type(body.get("n")) is not int or type(body.get("contributors")) is not int:
            raise WireError("body fields 'n' and 'contributors' must be ints")

    def combine(self, partials) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        keys = ("sums", "counts", "loss", "n", "contributors")
        return {key: sum(p[key] for p in partials) for key in keys}

    def contributors(self, partial: dict[str, Any]) -> int:
        return int(partial["contributors"])

    def next_state(self, total, previous, previous_objective, *, tol, relative) -> Step:  # type: ignore[no-untyped-def]
        norm = np.linalg.norm(total["sums"], axis=1, keepdims=True)
        centres = np.where(norm > 0, total["sums"] / np.where(norm > 0, norm, 1.0), previous)
        J = float(total["loss"])
        scale = max(abs(previous_objective), 1e-300) if relative else 1.0
        change = abs(previous_objective - J) / scale
        return Step(centres, J, change < tol, float(total["n"]))

    def subtree_partial(self, state, total) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        raise NotImplementedError("declared: tier periods must be 1")

    def is_finite(self, state: Any) -> bool:
        return bool(np.isfinite(state).all())

    def model_body(self, state: Any, extras: dict[str, Any]) -> dict[str, Any]:
        return {"centres": state}

    def read_model(self, body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return _array(body, "centres", (self.k, self.d)), {}

    def observer(self, views, view_ids, references=None) -> Callable[[Any], np.ndarray]:  # type: ignore[no-untyped-def]
        X = embed(views, [self.model.dims[g] for g in view_ids], self.model.balance)
        return lambda state: (X @ state.T).argmax(axis=1)

    def state_arrays(self, state: Any) -> dict[str, np.ndarray]:
        return {"centres": np.asarray(state)}


def _build(inp: BuildInput) -> SphericalModel:
    s = inp.settings
    assert isinstance(s, SphericalSettings)
    return SphericalModel(s.n_clusters, tuple(inp.dims or ()), s.balance)


SPHERICAL = AlgorithmPlugin(
    family="test",
    settings=(SphericalSettings,),
    build=_build,
    model_type=SphericalModel,
    factory=SphericalKMeans,
    needs_dims=True,
    capabilities=Capabilities(rules=("sum",), protocol_kinds=("sync",)),
    model_arrays=lambda model: {"balance": np.str_(model.balance)},
)
"""The declaration: no compression, secure aggregation, DP, hybrid views or tier periods."""


def register() -> None:
    """What a composition root would do: one line registers the declaration and its
    node-side factory."""
    register_algorithm_plugin(SPHERICAL)
