"""The multi-view algorithm plug-ins: HK-MVFC, MV-FCM and MVKM-ED over the node core.

The three algorithms share one engine (:mod:`fedstrata.algorithms.multiview`: a
:class:`~fedstrata.algorithms.multiview.MultiViewModel` says which one runs) and two
ways of federating it, chosen by the protocol's combine rule:

* :class:`StatisticsAlgorithm` (rule ``sum``): clients send additive sufficient
  statistics under the global model; the root's step is the centralised update, so
  the federation reproduces centralised fitting. MVKM-ED's per-iteration β travels
  with the model (:meth:`StatisticsAlgorithm.at_iteration`).
* :class:`ParameterAlgorithm` (rules ``weighted``, ``mean``, ``median``; FedHK-MVFC
  Algorithm 4): clients personalise the global model (Eq. 78/79), run local
  iterations and send centres and view weights; the root averages them (Eq. 74-77)
  and stops by Eq. 86. ``median`` is not additive.

Both open with a setup round: clients report their per-view min/max/sum (the pooled
heat-kernel reference, with ``kernel_scope: global``) and k-means++ candidates from
which the root seeds the initial centres.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedstrata.algorithms.combine import ParamUpdate, has_converged, personalize
from fedstrata.algorithms.fit import fit_batched
from fedstrata.algorithms.kernels import kernel_reference
from fedstrata.algorithms.multiview import (
    MultiViewModel,
    PreparedViews,
    State,
    local_statistics,
    objective,
    prepare_views,
    state_from_statistics,
)
from fedstrata.algorithms.schedules import scheduled_scale
from fedstrata.algorithms.seeding import local_candidates, reduce_candidates
from fedstrata.errors import NodeProtocolError, WireError
from fedstrata.nodes.algorithm import Algorithm, Learner, Step
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.nodes.messages import (
    Shape,
    check_partial,
    compress_partial,
    merge_reference_bodies,
    params_partial,
    read_candidates,
    read_references,
    read_state,
    references_body,
    solve_params,
    state_body,
    stats_partial,
    sum_partials,
    to_stats,
)

__all__ = ["MultiViewLearner", "ParameterAlgorithm", "StatisticsAlgorithm", "multiview_algorithm"]


def _raw_refs_key(field: Any) -> bytes | None:
    """Bytes identifying a ``refs`` body field without validating it (None if malformed)."""
    if not isinstance(field, list):
        return None
    parts: list[bytes] = []
    for item in field:
        if item is None:
            parts.append(b"-")
            continue
        if not isinstance(item, dict):
            return None
        for name in ("min", "max", "sum"):
            arr = item.get(name)
            if not isinstance(arr, np.ndarray):
                return None
            parts += [arr.dtype.str.encode(), repr(arr.shape).encode(), arr.tobytes()]
        parts.append(repr(item.get("count")).encode())
    return b"|".join(parts)


class MultiViewLearner(Learner):
    """A client's local views under a multi-view model (either combine rule)."""

    def __init__(
        self,
        algorithm: _MultiView,
        views: Sequence[np.ndarray],
        view_ids: Sequence[int],
        rng: np.random.Generator,
        node_id: str,
    ) -> None:
        self.algorithm = algorithm
        self.views = [np.asarray(v, dtype=np.float64) for v in views]
        self.view_ids = tuple(view_ids)
        shape = algorithm.shape
        if len(self.view_ids) != len(self.views) or any(
            not 0 <= g < shape.n_views or shape.dims[g] != v.shape[1]
            for g, v in zip(self.view_ids, self.views, strict=True)
        ):
            raise NodeProtocolError(f"client {node_id}: views do not match view_ids/dims")
        self.rng = rng
        self.node_id = node_id
        self.n_samples = self.views[0].shape[0]
        self._prepared: PreparedViews | None = None
        self._refs_key: bytes | None = None
        self.local: State | None = None  # the personalised model (parameter rules)

    def _flops(self, iters: int) -> float:
        a = self.algorithm
        per = self.n_samples * a.shape.n_clusters * sum(a.shape.dims)
        return float(per * iters * a.protocol.flops_per_element)

    def setup(self) -> tuple[dict[str, Any], float]:
        """Per-view kernel references, and seeding candidates from a full-view client."""
        shape = self.algorithm.shape
        refs: list[Any] = [None] * shape.n_views
        for g, X in zip(self.view_ids, self.views, strict=True):
            refs[g] = kernel_reference(X)
        body: dict[str, Any] = {"mode": "setup", "n": self.n_samples, **references_body(refs)}
        if len(self.view_ids) == shape.n_views:  # only full-view clients can seed all views
            candidates, sizes = local_candidates(self.views, shape.n_clusters, self.rng)
            body["init"], body["init_w"] = candidates, sizes
        return body, self._flops(10)

    def prepared(self, body: dict[str, Any]) -> PreparedViews:
        """The views prepared under the body's kernel references (cached while unchanged)."""
        key = _raw_refs_key(body["refs"]) if "refs" in body else b""
        if self._prepared is not None and key is not None and key == self._refs_key:
            return self._prepared
        a = self.algorithm
        refs = read_references(body, a.shape) if "refs" in body else None
        held = None if refs is None else [refs[g] for g in self.view_ids]
        self._prepared = prepare_views(
            self.views,
            a.model,
            view_ids=self.view_ids,
            n_views=a.shape.n_views,
            references=held,  # type: ignore[arg-type]
        )
        self._refs_key = key
        return self._prepared

    def update(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """The algorithm's partial under the body's global model."""
        glob = read_state(body, self.algorithm.shape).batched()
        return self.algorithm.local_update(self, glob, self.prepared(body))

    def finish(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """Labels and memberships under the final model, and the personalised ones.

        With personalization on (``protocol.personal_iters``) the client blends the
        global model with its local one by Eq. 78/79 (γ_ℓ for centres, ρ_ℓ for view
        weights) and labels its samples under the blend too (``personal_labels``).
        """
        a = self.algorithm
        glob = read_state(body, a.shape).batched()
        pv = self.prepared(body)
        U = local_statistics(pv, glob, a.model).memberships[0]
        result: dict[str, Any] = {"labels": U.argmax(axis=1), "memberships": np.array(U)}
        iters = 1
        p = a.protocol
        if p.personal_iters is not None:
            local = self.local
            if local is None:  # statistics rule: the local model is fitted now
                res = fit_batched(pv, glob, a.model, max_iter=p.personal_iters, tol=0.0, warn=False)
                local, iters = res.state, iters + int(res.n_iter[0])
            gamma, rho = p.mixing_of(self.node_id)
            personal = personalize(glob, local, gamma, rho)
            if glob.view_scale is not None:
                personal = personal.with_scale(glob.view_scale)
            Up = local_statistics(pv, personal, a.model).memberships[0]
            result["personal_labels"] = Up.argmax(axis=1)
            result["personal_state"] = personal.take(0)
            result["personal_mixing"] = (gamma, rho)
        elif self.local is not None:
            result["personal_state"] = self.local.take(0)
        return result, self._flops(iters)


class _MultiView(Algorithm):
    """What both combine rules share: the setup round, model bodies, finiteness."""

    compressions = ("float32", "float16", "qsgd")

    def __init__(self, model: MultiViewModel, protocol: ProtocolConfig, shape: Shape) -> None:
        self.model = model
        self.protocol = protocol
        self.shape = shape

    def learner(
        self,
        views: Sequence[np.ndarray],
        *,
        view_ids: Sequence[int],
        rng: np.random.Generator,
        node_id: str,
    ) -> MultiViewLearner:
        """A :class:`MultiViewLearner` over one client's views."""
        return MultiViewLearner(self, views, view_ids, rng, node_id)

    def local_update(
        self, learner: MultiViewLearner, glob: State, pv: PreparedViews
    ) -> tuple[dict[str, Any], float]:
        """The client's partial under the (batched) global model ``glob``."""
        raise NotImplementedError

    def needs_setup(self, fixed_init: bool) -> bool:
        """A setup round unless the references are local and the initial model is given."""
        return self.protocol.kernel_scope == "global" or not fixed_init

    def check_setup(self, body: dict[str, Any]) -> None:
        """References and candidates must parse."""
        if body.get("mode") != "setup":
            raise WireError("expected a setup reply")
        read_references(body, self.shape)
        read_candidates(body, self.shape)

    def merge_setup(
        self, bodies: Sequence[dict[str, Any]], rng: np.random.Generator
    ) -> dict[str, Any]:
        """Pooled references and the candidates reduced to ``n_clusters`` (k-means++)."""
        merged: dict[str, Any] = {"mode": "setup", "n": sum(int(b.get("n", 0)) for b in bodies)}
        merged.update(merge_reference_bodies(bodies, self.shape))
        cands = [c for c in (read_candidates(b, self.shape) for b in bodies) if c is not None]
        if cands:
            views = [np.vstack([c[0][h] for c in cands]) for h in range(self.shape.n_views)]
            weights = np.concatenate([c[1] for c in cands])
            centers, w = reduce_candidates(views, weights, self.shape.n_clusters, rng)
            merged["init"], merged["init_w"] = centers, w
        return merged

    def after_setup(
        self, merged: dict[str, Any], state: Any | None
    ) -> tuple[Any | None, dict[str, Any], bool]:
        """Global references (if scoped globally) and centres seeded from the candidates."""
        extras: dict[str, Any] = {}
        complete = True
        if self.protocol.kernel_scope == "global":
            extras = {"refs": merged["refs"]}
            complete = not any(r is None for r in merged["refs"])
        if state is None and len(merged.get("init_w", ())) == self.shape.n_clusters:
            H = self.shape.n_views
            state = read_state(
                {"centers": merged["init"], "view_weights": np.full(H, 1.0 / H)}, self.shape
            )
        return state, extras, complete

    def check_partial(self, body: dict[str, Any]) -> None:
        """Validate against the shape; a compressed partial is decoded in place."""
        check_partial(body, self.shape)

    def combine(self, partials: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Sum the partials (concatenate ``median`` items)."""
        return sum_partials(partials)

    def contributors(self, partial: dict[str, Any]) -> int:
        """The partial's ``contributors`` count."""
        return int(partial["contributors"])

    def compress(
        self, partial: dict[str, Any], scheme: str, *, bits: int, rng: np.random.Generator | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """See :func:`fedstrata.nodes.messages.compress_partial`."""
        return compress_partial(partial, scheme, bits=bits, rng=rng)

    def is_finite(self, state: Any) -> bool:
        """Every centre and view weight is finite."""
        return bool(
            all(np.isfinite(c).all() for c in state.centers)
            and np.isfinite(state.view_weights).all()
        )

    def model_body(self, state: Any, extras: dict[str, Any]) -> dict[str, Any]:
        """Centres, view weights (and view scale), then the extras."""
        return {**state_body(state), **extras}

    def read_model(self, body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The parent's model and its references."""
        extras = {"refs": body["refs"]} if "refs" in body else {}
        return read_state(body, self.shape), extras

    def subtree_partial(self, state: Any, total: dict[str, Any]) -> dict[str, Any]:
        """The subtree's model as one n-weighted parameter update."""
        update = ParamUpdate(
            centers=state.centers,
            view_weights=state.view_weights,
            n_samples=int(total["n"]),
            objective=float(total["objective"]),
        )
        partial = params_partial(update, "weighted")
        partial["contributors"] = int(total["contributors"])
        return partial

    def next_state(
        self,
        total: dict[str, Any],
        previous: Any,
        previous_objective: float,
        *,
        tol: float,
        relative: bool,
    ) -> Step:
        """The root's step, by the combined partial's mode.

        ``stats``: the centralised update from summed statistics, converged when
        |ΔJ| (relative: |ΔJ|/|J|) < tol. ``params``/``items``: Eq. 74-77 from the
        combined parameters (also what a HierFAVG middle tier forwards under rule
        ``sum``), converged by Eq. 86.
        """
        try:
            if total["mode"] == "stats":
                stats = to_stats(total, self.shape)
                new = state_from_statistics(stats, previous, self.model)
                J = float(objective(stats, new.view_weights, self.model.alpha))
                change = abs(previous_objective - J)
                if relative:
                    change /= max(abs(previous_objective), 1e-300)
                return Step(new, J, change < tol, float(stats.n_samples))
            new = solve_params(total, self.shape, previous)
        except WireError:
            return Step(None, math.nan, False, float(total.get("n", 0)))
        return Step(
            new,
            float(total["objective"]),
            has_converged(previous, new, tol, relative=relative),
            float(total["n"]),
        )

    def mix(self, old: dict[str, Any], new: dict[str, Any], weight: float) -> dict[str, Any]:
        """Float arrays and the objective interpolated; counts from ``new``."""
        if not self.additive:
            return super().mix(old, new, weight)
        out = dict(new)
        for key, value in new.items():
            if key in ("mode", "n", "contributors", "counts", "sub"):
                continue
            prev = old[key]
            if isinstance(value, list):
                out[key] = [_lerp(a, b, weight) for a, b in zip(prev, value, strict=True)]
            elif isinstance(value, np.ndarray | float):
                out[key] = _lerp(prev, value, weight)
        return out


def _lerp(a: Any, b: Any, w: float) -> Any:
    if a is None or b is None:
        return b if a is None else a
    return (1.0 - w) * a + w * b


class StatisticsAlgorithm(_MultiView):
    """Rule ``sum``: additive sufficient statistics; the root's step is centralised."""

    additive = True

    def __init__(self, model: MultiViewModel, protocol: ProtocolConfig, shape: Shape) -> None:
        super().__init__(model, protocol, shape)
        self.name = f"{_family(model)}/sum"

    def local_update(
        self, learner: MultiViewLearner, glob: State, pv: PreparedViews
    ) -> tuple[dict[str, Any], float]:
        """The client's statistics under ``glob`` and its objective term."""
        stats = local_statistics(pv, glob, self.model)
        partial = stats_partial(
            stats.take(0), float(objective(stats, glob.view_weights, self.model.alpha)[0])
        )
        return partial, learner._flops(1)

    def at_iteration(self, state: Any, iteration: int, extras: dict[str, Any]) -> Any:
        """MVKM-ED: attach β of ``iteration`` (from the pooled references)."""
        if self.model.scale_schedule == "none":
            return state
        refs = read_references(extras, self.shape) if "refs" in extras else []
        return state.with_scale(scheduled_scale(self.model, refs, iteration))


class ParameterAlgorithm(_MultiView):
    """Rules ``weighted``/``mean``/``median``: local fitting, averaged parameters."""

    def __init__(self, model: MultiViewModel, protocol: ProtocolConfig, shape: Shape) -> None:
        super().__init__(model, protocol, shape)
        self.additive = protocol.rule != "median"
        self.name = f"{_family(model)}/{protocol.rule}"

    def local_update(
        self, learner: MultiViewLearner, glob: State, pv: PreparedViews
    ) -> tuple[dict[str, Any], float]:
        """Personalise (Eq. 78/79), fit ``local_iters`` iterations, send the parameters."""
        p = self.protocol
        start = glob if learner.local is None else personalize(glob, learner.local, p.gamma, p.rho)
        res = fit_batched(pv, start, self.model, max_iter=p.local_iters, tol=p.tol, warn=False)
        learner.local = res.state
        stats = local_statistics(pv, res.state, self.model)
        update = ParamUpdate(
            centers=tuple(
                a[0] if g in learner.view_ids else None for g, a in enumerate(res.state.centers)
            ),
            view_weights=res.state.view_weights[0],
            n_samples=learner.n_samples,
            cluster_mass=stats.cluster_mass[0],
            objective=float(res.objective[0]),
        )
        return params_partial(update, p.rule), learner._flops(int(res.n_iter[0]) + 1)


def _family(model: MultiViewModel) -> str:
    if model.scale_schedule != "none":
        return "mvkm-ed"
    return "mvfcm" if model.kernel == "none" else "hk-mvfc"


def multiview_algorithm(model: MultiViewModel, protocol: ProtocolConfig, shape: Shape) -> Algorithm:
    """The plug-in for ``model`` under ``protocol.rule``."""
    if protocol.rule == "sum":
        return StatisticsAlgorithm(model, protocol, shape)
    return ParameterAlgorithm(model, protocol, shape)
