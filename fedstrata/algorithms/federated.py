"""In-process federated fitting, with no network: the reference the simulator reproduces.

Two modes, chosen by the aggregation rule:

``rule="sum"`` (sufficient statistics). Every round each client computes its
additive statistics under the global state; the server sums them and solves for the
new state. Heat-kernel coefficients are measured against the pooled per-feature
min/max/mean (``kernel_scope="global"``; the min and max are revealed to the
server, the only non-sum in the protocol). This is the centralized fit with its sums
split across clients: same labels, same centres up to summation order.

``rule in {"weighted", "mean", "median"}`` (the paper's Algorithm 4). Each client
personalizes the global model (Eq. 78/79), runs ``local_iters`` HK-MVFC iterations
on its own data with local heat-kernel coefficients (Eq. 37/38) and sends its
centres and view weights; the server aggregates with Eq. 74/75, 77 or 76 and stops by
Eq. 86.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedstrata.algorithms._validation import check_views
from fedstrata.algorithms.combine import (
    RULES,
    ParamUpdate,
    aggregate_params,
    has_converged,
    personalize,
)
from fedstrata.algorithms.fit import fit_batched
from fedstrata.algorithms.init import initial_centers
from fedstrata.algorithms.kernels import kernel_reference, merge_kernel_references
from fedstrata.algorithms.multiview import (
    MultiViewModel,
    PreparedViews,
    State,
    Stats,
    auto_fuzzifier,
    combine,
    local_statistics,
    objective,
    prepare_views,
    sum_statistics,
)
from fedstrata.errors import ValidationError

__all__ = ["FederatedResult", "federated_fit", "initial_state", "prepare_clients"]


@dataclass
class FederatedResult:
    """Outcome of :func:`federated_fit`.

    Attributes
    ----------
    state
        Final global centres and view weights.
    labels, memberships
        Per client, under the final global state.
    rounds
        Communication rounds run.
    converged
        Whether the stopping rule fired before the round limit.
    objective_history
        Global objective per round (sum mode: J(U_t, A_{t-1}, V_t); paper mode: the
        sum of the clients' local objectives).
    client_states
        Paper mode: each client's personalized local model after the last round.
    """

    state: State
    labels: list[np.ndarray]
    memberships: list[np.ndarray]
    rounds: int
    converged: bool
    objective_history: list[float] = field(default_factory=list)
    client_states: list[State] = field(default_factory=list)


def prepare_clients(
    client_views: Sequence[Sequence[np.ndarray]], model: MultiViewModel, *, kernel_scope: str
) -> list[PreparedViews]:
    """Validate every client's views and compute their heat-kernel coefficients.

    ``kernel_scope="local"`` measures δ against each client's own data (Eq. 37/38),
    ``"global"`` against the pooled statistics of all clients: the merged
    :class:`~fedstrata.algorithms.kernels.KernelReference` (min, max, sum, count and,
    for ``model.bandwidth``, the sum of squared deviations ``sq_dev``).
    """
    if not client_views:
        raise ValidationError("client_views must hold at least one client")
    data = [check_views(v, name=f"client_views[{i}]") for i, v in enumerate(client_views)]
    dims = [X.shape[1] for X in data[0]]
    for i, views in enumerate(data):
        if [X.shape[1] for X in views] != dims:
            raise ValidationError(
                f"client {i} has view dims {[X.shape[1] for X in views]}, expected {dims}"
            )
    if kernel_scope == "local":
        return [prepare_views(v, model, view_dims=dims) for v in data]
    if kernel_scope != "global":
        raise ValidationError(f"kernel_scope must be 'local' or 'global', got {kernel_scope!r}")
    refs = [
        merge_kernel_references([kernel_reference(v[h]) for v in data]) for h in range(len(dims))
    ]
    return [prepare_views(v, model, references=refs, view_dims=dims) for v in data]


def initial_state(
    pvs: Sequence[PreparedViews], n_clusters: int, rng: np.random.Generator, method: str = "kmeans"
) -> State:
    """One global initial state, seeded on the largest client's data.

    The server never sees pooled data (Algorithm 3 with one broadcast A_global(0)).
    """
    big = max(pvs, key=lambda p: p.n_samples)
    if big.n_samples < n_clusters:
        raise ValidationError(f"the largest client has fewer samples than n_clusters={n_clusters}")
    centers = initial_centers(list(big.views), n_clusters, n_init=1, method=method, rng=rng)
    H = big.n_views
    return State(tuple(a[0] for a in centers), np.full(H, 1.0 / H))


def _memberships(stats: Stats) -> np.ndarray:
    """The memberships of the first batch, which :func:`local_statistics` always returns."""
    if stats.memberships is None:  # only sum_statistics drops them
        raise ValidationError("local statistics without memberships")
    return stats.memberships[0]


def federated_fit(
    client_views: Sequence[Sequence[np.ndarray]],
    *,
    n_clusters: int,
    rule: str = "sum",
    rounds: int = 50,
    local_iters: int = 1,
    m: float | str = 2.0,
    alpha: float = 5.0,
    kernel: str = "type1",
    center_update: str = "paper",
    gamma: float = 0.7,
    rho: float = 0.7,
    tol: float = 1e-6,
    init: State | None = None,
    kernel_scope: str | None = None,
    random_state: Any = None,
    bandwidth: float | None = None,
    standardize: bool = True,
    view_balance: str = "dimension",
    relative_tol: bool = False,
    init_method: str = "kmeans",
) -> FederatedResult:
    """Fit FedHK-MVFC over in-memory clients.

    Parameters
    ----------
    client_views
        One list of (n_ℓ, d_h) arrays per client.
    n_clusters, m, alpha, kernel, center_update, bandwidth, standardize, view_balance
        As :class:`~fedstrata.algorithms.HKMVFC`; the defaults here are those of
        ``preset="paper"`` (the settings the FedHK-MVFC paper prints for its federated
        two-client analysis: m = 2, α = 5, Type 1, the Eq. 16 centre update). ``m="auto"``
        resolves by :func:`~fedstrata.algorithms.multiview.auto_fuzzifier` from the
        pooled sample count (the sum of the clients' counts).
    rule
        ``"sum"`` (exact sufficient statistics), ``"weighted"`` (Eq. 74/75),
        ``"mean"`` (Eq. 77) or ``"median"`` (Eq. 76).
    rounds
        Maximum communication rounds T.
    local_iters
        Local iterations E per round (must be 1 for ``"sum"``).
    gamma, rho
        Personalization weights of Eq. 78/79 (paper mode).
    tol
        Sum mode: |ΔJ| < tol as Algorithm 1; paper mode: Eq. 86.
    init
        Global initial state (unbatched); by default k-means on the largest client.
    kernel_scope
        ``"global"`` (default for sum) or ``"local"`` (default for the paper rules).
    random_state
        Seed or generator for the initialization.
    relative_tol
        Sum mode: stop at |ΔJ| < tol·|J| (as ``HKMVFC(relative_tol=True)``).
    init_method
        Initializer of the largest client when ``init`` is not given (see
        :func:`~fedstrata.algorithms.init.initial_centers`).
    """
    if rule not in RULES:
        raise ValidationError(f"unknown rule {rule!r}; expected one of {RULES}")
    if rule == "sum" and local_iters != 1:
        raise ValidationError("rule='sum' aggregates every iteration: local_iters must be 1")
    if rounds < 1 or local_iters < 1:
        raise ValidationError("rounds and local_iters must be >= 1")
    if m == "auto" and client_views:
        n_total = sum(int(np.shape(v[0])[0]) for v in client_views)
        m = auto_fuzzifier(n_total, [int(np.shape(X)[1]) for X in client_views[0]], n_clusters)
    model = MultiViewModel(
        n_clusters=n_clusters,
        m=float(m),
        alpha=float(alpha),
        kernel=kernel,
        center_update=center_update,
        bandwidth=None if bandwidth is None else float(bandwidth),
        standardize=standardize,
        view_balance=view_balance,
    )
    scope = kernel_scope or ("global" if rule == "sum" else "local")
    pvs = prepare_clients(client_views, model, kernel_scope=scope)
    from sklearn.utils import check_random_state  # lazily: sklearn is slow to import

    rng = np.random.default_rng(check_random_state(random_state).randint(2**31 - 1))
    state = init if init is not None else initial_state(pvs, n_clusters, rng, init_method)
    state = state.batched()
    history: list[float] = []
    converged = False
    locals_: list[State] = [state] * len(pvs)
    prev = np.inf
    t = 0
    for t in range(1, rounds + 1):  # noqa: B007 - t is reported after the loop
        if rule == "sum":
            stats = [local_statistics(pv, state, model) for pv in pvs]
            new = combine(stats, state, model)
            J = float(objective(sum_statistics(stats), new.view_weights, model.alpha)[0])
            converged = abs(prev - J) < (tol * abs(J) if relative_tol else tol)
            prev = J
        else:
            updates = []
            for i, pv in enumerate(pvs):
                start = personalize(state, locals_[i], gamma, rho)
                res = fit_batched(pv, start, model, max_iter=local_iters, tol=tol, warn=False)
                locals_[i] = res.state
                mine = local_statistics(pv, res.state, model)
                updates.append(
                    ParamUpdate(
                        centers=tuple(a[0] for a in res.state.centers),
                        view_weights=res.state.view_weights[0],
                        n_samples=pv.n_samples,
                        cluster_mass=mine.cluster_mass[0],
                        objective=float(res.objective[0]),
                    )
                )
            new = aggregate_params(rule, updates).batched()
            J = float(sum(u.objective or 0.0 for u in updates))
            converged = has_converged(state, new, tol)
        history.append(J)
        state = new
        if converged:
            break
    final = [_memberships(local_statistics(pv, state, model)) for pv in pvs]
    return FederatedResult(
        state=state.take(0),
        labels=[U.argmax(axis=1) for U in final],
        memberships=[np.array(U) for U in final],
        rounds=t,
        converged=converged,
        objective_history=history,
        client_states=[s.take(0) for s in locals_] if rule != "sum" else [],
    )
