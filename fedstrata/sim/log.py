"""Event log output and run counters of a simulation.

The event log is a list of flat dicts, one per transmission, delivery,
drop, duplicate, timer, crash... (see :class:`~fedstrata.sim.kernel.Simulation`
for the fields). It is written as JSON lines with sorted keys and compact
separators so that two identical runs give byte-identical files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedstrata.sim.engine import Engine

__all__ = ["summarize", "write_jsonl"]


def write_jsonl(rows: Iterable[Mapping[str, Any]], path: str | Path) -> int:
    """Write ``rows`` as JSON lines with sorted keys; return the number of lines.

    Parameters
    ----------
    rows
        JSON-serialisable mappings.
    path
        Output file (overwritten; parent directories are created).

    Returns
    -------
    int
        Lines written.

    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True, separators=(",", ":"), allow_nan=False))
            fh.write("\n")
            n += 1
    return n


def _tier_row() -> dict[str, int]:
    return {
        "ack_bytes_down": 0,
        "ack_bytes_up": 0,
        "bytes_down": 0,
        "bytes_up": 0,
        "delivered": 0,
        "dropped": 0,
        "duplicates": 0,
        "messages_down": 0,
        "messages_up": 0,
        "nodes": 0,
        "publishes": 0,
    }


def summarize(engine: Engine, now: float) -> dict[str, Any]:
    """Return the run counters as a plain, JSON-ready dict.

    ``bytes``/``messages`` count PUBLISH packets on wire hops only (a
    co-located connection carries no wire bytes); ``up`` is towards a
    broker, ``down`` from a broker to a subscriber. A transmission that is
    then lost still counts: it was sent. ``ack_bytes`` counts PUBACKs by
    the direction they travel. ``delivered`` counts first deliveries to
    nodes; ``duplicates`` further copies handed to nodes (QoS 1 is
    at-least-once); ``broker_duplicates`` copies a broker received again.
    """
    tiers: dict[str, dict[str, int]] = {}
    for ns in engine.nodes.values():
        row = tiers.setdefault(ns.tier, _tier_row())
        row["nodes"] += 1
        row["publishes"] += ns.publishes
        row["delivered"] += ns.delivered
        row["duplicates"] += ns.duplicates
        row["dropped"] += ns.dropped
        for port in ns.ports:
            row["bytes_up"] += port.up_bytes
            row["bytes_down"] += port.down_bytes
            row["messages_up"] += port.up_msgs
            row["messages_down"] += port.down_msgs
            row["ack_bytes_up"] += port.ack_up_bytes
            row["ack_bytes_down"] += port.ack_down_bytes
    up = sum(r["bytes_up"] for r in tiers.values())
    down = sum(r["bytes_down"] for r in tiers.values())
    return {
        "virtual_time": now,
        "nodes": len(engine.nodes),
        "finished": len(engine.results),
        "publishes": engine.publishes,
        "delivered": sum(r["delivered"] for r in tiers.values()),
        "duplicates": sum(r["duplicates"] for r in tiers.values()),
        "broker_duplicates": engine.broker_duplicates,
        "dropped": sum(engine.drops.values()),
        "dropped_by_reason": dict(sorted(engine.drops.items())),
        "retransmissions": engine.retransmissions,
        "acks_lost": engine.acks_lost,
        "timers_fired": engine.timers_fired,
        "bytes": {"up": up, "down": down, "total": up + down},
        "messages": {
            "up": sum(r["messages_up"] for r in tiers.values()),
            "down": sum(r["messages_down"] for r in tiers.values()),
        },
        "ack_bytes": {
            "up": sum(r["ack_bytes_up"] for r in tiers.values()),
            "down": sum(r["ack_bytes_down"] for r in tiers.values()),
        },
        "by_tier": {tier: tiers[tier] for tier in sorted(tiers)},
        "records": len(engine.records),
    }
