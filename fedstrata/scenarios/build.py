"""Turn a validated :class:`Scenario` into data, sans-IO nodes and a wired-up simulation."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

import fedstrata.registry  # noqa: F401  (the composition root: registers plug-ins and kinds)
from fedstrata.algorithms.kernels import kernel_reference, merge_kernel_references
from fedstrata.algorithms.multiview import MultiViewModel
from fedstrata.errors import ScenarioError, ValidationError
from fedstrata.mqtt import group_prefix
from fedstrata.nodes.algorithm import Algorithm, algorithm_for
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.nodes.sealing import PLAIN, RunKeys, Seal
from fedstrata.plugins.messages import Shape
from fedstrata.plugins.spec import BuildInput, plugin_for
from fedstrata.privacy.sample_dp import SETUP_RELEASES, PrivateConfig
from fedstrata.scenarios.datasets import MultiViewDataset
from fedstrata.scenarios.node_builder import NodeBuilder, node_timing  # noqa: F401 (re-exported)
from fedstrata.scenarios.privacy_schema import DPBlockClips
from fedstrata.scenarios.restart import restart_factory
from fedstrata.scenarios.schema import (
    LatencySpec,
    LinkSpec,
    Scenario,
    clip,
)
from fedstrata.scenarios.wiring import prepare_data, split_samples, wire_topology
from fedstrata.sim.kernel import Connection, Simulation
from fedstrata.sim.links import Constant, Empirical, LatencyModel, Link, LogNormal, Normal, Pareto
from fedstrata.sim.tcp import TcpModel

__all__ = [
    "Federation",
    "build_federation",
    "latency_model",
    "link_of",
    "model_of",
    "protocol_config",
    "split_data",
    "tcp_model",
]


@dataclass
class Federation:
    """Everything a run needs: data, who holds what, the nodes and the simulation."""

    scenario: Scenario
    dataset: MultiViewDataset
    client_indices: dict[str, np.ndarray]
    client_views: dict[str, tuple[int, ...]]
    model: MultiViewModel
    protocol: ProtocolConfig
    shape: Shape
    sim: Simulation
    parents: dict[str, str] = field(default_factory=dict)
    tiers: dict[str, str] = field(default_factory=dict)
    #: Set by :func:`fedstrata.scenarios.run.simulate`: the final global model (None if
    #: the run never got one) and every sample's label under it.
    final_state: Any = None
    final_labels: np.ndarray | None = None
    #: Per-client metrics of the global and personalized models (personalization on).
    client_rows: list[dict[str, Any]] = field(default_factory=list)

    def data_notes(self) -> list[str]:
        """The plug-in's warnings about its model on the pooled data (``data_notes``)."""
        plugin = plugin_for(self.scenario.algorithm.name)
        if plugin is None or plugin.data_notes is None:
            return []
        return plugin.data_notes(self.model, self.dataset.views)

    @cached_property
    def algorithm(self) -> Algorithm:
        """The algorithm plug-in the nodes run (for observers: records, final labels)."""
        return algorithm_for(self.model, self.protocol, self.shape)

    def client_observers(self) -> Iterator[tuple[str, Callable[[Any], np.ndarray]]]:
        """Per client, its labels under a global state, computed as the client does.

        The references are those the clients are configured with: the pooled ones
        (global scope; the tensor family always) or each client's own (local scope).
        Pairs (client id, observer) are made one at a time: an observer holds the
        client's prepared data, and a dict of them all held every client's at once at
        the end of a run (10,000 clients: 15 MiB of the peak).
        """
        X = self.dataset.views
        held = self.client_views
        indices = self.client_indices
        H = self.shape.n_views
        refs: list[Any] = [None] * H
        if self.protocol.kernel_scope == "global" or not isinstance(self.model, MultiViewModel):
            refs = [
                merge_kernel_references(
                    [kernel_reference(X[h][indices[c]]) for c in indices if h in held[c]]
                )
                for h in range(H)
            ]
        for c, idx in indices.items():
            views = [X[g][idx] for g in held[c]]
            own = None if refs[0] is None else [refs[g] for g in held[c]]
            yield c, self.algorithm.observer(views, held[c], own)


def latency_model(spec: LatencySpec) -> LatencyModel:
    """The simulator's latency model for a schema entry."""
    if spec.dist == "constant":
        return Constant(float(spec.value or 0.0))
    if spec.dist == "normal":
        return Normal(float(spec.mean or 0.0), float(spec.std or 0.0))
    if spec.dist == "lognormal":
        return LogNormal(float(spec.median or 0.0), float(spec.sigma or 0.0))
    if spec.dist == "pareto":
        return Pareto(float(spec.scale or 0.0), float(spec.shape or 0.0))
    try:
        return Empirical.from_csv(str(spec.file))
    except (OSError, ValueError) as exc:  # the loader checks traces; this is for other callers
        raise ScenarioError(
            f"cannot read latency trace {clip(repr(spec.file))}: {clip(str(exc), 200)}"
        ) from None


def tcp_model(sc: Scenario) -> TcpModel | None:
    """The TCP parameters of ``sc`` (``network``), or ``None`` under ``model: message-retry``."""
    net = sc.network
    if net.model != "tcp":
        return None
    given = {
        "mss": net.mss_bytes,
        "initial_window": net.initial_window,
        "rto_min": net.rto_min_s,
    }
    return TcpModel(**{k: v for k, v in given.items() if v is not None})


def link_of(spec: LinkSpec) -> Link:
    """The simulator's link for a schema entry."""
    return Link(
        latency=latency_model(spec.latency),
        bandwidth_bps=None if spec.bandwidth_mbps is None else spec.bandwidth_mbps * 1e6,
        loss=spec.loss,
        jitter=None if spec.jitter is None else latency_model(spec.jitter),
    )


def model_of(sc: Scenario, dims: Sequence[int] | None = None, n_samples: int | None = None) -> Any:
    """The clustering model of the scenario's algorithm section, built by its plug-in.

    Some models depend on the views' feature counts ``dims`` (the tensor family's ranks,
    the deep family's input sizes; the plug-in's ``needs_dims``) or, like hk-mvfc's
    ``preset: real-data`` without ``m``, on the federation's sample count ``n_samples``;
    without them the plug-in raises a :class:`~fedstrata.errors.ScenarioError` saying
    so. See :class:`fedstrata.plugins.spec.AlgorithmPlugin`.
    """
    a = sc.algorithm
    plugin = plugin_for(a.name)
    if plugin is None:
        raise ScenarioError(f"unknown algorithm {a.name!r}", path="algorithm.name")
    shape = None if dims is None else tuple(int(d) for d in dims)
    return plugin.build(BuildInput(a, shape, n_samples, sc.seed, sc))


def split_data(sc: Scenario, ds: MultiViewDataset) -> list[np.ndarray]:
    """Sample indices of each client, by the scenario's partition.

    See :func:`fedstrata.scenarios.wiring.split_samples`: every client gets at least
    one sample, or a :class:`~fedstrata.errors.ScenarioError` names the field to change.
    """
    return split_samples(sc, ds)


def protocol_config(sc: Scenario, run: str) -> ProtocolConfig:
    """The nodes' protocol settings for ``sc``, with run id ``run`` (the topics' 2nd level).

    The one mapping from the scenario's ``protocol`` section to
    :class:`~fedstrata.nodes.config.ProtocolConfig`, used by the simulator, MQTT runs
    and device nodes alike.
    """
    pr = sc.protocol
    config = ProtocolConfig(
        run=run,
        rule=pr.rule,
        rounds=pr.rounds,
        local_iters=pr.local_iters,
        tol=pr.tol,
        gamma=pr.gamma,
        rho=pr.rho,
        kernel_scope=pr.kernel_scope or ("global" if pr.rule == "sum" else "local"),
        qos=pr.qos,
        patience=pr.patience,
        tol_mode=pr.tol_mode,
        plateau=pr.plateau,
        plateau_tol=pr.plateau_tol,
        compression=pr.compression.scheme,
        compression_bits=pr.compression.bits or 8,
        kind=pr.kind,
        settings=pr.settings,
        stragglers=pr.stragglers,
        sample=pr.sample,
        over_select=pr.over_select,
        dp_clip=dp_clip(sc),
        dp_block_clips=()
        if sc.privacy.dp is None or not isinstance(sc.privacy.dp.clip, DPBlockClips)
        else sc.privacy.dp.clip.bounds(),
        dp_noise=dp_noise_multiplier(sc),
        dp_schedule=dp_noise_schedule(sc),
        secure=sc.privacy.secure_aggregation,
        secure_threshold=sc.privacy.threshold,
        secure_neighbours=sc.privacy.neighbours,
        secure_scale_bits=sc.privacy.precision_bits,
        private=private_config(sc),
        personal_iters=None if pr.personalization is None else pr.personalization.local_iters,
        personal=()
        if pr.personalization is None
        else tuple(
            (cid, pr.gamma if m.gamma is None else m.gamma, pr.rho if m.rho is None else m.rho)
            for cid, m in sorted(pr.personalization.clients.items())
        ),
    )
    shares = dp_shares(sc, config)
    if shares == 1:
        return config
    private = config.private
    if private is not None:
        private = dataclasses.replace(private, shares=shares)
    return dataclasses.replace(config, dp_shares=shares, private=private)


def private_config(sc: Scenario) -> PrivateConfig | None:
    """The private pipeline of ``sc``: on with secure aggregation or DP, else None."""
    dp = sc.privacy.dp
    if dp is None and sc.privacy.secure_aggregation == "none":
        return None
    if dp is None:
        return PrivateConfig(seed=sc.seed)
    return PrivateConfig(
        bounds=public_bounds(dp.bounds),
        noise=dp_noise_multiplier(sc),
        radius=dp.radius,
        cells=dp.cells,
        sample_rounds=dp.unit == "sample",
        seed=sc.seed,
        releases=dp_releases(sc),
    )


def public_bounds(bounds: Any) -> tuple[tuple[np.ndarray, np.ndarray], ...] | None:
    """``privacy.dp.bounds`` as per-view (lo, hi) arrays (scalars for a whole view)."""
    if bounds is None:
        return None
    out = []
    for b in bounds:
        if isinstance(b, list):
            out.append((np.float64(b[0]) * np.ones(()), np.float64(b[1]) * np.ones(())))
        else:
            out.append((np.asarray(b.lo, dtype=np.float64), np.asarray(b.hi, dtype=np.float64)))
    return tuple(out)


def dp_releases(sc: Scenario) -> int:
    """Noisy releases a DP run plans per client: the two private setup stages and the rounds."""
    return SETUP_RELEASES + sc.protocol.rounds


def secure_groups(sc: Scenario, wiring: Any = None) -> dict[str, tuple[int, bool]]:
    """Each aggregator's session size (children asked per round) and whether they are clients.

    The roster of a secure session is the children a round asks: all of them, or the
    sampled ``ceil(sample * n)`` where clients are sampled.
    """
    wiring = wire_topology(sc) if wiring is None else wiring
    clients = set(wiring.clients)
    out = {}
    for node, kids in wiring.children.items():
        below = bool(kids) and kids[0] in clients
        n = len(kids)
        if below and sc.protocol.sample < 1.0:
            n = max(1, math.ceil(sc.protocol.sample * n - 1e-9))
        out[node] = (n, below)
    return out


def dp_shares(sc: Scenario, protocol: ProtocolConfig, wiring: Any = None) -> int:
    """Distributed DP under secure aggregation: the smallest threshold of the client groups.

    Each client then adds noise of variance σ²/t; any sum an aggregator can unmask
    holds at least t inputs and so carries at least σ². 1 without secure aggregation.
    """
    if protocol.secure == "none" or sc.privacy.dp is None:
        return 1
    from fedstrata.nodes.secure import threshold_count

    groups = secure_groups(sc, wiring)
    return min(threshold_count(protocol, n) for n, below in groups.values() if below)


def dp_clip(sc: Scenario) -> float | None:
    """The L2 bound of a client's whole statistics vector (per-block bounds combined)."""
    dp = sc.privacy.dp
    if dp is None:
        return None
    if dp.clip is None:  # sample level: no client-level clip
        return None
    if isinstance(dp.clip, float):
        return dp.clip
    return math.sqrt(sum(c * c for c in dp.clip.bounds()))


def dp_budgets(sc: Scenario) -> tuple[float, ...]:
    """The per-round budgets ε_t of an Eq. 93 schedule (empty for ``constant``)."""
    dp = sc.privacy.dp
    if dp is None or dp.schedule == "constant":
        return ()
    from fedstrata.privacy.dp import adaptive_budget

    eps = adaptive_budget(dp.epsilon, sc.protocol.rounds)
    if dp.schedule == "eq93-normalised":  # the whole run, setup included, spends ε
        eps = eps * whole_run_scale(sc, eps)
    return tuple(float(e) for e in eps)


def planned_epsilon(sc: Scenario, budgets: Sequence[float] | None = None) -> float:
    """The ε a DP run spends when it makes the releases it plans (:func:`dp_releases`).

    The private setup's two releases at the run's constant multiplier, then the
    rounds: at that multiplier, or by Eq. 89 at each ε_t of a schedule (``budgets``,
    by default :func:`dp_budgets`), composed by one RDP accountant.
    """
    from fedstrata.privacy.dp import Accountant, noise_multipliers

    dp = sc.privacy.dp
    assert dp is not None
    budgets = dp_budgets(sc) if budgets is None else budgets
    acc = Accountant(dp.delta)
    z = dp_noise_multiplier(sc)
    acc.spend(z, count=SETUP_RELEASES)
    if budgets:
        for zt in noise_multipliers(list(budgets), dp.delta):
            acc.spend(float(zt))
    else:
        acc.spend(z, count=sc.protocol.rounds)
    return acc.epsilon()


def whole_run_scale(sc: Scenario, budgets: np.ndarray) -> float:
    """The factor on an Eq. 93 schedule that makes the whole run spend exactly its ε.

    ``eq93-normalised`` means the run's ε, and the private setup's two releases come
    out of it: bisection on the factor (a larger factor, less noise, more ε).
    """
    dp = sc.privacy.dp
    assert dp is not None
    lo, hi = 1e-6, 1.0
    while planned_epsilon(sc, list(budgets * hi)) < dp.epsilon:
        lo, hi = hi, hi * 2.0
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if planned_epsilon(sc, list(budgets * mid)) > dp.epsilon:
            hi = mid
        else:
            lo = mid
        if hi / lo < 1.0 + 1e-9:
            break
    return lo


def dp_noise_schedule(sc: Scenario) -> tuple[float, ...]:
    """Per-round noise multipliers z_t (Eq. 89 with the ε_t of :func:`dp_budgets`)."""
    budgets = dp_budgets(sc)
    if not budgets:
        return ()
    from fedstrata.privacy.dp import noise_multipliers

    assert sc.privacy.dp is not None
    return tuple(float(z) for z in noise_multipliers(budgets, sc.privacy.dp.delta))


def dp_noise_multiplier(sc: Scenario) -> float:
    """The noise multiplier z = σ/clip that keeps the scenario's rounds within its ε.

    Every release of the run (the private setup's two stages and ``protocol.rounds``
    rounds, :func:`dp_releases`) composed under the RDP accountant within ε (0
    without DP): one budget for the whole pipeline.
    """
    dp = sc.privacy.dp
    if dp is None:
        return 0.0
    from fedstrata.privacy.dp import sigma_for

    return float(sigma_for(dp.epsilon, dp.delta, dp_releases(sc)))


def build_federation(
    sc: Scenario,
    *,
    seed: int | None = None,
    record_events: bool = False,
    keys: RunKeys | None = None,
    batch: bool = True,
    in_process: bool = False,
) -> Federation:
    """Build the data split, the nodes and the simulation for ``sc``.

    ``seed`` overrides the scenario's seed (data, partition, links and faults).
    ``keys`` signs every message with them (see :func:`seals_for`). ``batch``: the
    children of each aggregator compute their steps in one batched call (the same
    bits; see :class:`~fedstrata.nodes.cohort.Cohort`); False: each on its own.
    ``in_process``: the nodes run in this process's simulator, and unsigned messages
    travel unpacked (:class:`~fedstrata.wire.Unpacked`: the same sizes and decoded
    messages); never for nodes that go on a real broker.
    """
    if seed is not None:
        sc = sc.model_copy(update={"seed": seed})
    data = prepare_data(sc)  # dataset, split and views: the same code as the pre-flight check
    ds = data.dataset
    dims = tuple(X.shape[1] for X in ds.views)
    model = model_of(sc, dims, ds.n_samples)
    protocol = protocol_config(
        sc, sc.name.replace("/", "_").replace("+", "_").replace("#", "_") or "run"
    )
    indices, held = data.indices, data.held
    wiring = wire_topology(sc)  # raises when an aggregator would have no children
    tiers, tier_of, parents, clients = wiring.tiers, wiring.tier_of, wiring.parents, wiring.clients
    seals = seals_for(
        sc, [n for _, group in tiers for n in group] + list(clients), keys, in_process=in_process
    )
    nodes = NodeBuilder.of(sc, model, dims, protocol, wiring, batch=batch)
    shape = nodes.shape

    sim = Simulation(
        sc.seed, record_events=record_events, links=sc.network.model, tcp=tcp_model(sc)
    )
    spec_of = {t.name: t for t in sc.topology.tiers}
    for name, group in tiers:
        mbps = sc.topology.cloud_access_mbps if name == "cloud" else spec_of[name].access_mbps
        for node in group:
            sim.add_broker(
                node,
                [group_prefix(protocol.run, name, node)],
                access_bps=None if mbps is None else mbps * 1e6,
            )
    for name, group in tiers:
        spec = spec_of.get(name)
        for node in group:
            parent = parents.get(node)
            conns = [Connection(node, None)]
            if parent is not None:
                assert spec is not None
                conns.append(Connection(parent, link_of(spec.link)))
            sim.add_node(
                nodes.aggregator(node, seals[node]),
                connections=conns,
                tier=name,
                speed_flops=(spec.speed_gflops if spec else 100.0) * 1e9,
            )
    client_link = sc.topology.clients.link
    client_indices = {}
    for j, (c, idx) in enumerate(zip(clients, indices, strict=True)):
        client_indices[c] = idx
        sim.add_node(
            nodes.client(c, [ds.views[g][idx] for g in held[j]], held[j], seals[c]),
            connections=[Connection(parents[c], link_of(client_link))],
            tier="edge",
            speed_flops=sc.topology.clients.speed_gflops * 1e9,
        )
    fed = Federation(
        sc,
        ds,
        client_indices,
        dict(zip(clients, map(tuple, held), strict=True)),
        model,
        protocol,
        shape,
        sim,
        parents,
        {**tier_of, **dict.fromkeys(clients, "edge")},
    )
    _apply_faults(fed)
    return fed


def _apply_faults(fed: Federation) -> None:
    sc, sim = fed.scenario, fed.sim
    f = sc.faults
    clients = list(fed.client_indices)
    if f.dropout > 0:
        sim.faults.round_dropout(clients, f.dropout)
    for p in f.partitions:
        sim.faults.partition(p.nodes, p.start, p.end)
    for d in f.degradations:
        sim.faults.degrade(
            d.nodes,
            d.start,
            d.end,
            latency_factor=d.latency_factor,
            extra_latency=d.extra_latency_s,
            bandwidth_factor=d.bandwidth_factor,
            loss=d.loss,
        )
    for c in f.crashes:
        factory = _restart_factory(fed, c.node) if c.restart_after is not None else None
        sim.faults.crash(c.node, c.at, restart_after=c.restart_after, factory=factory)
    if f.availability is not None:
        a = f.availability
        if a.kind == "markov":
            for c in clients:
                sim.faults.availability_markov(c, a.p_off, a.p_on, a.step_s)
        else:
            raise ScenarioError(
                "availability traces from files are not wired yet", path="faults.availability"
            )


def _restart_factory(fed: Federation, node_id: str) -> Any:
    """A fresh node object with the same configuration (its memory is lost in the crash)."""
    return restart_factory(fed.sim.node(node_id))


def seals_for(
    sc: Scenario, nodes: Sequence[str], keys: RunKeys | None = None, *, in_process: bool = False
) -> dict[str, Seal]:
    """Each node's :class:`~fedstrata.nodes.sealing.Seal`.

    With ``keys`` (a run over a real broker: per-run random keys or key files), every
    node signs with them, whatever ``privacy.sign`` says. Without, as the simulator
    does: with ``privacy.sign``, keys derived from the scenario's seed (reproducible,
    and only as secret as the seed: :attr:`RunKeys.DERIVED`), else plain, and with
    ``in_process`` unpacked (see :class:`~fedstrata.nodes.sealing.Seal`).
    """
    if keys is None:
        if not sc.privacy.sign:
            plain = Seal(in_process=True) if in_process else PLAIN
            return {n: plain for n in nodes}
        keys = RunKeys.derived(sc.seed, nodes)
    missing = [n for n in nodes if n not in keys.seeds]
    if missing:
        raise ValidationError(f"no signing key for {', '.join(missing[:5])}")
    return keys.seals(nodes)
