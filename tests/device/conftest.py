"""Device-node tests: the broker fixture of tests/broker and helpers to lay out a deployment.

A deployment in a folder: the scenario file, one node.yaml per node, and each
client's data files written from the simulator's own split
(:func:`~fedstrata.scenarios.build.build_federation`), so that the devices hold
exactly what the simulated clients hold.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from fedstrata.privacy.signing import NodeKeys
from fedstrata.scenarios.build import build_federation
from fedstrata.scenarios.loader import load_scenario
from tests.broker.conftest import _need_mosquitto, mosquitto  # noqa: F401 - the fixture

EXE = shutil.which("fedstrata")

FLAT = """\
name: flat-device
seed: {seed}
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 40}}, partition: {{kind: iid}}}}
topology: {{clients: {{count: 3}}}}
algorithm: {{name: hk-mvfc, n_clusters: 4, center_update: exact}}
protocol: {{rule: sum, rounds: 12, tol: 1.0e-6, deadline_s: 30}}
"""


def write_csv(path: Path, X: np.ndarray, header: bool = True) -> None:
    """A view as CSV, every float with 17 significant digits (it reads back exactly)."""
    lines = [",".join(f"f{k}" for k in range(X.shape[1]))] if header else []
    lines += [",".join(repr(float(v)) for v in row) for row in X]
    path.write_text("\n".join(lines) + "\n")


def write_deployment(
    folder: Path,
    scenario_text: str,
    *,
    run: str,
    url: str,
    timeout_s: float | None = None,
    broker: str | None = None,
    signing: str = "keys",
) -> dict[str, Path]:
    """Scenario, data files and one node.yaml per node in ``folder``; node id -> node.yaml.

    Client ``client-j`` holds its simulated samples: view files alternate between CSV
    (even j) and one .npz archive holding every view (odd j). ``broker`` replaces the
    broker section's flow mapping (``{url: ...}``). ``signing``: ``"keys"`` (as a
    deployment should: fresh keys in ``folder/keys``, named under ``signing``),
    ``"insecure"`` (``insecure: true``) or ``"none"`` (neither: the caller adds one).
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "federation.yaml").write_text(scenario_text)
    sc = load_scenario(folder / "federation.yaml")
    fed = build_federation(sc)
    extra = "" if timeout_s is None else f"timeout_s: {timeout_s}\n"
    roster: dict[str, str] = {}
    if signing == "keys":
        (folder / "keys").mkdir(exist_ok=True)
        for node in [n for ids in sc.node_ids().values() for n in ids]:
            k = NodeKeys.generate()
            k.save(folder / "keys" / f"{node}.key", overwrite=True)
            roster[node] = k.public_key.hex()
        (folder / "keys" / "public-keys.json").write_text(json.dumps(roster))
    section = broker or f"{{url: '{url}'}}"
    configs: dict[str, Path] = {}

    def node_yaml(node: str, data: str = "") -> None:
        path = folder / f"{node}.yaml"
        sign = {
            "keys": f"signing: {{key: keys/{node}.key, public_keys: keys/public-keys.json}}\n",
            "insecure": "insecure: true\n",
            "none": "",
        }[signing]
        path.write_text(
            f"scenario: federation.yaml\nnode: {node}\nrun: {run}\n"
            f"broker: {section}\n{data}out: records/{node}\n{extra}{sign}"
        )
        configs[node] = path

    for tier, ids in sc.node_ids().items():
        if tier != "edge":
            for nid in ids:
                node_yaml(nid)
    for j, (c, idx) in enumerate(fed.client_indices.items()):
        views = {g: fed.dataset.views[g][idx] for g in fed.client_views[c]}
        (folder / "data").mkdir(exist_ok=True)
        entries = []
        if j % 2 == 0:
            for g, X in views.items():
                write_csv(folder / "data" / f"{c}-view{g}.csv", X)
                entries.append(f"  - {{view: {g}, path: data/{c}-view{g}.csv}}")
        else:
            np.savez(folder / "data" / f"{c}.npz", **{f"x{g}": X for g, X in views.items()})
            entries += [f"  - {{view: {g}, path: data/{c}.npz, key: x{g}}}" for g in views]
        node_yaml(c, "data:\n" + "\n".join(entries) + "\n")
    return configs


def start_node(config: Path, **kwargs) -> subprocess.Popen:
    """``fedstrata node --config CONFIG`` as a real subprocess, run from its folder."""
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    return subprocess.Popen(
        [EXE, "node", "--config", config.name],
        cwd=config.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        **kwargs,
    )


def node_json(folder: Path, node: str) -> dict:
    """The node.json a node wrote into ``records/NODE``."""
    return json.loads((folder / "records" / node / "node.json").read_text())


@pytest.fixture
def broker_url(mosquitto) -> str:  # noqa: F811 - the fixture imported above
    """The URL of the session's private Mosquitto."""
    return mosquitto.url
