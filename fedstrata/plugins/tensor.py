"""The tensor-decomposition family over the node core (E-FKMVC, FedHK-PARAFAC2, ...).

E-FKMVC, FedHK-PARAFAC2, FedHK-Tucker and FedHK-MVC-Person come from "Personalized
Federated Heat-Kernel Enhanced Multi-View Clustering via Advanced Tensor Decomposition".

The math lives in :mod:`fedstrata.algorithms.tensor`: a
:class:`~fedstrata.algorithms.tensor.TensorClient` runs the local epochs from a global
model and returns a message of fixed-shape arrays that is already pre-weighted
(n·A, n·V, presence counts, ŵ·n·factors, ...), so that the server's rule is a sum of
messages followed by :func:`~fedstrata.algorithms.tensor.aggregate`. That makes every
partial additive: it crosses any number of tiers, the asynchronous kinds can mix it,
and secure aggregation can mask it.

The setup round is the multi-view one: clients report per-view min/max/sum (merged
exactly into the pooled per-feature range) and k-means candidates; the root scales
the candidates into [0, 1] with the pooled range (and, with ``center_views``, centres
them at the pooled mean) and builds the first global model from them
(:func:`~fedstrata.algorithms.tensor.initial_global`). Each client scales its own views
the same way, so every client works in one space.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstrata.algorithms.kernels import KernelReference, kernel_reference
from fedstrata.algorithms.tensor import (
    TensorModel,
    aggregate,
    has_converged,
    initial_global,
    message_shapes,
    model_shapes,
)
from fedstrata.errors import NodeProtocolError, WireError
from fedstrata.nodes.algorithm import Algorithm, Step
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.plugins._scaled import ScaledViewsLearner, scale_with_ranges
from fedstrata.plugins._setup import SharedSetupRound, setup_body
from fedstrata.plugins.messages import (
    Shape,
    read_choice,
    read_int,
    read_references,
)
from fedstrata.privacy.layout import Layout, SummedField

if TYPE_CHECKING:
    from fedstrata.algorithms.tensor.client import TensorClient

__all__ = ["TensorAlgorithm", "TensorLearner", "tensor_algorithm"]

_F64 = np.dtype(np.float64)


def _read_arrays(
    body: dict[str, Any], key: str, shapes: dict[str, tuple[int, ...]]
) -> dict[str, np.ndarray]:
    """A list of finite float64 arrays in ``shapes``' key order, as a dict."""
    items = body.get(key)
    if not isinstance(items, list) or len(items) != len(shapes):
        raise WireError(f"body field {key!r} must be a list of {len(shapes)} arrays")
    out: dict[str, np.ndarray] = {}
    for (name, shape), a in zip(shapes.items(), items, strict=True):
        if shape == () and type(a) is float:  # a scalar as secure aggregation unmasks it
            a = np.asarray(a, dtype=np.float64)
        if not isinstance(a, np.ndarray) or a.dtype != _F64 or a.shape != shape:
            raise WireError(f"{key}[{name}] must be a float64 array of shape {shape}")
        if not np.isfinite(a).all():
            raise WireError(f"{key}[{name}] holds NaN or infinite values")
        out[name] = a
    return out


class TensorLearner(ScaledViewsLearner):
    """A client's views and its :class:`TensorClient` (previous factors, λ, ρ)."""

    algorithm: TensorAlgorithm

    def _flops(self, epochs: int) -> float:
        a = self.algorithm
        per = self.n_samples * a.shape.n_clusters * sum(a.shape.dims)
        return float(per * epochs * a.protocol.flops_per_element)

    def setup(self, request: dict[str, Any] | None = None) -> tuple[dict[str, Any], float]:
        """Per-view ranges (min/max/sum) and, from a full-view client, k-means candidates.

        Under secure aggregation: the private setup's sums instead (no DP here: the
        tensor family does not support it, so no noise stream is needed).
        """
        a = self.algorithm
        if a.private is not None:
            return a.setup_reply(self.views, self.view_ids, request, None), self._flops(1)
        # ranges: the views are min-max scaled; the bandwidth kernel also needs the spread
        spread = a.model.bandwidth is not None
        body = setup_body(self.views, self.view_ids, a.shape, self.rng, spread=spread)
        return body, self._flops(10)

    def update(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """Local epochs from the body's global model; the pre-weighted additive message."""
        a = self.algorithm
        glob, _ = a.read_model(body)
        msg = self.client_state.step(glob)
        partial = {
            "mode": "tensor",
            "stats": [np.asarray(msg[k], dtype=np.float64) for k in a.message_shapes],
            "n": int(self.n_samples),
            "contributors": 1,
        }
        return partial, self._flops(a.model.local_epochs)

    def finish(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """Each local sample's cluster under the final global model."""
        glob, _ = self.algorithm.read_model(body)
        return {"labels": self.client_state.labels(glob)}, self._flops(1)


class TensorAlgorithm(SharedSetupRound, Algorithm):
    """The aggregators' half: sums of pre-weighted messages, then the paper's server rule."""

    additive = True

    def __init__(self, model: TensorModel, protocol: ProtocolConfig, shape: Shape) -> None:
        if tuple(model.dims) != tuple(shape.dims) or model.n_clusters != shape.n_clusters:
            raise NodeProtocolError(
                f"{model.method}: the model's dims {model.dims} and clusters "
                f"{model.n_clusters} do not match the federation's {shape}"
            )
        self.model = model
        self.protocol = protocol
        self.shape = shape
        self.name = f"{model.method}/sum"
        self.message_shapes = dict(message_shapes(model))
        self.model_shapes = dict(model_shapes(model))

    def client(
        self,
        views: Sequence[np.ndarray],
        view_ids: Sequence[int],
        refs: Sequence[KernelReference],
    ) -> TensorClient:
        """A :class:`TensorClient` over views scaled with the pooled ranges ``refs``.

        With a bandwidth (preset ``real-data``) the kernel widths come from the pooled
        variances in ``refs`` (the setup exchanged Σ(x − mean)²).
        """
        from fedstrata.algorithms.tensor.client import TensorClient  # tensorly: on first use
        from fedstrata.algorithms.tensor.kernel import view_scales

        scaled = scale_with_ranges(views, refs, self.model.center_views)
        scales = None
        if self.model.bandwidth is not None:
            scales = view_scales(self.model, refs, view_ids, minmax=True)
        return TensorClient(self.model, scaled, view_ids, scales)

    def learner(
        self,
        views: Sequence[np.ndarray],
        *,
        view_ids: Sequence[int],
        rng: np.random.Generator,
        node_id: str,
    ) -> TensorLearner:
        """A :class:`TensorLearner` over one client's views."""
        return TensorLearner(self, views, view_ids, rng, node_id)

    # -- the setup round -----------------------------------------------------------

    def needs_setup(self, fixed_init: bool) -> bool:
        """Always: every client needs the pooled ranges its views are scaled with."""
        return True

    def after_setup(
        self, merged: dict[str, Any], state: Any | None
    ) -> tuple[Any | None, dict[str, Any], bool]:
        """The pooled ranges as extras; the first model from the scaled candidates."""
        merged = self.plain_setup(merged)
        found = read_references(merged, self.shape)
        extras = {"refs": merged["refs"]}
        refs = [r for r in found if r is not None]
        complete = len(refs) == len(found)
        if complete and state is None and len(merged.get("init_w", ())) == self.shape.n_clusters:
            centers = scale_with_ranges(merged["init"], refs, self.model.center_views)
            state = initial_global(self.model, centers)
        return state, extras, complete

    # -- rounds ----------------------------------------------------------------------

    def check_partial(self, body: dict[str, Any]) -> None:
        """Every message array present, of its shape, finite; counts are ints."""
        read_choice(body, "mode", ("tensor",))
        _read_arrays(body, "stats", self.message_shapes)
        read_int(body, "n")
        read_int(body, "contributors", 1)

    def combine(self, partials: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Elementwise sums of the messages and counts."""
        if len(partials) == 1:
            return dict(partials[0])
        # np.asarray: a sum of 0-d arrays is a numpy scalar, not an array
        stats = [
            np.asarray(sum(arrs), dtype=np.float64)
            for arrs in zip(*(p["stats"] for p in partials), strict=True)
        ]
        return {
            "mode": "tensor",
            "stats": stats,
            "n": sum(p["n"] for p in partials),
            "contributors": sum(p["contributors"] for p in partials),
        }

    def mix(self, old: dict[str, Any], new: dict[str, Any], weight: float) -> dict[str, Any]:
        """``(1 − weight)·old + weight·new`` on the message arrays; counts are the newest."""
        out = dict(new)
        out["stats"] = [
            np.asarray((1.0 - weight) * a + weight * b, dtype=np.float64)
            for a, b in zip(old["stats"], new["stats"], strict=True)
        ]
        return out

    def secure_layout(self) -> Layout:
        """The message arrays in their fixed order, then the counts."""
        return Layout(
            (
                SummedField("stats", tuple(self.message_shapes.values()), listed=True),
                SummedField("n", ((),), integer=True),
                SummedField("contributors", ((),), integer=True),
            ),
            {"mode": "tensor"},
        )

    def contributors(self, partial: dict[str, Any]) -> int:
        """Clients summed into ``partial``."""
        return int(partial["contributors"])

    def next_state(
        self,
        total: dict[str, Any],
        previous: Any,
        previous_objective: float,
        *,
        tol: float,
        relative: bool,
    ) -> Step:
        """The paper's server rule on the summed messages; stop on the objective's change."""
        msg = dict(zip(self.message_shapes, total["stats"], strict=True))
        with np.errstate(all="ignore"):
            state, J = aggregate(self.model, msg, previous)
        if not self.is_finite(state) or not np.isfinite(J):
            return Step(None, float("nan"), False, float(total["n"]))
        if relative:
            done = has_converged(previous_objective, J, tol)
        else:
            done = bool(np.isfinite(previous_objective) and abs(previous_objective - J) < tol)
        return Step(state, float(J), done, float(total["n"]))

    def subtree_partial(self, state: Any, total: dict[str, Any]) -> dict[str, Any]:
        """Not supported: a fog cannot turn a tensor model back into client messages."""
        raise NodeProtocolError(
            f"{self.name}: a middle tier's local periods (period > 1) are not supported"
        )

    def is_finite(self, state: Any) -> bool:
        """Whether every array of the global model is finite."""
        return state is not None and all(np.isfinite(state[k]).all() for k in self.model_shapes)

    # -- model bodies ------------------------------------------------------------------

    def model_body(self, state: Any, extras: dict[str, Any]) -> dict[str, Any]:
        """The global model's arrays in their fixed order."""
        return {"tensor": [np.asarray(state[k], dtype=np.float64) for k in self.model_shapes]}

    def read_model(self, body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The global model from a body (WireError when malformed)."""
        return _read_arrays(body, "tensor", self.model_shapes), {}

    # -- observers (records, not protocol) ---------------------------------------------

    def observer(
        self,
        views: Sequence[np.ndarray],
        view_ids: Sequence[int],
        references: Sequence[KernelReference] | None = None,
    ) -> Callable[[Any], np.ndarray]:
        """Labels of ``views`` under a global model, as a fresh client would give them."""
        refs = references if references is not None else [kernel_reference(X) for X in views]
        client = self.client(views, view_ids, refs)
        return client.labels

    def state_arrays(self, state: Any) -> dict[str, np.ndarray]:
        """The global model's arrays by name (``model.npz``)."""
        return {k: np.asarray(state[k]) for k in self.model_shapes}


def tensor_algorithm(model: TensorModel, protocol: ProtocolConfig, shape: Shape) -> Algorithm:
    """The plug-in for a tensor-family model (every protocol rule runs as sums)."""
    return TensorAlgorithm(model, protocol, shape)
