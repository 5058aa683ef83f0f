"""One measured run: a scenario deployed in a fresh lab, its rounds, bytes and kernel counts."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedstrata.errors import TransportError
from fedstrata.netlab import commands as cmd
from fedstrata.netlab.compare import read_rounds
from fedstrata.netlab.counters import qdisc_drops
from fedstrata.netlab.deployment import deploy, wait_nodes
from fedstrata.netlab.lab import Lab
from fedstrata.scenarios.loader import load_scenario

__all__ = ["Measured", "measure", "shaped", "sim_wire_bytes"]


@dataclass(frozen=True)
class Measured:
    """A deployment's outcome.

    ``tcp_bytes`` is every TCP/IP byte sent on the lab's veths (nftables, the IP
    header and TCP header included, retransmissions and ACKs included, Ethernet
    excluded); ``dropped_packets`` the packets the loss rules dropped; ``queue_drops``
    those the token buckets' queues dropped (0 when TCP, not tail drop, set the pace).
    """

    rows: list[dict[str, str]]
    root: dict[str, Any]
    statuses: dict[str, str]
    exit_codes: dict[str, int]
    payload_up: int
    payload_down: int
    tcp_bytes: int
    dropped_packets: int
    queue_drops: int
    wall_s: float
    leftovers: list[str]


def shaped(text: str, loss: float, mbps: float | None) -> str:
    """Scenario YAML ``text`` with every link's loss and bandwidth set (latency left as is)."""
    doc = yaml.safe_load(text)
    topo = doc.setdefault("topology", {})
    links = [t.setdefault("link", {}) for t in topo.get("tiers", [])]
    links.append(topo.setdefault("clients", {}).setdefault("link", {}))
    for link in links:
        link["loss"] = loss
        if mbps is None:
            link.pop("bandwidth_mbps", None)
        else:
            link["bandwidth_mbps"] = mbps
    return yaml.safe_dump(doc, sort_keys=False)


def sim_wire_bytes(summary: dict[str, Any]) -> tuple[int, str]:
    """The simulator's bytes on the wire and what they count.

    ``ip``: its estimate of IP-level bytes (``network.ip_bytes``: TCP/IP headers and
    ACKs included); ``mqtt``, when it has none: its MQTT packets (PUBLISH and PUBACK
    bytes on wire hops), which leave out TCP/IP headers, ACKs and MQTT control packets.
    """
    ip = (summary.get("network") or {}).get("ip_bytes")
    if isinstance(ip, dict):  # {up, down, total}
        ip = ip.get("total")
    if ip is not None:
        return int(ip), "ip"
    return int(summary["bytes_total"]) + int(sum(summary.get("ack_bytes", {}).values())), "mqtt"


def _collect(lab: Lab, folder: Path, dep: Any, codes: dict[str, int], wall: float) -> Measured:
    records = {n: dep.node_record(n) for n in dep.nodes}
    traffic = [r["traffic"] for r in records.values()]
    counters = lab.counters()
    queue = sum(sum(qdisc_drops(lab.run(cmd.qdisc_stats(ns))).values()) for ns in lab.namespaces)
    return Measured(
        rows=read_rounds(folder / "records" / dep.layout.root / "rounds.csv"),
        root=records[dep.layout.root],
        statuses={n: r["status"] for n, r in records.items()},
        exit_codes=codes,
        payload_up=sum(t["payload_bytes_out"] for t in traffic),
        payload_down=sum(t["payload_bytes_in"] for t in traffic),
        tcp_bytes=sum(c.tx_bytes for c in counters.values()),
        dropped_packets=sum(c.dropped_packets for c in counters.values()),
        queue_drops=queue,
        wall_s=wall,
        leftovers=[],
    )


def measure(scenario: Path, folder: Path, timeout_s: float = 300) -> Measured:
    """Deploy ``scenario`` in a new lab, wait for every node, read everything, clean up.

    The run id is the scenario's name, as in the simulator (it is inside every
    payload, so the payload bytes are equal only then); each lab has fresh brokers.
    """
    sc = load_scenario(scenario)
    started = time.monotonic()
    with Lab() as lab:
        dep = deploy(lab, scenario, folder, sc.name, timeout_s=timeout_s)
        codes = wait_nodes(dep, timeout_s + 30)
        try:
            result = _collect(lab, folder, dep, codes, time.monotonic() - started)
        except (OSError, ValueError, KeyError) as exc:
            raise TransportError(f"{folder}: the deployment left no usable record: {exc}") from exc
    leftovers = lab.leftovers()
    (folder / "measured.json").write_text(
        json.dumps({k: v for k, v in result.__dict__.items() if k != "rows"}, indent=1)
    )
    return Measured(**{**result.__dict__, "leftovers": leftovers})
