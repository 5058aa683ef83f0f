"""Build the nodes of a scenario's federation: the one place a node gets its configuration.

The simulator (:func:`~fedstrata.scenarios.build.build_federation`), the MQTT
runner and its worker processes (which build the same federation) and a device
running one node (:func:`fedstrata.device.build.build_node`) all make their nodes
here, so a node is configured alike on every transport: the clustering model, the
protocol settings, its parent and children, an aggregator's deadline, period and
quorum, and a client's random seed (:func:`client_seed`).

A :class:`NodeBuilder` holds what every node of one federation shares; it reads no
dataset: a client's data are given (the simulator's split, or what a device holds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from fedstrata.nodes.aggregator import AggregatorNode
from fedstrata.nodes.algorithm import Algorithm, algorithm_for
from fedstrata.nodes.client import ClientNode
from fedstrata.nodes.cohort import Cohort
from fedstrata.nodes.config import Address, ProtocolConfig
from fedstrata.nodes.decoding import SharedDecoder
from fedstrata.nodes.sealing import Seal
from fedstrata.plugins.messages import Shape
from fedstrata.scenarios.schema import Scenario
from fedstrata.scenarios.wiring import Wiring, wire_topology

__all__ = ["NodeBuilder", "client_seed", "node_timing"]


def node_timing(sc: Scenario, wiring: Any = None) -> dict[str, tuple[float, int]]:
    """Each aggregator's collection deadline (seconds) and period, by node id.

    The root collects for ``protocol.deadline_s``; a middle-tier node for its tier's
    ``deadline_s`` or, when absent, 0.8 of its parent's deadline divided by its period
    (it must close ``period`` times before its parent does once). A node's period is
    its tier's ``periods`` entry, else the tier's ``period``; the root's is 1.
    """
    wiring = wire_topology(sc) if wiring is None else wiring
    spec_of = {t.name: t for t in sc.topology.tiers}
    timing: dict[str, tuple[float, int]] = {}
    for level, (name, group) in enumerate(wiring.tiers):
        spec = spec_of.get(name)
        for node in group:
            if level == 0 or spec is None:
                timing[node] = (sc.protocol.deadline_s, 1)
                continue
            period = spec.periods.get(node, spec.period)
            parent_deadline = timing[wiring.parents[node]][0]
            deadline = (
                spec.deadline_s if spec.deadline_s is not None else parent_deadline * 0.8 / period
            )
            timing[node] = (deadline, period)
    return timing


def client_seed(seed: int, j: int) -> int:
    """The random seed of client ``client-j`` of a scenario with seed ``seed``."""
    return int(np.random.default_rng([seed, 2, j]).integers(2**31))


@dataclass(frozen=True, eq=False)
class NodeBuilder:
    """What every node of one federation shares, and how each node is made from it.

    Parameters
    ----------
    scenario
        A validated scenario (its seed draws the clients' seeds).
    model
        The clustering model (:func:`~fedstrata.scenarios.build.model_of`).
    dims
        The feature count of every view of the federation.
    protocol
        The protocol settings, with the run id as their ``run``.
    wiring
        Who reports to whom (:func:`~fedstrata.scenarios.wiring.wire_topology`).
    batch
        Give the children of each parent one :class:`~fedstrata.nodes.cohort.Cohort`
        (their steps computed in one batched call, with the same bits); False: each
        client computes its own (the reference path).
    """

    scenario: Scenario
    model: Any
    dims: tuple[int, ...]
    protocol: ProtocolConfig
    wiring: Wiring
    batch: bool = True

    @classmethod
    def of(
        cls,
        sc: Scenario,
        model: Any,
        dims: Sequence[int],
        protocol: ProtocolConfig,
        wiring: Wiring | None = None,
        *,
        batch: bool = True,
    ) -> NodeBuilder:
        """The builder of ``sc``'s nodes (``wiring`` computed when not given).

        Raises
        ------
        ScenarioError
            If an aggregator would have no children.

        """
        wiring = wire_topology(sc) if wiring is None else wiring
        return cls(sc, model, tuple(int(d) for d in dims), protocol, wiring, batch)

    @cached_property
    def shape(self) -> Shape:
        """The message shape every node checks sizes against."""
        return Shape(self.model.n_clusters, self.dims)

    @cached_property
    def client_algorithm(self) -> Algorithm:
        """The plug-in instance the federation's clients share (with what it caches)."""
        return algorithm_for(self.model, self.protocol, self.shape)

    @cached_property
    def decoder(self) -> SharedDecoder:
        """Decodes the model messages once for all the federation's clients."""
        return SharedDecoder()

    @cached_property
    def _cohorts(self) -> dict[str, Cohort]:
        return {}

    def cohort(self, parent: str) -> Cohort | None:
        """The cohort of ``parent``'s children (None without batching)."""
        if not self.batch:
            return None
        got = self._cohorts.get(parent)
        if got is None:
            got = self._cohorts[parent] = Cohort(self.client_algorithm)
        return got

    @cached_property
    def timing(self) -> dict[str, tuple[float, int]]:
        """Each aggregator's deadline (seconds) and period, by node id."""
        return node_timing(self.scenario, self.wiring)

    @cached_property
    def _client_index(self) -> dict[str, int]:
        return {c: j for j, c in enumerate(self.wiring.clients)}

    def address(self, node_id: str) -> Address:
        """How a node's children address it."""
        return Address(self.wiring.tier_of[node_id], node_id)

    def parent_of(self, node_id: str) -> Address | None:
        """The address of ``node_id``'s parent (``None`` for the root)."""
        parent = self.wiring.parents.get(node_id)
        return None if parent is None else self.address(parent)

    def aggregator(self, node_id: str, seal: Seal | None = None) -> AggregatorNode:
        """Aggregator ``node_id`` (the root or a middle-tier node), signing with ``seal``.

        Its children are the ones the wiring gives it; ``clients_below`` holds for the
        lowest tier (the one clients report to).
        """
        w = self.wiring
        deadline, period = self.timing[node_id]
        tier = w.tier_of[node_id]
        return AggregatorNode(
            node_id,
            tier=tier,
            children=w.children[node_id],
            parent=self.parent_of(node_id),
            model=self.model,
            shape=self.shape,
            protocol=self.protocol,
            deadline_s=deadline,
            quorum=self.scenario.protocol.quorum,
            period=period,
            clients_below=tier == w.tiers[-1][0],
            seal=seal,
        )

    def client(
        self,
        node_id: str,
        views: Sequence[np.ndarray],
        view_ids: Sequence[int],
        seal: Seal | None = None,
    ) -> ClientNode:
        """Client ``node_id`` holding ``views`` (views ``view_ids`` of the federation)."""
        j = self._client_index[node_id]
        parent = self.parent_of(node_id)
        assert parent is not None  # every client reports to an aggregator
        return ClientNode(
            node_id,
            parent=parent,
            views=list(views),
            model=self.model,
            protocol=self.protocol,
            seed=client_seed(self.scenario.seed, j),
            view_ids=view_ids,
            shape=self.shape,
            seal=seal,
            algorithm=self.client_algorithm,
            decoder=self.decoder,
            cohort=self.cohort(parent.group),
        )
