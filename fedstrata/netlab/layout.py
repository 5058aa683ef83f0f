"""Where each node of a scenario lives in a lab, and what joins it to its parent.

The layout mirrors the simulator: every node gets a namespace of its own (a device);
an aggregator hosts the broker of its group in its namespace (the simulator's aggregator
sits with its broker: no link between them); every other node reaches its parent's
namespace over its own uplink, a veth pair shaped as the scenario's link of its tier
(``topology.tiers[].link`` for a middle-tier node, ``topology.clients.link`` for a
client). A middle aggregator's broker is bridged to its parent's broker over that
aggregator's uplink, so what it exchanges with its parent crosses its link exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedstrata.errors import ValidationError
from fedstrata.scenarios.schema import LinkSpec, Scenario
from fedstrata.scenarios.wiring import wire_topology

__all__ = ["Layout", "NodePlace", "plan_layout"]


@dataclass(frozen=True, slots=True)
class NodePlace:
    """One node: its parent (None for the root), whether it hosts a broker, its uplink."""

    node: str
    tier: str
    parent: str | None
    hosts_broker: bool
    mbps: float | None
    loss: float


@dataclass(frozen=True, slots=True)
class Layout:
    """Every node of a scenario, parents before children (the root first)."""

    root: str
    places: tuple[NodePlace, ...]

    def place(self, node: str) -> NodePlace:
        """The place of ``node``."""
        for p in self.places:
            if p.node == node:
                return p
        raise KeyError(node)

    @property
    def brokers(self) -> list[str]:
        """The nodes that host a broker: the root, then every middle aggregator."""
        return [p.node for p in self.places if p.hosts_broker]


def _uplink(link: LinkSpec, node: str) -> tuple[float | None, float]:
    """Bandwidth and loss of ``link``; a link with latency cannot be built (no netem)."""
    lat = link.latency
    if (lat.dist != "constant" or (lat.value or 0.0) > 0.0) or link.jitter is not None:
        raise ValidationError(
            f"{node}: the lab cannot add latency or jitter (this kernel has no netem); "
            "give the scenario's links latency 0"
        )
    return link.bandwidth_mbps, link.loss


def plan_layout(sc: Scenario) -> Layout:
    """The layout of ``sc``: one namespace per node, one shaped uplink per non-root node."""
    wiring = wire_topology(sc)
    root = sc.topology.cloud_id
    tier_links = {t.name: t.link for t in sc.topology.tiers}
    places = [NodePlace(root, "cloud", None, True, None, 0.0)]
    for tier, ids in wiring.tiers[1:]:
        for node in ids:
            mbps, loss = _uplink(tier_links[tier], node)
            places.append(NodePlace(node, tier, wiring.parents[node], True, mbps, loss))
    mbps, loss = _uplink(sc.topology.clients.link, "clients")
    places += [NodePlace(c, "edge", wiring.parents[c], False, mbps, loss) for c in wiring.clients]
    return Layout(root, tuple(places))
