"""One measured run: a scenario deployed in a fresh lab, its rounds, bytes and kernel counts."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedstrata.errors import TransportError
from fedstrata.netlab import commands as cmd
from fedstrata.netlab.compare import read_rounds
from fedstrata.netlab.counters import qdisc_drops
from fedstrata.netlab.deployment import Deployment, deploy, wait_nodes
from fedstrata.netlab.faults import FaultDriver, LabFault, lab_faults
from fedstrata.netlab.lab import Lab
from fedstrata.scenarios.loader import load_scenario

__all__ = ["Measured", "fault_actor", "measure", "shaped", "sim_wire_bytes"]


@dataclass(frozen=True)
class Measured:
    """A deployment's outcome.

    ``tcp_bytes`` is every TCP/IP byte sent on the lab's veths (nftables, the IP
    header and TCP header included, retransmissions and ACKs included, Ethernet
    excluded); ``dropped_packets`` the packets the loss rules dropped; ``queue_drops``
    those the token buckets' queues dropped (0 when TCP, not tail drop, set the pace).
    ``faults`` lists the partitions and kills the lab applied (see
    :class:`~fedstrata.netlab.faults.FaultDriver`), ``offsets`` each node's time zero
    minus the root's, ``unrecorded`` the nodes whose ``node.json`` has no traffic (a
    process killed by SIGKILL writes nothing more: its bytes are not in the payload
    sums).
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
    faults: list[dict[str, Any]] = field(default_factory=list)
    offsets: dict[str, float] = field(default_factory=dict)
    unrecorded: list[str] = field(default_factory=list)


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
    traffic = [r["traffic"] for r in records.values() if "traffic" in r]
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
        unrecorded=sorted(n for n, r in records.items() if "traffic" not in r),
    )


def fault_actor(dep: Deployment) -> Any:
    """The action of each :class:`~fedstrata.netlab.faults.LabFault` on ``dep``."""

    def act(fault: LabFault) -> None:
        if fault.action == "kill":
            dep.lab.kill(dep.nodes[fault.node])
        else:
            dep.lab.partition(dep.uplink[fault.node], fault.action == "cut")

    return act


def _driver(dep: Deployment, faults: list[LabFault]) -> FaultDriver:
    logs = {n: dep.folder / "logs" / f"{n}.txt" for n in dep.nodes}
    return FaultDriver(faults, fault_actor(dep), logs, dep.layout.root)


def measure(
    scenario: Path,
    folder: Path,
    timeout_s: float = 300,
    kills: Mapping[str, float] | None = None,
) -> Measured:
    """Deploy ``scenario`` in a new lab, wait for every node, read everything, clean up.

    The run id is the scenario's name, as in the simulator (it is inside every
    payload, so the payload bytes are equal only then); each lab has fresh brokers.
    The scenario's ``faults.partitions`` are applied in the kernel and each node of
    ``kills`` (node -> seconds) is killed by SIGKILL, on that node's run clock
    (:mod:`fedstrata.netlab.faults`).
    """
    sc = load_scenario(scenario)
    faults = lab_faults(sc, kills)
    started = time.monotonic()
    with Lab() as lab:
        dep = deploy(lab, scenario, folder, sc.name, timeout_s=timeout_s)
        driver = _driver(dep, faults).start()
        try:
            codes = wait_nodes(dep, timeout_s + 30)
        finally:
            driver.stop()
        if driver.errors:
            raise TransportError(f"{folder}: faults not applied: {driver.errors}")
        try:
            result = _collect(lab, folder, dep, codes, time.monotonic() - started)
        except (OSError, ValueError, KeyError) as exc:
            raise TransportError(f"{folder}: the deployment left no usable record: {exc}") from exc
    leftovers = lab.leftovers()
    extra = {"leftovers": leftovers, "faults": driver.report(), "offsets": driver.offsets()}
    result = Measured(**{**result.__dict__, **extra})
    (folder / "measured.json").write_text(
        json.dumps({k: v for k, v in result.__dict__.items() if k != "rows"}, indent=1)
    )
    return result
