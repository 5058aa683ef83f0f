"""A round's time budget: whether each aggregator can collect its quorum in time.

Before a run, each child's answer time is estimated from the scenario alone: its
link's typical latency both ways (the median of the latency model), the model down and
the partial up at the link's bandwidth (under ``network.model: tcp`` with TCP/IP
headers, and at the typical round trip with slow start and the loss-rate cap), the
client's local work at its ``speed_gflops`` and, for a middle-tier node, its own
collection. The work and the message sizes are the algorithm plug-in's
(:attr:`~fedstrata.plugins.spec.AlgorithmPlugin.round_cost`: a lower bound of a
client's costliest round); an algorithm without that declaration gets no estimate.

An aggregator *overruns* when the quorum-th fastest of its children needs longer than
its deadline. Without latency the rest is deterministic in the simulator (work at a
fixed speed, bytes at a fixed bandwidth), so an overrun even at zero latency means
that no round can ever close (:attr:`Overrun.never`): pre-flight refuses the scenario
(:func:`~fedstrata.scenarios.preflight.preflight`). An overrun only at the typical
latency is a warning (:mod:`fedstrata.scenarios.advice`): rounds fail unless the
latencies come out short.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstrata.plugins.spec import CostInput, RoundCost, plugin_for
from fedstrata.scenarios.schema import Scenario
from fedstrata.scenarios.wiring import PreparedData, Wiring, wire_topology

__all__ = ["Hop", "Overrun", "client_hops", "round_overruns", "seconds", "typical_latency"]


def seconds(value: float) -> str:
    """A duration for a message: ``1.23 s`` or ``45.6 ms``."""
    return f"{value:.3g} s" if value >= 0.01 else f"{value * 1e3:.3g} ms"


def typical_latency(spec: Any) -> float:
    """A latency model's median, from a fixed sample (0 when it cannot be built)."""
    from fedstrata.scenarios.build import latency_model

    if spec is None:
        return 0.0
    try:
        model = latency_model(spec)
    except Exception:  # a bad trace is an error reported by preflight, not here
        return 0.0
    return float(np.median(model.sample_many(np.random.default_rng(0), 501)))


@dataclass(frozen=True)
class Hop:
    """The time one child needs to answer its parent: latency, transfer and compute."""

    latency: float
    transfer: float
    compute: float
    below: float = 0.0  # a middle node: its own collection at the typical latency
    below_floor: float = 0.0  # ... and at zero latency
    stall: float = 0.0  # TCP at the typical round trip: slow start, the loss-rate cap

    @property
    def total(self) -> float:
        """The answer time at the typical latency."""
        return self.latency + self.transfer + self.stall + self.compute + self.below

    @property
    def floor(self) -> float:
        """The answer time at zero latency: what no round can undercut."""
        return self.transfer + self.compute + self.below_floor

    def parts(self, *, latency: bool = True) -> str:
        """The terms of :attr:`total` (or of :attr:`floor`), for a message."""
        shown = [
            ("latency", self.latency if latency else 0.0),
            ("collection below", self.below if latency else self.below_floor),
            ("transfer", self.transfer),
            ("TCP slow start and loss", self.stall if latency else 0.0),
            ("compute", self.compute),
        ]
        return " + ".join(f"{name} {seconds(v)}" for name, v in shown if v > 0)


@dataclass(frozen=True)
class Overrun:
    """An aggregator whose quorum of children cannot answer within its deadline.

    ``node``/``tier``: the slowest such aggregator of its tier; ``path``: the deadline's
    key; ``hop``: the answer time of the quorum-th fastest child; ``need``: the quorum
    in children; ``never``: it overruns even at zero latency.
    """

    node: str
    tier: str
    path: str
    deadline: float
    hop: Hop
    need: int

    @property
    def never(self) -> bool:
        """Whether no round can ever close in time (the overrun holds at zero latency)."""
        return self.hop.floor > self.deadline


def _transfer(sc: Scenario, link: Any, sizes: Sequence[float], rtt: float) -> tuple[float, float]:
    """Seconds to send messages of ``sizes`` bytes over ``link``, one after the other.

    Returns ``(at zero latency, more at the round trip rtt)``. Under ``network.model:
    tcp`` the first counts TCP/IP headers, the second slow start and the loss-rate cap
    of :class:`~fedstrata.sim.tcp.TcpModel` (no loss delays: they are random, and this
    is a lower bound); under ``message-retry``, bytes at the bandwidth and nothing more.
    """
    from fedstrata.scenarios.build import tcp_model

    bw = None if link.bandwidth_mbps is None else link.bandwidth_mbps * 1e6
    tcp = tcp_model(sc)
    if tcp is None:
        return (0.0 if bw is None else 8 * sum(sizes) / bw), 0.0
    floor = sum(tcp.transfer(int(n), bw, 0.0, 0.0) for n in sizes)
    typical = sum(tcp.transfer(int(n), bw, rtt, link.loss) for n in sizes)
    return floor, max(0.0, typical - floor)


def client_hops(
    sc: Scenario, data: PreparedData, wiring: Wiring, model: Any, cost_of: Any
) -> tuple[dict[str, Hop], RoundCost]:
    """Each client's answer time (by id) under ``cost_of``, and the largest messages."""
    from fedstrata.scenarios.build import protocol_config

    dims = tuple(int(X.shape[1]) for X in data.dataset.views)
    protocol = protocol_config(sc, "preflight")
    link = sc.topology.clients.link
    latency = 2 * typical_latency(link.latency)
    hops: dict[str, Hop] = {}
    largest = RoundCost(0.0, 0.0, 0.0)
    for j, client in enumerate(wiring.clients):
        cost = cost_of(
            CostInput(
                model=model,
                n_samples=len(data.indices[j]),
                held_dims=tuple(dims[v] for v in data.held[j]),
                dims=dims,
                protocol=protocol,
            )
        )
        largest = RoundCost(
            0.0, max(largest.down_bytes, cost.down_bytes), max(largest.up_bytes, cost.up_bytes)
        )
        transfer, stall = _transfer(sc, link, (cost.down_bytes, cost.up_bytes), latency)
        hops[client] = Hop(
            latency=latency,
            transfer=transfer,
            compute=cost.flops / (sc.topology.clients.speed_gflops * 1e9),
            stall=stall,
        )
    return hops, largest


def _deadline_path(sc: Scenario, level: int, tier: str) -> str:
    if level == 0:
        return "protocol.deadline_s"
    for i, spec in enumerate(sc.topology.tiers):
        if spec.name == tier and spec.deadline_s is not None:
            return f"topology.tiers.{i}.deadline_s"
    return "protocol.deadline_s"


def _slowest_needed(answers: Sequence[Hop], quorum: float) -> tuple[Hop, int]:
    ranked = sorted(answers, key=lambda h: (h.total, h.floor))
    need = max(1, math.ceil(quorum * len(ranked) - 1e-9))
    return ranked[need - 1], need


def round_overruns(sc: Scenario, data: PreparedData, model: Any) -> list[Overrun]:
    """The slowest overrunning aggregator of each tier, bottom-up (empty: all fit).

    ``model`` is the built model of the scenario's algorithm (its plug-in's
    ``round_cost`` reads it); an algorithm that declares no cost gives no overruns.
    """
    from fedstrata.scenarios.build import node_timing

    plugin = plugin_for(sc.algorithm.name)
    cost_of = None if plugin is None else plugin.round_cost
    if cost_of is None:
        return []
    wiring = wire_topology(sc)
    timing = node_timing(sc, wiring)
    hop, largest = client_hops(sc, data, wiring, model, cost_of)
    children: dict[str, list[str]] = {}
    for child, parent in wiring.parents.items():
        children.setdefault(parent, []).append(child)
    spec_of = {t.name: t for t in sc.topology.tiers}
    found: list[Overrun] = []
    for level in range(len(wiring.tiers) - 1, -1, -1):  # bottom-up: children first
        name, group = wiring.tiers[level]
        worst: Overrun | None = None
        if level > 0:  # the tier's uplink: one latency model and size for all its nodes
            link = spec_of[name].link
            up_latency = 2 * typical_latency(link.latency)
            sizes = (largest.down_bytes, largest.up_bytes)
            up_transfer, up_stall = _transfer(sc, link, sizes, up_latency)
        for node in group:
            answers = [hop[ch] for ch in children.get(node, ())]
            if not answers:
                continue
            deadline = timing[node][0]
            slowest, need = _slowest_needed(answers, sc.protocol.quorum)
            if slowest.total > deadline and (
                worst is None or slowest.total / deadline > worst.hop.total / worst.deadline
            ):
                path = _deadline_path(sc, level, name)
                worst = Overrun(node, name, path, deadline, slowest, need)
            if level > 0:
                hop[node] = Hop(
                    latency=up_latency,
                    transfer=up_transfer,
                    stall=up_stall,
                    compute=0.0,
                    below=min(slowest.total, deadline),
                    below_floor=min(slowest.floor, deadline),
                )
        if worst is not None:
            found.append(worst)
    return found
