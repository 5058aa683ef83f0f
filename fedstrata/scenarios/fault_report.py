"""What the injected faults did in a run over MQTT, in the simulator's summary fields.

The ``crashed`` list (every crash, with ``restarts``, as the simulator lists them),
the network part of the ``dropped`` block (the deliveries a dropout or an offline
node suppressed, next to an emulated link's ``loss``) and ``faults_injected``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedstrata.scenarios.mqtt_counters import crashed_nodes, link_losses

if TYPE_CHECKING:
    from fedstrata.scenarios.fault_inject import FaultCounts
    from fedstrata.scenarios.mqtt_nodes import NodeOutcome

__all__ = ["crash_list", "fault_row", "faults_injected", "network_drops"]

#: The ``reason`` of an injected crash (the simulator's).
CRASH_FAULT = "crash fault"


def crash_list(outcomes: dict[str, NodeOutcome]) -> list[dict[str, Any]]:
    """Every crash of the run by time then node: injected ones and nodes that broke."""
    injected = [c for o in outcomes.values() if o.faults for c in o.faults.crashes]
    others = [c for c in crashed_nodes(outcomes) if c["reason"] != CRASH_FAULT]
    return sorted([*injected, *others], key=lambda c: (c["t"], c["node"]))


def network_drops(outcomes: dict[str, NodeOutcome]) -> dict[str, dict[str, int]]:
    """Per tier and reason, what never reached a node: emulated losses, dropouts, offline."""
    lost = link_losses(outcomes)
    for o in outcomes.values():
        if o.faults is None:
            continue
        row = lost.setdefault(o.tier, {})
        for reason, n in o.faults.dropped.items():
            row[reason] = row.get(reason, 0) + n
        if o.faults.abandoned:
            row["max_retries"] = row.get("max_retries", 0) + o.faults.abandoned
    return {tier: row for tier, row in lost.items() if row}


def fault_row(f: FaultCounts) -> dict[str, int]:
    """One node's counts of ``faults_injected`` (the ones that are not zero)."""
    row = {
        "crashes": len(f.crashes),
        "restarts": sum(1 for c in f.crashes if c["restarts"]),
        "dropout": f.dropped["dropout"],
        "offline": f.dropped["offline"],
        "held": f.held,
        "abandoned": f.abandoned,
        "deferred": f.deferred,
        "suppressed": f.suppressed,
    }
    return {k: v for k, v in row.items() if v}


def faults_injected(outcomes: dict[str, NodeOutcome]) -> dict[str, Any]:
    """The ``faults_injected`` summary key: totals, each node's counts, and the timeline.

    ``timeline`` lists ``[t, node, fault]`` by time (see
    :class:`~fedstrata.scenarios.fault_inject.FaultCounts`).
    """
    per_node = {
        nid: row
        for nid, o in sorted(outcomes.items())
        if o.faults is not None and (row := fault_row(o.faults))
    }
    total = {k: sum(row.get(k, 0) for row in per_node.values()) for k in _KEYS}
    timeline = sorted(
        [t, nid, fault]
        for nid, o in outcomes.items()
        if o.faults is not None
        for t, fault in o.faults.timeline
    )
    return {**total, "per_node": per_node, "timeline": timeline}


_KEYS = (
    "crashes",
    "restarts",
    "dropout",
    "offline",
    "held",
    "abandoned",
    "deferred",
    "suppressed",
)
