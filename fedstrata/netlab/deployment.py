"""A scenario's federation, deployed in a lab: real Mosquitto brokers and ``fedstrata node``.

:func:`deploy` builds the namespaces and shaped links of the scenario's
:class:`~fedstrata.netlab.layout.Layout`, writes each broker's configuration (a middle
aggregator's bridged to its parent's broker over its uplink), each node's ``node.yaml``
and each client's data (the rows the simulator gives it, so the deployment computes
the simulated model), starts the brokers, then the nodes (clients and middle tiers
first, the root last) and waits for every node to finish.

Nodes run unsigned (``insecure: true``, a closed lab network): the simulator then
counts the same payload bytes (it signs only with ``privacy.sign``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedstrata.broker.config import bridge_text, mosquitto_conf
from fedstrata.broker.launcher import find_mosquitto
from fedstrata.errors import TransportError, ValidationError
from fedstrata.netlab.lab import Lab, VethLink
from fedstrata.netlab.layout import Layout, plan_layout
from fedstrata.scenarios.loader import load_scenario
from fedstrata.scenarios.wiring import prepare_data

__all__ = ["PORT", "Deployment", "broker_config", "deploy", "prepare", "wait_nodes"]

PORT = 1883
"""Every broker listens on this port in its own namespace."""


@dataclass
class Deployment:
    """A deployed federation: where each node lives, its uplink, its process and files."""

    lab: Lab
    folder: Path
    layout: Layout
    run_id: str
    ns: dict[str, str] = field(default_factory=dict)
    uplink: dict[str, VethLink] = field(default_factory=dict)
    brokers: dict[str, subprocess.Popen[Any]] = field(default_factory=dict)
    nodes: dict[str, subprocess.Popen[Any]] = field(default_factory=dict)
    configs: dict[str, Path] = field(default_factory=dict)

    def broker_url(self, node: str) -> str:
        """The broker a node talks to: its own (an aggregator), else its parent's."""
        place = self.layout.place(node)
        if place.hosts_broker:
            return f"mqtt://127.0.0.1:{PORT}"
        return f"mqtt://{self.uplink[node].upper_ip}:{PORT}"

    def node_record(self, node: str) -> dict[str, Any]:
        """The ``node.json`` a node wrote."""
        return dict(json.loads((self.folder / "records" / node / "node.json").read_text()))


def _write_client_data(folder: Path, scenario: Path) -> dict[str, str]:
    """Each client's views as ``.npz`` (the simulator's rows); client -> its data section."""
    sc = load_scenario(scenario)
    prepared = prepare_data(sc)
    (folder / "data").mkdir(exist_ok=True)
    sections = {}
    for j, idx in enumerate(prepared.indices):
        c = f"client-{j}"
        rows = np.sort(idx)
        views = {g: prepared.dataset.views[g][rows] for g in prepared.held[j]}
        np.savez(folder / "data" / f"{c}.npz", **{f"x{g}": X for g, X in views.items()})
        entries = [f"  - {{view: {g}, path: data/{c}.npz, key: x{g}}}" for g in views]
        sections[c] = "data:\n" + "\n".join(entries) + "\n"
    return sections


def _write_node_configs(dep: Deployment, scenario: Path, timeout_s: float) -> None:
    shutil.copyfile(scenario, dep.folder / "federation.yaml")
    data = _write_client_data(dep.folder, dep.folder / "federation.yaml")
    for place in dep.layout.places:
        path = dep.folder / f"{place.node}.yaml"
        path.write_text(
            f"scenario: federation.yaml\nnode: {place.node}\nrun: {dep.run_id}\n"
            f"broker: {{url: '{dep.broker_url(place.node)}'}}\n{data.get(place.node, '')}"
            f"out: records/{place.node}\ntimeout_s: {timeout_s}\ninsecure: true\n"
        )
        dep.configs[place.node] = path


def _build_network(dep: Deployment) -> None:
    for place in dep.layout.places:
        dep.ns[place.node] = dep.lab.namespace(place.node)
    for place in dep.layout.places:
        if place.parent is not None:
            link = dep.lab.link(dep.ns[place.parent], dep.ns[place.node])
            dep.lab.shape(link, place.mbps, place.loss)
            dep.uplink[place.node] = link


def _wait(check: Any, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TransportError(f"{what}: not ready after {timeout_s:.0f} s")
        time.sleep(0.05)


def _listening(dep: Deployment, node: str, peer: str | None = None) -> bool:
    """Whether ``node``'s broker listens (or, with ``peer``, its bridge is connected)."""
    query = f"dst {peer}:{PORT}" if peer else f"sport = :{PORT}"
    state = "established" if peer else "listening"
    out = dep.lab.run(["ss", "-N", dep.ns[node], "-Htn", "state", state, query])
    return bool(out.strip())


def broker_config(dep: Deployment, node: str) -> str:
    """The Mosquitto configuration of ``node``'s broker: a middle aggregator's is bridged.

    The bridge connects to the parent's broker at the parent's end of ``node``'s
    uplink, so what the site exchanges with its parent crosses that link.
    """
    place = dep.layout.place(node)
    bridge = None
    if place.parent is not None:
        parent = dep.layout.place(place.parent)
        remote = f"{dep.uplink[node].upper_ip}:{PORT}"
        bridge = bridge_text(node, remote, cloud_id=parent.node, cloud_tier=parent.tier)
    return mosquitto_conf(node, port=PORT, bridge=bridge)


def _start_brokers(dep: Deployment) -> None:
    exe = find_mosquitto()
    (dep.folder / "brokers").mkdir(exist_ok=True)
    for node in dep.layout.brokers:
        conf = dep.folder / "brokers" / f"{node}.conf"
        conf.write_text(broker_config(dep, node))
        with (dep.folder / "brokers" / f"{node}.log").open("w") as log:
            dep.brokers[node] = dep.lab.spawn(
                dep.ns[node], [exe, "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT
            )
        _wait(lambda n=node: _listening(dep, n), f"the broker of {node}", 10)
    for node in dep.layout.brokers:  # a bridge connects once its parent listens
        link = dep.uplink.get(node)
        if link is not None:
            _wait(lambda n=node, ip=link.upper_ip: _listening(dep, n, ip), f"{node}'s bridge", 30)


def _start_nodes(dep: Deployment) -> None:
    exe = shutil.which("fedstrata") or str(Path(sys.executable).parent / "fedstrata")
    # the root last: its setup round then starts with every child already listening
    order = [p.node for p in reversed(dep.layout.places)]
    (dep.folder / "logs").mkdir(exist_ok=True)
    for node in order:
        with (dep.folder / "logs" / f"{node}.txt").open("w") as out:
            dep.nodes[node] = dep.lab.spawn(
                dep.ns[node],
                [exe, "node", "--config", dep.configs[node].name],
                cwd=dep.folder,
                stdout=out,
                stderr=subprocess.STDOUT,
            )


def prepare(
    lab: Lab, scenario: Path, folder: Path, run_id: str, timeout_s: float = 300
) -> Deployment:
    """Build ``scenario``'s network in ``lab`` and write every node's files; start nothing.

    Parameters are those of :func:`deploy`.
    """
    if folder.exists() and any(folder.iterdir()):
        # a finished node refuses an out folder holding a finished record (exit 2): the
        # run would silently read the old records
        raise ValidationError(f"{folder} is not empty: give each deployment a new folder")
    folder.mkdir(parents=True, exist_ok=True)
    dep = Deployment(lab, folder, plan_layout(load_scenario(scenario)), run_id)
    _build_network(dep)
    _write_node_configs(dep, scenario, timeout_s)
    return dep


def deploy(
    lab: Lab, scenario: Path, folder: Path, run_id: str, timeout_s: float = 300
) -> Deployment:
    """Build ``scenario``'s network in ``lab``, start its brokers and nodes; do not wait.

    Parameters
    ----------
    lab : Lab
        An entered lab; everything is removed when it closes.
    scenario : Path
        The scenario file (links with latency 0: the lab cannot add delay).
    folder : Path
        Where configurations, data, logs and the nodes' records go.
    run_id : str
        The run id of every node.
    timeout_s : float
        Each node's ``timeout_s``.
    """
    dep = prepare(lab, scenario, folder, run_id, timeout_s)
    _start_brokers(dep)
    _start_nodes(dep)
    return dep


def wait_nodes(dep: Deployment, timeout_s: float) -> dict[str, int]:
    """Wait for every node to exit; their exit codes (a node still running is killed: -9)."""
    deadline = time.monotonic() + timeout_s
    codes = {}
    for node, proc in dep.nodes.items():
        try:
            codes[node] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            dep.lab.kill(proc)
            codes[node] = proc.wait(timeout=10)
    return codes
