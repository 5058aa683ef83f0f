"""A crashed node's successor: a fresh node object built like the old one (memory lost).

Shared by the simulator's crash faults (:mod:`fedstrata.scenarios.build`) and the
fault injection over a real broker (:mod:`fedstrata.scenarios.fault_inject`), so
the two restart a node the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fedstrata.nodes.aggregator import AggregatorNode
from fedstrata.nodes.client import ClientNode

__all__ = ["restart_factory"]


def restart_factory(old: Any) -> Callable[[], Any]:
    """Build a fresh node like ``old`` (memory lost), as the simulator's restart does.

    A client gets a new seed drawn from ``old``'s generator when it restarts, an
    aggregator the same configuration; both get a fresh seal (empty replay memory).
    The same construction as the scenario builder's restart factory.
    """

    def make() -> Any:
        if isinstance(old, ClientNode):
            return ClientNode(
                old.node_id,
                parent=old.parent,
                views=old.views,
                model=old.model,
                protocol=old.protocol,
                seed=int(old.rng.integers(2**31)),
                view_ids=old.view_ids,
                shape=old.shape,
                seal=old._seal.fresh(),
            )
        return AggregatorNode(
            old.node_id,
            tier=old.tier,
            children=sorted(old.children),
            parent=old.parent,
            model=old.model,
            shape=old.shape,
            protocol=old.protocol,
            deadline_s=old.deadline_s,
            quorum=old.quorum,
            period=old.period,
            clients_below=old.clients_below,
            seal=old._seal.fresh(),
        )

    return make
