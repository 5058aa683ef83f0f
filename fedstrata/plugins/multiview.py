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
which the root seeds the initial centres. The pooled references are the plug-in's
*extras*: the nodes send them once per run as its configuration
(:mod:`fedstrata.nodes.runconfig`) and each client prepares its views under them once
(:meth:`MultiViewLearner.configure`); model bodies carry only the state.

Lean path. A client with few samples spends more time on per-call overhead than on
its arithmetic, and every client of a round reads the same global model:

* the parsed, validated model is kept per algorithm instance (the builder shares one
  among a federation's clients), keyed by its exact bytes (:class:`GlobalModels`), so
  each distinct model is checked once per federation, and so are its per-view
  constants (the coefficient rows of the distance GEMM, v^α);
* a client with at most :data:`LEAN_MAX_SAMPLES` samples computes its statistics
  with :func:`lean_statistics`: the numpy operations of
  :func:`~fedstrata.algorithms.multiview.local_statistics` on the same numbers in the
  same order (hence the same bits), without the batch axis and the scratch workspace
  that pay off for large clients only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fedstrata.algorithms.combine import ParamUpdate, has_converged, personalize
from fedstrata.algorithms.fit import fit_batched
from fedstrata.algorithms.kernels import KernelReference
from fedstrata.algorithms.multiview import (  # the private helpers: see lean_statistics
    MultiViewModel,
    PreparedViews,
    State,
    Stats,
    held_fraction,
    local_statistics,
    objective,
    prepare_views,
    state_from_statistics,
)
from fedstrata.algorithms.schedules import scheduled_scale
from fedstrata.errors import NodeProtocolError, WireError
from fedstrata.nodes.algorithm import Algorithm, Learner, Step
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.plugins._setup import (
    SharedSetupRound,
    setup_body,
)
from fedstrata.plugins.batch_update import (
    PreparedObserver,
    StackCache,
    finish_batch,
    labels_batch,
    setup_batch,
    update_batch,
)
from fedstrata.plugins.global_models import GlobalModel, GlobalModels, read_global
from fedstrata.plugins.lean import lean_statistics
from fedstrata.plugins.messages import (
    Shape,
    check_partial,
    compress_partial,
    params_partial,
    read_references,
    read_state,
    solve_params,
    state_body,
    stats_partial,
    sum_partials,
    to_stats,
)
from fedstrata.plugins.sample_rounds import read_frame, sample_partial, state_from_sample_sums
from fedstrata.privacy.layout import Layout, SummedField

__all__ = [
    "LEAN_MAX_SAMPLES",
    "GlobalModel",
    "GlobalModels",
    "MultiViewLearner",
    "ParameterAlgorithm",
    "StatisticsAlgorithm",
    "lean_statistics",
    "multiview_algorithm",
    "read_global",
]

#: Clients with at most this many samples take the lean client step (rule ``sum``).
LEAN_MAX_SAMPLES = 256


def _memberships(stats: Stats) -> np.ndarray:
    """The memberships of a client's statistics (local_statistics always computes them)."""
    if stats.memberships is None:
        raise NodeProtocolError("the client statistics carry no memberships")
    return stats.memberships[0]


def _kernel_scale(body: dict[str, Any], node_id: str) -> float:
    """The factor of ``node_id`` in a model's ``kernel_scale`` map (1.0 when absent)."""
    scales = body.get("kernel_scale")
    if scales is None:
        return 1.0
    if not isinstance(scales, dict):
        raise WireError("body field 'kernel_scale' must map node ids to factors")
    f = scales.get(node_id, 1.0)
    if isinstance(f, bool) or not isinstance(f, int | float) or not 0.0 < f <= 1.0:
        raise WireError(f"kernel_scale of {node_id} must lie in (0, 1], got {f!r}")
    return float(f)


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
        self._refs: list[KernelReference] | None = None  # from the run's configuration
        self.local: State | None = None  # the personalised model (parameter rules)
        self._dp_rng: np.random.Generator | None = None
        #: Sample-level DP: the pooled means and s.d.s of the run's configuration.
        self._frame: tuple[list[np.ndarray], list[np.ndarray]] | None = None
        self._releases = 0  # noisy partials sent so far (the round of a DP schedule)
        self._made = 0  # noisy releases of any kind (setup stages, rounds): the budget's

    def _flops(self, iters: int) -> float:
        a = self.algorithm
        per = self.n_samples * a.shape.n_clusters * sum(a.shape.dims)
        return float(per * iters * a.protocol.flops_per_element)

    def setup(self, request: dict[str, Any] | None = None) -> tuple[dict[str, Any], float]:
        """Per-view kernel references, and seeding candidates from a full-view client.

        In a private run: the private setup stage's sums instead
        (:mod:`fedstrata.plugins.private_setup`).
        """
        a = self.algorithm
        if a.private is not None:
            self._spend()
            if self._dp_rng is None:  # a child stream: the client's own draws stay as they were
                self._dp_rng = self.rng.spawn(1)[0]
            return a.setup_reply(self.views, self.view_ids, request, self._dp_rng), self._flops(1)
        # Σ(x − mean)² only when a bandwidth needs the pooled variances (bytes count)
        spread = a.model.bandwidth is not None
        body = setup_body(self.views, self.view_ids, a.shape, self.rng, spread=spread)
        return body, self._flops(10)

    def configure(self, extras: dict[str, Any]) -> None:
        """Take the pooled kernel references (``refs``) of the run's configuration.

        Without a configuration (``kernel_scope: local``) every view is measured
        against the client's own data. Malformed references raise WireError and leave
        the previous ones in place.
        """
        a = self.algorithm
        refs = read_references(extras, a.shape) if "refs" in extras else None
        held = None if refs is None else [refs[g] for g in self.view_ids]
        if any(r is None for r in held or ()):
            raise WireError(
                "the configuration has no kernel reference for a view this client holds"
            )
        self._refs = held  # type: ignore[assignment]
        self._prepared = None
        private = a.private
        if private is not None and private.sample_rounds:
            self._frame = read_frame(extras, a.shape)

    def prepared(self) -> PreparedViews:
        """The views prepared under the configured kernel references (once per configuration)."""
        if self._prepared is None:
            a = self.algorithm
            self._prepared = prepare_views(
                self.views,
                a.model,
                view_ids=self.view_ids,
                n_views=a.shape.n_views,
                references=self._refs,
                view_dims=a.shape.dims,
            )
        return self._prepared

    def update(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """The algorithm's partial under the body's global model.

        A ``kernel_scale`` entry for this client (the adaptive root's Eq. 138 factor,
        experimental) multiplies its heat-kernel coefficients for the round, through
        the model's per-view scale.
        """
        glob = self.algorithm.models.read(body, self.algorithm.shape)
        if self._frame is not None:  # sample-level DP rounds
            return self._sample_private(glob.state), self._flops(1)
        factor = _kernel_scale(body, self.node_id)
        if factor == 1.0:
            partial, flops = self.algorithm.local_update(self, glob.state, self.prepared(), glob)
        else:
            state = glob.state
            H = self.algorithm.shape.n_views
            base = state.view_scale if state.view_scale is not None else np.ones((1, H))
            scaled = state.with_scale(base * factor)
            partial, flops = self.algorithm.local_update(self, scaled, self.prepared(), None)
        return self._private(partial), flops

    def _spend(self) -> None:
        """Count a noisy release; refuse it (BudgetSpentError) beyond the run's budget."""
        private = self.algorithm.private
        if private is not None and private.dp:
            private.check_release(self._made)
            self._made += 1

    def _sample_private(self, state: State) -> dict[str, Any]:
        """The round's sample-level DP partial (:mod:`fedstrata.plugins.sample_rounds`)."""
        self._spend()
        a = self.algorithm
        assert self._frame is not None
        assert a.private is not None
        if self._dp_rng is None:
            self._dp_rng = self.rng.spawn(1)[0]
        return sample_partial(
            self.views,
            self.prepared(),
            state,
            a.model,
            a.shape,
            self._frame,
            a.private,
            self._dp_rng,
        )

    def _private(self, partial: dict[str, Any]) -> dict[str, Any]:
        """The partial under the Gaussian mechanism when DP is on (``protocol.dp_clip``).

        The float statistics (``num``, ``den``, ``costs``, ``mass``), taken as one vector,
        are clipped to L2 norm ``dp_clip`` and get noise of std ``dp_noise · dp_clip``
        (divided by √``dp_shares`` under secure aggregation: distributed noise whose
        securely summed total carries the full variance). With ``dp_block_clips`` each
        of the four blocks is clipped to its own bound c_b and noised with std
        z·√4·c_b, the same privacy as one bound on the blocks scaled to unit norm:
        small blocks (the denominators) are no longer drowned by the large ones. The
        noise comes from the client's own child stream (its other draws stay as they
        were). The objective term is not sent
        (0.0): the root computes J from the noisy sums.
        Sample counts (``n``, ``counts``) are released as they are.
        """
        p = self.algorithm.protocol
        if p.dp_clip is None or partial.get("mode") != "stats":
            return partial
        from fedstrata.privacy.dp import gaussian_mechanism

        self._spend()
        if self._dp_rng is None:  # a child stream: the client's own draws stay as they were
            self._dp_rng = self.rng.spawn(1)[0]
        release, self._releases = self._releases, self._releases + 1
        H = len(partial["num"])
        z = p.noise_multiplier(release)
        shares = p.dp_shares
        blocks = [list(partial["num"]), list(partial["den"]), [partial["costs"]], [partial["mass"]]]
        if p.dp_block_clips:  # each block its own bound; noise z·√B·c_b keeps the same z
            scale = math.sqrt(len(blocks))
            bounds = [(b, c, z * scale * c) for b, c in zip(blocks, p.dp_block_clips, strict=True)]
        else:  # one bound on the whole vector
            bounds = [([a for b in blocks for a in b], p.dp_clip, z * p.dp_clip)]
        arrays = []
        for block, clip, sigma in bounds:
            rel = gaussian_mechanism(
                block,
                clip=clip,
                rng=self._dp_rng,
                sigma=sigma,
                distributed=shares > 1,
                n_clients=shares if shares > 1 else None,
            )
            arrays += list(rel.arrays)
        out = dict(partial)
        out["num"], out["den"] = arrays[:H], arrays[H : 2 * H]
        out["costs"], out["mass"] = arrays[2 * H], arrays[2 * H + 1]
        out["objective"] = 0.0
        return out

    def finish(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """Labels and memberships under the final model, and the personalised ones.

        With personalization on (``protocol.personal_iters``) the client blends the
        global model with its local one by Eq. 78/79 (γ_ℓ for centres, ρ_ℓ for view
        weights) and labels its samples under the blend too (``personal_labels``).
        """
        a = self.algorithm
        glob = read_global(body, a.shape, a.models)
        pv = self.prepared()
        U = _memberships(local_statistics(pv, glob, a.model))
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
            Up = _memberships(local_statistics(pv, personal, a.model))
            result["personal_labels"] = Up.argmax(axis=1)
            result["personal_state"] = personal.take(0)
            result["personal_mixing"] = (gamma, rho)
        elif self.local is not None:
            result["personal_state"] = self.local.take(0)
        return result, self._flops(iters)


class _MultiView(SharedSetupRound, Algorithm):
    """What both combine rules share: the setup round, model bodies, finiteness."""

    compressions = ("float32", "float16", "qsgd")

    def __init__(self, model: MultiViewModel, protocol: ProtocolConfig, shape: Shape) -> None:
        self.model = model
        self.protocol = protocol
        self.shape = shape
        #: The global models its learners read (shared by the clients sharing it).
        self.models = GlobalModels()

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
        self,
        learner: MultiViewLearner,
        glob: State,
        pv: PreparedViews,
        lean: GlobalModel | None = None,
    ) -> tuple[dict[str, Any], float]:
        """The client's partial under the (batched) global model ``glob``.

        ``lean``: the same model as read by :class:`GlobalModels`, for the lean path.
        """
        raise NotImplementedError

    def needs_setup(self, fixed_init: bool) -> bool:
        """A setup round unless the references are local and the initial model is given."""
        return self.protocol.kernel_scope == "global" or not fixed_init

    def after_setup(
        self, merged: dict[str, Any], state: Any | None
    ) -> tuple[Any | None, dict[str, Any], bool]:
        """Global references (if scoped globally) and centres seeded from the candidates."""
        merged = self.plain_setup(merged)
        extras: dict[str, Any] = {}
        complete = True
        if self.protocol.kernel_scope == "global":
            extras = {"refs": merged["refs"]}
            complete = not any(r is None for r in merged["refs"])
        private = self.private
        if private is not None and private.sample_rounds and self._frame is not None:
            extras["frame"] = {"mu": self._frame["mu"], "scale": self._frame["scale"]}
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
        """See :func:`fedstrata.plugins.messages.compress_partial`."""
        return compress_partial(partial, scheme, bits=bits, rng=rng)

    def is_finite(self, state: Any) -> bool:
        """Every centre and view weight is finite."""
        return bool(
            all(np.isfinite(c).all() for c in state.centers)
            and np.isfinite(state.view_weights).all()
        )

    def model_body(self, state: Any, extras: dict[str, Any]) -> dict[str, Any]:
        """Centres, view weights (and view scale); the references travel in the config."""
        return state_body(state)

    def read_model(self, body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The parent's model (its references come with the run's configuration)."""
        return read_state(body, self.shape), {}

    def observer(
        self,
        views: Sequence[np.ndarray],
        view_ids: Sequence[int],
        references: Sequence[KernelReference] | None = None,
    ) -> Callable[[Any], np.ndarray]:
        """Labels of ``views`` under a state, with δ measured against ``references``."""
        pv = prepare_views(
            views,
            self.model,
            view_ids=view_ids,
            n_views=self.shape.n_views,
            references=references,
            view_dims=self.shape.dims,
        )
        return PreparedObserver(pv, self.model)

    def setup_batch(
        self, learners: Sequence[Learner], body: dict[str, Any]
    ) -> list[tuple[dict[str, Any], float, Callable[[], bool]] | None]:
        """Full-view clients' setup replies, their candidates seeded in stacked groups."""
        if body.get("request") is not None:
            return [None] * len(learners)
        return setup_batch(self, learners, learner_type=MultiViewLearner)

    def labels_batch(
        self, observers: Sequence[Callable[[Any], np.ndarray]], state: Any
    ) -> list[np.ndarray]:
        """Small clients' labels in stacked groups, each the bits of its own observer."""
        return labels_batch(observers, state, model=self.model, max_samples=LEAN_MAX_SAMPLES)

    def state_arrays(self, state: Any) -> dict[str, np.ndarray]:
        """``centers_{h}`` per view and ``view_weights``."""
        arrays = {f"centers_{h}": np.asarray(c) for h, c in enumerate(state.centers)}
        arrays["view_weights"] = np.asarray(state.view_weights)
        return arrays

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
            private = self.private
            if total["mode"] == "stats" and private is not None and private.sample_rounds:
                assert self._frame is not None  # set by the root's private setup
                new, held = state_from_sample_sums(
                    total, previous, self._frame, self.shape, private
                )
                return Step(new, 0.0, False, 0.0, {"dp_held": held})
            if total["mode"] == "stats":
                stats = to_stats(total, self.shape)
                floor = self._noise_floor(int(total["contributors"]))
                new = state_from_statistics(stats, previous, self.model, min_den=floor)
                J = float(objective(stats, new.view_weights, self.model.alpha))
                change = abs(previous_objective - J)
                if relative:
                    change /= max(abs(previous_objective), 1e-300)
                info = {} if floor == 0.0 else {"dp_held": held_fraction(stats, floor)}
                return Step(new, J, change < tol, float(stats.n_samples), info)
            new = solve_params(total, self.shape, previous)
        except WireError:
            return Step(None, math.nan, False, float(total.get("n", 0)))
        return Step(
            new,
            float(total["objective"]),
            has_converged(previous, new, tol, relative=relative),
            float(total["n"]),
        )

    def _noise_floor(self, contributors: int) -> float:
        """Under DP: 3 std of the noise on a summed denominator (0 without DP).

        Each contributor's denominators carry noise of std z·c/√shares (c the whole
        vector's bound, or 2·den bound per block); a sum of ``contributors`` has √n
        times that. Post-processing of a DP release: it costs no privacy.
        """
        p = self.protocol
        if p.dp_clip is None:
            return 0.0
        z = max(p.dp_schedule) if p.dp_schedule else p.dp_noise
        c = 2.0 * p.dp_block_clips[1] if p.dp_block_clips else p.dp_clip
        return 3.0 * z * c * math.sqrt(max(contributors, 1) / p.dp_shares)

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
        self._stacks = StackCache()

    def update_batch(
        self, learners: Sequence[Learner], body: dict[str, Any]
    ) -> list[tuple[dict[str, Any], float] | None]:
        """Small clients' lean steps in stacked groups (:mod:`fedstrata.plugins.batch_update`)."""
        return update_batch(
            self,
            learners,
            body,
            lean=lean_statistics,
            learner_type=MultiViewLearner,
            max_samples=LEAN_MAX_SAMPLES,
            stacks=self._stacks,
        )

    def finish_batch(
        self, learners: Sequence[Learner], body: dict[str, Any]
    ) -> list[tuple[dict[str, Any], float] | None]:
        """Small clients' final labels in stacked groups (without personalization)."""
        return finish_batch(
            self,
            learners,
            body,
            learner_type=MultiViewLearner,
            max_samples=LEAN_MAX_SAMPLES,
            stacks=self._stacks,
        )

    def secure_layout(self) -> Layout:
        """Statistics (noised under DP), then the counts and the objective."""
        k, dims, H = self.shape.n_clusters, self.shape.dims, self.shape.n_views
        per_view = tuple((k, d) for d in dims)
        return Layout(
            (
                SummedField("num", per_view, listed=True, noised=True),
                SummedField("den", per_view, listed=True, noised=True),
                SummedField("costs", ((H,),), noised=True),
                SummedField("mass", ((k,),), noised=True),
                SummedField("counts", ((H,),), integer=True),
                SummedField("n", ((),), integer=True),
                SummedField("contributors", ((),), integer=True),
                SummedField("objective", ((),)),
            ),
            {"mode": "stats"},
        )

    def local_update(
        self,
        learner: MultiViewLearner,
        glob: State,
        pv: PreparedViews,
        lean: GlobalModel | None = None,
    ) -> tuple[dict[str, Any], float]:
        """The client's statistics under ``glob`` and its objective term."""
        if lean is not None and len(pv.view_ids) > 0 and pv.n_samples <= LEAN_MAX_SAMPLES:
            num, den, costs, mass, J = lean_statistics(pv, lean, self.model)
            counts = np.zeros(self.shape.n_views, dtype=np.int64)
            counts[list(pv.view_ids)] = pv.n_samples
            partial = {
                "mode": "stats",
                "num": num,
                "den": den,
                "costs": costs,
                "mass": mass,
                "counts": counts,
                "n": int(pv.n_samples),
                "contributors": 1,
                "objective": J,
            }
            return partial, learner._flops(1)
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

    def parameter_stop_test(self, *, relative: bool) -> str:
        """FedHK-MVFC's Eq. 86: the (relative) change of the averaged centres."""
        return ("the relative centre change" if relative else "the centre change") + " (Eq. 86)"

    def secure_layout(self) -> Layout:
        """Weighted centres (``None`` where no member held the view), weights, counts."""
        if not self.additive:
            return super().secure_layout()
        k, dims, H = self.shape.n_clusters, self.shape.dims, self.shape.n_views
        return Layout(
            (
                SummedField(
                    "wcenters", tuple((k, d) for d in dims), listed=True, optional_by="wheld"
                ),
                SummedField("wviews", ((H,),)),
                SummedField("wheld", ((H,),)),
                SummedField("n", ((),), integer=True),
                SummedField("contributors", ((),), integer=True),
                SummedField("objective", ((),)),
            ),
            {"mode": "params"},
        )

    def local_update(
        self,
        learner: MultiViewLearner,
        glob: State,
        pv: PreparedViews,
        lean: GlobalModel | None = None,
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
