"""A ``fedstrata node`` deployment on the broker ``fedstrata broker config`` writes.

One Mosquitto for a three-tier federation (``--site cloud``: the root's site holds
every tier), a ``mosquitto_passwd`` file, and every node a real ``fedstrata node``
process logging in as itself with its own password file: the ACL allows every
publish and subscribe the run needs (the clients under the fog included), the
pinned client ids let each node hold its one session, and the root's model is the
simulator's. The nodes sign their messages with keys from ``fedstrata keys``, as a
deployment does.
"""

import re
import shutil
import subprocess

import numpy as np
import pytest

from fedstrata.broker.launcher import PrivateBroker
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate
from tests.broker.conftest import _need_mosquitto, need_tool
from tests.device.conftest import node_json, start_node, write_deployment

pytestmark = pytest.mark.broker

EXE = shutil.which("fedstrata")
SCENARIO = """\
name: acl-deployment
seed: 11
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}, partition: {kind: iid}}
topology: {tiers: [{name: fog, count: 1}], clients: {count: 2}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 5, tol: 1.0e-6, deadline_s: 30}
privacy: {sign: true}
"""


def test_a_node_deployment_runs_on_the_generated_site_broker(tmp_path):
    _need_mosquitto()
    tmp_path.chmod(0o755)  # Mosquitto may drop to its own user: it reads the files here
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    configs = write_deployment(tmp_path, SCENARIO, run="acl-1", url="mqtt://unused:1")
    nodes = sorted(configs)
    assert nodes == ["client-0", "client-1", "cloud", "fog-0"]
    passwd = need_tool("mosquitto_passwd")
    for i, node in enumerate(nodes):
        args = [passwd, "-b", *(["-c"] if i == 0 else []), tmp_path / "passwd", node, f"pw-{node}"]
        subprocess.run(args, check=True, capture_output=True, timeout=30)

    res = subprocess.run(
        [EXE, "keys", tmp_path / "federation.yaml", "--out", tmp_path / "site-keys"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr

    def config(port):
        args = [
            *(EXE, "broker", "config", "--site", "cloud", "--out", tmp_path / "cloud.conf"),
            *("--port", str(port), "--bind", "127.0.0.1"),
            *("--scenario", tmp_path / "federation.yaml", "--password-file", tmp_path / "passwd"),
        ]
        res = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        return (tmp_path / "cloud.conf").read_text()

    with PrivateBroker(config=config, log_file=tmp_path / "mosquitto.log") as broker:
        # every node logs in as itself, its password in a file of its own (mode 0600)
        for node, path in configs.items():
            secret = tmp_path / f"{node}.pass"
            secret.write_text(f"pw-{node}\n")
            secret.chmod(0o600)
            section = f"{{url: '{broker.url}', username: {node}, password_file: {node}.pass}}"
            text, n = re.subn(r"^broker: .*$", f"broker: {section}", path.read_text(), flags=re.M)
            assert n == 1
            # this test's own keys, from `fedstrata keys` (whatever the helper wrote)
            text = re.sub(r"^(signing|insecure): .*\n", "", text, flags=re.M)
            keys = f"key: site-keys/{node}.key, public_keys: site-keys/public-keys.json"
            path.write_text(text + f"signing: {{{keys}}}\n")
        procs = {node: start_node(path) for node, path in configs.items()}
        results = {}
        try:
            for node, proc in procs.items():
                out, err = proc.communicate(timeout=90)
                results[node] = (proc.returncode, out, err)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    for node, (code, out, err) in results.items():
        assert code == 0, (node, out, err)
        assert err == "", (node, err)
    fed, summary, _ = simulate(parse_scenario(SCENARIO))
    root = node_json(tmp_path, "cloud")
    assert root["status"] == "finished"
    assert (root["run_status"], root["rounds"]) == (summary["status"], summary["rounds"])
    model = np.load(tmp_path / "records" / "cloud" / "model.npz")
    for h, centers in enumerate(fed.final_state.centers):
        np.testing.assert_allclose(model[f"centers_{h}"], centers, rtol=0, atol=1e-10)
    for node in nodes:
        record = node_json(tmp_path, node)
        assert record["status"] == "finished", (node, record["reason"])
        # one session each: no node was disconnected by another's login
        assert record["reconnects"] == 0, (node, record["mqtt_log"])
    for client in ("client-0", "client-1"):
        assert node_json(tmp_path, client)["final_model_round"] == summary["rounds"] + 1
