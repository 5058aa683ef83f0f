"""Event log output and run counters of a simulation.

The event log is a list of flat dicts, one per transmission, delivery,
drop, duplicate, timer, crash... (see :class:`~fedstrata.sim.kernel.Simulation`
for the fields). It is written as JSON lines with sorted keys and compact
separators so that two identical runs give byte-identical files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedstrata.sim.engine import Engine

__all__ = ["check_invariants", "summarize", "write_jsonl"]


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
        "gave_up": 0,
        "lost_down": 0,
        "lost_local": 0,
        "lost_up": 0,
        "messages_down": 0,
        "messages_up": 0,
        "nodes": 0,
        "not_sent": 0,
        "payload_bytes_down": 0,
        "payload_bytes_up": 0,
        "publishes": 0,
        "suppressed": 0,
    }


def _merge(into: dict[str, int], counts: Mapping[str, int]) -> None:
    for key, n in counts.items():
        into[key] = into.get(key, 0) + n


def summarize(engine: Engine, now: float) -> dict[str, Any]:
    """Return the run counters as a plain, JSON-ready dict.

    Traffic. ``bytes``/``messages`` count PUBLISH transmissions on wire hops
    only (a co-located connection carries no wire bytes), retransmissions
    included; ``up`` is towards a broker, ``down`` from a broker to a
    subscriber. A transmission that is then lost still counts: it was sent.
    ``ack_bytes`` counts PUBACKs by the direction they travel.
    ``payload_bytes`` sums ``len(payload)`` over every PUBLISH a node made
    (``up``) and every PUBLISH handed to a node, duplicates included
    (``down``), whatever the hops: the application's bytes, which an MQTT run
    reports the same way.
    ``publishes`` counts application messages: Publish effects and wills (a
    will in the tier of the node it belongs to). ``delivered`` counts first
    deliveries to nodes; ``duplicates`` further copies handed to nodes (QoS 1
    is at-least-once); ``broker_duplicates`` copies a broker received again;
    ``retransmissions`` QoS 1 resends (by clients and brokers), each also
    counted as a transmission when it leaves.

    Drops. Every drop is logged with a reason (``dropped_by_reason``, the
    full breakdown; ``dropped`` its sum) and counted under exactly one kind:

    * ``lost`` (``lost_by_direction`` up/down, ``lost_by_reason``): a PUBLISH
      transmitted on a wire hop that did not get through: ``loss``,
      ``outage`` (lost in transit), or on arrival at a receiver that is
      ``offline``, ``crashed``, ``finished`` or misses the round
      (``dropout``). Each transmission has at most one such fate;
    * ``lost_local``: the same on co-located hops (not counted in
      ``messages``);
    * ``not_sent`` (``not_sent_by_reason``): transmissions suppressed at the
      source, never sent: the sender was ``offline`` (one per attempt, a
      QoS 1 retry included);
    * ``gave_up``: QoS 1 deliveries a sender (client or broker) abandoned
      after ``max_retries`` retransmissions;
    * ``suppressed``: ``Started`` and ``TimerFired`` events never handed to a
      node because it was offline for good.

    Invariants (checked by :func:`check_invariants`; they hold for every run):

    1. ``lost_by_direction[d] <= messages[d]`` for ``d`` in up, down, per
       tier as well (a drop is counted in the tier of the hop's node), so
       ``lost <= messages["up"] + messages["down"]``;
    2. ``bytes["up"] + bytes["down"] == bytes["total"]``;
    3. the ``by_tier`` rows sum to the totals: ``bytes_up``/``bytes_down``,
       ``messages_up``/``messages_down``, ``dropped``, ``lost_up``,
       ``lost_down``, ``lost_local``, ``not_sent``, ``gave_up``,
       ``suppressed``, ``delivered``, ``duplicates``, ``publishes``,
       ``payload_bytes_up``/``payload_bytes_down``;
    4. ``dropped == lost + lost_local + not_sent + gave_up + suppressed ==
       sum(dropped_by_reason)``, and each ``*_by_reason`` breakdown sums to
       its counter;
    5. every counter is a non-negative int and ``virtual_time`` is finite
       and >= 0.
    """
    tiers: dict[str, dict[str, int]] = {}
    for ns in engine.nodes.values():
        row = tiers.setdefault(ns.tier, _tier_row())
        row["nodes"] += 1
        row["publishes"] += ns.publishes
        row["delivered"] += ns.delivered
        row["payload_bytes_up"] += ns.payload_out
        row["payload_bytes_down"] += ns.payload_in
        row["duplicates"] += ns.duplicates
        row["dropped"] += ns.dropped
        if ns.drop_kinds:
            _merge(row, ns.drop_kinds)
        for port in ns.ports:
            row["bytes_up"] += port.up_bytes
            row["bytes_down"] += port.down_bytes
            row["messages_up"] += port.up_msgs
            row["messages_down"] += port.down_msgs
            row["ack_bytes_up"] += port.ack_up_bytes
            row["ack_bytes_down"] += port.ack_down_bytes
    rows = tiers.values()
    up = sum(r["bytes_up"] for r in rows)
    down = sum(r["bytes_down"] for r in rows)
    pay_up = sum(r["payload_bytes_up"] for r in rows)
    pay_down = sum(r["payload_bytes_down"] for r in rows)
    kinds = engine.drop_kinds

    def total(kind: str) -> int:
        return sum(kinds.get(kind, {}).values())

    def by_reason(*names: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for name in names:
            _merge(out, kinds.get(name, {}))
        return dict(sorted(out.items()))

    lost_up, lost_down = total("lost_up"), total("lost_down")
    ports = [port for ns in engine.nodes.values() for port in ns.ports]
    conns = [p.conn for p in ports if p.conn is not None]
    resent = round(sum(c.resent_bytes for c in conns))
    ip_up, ip_down = sum(p.ip_up for p in ports), sum(p.ip_down for p in ports)
    return {
        "link_model": "message-retry" if engine.transport is None else "tcp",
        # IP-level bytes (headers and TCP ACKs in), by the tcp model only; None otherwise.
        "ip_bytes": None
        if engine.transport is None
        else {
            "up": ip_up,
            "down": ip_down,
            "retransmitted": resent,  # expected, from each message's segments and loss
            "total": ip_up + ip_down + resent,
        },
        "connections_closed": sum(c.breaks for c in conns),
        "virtual_time": now,
        "nodes": len(engine.nodes),
        "finished": len(engine.results),
        "publishes": engine.publishes,
        "delivered": sum(r["delivered"] for r in rows),
        "duplicates": sum(r["duplicates"] for r in rows),
        "broker_duplicates": engine.broker_duplicates,
        "dropped": sum(engine.drops.values()),
        "dropped_by_reason": dict(sorted(engine.drops.items())),
        "lost": lost_up + lost_down,
        "lost_by_direction": {"up": lost_up, "down": lost_down},
        "lost_by_reason": by_reason("lost_up", "lost_down"),
        "lost_local": total("lost_local"),
        "not_sent": total("not_sent"),
        "not_sent_by_reason": by_reason("not_sent"),
        "gave_up": total("gave_up"),
        "suppressed": total("suppressed"),
        "retransmissions": engine.retransmissions,
        "acks_lost": engine.acks_lost,
        "timers_fired": engine.timers_fired,
        "bytes": {"up": up, "down": down, "total": up + down},
        "payload_bytes": {"up": pay_up, "down": pay_down, "total": pay_up + pay_down},
        "messages": {
            "up": sum(r["messages_up"] for r in rows),
            "down": sum(r["messages_down"] for r in rows),
        },
        "ack_bytes": {
            "up": sum(r["ack_bytes_up"] for r in rows),
            "down": sum(r["ack_bytes_down"] for r in rows),
        },
        "by_tier": {tier: tiers[tier] for tier in sorted(tiers)},
        "records": len(engine.records),
    }


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_invariants(stats: Mapping[str, Any]) -> list[str]:
    """Return the invariants of :func:`summarize` that ``stats`` violates (empty: all hold).

    Parameters
    ----------
    stats
        A dict from :func:`summarize` (``Simulation.stats()``), or a copy of
        it read back from JSON.

    Returns
    -------
    list of str
        One human-readable line per violation, e.g.
        ``"lost_by_direction.up (7) > messages.up (5)"``; a missing or
        malformed key is reported as a violation too.

    """
    bad: list[str] = []
    try:
        msgs, nbytes = stats["messages"], stats["bytes"]
        lost_dir = stats["lost_by_direction"]
        tiers = stats["by_tier"]
        totals = {
            "bytes_up": nbytes["up"],
            "bytes_down": nbytes["down"],
            "messages_up": msgs["up"],
            "messages_down": msgs["down"],
            "dropped": stats["dropped"],
            "lost_up": lost_dir["up"],
            "lost_down": lost_dir["down"],
            "lost_local": stats["lost_local"],
            "not_sent": stats["not_sent"],
            "gave_up": stats["gave_up"],
            "suppressed": stats["suppressed"],
            "delivered": stats["delivered"],
            "duplicates": stats["duplicates"],
            "publishes": stats["publishes"],
            "payload_bytes_up": stats["payload_bytes"]["up"],
            "payload_bytes_down": stats["payload_bytes"]["down"],
        }
        counts = {
            **{f"total.{k}": v for k, v in totals.items()},
            "bytes.total": nbytes["total"],
            "payload_bytes.total": stats["payload_bytes"]["total"],
            "lost": stats["lost"],
            "retransmissions": stats["retransmissions"],
            "acks_lost": stats["acks_lost"],
            **{f"dropped_by_reason.{k}": v for k, v in stats["dropped_by_reason"].items()},
            **{f"lost_by_reason.{k}": v for k, v in stats["lost_by_reason"].items()},
            **{f"not_sent_by_reason.{k}": v for k, v in stats["not_sent_by_reason"].items()},
            **{f"ack_bytes.{k}": v for k, v in stats["ack_bytes"].items()},
        }
        for tier, row in tiers.items():
            counts.update({f"by_tier.{tier}.{k}": v for k, v in row.items()})
        bad += [
            f"{name} = {v!r} is not a non-negative int"
            for name, v in counts.items()
            if not _is_count(v)
        ]
        if bad:
            return bad
        vt = stats["virtual_time"]
        if not (isinstance(vt, int | float) and math.isfinite(vt) and vt >= 0):
            bad.append(f"virtual_time = {vt!r} is not a finite time >= 0")
        for d in ("up", "down"):
            if lost_dir[d] > msgs[d]:
                bad.append(f"lost_by_direction.{d} ({lost_dir[d]}) > messages.{d} ({msgs[d]})")
            for tier, row in tiers.items():
                if row[f"lost_{d}"] > row[f"messages_{d}"]:
                    bad.append(
                        f"by_tier.{tier}.lost_{d} ({row[f'lost_{d}']}) > "
                        f"by_tier.{tier}.messages_{d} ({row[f'messages_{d}']})"
                    )
        if stats["lost"] != lost_dir["up"] + lost_dir["down"]:
            bad.append(f"lost ({stats['lost']}) != lost_by_direction up + down")
        if stats["lost"] > msgs["up"] + msgs["down"]:
            bad.append(f"lost ({stats['lost']}) > messages up + down")
        if nbytes["up"] + nbytes["down"] != nbytes["total"]:
            bad.append(
                f"bytes.up + bytes.down ({nbytes['up']} + {nbytes['down']}) "
                f"!= bytes.total ({nbytes['total']})"
            )
        for key, value in totals.items():
            summed = sum(row[key] for row in tiers.values())
            if summed != value:
                bad.append(f"by_tier rows sum {key} to {summed}, the total is {value}")
        parts = (
            stats["lost"]
            + stats["lost_local"]
            + stats["not_sent"]
            + stats["gave_up"]
            + stats["suppressed"]
        )
        if parts != stats["dropped"]:
            bad.append(
                f"dropped ({stats['dropped']}) != lost + lost_local + not_sent + gave_up "
                f"+ suppressed ({parts})"
            )
        for name, breakdown, value in (
            ("dropped_by_reason", stats["dropped_by_reason"], stats["dropped"]),
            ("lost_by_reason", stats["lost_by_reason"], stats["lost"]),
            ("not_sent_by_reason", stats["not_sent_by_reason"], stats["not_sent"]),
        ):
            if sum(breakdown.values()) != value:
                bad.append(f"{name} sums to {sum(breakdown.values())}, not {value}")
    except (KeyError, TypeError, AttributeError) as exc:
        bad.append(f"malformed stats: {type(exc).__name__}: {exc}")
    return bad
