"""``fedstrata node`` injects the scenario's faults for its own node id.

A flat deployment (cloud and three clients, each a real ``fedstrata node`` process on
a real Mosquitto) of a scenario whose schedule crashes ``client-2`` for good at 0 s
(so that every round waits for its deadline) and ``client-1`` at 1.5 s with a restart
2 s later: the devices crash when the
schedule says (``client-2``'s will reaches the broker), ``client-1`` comes back as a
fresh node and finishes, the root finishes its rounds by deadline and quorum.
"""

from __future__ import annotations

import secrets

import pytest

from fedstrata.device.config import load_node_config
from fedstrata.device.node import EXIT_CODES
from fedstrata.mqtt import presence_topic
from tests.device.conftest import node_json, start_node, write_deployment
from tests.device.test_node_mqtt import Presence, finish

SCENARIO = """\
name: flat-faults
seed: 4
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 40}, partition: {kind: iid}}
topology: {clients: {count: 3}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 6, tol: 1.0e-12, deadline_s: 1.0, quorum: 0.3}
faults:
  crashes:
    - {node: client-2, at: 0.0}
    - {node: client-1, at: 1.5, restart_after: 2.0}
"""


@pytest.mark.broker
@pytest.mark.slow
def test_device_nodes_crash_and_restart_on_the_scenarios_schedule(mosquitto, tmp_path):
    run = f"t-{secrets.token_hex(4)}"
    configs = write_deployment(tmp_path, SCENARIO, run=run, url=mosquitto.url)
    watch = Presence(mosquitto, presence_topic(run, "client-2"))
    try:
        results = finish({nid: start_node(path) for nid, path in configs.items()})
        heard = watch.before_marker()
    finally:
        watch.close()
    assert b"" in heard  # client-2's will: it went without a DISCONNECT
    for nid, (code, out, err) in results.items():
        assert "Traceback" not in out + err, (nid, err)
        assert code == (EXIT_CODES["crashed"] if nid == "client-2" else 0), (nid, out, err)

    down = node_json(tmp_path, "client-2")
    assert down["status"] == "crashed" and down["reason"] == "client-2 crashed: crash fault"
    assert down["faults_injected"] == {"crashes": 1}
    [crash] = down["crashed"]
    assert (crash["reason"], crash["restarts"]) == ("crash fault", False)
    assert 0.0 <= crash["t"] < 1.0

    back = node_json(tmp_path, "client-1")
    assert back["status"] == "finished", back
    assert back["faults_injected"] == {"crashes": 1, "restarts": 1}
    [crash] = back["crashed"]
    assert crash["restarts"] is True and 1.5 <= crash["t"] < 2.0
    assert back["traffic"]["connects"] >= 2  # a second incarnation connected
    assert (tmp_path / "records" / "client-1" / "labels.csv").exists()

    root = node_json(tmp_path, "cloud")
    assert root["status"] == "finished" and root["rounds"] == 6
    assert "faults_injected" not in root  # nothing scheduled for the root
    assert node_json(tmp_path, "client-0")["status"] == "finished"


def test_faults_ignore_leaves_the_schedule_out_with_a_warning(tmp_path):
    configs = write_deployment(tmp_path, SCENARIO, run="t-x", url="mqtt://127.0.0.1:1")
    path = configs["client-2"]
    default = load_node_config(path)
    assert default.faults == "inject" and not default.warnings
    path.write_text(path.read_text() + "faults: ignore\n")
    ignored = load_node_config(path)
    assert ignored.faults == "ignore"
    assert ignored.warnings == (
        "the scenario's faults are not injected on this device (faults: ignore); ignored: crashes",
    )
