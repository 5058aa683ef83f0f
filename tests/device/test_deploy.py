"""The deploy/ examples: every file parses, every node config checks, and the demo runs.

Docker and systemd do not run here: the compose file and the unit are checked as
files; the demo's nodes run as plain subprocesses against a private Mosquitto, with
the compose service name in their broker URL replaced.
"""

import configparser
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedstrata.device.config import NodeSpec
from fedstrata.scenarios.loader import load_scenario
from fedstrata.scenarios.run import simulate
from tests.device.conftest import EXE, node_json, start_node

DEPLOY = Path(__file__).parents[2] / "deploy"
NODES = ["cloud", "fog-0", "client-0", "client-1", "client-2"]


def test_compose_file_names_what_exists():
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert sorted(services) == sorted(["mosquitto", *NODES])
    assert "healthcheck" in services["mosquitto"]
    for nid in NODES:
        svc = services[nid]
        assert svc["command"] == ["node", "--config", f"nodes/{nid}.yaml"]
        assert svc["depends_on"]["mosquitto"]["condition"] == "service_healthy"
        assert svc["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        for volume in svc["volumes"]:
            host = volume.split(":")[0]
            if host.startswith("./"):
                assert (DEPLOY / host).exists(), volume
    assert services["cloud"]["restart"] == "no"  # a restarted root would start over
    assert (DEPLOY / "Dockerfile").is_file()


def test_every_node_config_checks():
    assert EXE is not None
    procs = {
        nid: subprocess.Popen(
            [EXE, "node", "--config", str(DEPLOY / "nodes" / f"{nid}.yaml"), "--check"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for nid in NODES
    }
    for nid, p in procs.items():
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, (nid, err)
        assert out.startswith(f"{DEPLOY / 'nodes' / nid}.yaml: ok\n") and err == ""
        assert "run id demo-1" in out and "mqtt://mosquitto:1883" in out


def test_systemd_example_config_and_unit():
    spec = NodeSpec.model_validate(yaml.safe_load((DEPLOY / "systemd" / "node.yaml").read_text()))
    assert spec.broker.url.startswith("mqtts://") and spec.broker.cert and spec.broker.key
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # keys are case-sensitive
    unit.read(DEPLOY / "systemd" / "fedstrata-node.service")
    svc = unit["Service"]
    assert svc["ExecStart"].endswith("fedstrata node --config /etc/fedstrata/node.yaml")
    assert svc["KillSignal"] == "SIGTERM" and svc["SuccessExitStatus"] == "130"
    assert svc["Restart"] == "on-failure"


@pytest.mark.broker
def test_the_demo_computes_the_simulators_model(mosquitto, tmp_path):
    site = tmp_path / "deploy"
    shutil.copytree(DEPLOY, site, ignore=shutil.ignore_patterns("records"))
    for nid in NODES:
        path = site / "nodes" / f"{nid}.yaml"
        text = path.read_text().replace("mqtt://mosquitto:1883", mosquitto.url)
        path.write_text(text.replace("run: demo-1", f"run: demo-{tmp_path.name[-12:]}"))
    procs = {nid: start_node(site / "nodes" / f"{nid}.yaml") for nid in NODES}
    try:
        for nid, p in procs.items():
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0 and err == "", (nid, out, err)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
    fed, summary, _ = simulate(load_scenario(DEPLOY / "federation.yaml"))
    root = node_json(site, "cloud")
    assert (root["run_status"], root["rounds"]) == (summary["status"], summary["rounds"])
    # the demo's nodes say insecure: true, and their records say so
    assert (root["signed"], root["insecure"], root["rejected"]) == (False, True, {})
    model = np.load(site / "records" / "cloud" / "model.npz")
    for h, centers in enumerate(fed.final_state.centers):
        np.testing.assert_allclose(model[f"centers_{h}"], centers, rtol=0, atol=1e-10)
    assert node_json(site, "fog-0")["reason"] == "relayed the final model to its children"
    for c, idx in fed.client_indices.items():
        lines = (site / "records" / c / "labels.csv").read_text().splitlines()[1:]
        np.testing.assert_array_equal(
            [int(r.split(",")[2]) for r in lines], fed.final_labels[np.sort(idx)]
        )
