"""Build ONE node of a scenario's federation, exactly as the simulator builds it.

:func:`fedstrata.scenarios.build.build_federation` builds every node of a federation
from one dataset. A device builds only its own node and holds only its own data;
:func:`build_node` gives that node the same configuration the simulator would: the
clustering model (:func:`~fedstrata.scenarios.build.model_of`), the protocol settings,
the wiring (:func:`~fedstrata.scenarios.wiring.wire_topology`), each tier's
deadline and period, and a client's random seed, drawn from
``numpy.random.default_rng([seed, 2, j])`` for client ``client-j``. So a deployment
whose clients hold the simulator's data split computes the simulator's model.

Nothing here reads the scenario's dataset, partition or view assignment: a client's
data are given (what the device holds). The federation's view dimensions are given
too (every node needs them to check message sizes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

import fedstrata.registry  # noqa: F401  (the composition root: registers plug-ins and kinds)
from fedstrata.errors import ValidationError
from fedstrata.nodes.aggregator import AggregatorNode
from fedstrata.nodes.client import ClientNode
from fedstrata.nodes.sealing import Seal
from fedstrata.scenarios.build import model_of, protocol_config
from fedstrata.scenarios.node_builder import NodeBuilder, client_seed
from fedstrata.scenarios.schema import Scenario

__all__ = [
    "DeviceNode",
    "Role",
    "build_node",
    "client_seed",
    "protocol_config",
    "scenario_digest",
]

Role = Literal["root", "aggregator", "client"]
"""What a node is: the root aggregator, a middle-tier aggregator, or an edge client."""


@dataclass(frozen=True, eq=False)
class DeviceNode:
    """One node of a federation, ready for a :class:`~fedstrata.broker.runner.NodeRunner`.

    Parameters
    ----------
    node
        The sans-IO node object.
    role
        ``root``, ``aggregator`` or ``client``.
    tier
        Its tier: ``cloud``, a middle tier's name, or ``edge``.
    parent
        Its parent's node id (``None`` for the root).
    children
        An aggregator's children, sorted (empty for a client).
    """

    node: ClientNode | AggregatorNode
    role: Role
    tier: str
    parent: str | None
    children: tuple[str, ...] = ()


def scenario_digest(sc: Scenario) -> str:
    """SHA-256 of the resolved scenario: the ``scenario_hash`` of a run record.

    Equal on every node that runs the same study; the same value as
    :func:`fedstrata.scenarios.run.scenario_hash` (without importing the run and
    metrics code, which is slow to import on a small device).
    """
    return hashlib.sha256(sc.resolved_yaml().encode()).hexdigest()


def build_node(
    sc: Scenario,
    node_id: str,
    *,
    run: str,
    dims: Sequence[int],
    views: Sequence[np.ndarray] | None = None,
    view_ids: Sequence[int] | None = None,
    seal: Seal | None = None,
) -> DeviceNode:
    """Build node ``node_id`` of ``sc`` as the simulator would.

    Parameters
    ----------
    sc
        A validated scenario.
    node_id
        A node of its topology: the cloud id, a middle-tier node ``{tier}-{i}`` or a
        client ``client-{j}``.
    run
        The run id shared by every node of the deployment.
    dims
        The feature count of every view of the federation.
    views, view_ids
        A client's data, one ``(n, d_g)`` array per view it holds, and which views
        they are (indices into ``dims``). Clients only.
    seal
        Signs and verifies the node's messages (``privacy.sign``); None: plain.

    Returns
    -------
    DeviceNode
        The node with its role, tier and parent.

    Raises
    ------
    ValidationError
        If ``node_id`` is not in the topology, data are given to an aggregator or
        missing for a client, or they do not match ``dims``.
    ScenarioError
        If the scenario names an algorithm the nodes do not run, or an aggregator
        would have no children.

    """
    tier = sc.tier_of(node_id)
    if tier is None:
        raise ValidationError(f"no node {node_id!r} in the scenario's topology")
    dims = tuple(int(d) for d in dims)
    if not dims or any(d < 1 for d in dims):
        raise ValidationError(f"dims must be positive feature counts, got {dims}")
    nodes = NodeBuilder.of(sc, model_of(sc, dims), dims, protocol_config(sc, run), batch=False)
    parent = nodes.wiring.parents.get(node_id)
    if tier == "edge":
        if views is None or view_ids is None:
            raise ValidationError(f"client {node_id} needs its views and their view ids")
        ids = tuple(int(g) for g in view_ids)
        if len(ids) != len(views) or not ids or len(set(ids)) != len(ids):
            raise ValidationError("view_ids must name each given view once")
        for g, X in zip(ids, views, strict=True):
            if not 0 <= g < len(dims) or np.ndim(X) != 2 or np.shape(X)[1] != dims[g]:
                raise ValidationError(f"view {g} does not match dims {dims}")
        return DeviceNode(nodes.client(node_id, views, ids, seal), "client", "edge", parent)
    if views is not None or view_ids is not None:
        raise ValidationError(f"{node_id} is an aggregator: it holds no data")
    agg = nodes.aggregator(node_id, seal)
    role: Role = "root" if parent is None else "aggregator"
    return DeviceNode(agg, role, tier, parent, tuple(sorted(agg.children)))
