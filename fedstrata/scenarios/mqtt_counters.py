"""What the nodes of a run over MQTT add up to: traffic, presence, crashes, link losses.

Each node's :class:`~fedstrata.scenarios.mqtt_nodes.NodeOutcome` (its own counters,
from this process or a worker process) summed into the summary's fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedstrata.scenarios.summary import Volume

if TYPE_CHECKING:  # types only: the counters need no node runner
    from fedstrata.scenarios.mqtt_nodes import NodeOutcome

__all__ = ["crashed_nodes", "link_losses", "mqtt_volume", "presence_traffic"]


def mqtt_volume(outcomes: dict[str, NodeOutcome], *, qos1: bool) -> Volume:
    """The traffic of a run over MQTT: each node's PUBLISH packets, summed per tier.

    Presence notices are left out (see :func:`presence_traffic`); with QoS 1 every
    message is acknowledged by a 4-byte PUBACK (MQTT 3.1.1 §3.4, MQTT 5 §3.4.2.1).
    """
    per_tier: dict[str, dict[str, int]] = {}
    for o in outcomes.values():
        row = per_tier.setdefault(o.tier, dict.fromkeys(_TIER_COUNTERS, 0))
        t = o.traffic
        row["nodes"] += 1
        for key, value in (
            ("publishes", t.publishes),
            ("delivered", t.delivered),
            ("messages_up", t.publishes),
            ("messages_down", t.delivered),
            ("reconnects", t.reconnects),
            ("bytes_up", t.packet_bytes_out),
            ("bytes_down", t.packet_bytes_in),
            ("payload_bytes_up", t.payload_bytes_out),
            ("payload_bytes_down", t.payload_bytes_in),
        ):
            row[key] += value
    for row in per_tier.values():
        row["bytes_total"] = row["bytes_up"] + row["bytes_down"]
    per_tier = dict(sorted(per_tier.items()))

    def total(key: str) -> int:
        return sum(r[key] for r in per_tier.values())

    up, down = total("bytes_up"), total("bytes_down")
    pay_up, pay_down = total("payload_bytes_up"), total("payload_bytes_down")
    messages_up, messages_down = total("messages_up"), total("messages_down")
    return Volume(
        up,
        down,
        up + down,
        {"up": pay_up, "down": pay_down, "total": pay_up + pay_down},
        {"up": 4 * messages_down if qos1 else 0, "down": 4 * messages_up if qos1 else 0},
        messages_up + messages_down,
        per_tier,
    )


#: The counters of a tier's row in ``per_tier`` over MQTT (``bytes_total`` added).
_TIER_COUNTERS = (
    "nodes",
    "publishes",
    "delivered",
    "bytes_up",
    "bytes_down",
    "payload_bytes_up",
    "payload_bytes_down",
    "messages_up",
    "messages_down",
    "reconnects",
)


def presence_traffic(outcomes: dict[str, NodeOutcome]) -> dict[str, int]:
    """The presence notices' PUBLISH packets and bytes (``online`` and wills), up and down."""
    traffic = [o.traffic for o in outcomes.values()]
    return {
        "publishes": sum(t.presence_publishes for t in traffic),
        "bytes_up": sum(t.presence_bytes_out for t in traffic),
        "delivered": sum(t.presence_delivered for t in traffic),
        "bytes_down": sum(t.presence_bytes_in for t in traffic),
    }


def crashed_nodes(outcomes: dict[str, NodeOutcome]) -> list[dict[str, Any]]:
    """The ``crashed`` entries of a run over MQTT, by time then node."""
    return sorted(
        (
            {"node": nid, "t": round(float(o.crashed_at or 0.0), 3), "reason": o.crashed}
            for nid, o in outcomes.items()
            if o.crashed is not None
        ),
        key=lambda c: (c["t"], c["node"]),
    )


def link_losses(outcomes: dict[str, NodeOutcome]) -> dict[str, dict[str, int]]:
    """Transmissions the emulated links lost, per tier (the ``dropped`` block's network)."""
    lost: dict[str, dict[str, int]] = {}
    for o in outcomes.values():
        if o.link_lost:
            row = lost.setdefault(o.tier, {})
            row["loss"] = row.get("loss", 0) + o.link_lost
    return lost
