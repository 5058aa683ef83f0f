"""Read the kernel's counters of a lab: nftables named counters and interface statistics."""

from __future__ import annotations

import json
from dataclasses import dataclass

from fedstrata.errors import TransportError
from fedstrata.netlab.commands import counter_name

__all__ = ["DeviceCounters", "device_counters", "link_bytes", "qdisc_drops"]


@dataclass(frozen=True, slots=True)
class DeviceCounters:
    """What crossed one veth end, in IP bytes and packets (nftables counters).

    ``rx_bytes`` counts every packet that arrived, the ones the loss rule then dropped
    included (they crossed the wire); ``dropped_packets`` those it dropped.
    """

    rx_bytes: int
    rx_packets: int
    tx_bytes: int
    tx_packets: int
    dropped_bytes: int
    dropped_packets: int


def _counters(text: str) -> dict[str, tuple[int, int]]:
    """Named counters of ``nft -j list counters``: name -> (packets, bytes)."""
    try:
        items = json.loads(text)["nftables"]
    except (ValueError, KeyError, TypeError) as exc:
        raise TransportError(f"nft printed no counter list: {text[:200]!r}") from exc
    out = {}
    for item in items:
        c = item.get("counter") if isinstance(item, dict) else None
        if c is not None:
            out[c["name"]] = (int(c["packets"]), int(c["bytes"]))
    return out


def device_counters(text: str, devices: list[str]) -> dict[str, DeviceCounters]:
    """The counters of each of ``devices`` in the output of ``nft -j list counters``."""
    named = _counters(text)

    def get(kind: str, dev: str) -> tuple[int, int]:
        try:
            return named[counter_name(kind, dev)]
        except KeyError:
            raise TransportError(f"no nft counter {counter_name(kind, dev)}") from None

    out = {}
    for dev in devices:
        rx, tx, drop = get("rx", dev), get("tx", dev), get("drop", dev)
        out[dev] = DeviceCounters(rx[1], rx[0], tx[1], tx[0], drop[1], drop[0])
    return out


def link_bytes(text: str) -> dict[str, dict[str, int]]:
    """Per interface of ``ip -s -j link``: ``rx_bytes``, ``tx_bytes`` (frames, L2 headers in)."""
    out = {}
    for entry in json.loads(text):
        stats = entry.get("stats64") or entry.get("stats") or {}
        out[entry["ifname"]] = {
            "rx_bytes": int(stats.get("rx", {}).get("bytes", 0)),
            "tx_bytes": int(stats.get("tx", {}).get("bytes", 0)),
            "rx_packets": int(stats.get("rx", {}).get("packets", 0)),
            "tx_packets": int(stats.get("tx", {}).get("packets", 0)),
        }
    return out


def qdisc_drops(text: str) -> dict[str, int]:
    """Packets each interface's root qdisc dropped (a full token-bucket queue), per ``tc -j``."""
    out: dict[str, int] = {}
    for q in json.loads(text):
        if q.get("root"):
            out[q["dev"]] = out.get(q["dev"], 0) + int(q.get("drops", 0))
    return out
