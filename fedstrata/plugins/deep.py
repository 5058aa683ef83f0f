"""The deep hybrid-view family over the node core (FMCSC, EFD-MVC; the ``[deep]`` extra).

Learners train PyTorch networks (:mod:`fedstrata.algorithms.deep.training`);
aggregators only average float32 vectors and run k-means steps
(:mod:`fedstrata.algorithms.deep.server`), so fog and cloud nodes need no PyTorch.

Setup round: the shared one (per-view ranges); each client min-max scales its views
with the pooled range, as the FMCSC code scales its data globally. Model body:
``{"deep": step, "groups": [float32 vector per global model], "centroids": (k, latent)
float64}`` (no centroids before the k-means phase). Partials, by phase:

* ``deep-train``: ``sums`` {group: Σ w·θ, float32}, ``weights`` {group: Σ w}, ``loss``
  (Σ n·loss), ``n``, ``contributors``. A single-view FMCSC client sends one model, a
  multi-view client V+1, an EFD-MVC client one: the bytes the papers' Table 5 and
  Algorithm 1 imply, exactly, as every vector is a fixed-order float32 array;
* ``deep-candidates``: ``cands`` (k, latent), ``sizes`` (k,): concatenated upwards;
* ``deep-lloyd``: ``sums`` (K, latent), ``counts`` (K,), ``inertia``: summed.

Candidates concatenate rather than sum, so partials are not *additive*: the
asynchronous kinds and secure aggregation refuse this family (and so does the
scenario validator, with located errors).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstrata.algorithms.deep.config import DeepModel
from fedstrata.algorithms.deep.server import (
    average_groups,
    groups_of,
    initial_state,
    lloyd_step,
    phase_of,
    reduce_feature_candidates,
)
from fedstrata.algorithms.kernels import KernelReference, kernel_reference
from fedstrata.algorithms.seeding import local_candidates
from fedstrata.errors import NodeProtocolError, WireError
from fedstrata.nodes.algorithm import Algorithm, Step
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.plugins._scaled import ScaledViewsLearner, scale_with_ranges
from fedstrata.plugins._setup import SharedSetupRound, setup_body
from fedstrata.plugins.messages import Shape, read_choice, read_int, read_references

if TYPE_CHECKING:
    from fedstrata.algorithms.deep.training import DeepClient

__all__ = ["DeepAlgorithm", "DeepLearner", "deep_algorithm"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _round_seed(model: DeepModel, node_id: str, step: int) -> int:
    """A client's training seed for a round: a function of the run seed, id and step only.

    It does not depend on what the client did before, so a client that missed rounds
    (or runs on a device instead of the simulator) draws the same numbers.
    """
    digest = hashlib.sha256(f"{model.seed}:{node_id}:{step}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _array(value: Any, what: str, dtype: np.dtype, shape: tuple[int | None, ...]) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.dtype != dtype or value.ndim != len(shape):
        raise WireError(f"{what} must be a {dtype} array of {len(shape)} dimension(s)")
    if any(want is not None and got != want for got, want in zip(value.shape, shape, strict=True)):
        raise WireError(f"{what} has shape {value.shape}, expected {shape}")
    if not np.isfinite(value).all():
        raise WireError(f"{what} holds NaN or infinite values")
    return value


def _number(value: Any, what: str, minimum: float = 0.0) -> float:
    # ints from the wire are exact and may exceed what np.isfinite takes (2**64 - 1)
    finite = type(value) is int or (type(value) is float and math.isfinite(value))
    if not finite or value < minimum:
        raise WireError(f"{what} must be a finite number >= {minimum}")
    return float(value)


class DeepLearner(ScaledViewsLearner):
    """A client's views and its :class:`~fedstrata.algorithms.deep.training.DeepClient`."""

    algorithm: DeepAlgorithm

    def _flops(self, epochs: int, models: int = 1) -> float:
        # forward + backward ≈ 6 flops per parameter and sample
        return float(6 * self.algorithm.parameters * self.n_samples * max(epochs, 1) * models)

    def setup(self, request: dict[str, Any] | None = None) -> tuple[dict[str, Any], float]:
        """Per-view ranges (min/max/sum) and, from a full-view client, k-means candidates.

        One stage only (``request`` is always None): the deep family supports neither
        secure aggregation nor DP, so it never runs the private setup.
        """
        body = setup_body(self.views, self.view_ids, self.algorithm.shape, self.rng, spread=False)
        return body, float(10 * self.n_samples * sum(v.shape[1] for v in self.views))

    def update(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """The round's partial: trained models, k-means candidates or Lloyd sums."""
        a, client = self.algorithm, self.client_state
        state, _ = a.read_model(body)
        step, model = state["step"], a.model
        phase = phase_of(model, step)
        base = {"n": int(self.n_samples), "contributors": 1}
        if phase in ("pretrain", "train"):
            seed = _round_seed(model, self.node_id, step)
            if phase == "pretrain":
                uploads, loss = client.pretrain(state["groups"]["all"], seed)
                flops = self._flops(model.pretrain_epochs)
            else:
                from fedstrata.algorithms.deep.rounds import train_round

                uploads, loss = train_round(client, state["groups"], seed)
                flops = self._flops(model.local_epochs) + self._flops(
                    model.copy_epochs, len(uploads) - 1
                )
            partial = {
                "mode": "deep-train",
                "sums": {u.group: (u.params * np.float32(u.weight)) for u in uploads},
                "weights": {u.group: float(u.weight) for u in uploads},
                "loss": float(loss) * self.n_samples,
                **base,
            }
            return partial, flops
        E = client.embed(state["groups"])
        if phase == "candidates":
            (cands,), sizes = local_candidates([E], model.n_clusters, self.rng)
            partial = {"mode": "deep-candidates", "cands": cands, "sizes": sizes, **base}
            return partial, self._flops(1) / 3
        C = state["centroids"]
        d = ((E[:, None, :] - C[None]) ** 2).sum(-1)
        labels = d.argmin(axis=1)
        k = C.shape[0]
        sums = np.zeros_like(C)
        np.add.at(sums, labels, E)
        partial = {
            "mode": "deep-lloyd",
            "sums": sums,
            "counts": np.bincount(labels, minlength=k).astype(np.float64),
            "inertia": float(d[np.arange(len(labels)), labels].sum()),
            **base,
        }
        return partial, self._flops(1) / 3

    def finish(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """Each local sample's nearest centre under the final model.

        A run stopped before the k-means phase has no centres: the client then clusters
        its own features (labels not aligned across clients; the record says so by a
        low score).
        """
        a, client = self.algorithm, self.client_state
        state, _ = a.read_model(body)
        E = client.embed(state["groups"])
        return {"labels": _assign(E, state["centroids"], a.model, self.rng)}, self._flops(1) / 3


def _assign(
    E: np.ndarray, centroids: np.ndarray | None, model: DeepModel, rng: np.random.Generator
) -> np.ndarray:
    if centroids is None:
        (centroids,), _ = local_candidates([E], model.n_clusters, rng)
    d = ((E[:, None, :] - centroids[None]) ** 2).sum(-1)
    return d.argmin(axis=1).astype(np.int64)


class DeepAlgorithm(SharedSetupRound, Algorithm):
    """The aggregators' half: weighted averages of networks and federated k-means."""

    additive = False

    def __init__(self, model: DeepModel, protocol: ProtocolConfig, shape: Shape) -> None:
        if tuple(model.dims) != tuple(shape.dims) or model.n_clusters != shape.n_clusters:
            raise NodeProtocolError(
                f"{model.method}: the model's dims {model.dims} and clusters "
                f"{model.n_clusters} do not match the federation's {shape}"
            )
        self.model = model
        self.protocol = protocol
        self.shape = shape
        self.name = f"{model.method}/deep"
        self.groups = groups_of(model)
        #: float32 parameters of one network
        self.parameters = model.parameter_count

    def client(
        self, views: Sequence[np.ndarray], view_ids: Sequence[int], refs: Sequence[KernelReference]
    ) -> DeepClient:
        """A torch client over views scaled with the pooled ranges ``refs``."""
        from fedstrata.algorithms.deep import require_torch

        require_torch()
        from fedstrata.algorithms.deep.training import DeepClient

        return DeepClient(self.model, scale_with_ranges(views, refs), view_ids)

    def learner(
        self,
        views: Sequence[np.ndarray],
        *,
        view_ids: Sequence[int],
        rng: np.random.Generator,
        node_id: str,
    ) -> DeepLearner:
        """A :class:`DeepLearner` over one client's views."""
        return DeepLearner(self, views, view_ids, rng, node_id)

    # -- the setup round -----------------------------------------------------------

    def needs_setup(self, fixed_init: bool) -> bool:
        """Always: every client scales its views with the pooled ranges."""
        return True

    def after_setup(
        self, merged: dict[str, Any], state: Any | None
    ) -> tuple[Any | None, dict[str, Any], bool]:
        """The pooled ranges as extras; the seeded initial network in every group."""
        refs = read_references(merged, self.shape)
        complete = not any(r is None for r in refs)
        if complete and state is None:
            from fedstrata.algorithms.deep.network import initial_parameters

            state = initial_state(self.model, initial_parameters(self.model))
        return state, {"refs": merged["refs"]}, complete

    # -- rounds ----------------------------------------------------------------------

    def check_partial(self, body: dict[str, Any]) -> None:
        """Fields of the partial's phase present, of their shapes, finite."""
        mode = read_choice(body, "mode", ("deep-train", "deep-candidates", "deep-lloyd"))
        latent = self.model.latent
        if mode == "deep-train":
            sums, weights = body.get("sums"), body.get("weights")
            if not isinstance(sums, dict) or not isinstance(weights, dict) or not sums:
                raise WireError("a deep-train partial needs dicts 'sums' and 'weights'")
            if set(sums) != set(weights) or not set(sums) <= set(self.groups):
                raise WireError(f"sums and weights must name the same groups of {self.groups}")
            for g in sums:
                _array(sums[g], f"sums[{g}]", _F32, (self.parameters,))
                _number(weights[g], f"weights[{g}]")
            _number(body.get("loss"), "loss", float("-inf"))
        elif mode == "deep-candidates":
            c = _array(body.get("cands"), "cands", _F64, (None, latent))
            sizes = _array(body.get("sizes"), "sizes", _F64, (c.shape[0],))
            # cluster sizes: at least one candidate, positive counts of samples (an
            # unbounded size would overflow the k-means++ draw's normalisation)
            if not sizes.size or (sizes <= 0).any() or (sizes > 2.0**53).any():
                raise WireError("a deep-candidates partial needs sizes in (0, 2**53]")
        elif mode == "deep-lloyd":
            k = _array(body.get("sums"), "sums", _F64, (None, latent)).shape[0]
            if not 1 <= k <= self.model.n_clusters:
                raise WireError(f"sums must have 1 .. {self.model.n_clusters} rows")
            _array(body.get("counts"), "counts", _F64, (k,))
            _number(body.get("inertia"), "inertia")
        else:
            raise WireError("expected a deep partial (deep-train, deep-candidates, deep-lloyd)")
        read_int(body, "n")
        read_int(body, "contributors", 1)

    def combine(self, partials: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Sums of models and weights, concatenated candidates, or summed Lloyd sums."""
        if len(partials) == 1:
            return dict(partials[0])
        modes = {p["mode"] for p in partials}
        if len(modes) != 1:  # a child answered with another phase's partial: no sum
            raise WireError(f"partials of different phases in one round: {sorted(modes)}")
        (mode,) = modes
        out: dict[str, Any] = {
            "mode": mode,
            "n": sum(p["n"] for p in partials),
            "contributors": sum(p["contributors"] for p in partials),
        }
        if mode == "deep-train":
            sums: dict[str, np.ndarray] = {}
            weights: dict[str, float] = {}
            for p in partials:
                for g, s in p["sums"].items():
                    sums[g] = sums[g] + s if g in sums else s.copy()
                    weights[g] = weights.get(g, 0.0) + p["weights"][g]
            out.update(sums=sums, weights=weights, loss=sum(p["loss"] for p in partials))
        elif mode == "deep-candidates":
            out["cands"] = np.vstack([p["cands"] for p in partials])
            out["sizes"] = np.concatenate([p["sizes"] for p in partials])
        else:
            out["sums"] = np.sum([p["sums"] for p in partials], axis=0)
            out["counts"] = np.sum([p["counts"] for p in partials], axis=0)
            out["inertia"] = float(sum(p["inertia"] for p in partials))
        return out

    def contributors(self, partial: dict[str, Any]) -> int:
        """Clients behind ``partial``."""
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
        """Average the networks, reduce the candidates, or take a Lloyd step."""
        model, step, n = self.model, previous["step"], float(total["n"])
        phase = phase_of(model, step)
        expected = "deep-train" if phase in ("pretrain", "train") else f"deep-{phase}"
        if total["mode"] != expected:  # well-formed, of another phase: the round fails
            raise WireError(f"a {total['mode']} partial in a {phase} round")
        state = dict(previous, step=step + 1)
        info = {"phase": float(("pretrain", "train", "candidates", "lloyd").index(phase))}
        if expected == "deep-train":
            state["groups"] = average_groups(model, previous, total["sums"], total["weights"])
            objective = total["loss"] / max(n, 1.0)
            if not self.is_finite(state) or not np.isfinite(objective):
                return Step(None, float("nan"), False, n, info)
            return Step(state, float(objective), False, n, info)
        if expected == "deep-candidates":
            state["centroids"] = reduce_feature_candidates(model, total["cands"], total["sizes"])
            return Step(state, previous_objective, False, n, info)
        centroids, shift = lloyd_step(previous["centroids"], total["sums"], total["counts"])
        state["centroids"] = centroids
        objective = total["inertia"] / max(n, 1.0)
        lloyds = step - model.rounds_before_kmeans
        if relative:
            steady = abs(previous_objective - objective) <= tol * max(abs(objective), 1e-300)
        else:
            steady = abs(previous_objective - objective) < tol
        lloyd_before = phase_of(model, step - 1) == "lloyd"
        done = shift == 0.0 or lloyds >= model.kmeans_rounds or (lloyd_before and steady)
        return Step(state, float(objective), bool(done), n, info)

    def subtree_partial(self, state: Any, total: dict[str, Any]) -> dict[str, Any]:
        """Not supported: a middle tier cannot turn a network back into client uploads."""
        raise NodeProtocolError(
            f"{self.name}: a middle tier's local periods (period > 1) are not supported"
        )

    def is_finite(self, state: Any) -> bool:
        """Whether every parameter and centre is finite."""
        if state is None:
            return False
        c = state.get("centroids")
        return all(np.isfinite(v).all() for v in state["groups"].values()) and (
            c is None or bool(np.isfinite(c).all())
        )

    # -- model bodies ------------------------------------------------------------------

    def model_body(self, state: Any, extras: dict[str, Any]) -> dict[str, Any]:
        """The step, every group's parameters in fixed order and the centres if any."""
        body: dict[str, Any] = {
            "deep": int(state["step"]),
            "groups": [state["groups"][g] for g in self.groups],
        }
        if state["centroids"] is not None:
            body["centroids"] = np.asarray(state["centroids"], dtype=np.float64)
        return body

    def read_model(self, body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The global state from a body (WireError when malformed)."""
        step = body.get("deep")
        if type(step) is not int or step < 0:
            raise WireError("a deep model body needs its step 'deep' (an int >= 0)")
        arrays = body.get("groups")
        if not isinstance(arrays, list) or len(arrays) != len(self.groups):
            raise WireError(f"a deep model body needs {len(self.groups)} parameter vectors")
        groups = {
            g: _array(a, f"groups[{g}]", _F32, (self.parameters,))
            for g, a in zip(self.groups, arrays, strict=True)
        }
        centroids = None
        if "centroids" in body:
            centroids = _array(body["centroids"], "centroids", _F64, (None, self.model.latent))
            if not 1 <= centroids.shape[0] <= self.model.n_clusters:
                raise WireError(f"centroids must have 1 .. {self.model.n_clusters} rows")
        elif phase_of(self.model, step) == "lloyd":
            raise WireError("a k-means round's model needs its centroids")
        return {"step": step, "groups": groups, "centroids": centroids}, {}

    # -- observers (records, not protocol) ---------------------------------------------

    def observer(
        self,
        views: Sequence[np.ndarray],
        view_ids: Sequence[int],
        references: Sequence[KernelReference] | None = None,
    ) -> Callable[[Any], np.ndarray]:
        """Labels of ``views`` under a state; before the k-means phase, k-means of them."""
        refs = references if references is not None else [kernel_reference(X) for X in views]
        client = self.client(views, view_ids, refs)

        def labels(state: Any) -> np.ndarray:
            rng = np.random.default_rng([self.model.seed, 104729])
            return _assign(client.embed(state["groups"]), state["centroids"], self.model, rng)

        return labels

    def state_arrays(self, state: Any) -> dict[str, np.ndarray]:
        """Every group's parameters (``params_<group>``) and the centres (``model.npz``)."""
        out = {f"params_{g}": np.asarray(state["groups"][g]) for g in self.groups}
        if state["centroids"] is not None:
            out["centroids"] = np.asarray(state["centroids"])
        return out


def deep_algorithm(model: DeepModel, protocol: ProtocolConfig, shape: Shape) -> Algorithm:
    """The plug-in for a deep hybrid-view model."""
    return DeepAlgorithm(model, protocol, shape)
