"""In-process federated loop of the tensor family: setup, then rounds of step → sum → aggregate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedstrata.algorithms._validation import check_views
from fedstrata.algorithms.kernels import (
    KernelReference,
    kernel_reference,
    merge_kernel_references,
)
from fedstrata.algorithms.seeding import local_candidates, reduce_candidates
from fedstrata.algorithms.tensor._common import scale_with_ranges
from fedstrata.algorithms.tensor.client import TensorClient
from fedstrata.algorithms.tensor.kernel import view_scales
from fedstrata.algorithms.tensor.model import (
    TensorModel,
    aggregate,
    has_converged,
    initial_global,
)
from fedstrata.errors import ValidationError

__all__ = ["INITS", "SCALINGS", "TensorFitResult", "tensor_federated_fit"]

INITS = ("kmeans", "kmeans-best", "random")
SCALINGS = ("minmax", "none")


@dataclass
class TensorFitResult:
    """Outcome of :func:`tensor_federated_fit`.

    Attributes
    ----------
    labels, memberships
        Per client: (n_ℓ,) labels and (n_ℓ, c) memberships under the final global model
        (FedHK-MVC-Person: under each client's personalised model).
    model
        The final global model (arrays of :func:`~fedstrata.algorithms.tensor.model_shapes`).
    objective_history
        The aggregate objective (mean per-sample local J) after every round.
    n_rounds
        Rounds run.
    converged
        Whether the relative-change rule stopped the loop before ``rounds``.
    clients
        The :class:`TensorClient` objects (their local state after the last round).
    minimum, maximum
        Pooled per-view feature ranges the data was scaled with (``None`` with
        ``scaling="none"``).
    mean
        Pooled per-view feature means the scaled data was centred at (raw units;
        ``None`` unless ``model.center_views`` and ``scaling="minmax"``).
    initial
        The first global model.
    """

    labels: list[np.ndarray]
    memberships: list[np.ndarray]
    model: dict[str, np.ndarray]
    objective_history: np.ndarray
    n_rounds: int
    converged: bool
    clients: list[TensorClient] = field(repr=False)
    minimum: list[np.ndarray] | None = field(default=None, repr=False)
    maximum: list[np.ndarray] | None = field(default=None, repr=False)
    mean: list[np.ndarray] | None = field(default=None, repr=False)
    initial: dict[str, np.ndarray] | None = field(default=None, repr=False)


def _generator(random_state: Any) -> np.random.Generator:
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(2**31 - 1))
    return np.random.default_rng(random_state)


@dataclass(frozen=True)
class _Space:
    """The pooled references the clients scale with (``None``: the data as given)."""

    refs: Sequence[KernelReference] | None = None
    center: bool = False

    def scale(self, views: Sequence[np.ndarray], ids: Sequence[int]) -> list[np.ndarray]:
        """``views`` (global ids ``ids``) in the clients' space."""
        if self.refs is None:
            return list(views)
        return scale_with_ranges(views, [self.refs[h] for h in ids], self.center)

    def from_unit(self, centers: list[np.ndarray]) -> list[np.ndarray]:
        """Centres drawn in the min-max unit box, moved into the clients' (centred) space."""
        if self.refs is None or not self.center:
            return centers
        offsets = scale_with_ranges([r.mean[None, :] for r in self.refs], self.refs)
        return [c - o for c, o in zip(centers, offsets, strict=True)]

    @property
    def minimum(self) -> list[np.ndarray] | None:
        """Per view, the pooled per-feature minimum (``None`` unscaled)."""
        return None if self.refs is None else [r.minimum for r in self.refs]

    @property
    def maximum(self) -> list[np.ndarray] | None:
        """Per view, the pooled per-feature maximum (``None`` unscaled)."""
        return None if self.refs is None else [r.maximum for r in self.refs]

    @property
    def mean(self) -> list[np.ndarray] | None:
        """Per view, the pooled mean the views are centred at (``None`` uncentred)."""
        return None if self.refs is None or not self.center else [r.mean for r in self.refs]


def tensor_federated_fit(
    model: TensorModel,
    clients: Sequence[Sequence[np.ndarray]],
    view_ids: Sequence[Sequence[int]] | None = None,
    *,
    rounds: int = 30,
    tol: float = 1e-4,
    random_state: Any = None,
    init: str = "kmeans",
    scaling: str = "minmax",
) -> TensorFitResult:
    """Run a tensor-family method over in-process clients.

    Parameters
    ----------
    model
        The method and its hyper-parameters.
    clients
        Each client's views (raw, unscaled), a list of (n_ℓ, d_h) arrays.
    view_ids
        Each client's global view indices (default: every client holds all views in
        order).
    rounds
        Maximum number of rounds T.
    tol
        Stop when the aggregate objective's relative change is below ``tol``
        (Algorithm 1's rule; 0 = always run ``rounds``).
    random_state
        Seed or generator of the k-means candidates / random initial centres.
    init
        ``"kmeans"``: every full-view client reports k-means candidates (centres and sizes)
        of its raw views, reduced by weighted k-means to c centres (as the node plug-in
        does; falls back to ``"random"`` when no client holds every view);
        ``"kmeans-best"``: as ``"kmeans"``, each client's candidates the best of 10
        k-means++ seedings by inertia (the ``real-data`` preset; one client is then
        scikit-learn's ``KMeans(n_init=10)`` on the standardized concatenation);
        ``"random"``: seeded U[0, 1] centres in the scaled space (the paper's random
        global initialisation, read as uniform on the unit box).
    scaling
        ``"minmax"``: scale every view into [0, 1] with the pooled per-feature range
        (clients report min/max; merged exactly). ``"none"``: use the data as given.
    """
    if not isinstance(model, TensorModel):
        raise ValidationError("model must be a TensorModel")
    if init not in INITS:
        raise ValidationError(f"init must be one of {INITS}; got {init!r}")
    if scaling not in SCALINGS:
        raise ValidationError(f"scaling must be one of {SCALINGS}; got {scaling!r}")
    if not isinstance(rounds, int | np.integer) or isinstance(rounds, bool) or rounds < 1:
        raise ValidationError(f"rounds must be an int >= 1, got {rounds!r}")
    if not np.isfinite(tol) or tol < 0:
        raise ValidationError(f"tol must be a finite number >= 0, got {tol!r}")
    if len(clients) == 0:
        raise ValidationError("at least one client is needed")
    s = model.n_views
    data = [check_views(list(v), name=f"clients[{i}]") for i, v in enumerate(clients)]
    ids = [list(range(s)) for _ in data] if view_ids is None else [list(g) for g in view_ids]
    if len(ids) != len(data):
        raise ValidationError(f"{len(data)} clients but {len(ids)} view-id lists")
    for i, (views, g) in enumerate(zip(data, ids, strict=True)):
        if len(views) != len(g) or len(set(g)) != len(g) or any(not 0 <= h < s for h in g):
            raise ValidationError(f"client {i}: view ids {g} do not match its {len(views)} views")
        for h, X in zip(g, views, strict=True):
            if X.shape[1] != model.dims[h]:
                raise ValidationError(
                    f"client {i}: view {h} has {X.shape[1]} features, expected {model.dims[h]}"
                )
    rng = _generator(random_state)

    # setup: pooled ranges, candidates
    holders: list[list[np.ndarray]] = [[] for _ in range(s)]
    for views, g in zip(data, ids, strict=True):
        for h, X in zip(g, views, strict=True):
            holders[h].append(X)
    if any(not hs for hs in holders):
        missing = [k for k in range(s) if not holders[k]]
        raise ValidationError(f"no client holds view(s) {missing}")
    refs = [merge_kernel_references([kernel_reference(X) for X in hs]) for hs in holders]
    scales = None
    if model.bandwidth is not None:  # pooled variances, in the space the clients work in
        scales = view_scales(model, refs, range(s), minmax=scaling == "minmax")
    space = _Space(refs if scaling == "minmax" else None, model.center_views)
    scaled = [space.scale(views, g) for views, g in zip(data, ids, strict=True)]
    centers: list[np.ndarray] | None = None
    if init in ("kmeans", "kmeans-best"):
        cands = [
            local_candidates(views, model.n_clusters, rng, method=init)
            for views, g in zip(data, ids, strict=True)
            if len(g) == s
        ]
        if cands:
            order = [np.argsort(g) for g in ids if len(g) == s]
            per_view = [
                np.vstack([c[0][o[k]] for c, o in zip(cands, order, strict=True)]) for k in range(s)
            ]
            weights = np.concatenate([c[1] for c in cands])
            reduced, w = reduce_candidates(per_view, weights, model.n_clusters, rng)
            if w.size == model.n_clusters:
                centers = space.scale(reduced, range(s))
    if centers is None:
        centers = space.from_unit([rng.random((model.n_clusters, d)) for d in model.dims])
    glob = initial_global(model, centers)
    first = {k: np.array(v) for k, v in glob.items()}

    tcs = [
        TensorClient(model, views, g, None if scales is None else [scales[h] for h in g])
        for views, g in zip(scaled, ids, strict=True)
    ]
    history: list[float] = []
    previous_J = float("inf")
    converged = False
    for _ in range(rounds):
        msgs = [tc.step(glob) for tc in tcs]
        total = {k: sum(msg[k] for msg in msgs) for k in msgs[0]}
        with np.errstate(all="ignore"):
            glob, J = aggregate(model, total, glob)
        history.append(J)
        if has_converged(previous_J, J, tol):
            converged = True
            break
        previous_J = J
    mems = [tc.memberships(glob) for tc in tcs]
    return TensorFitResult(
        labels=[u.argmax(axis=1) for u in mems],
        memberships=mems,
        model=glob,
        objective_history=np.asarray(history),
        n_rounds=len(history),
        converged=converged,
        clients=tcs,
        minimum=space.minimum,
        maximum=space.maximum,
        mean=space.mean,
        initial=first,
    )
