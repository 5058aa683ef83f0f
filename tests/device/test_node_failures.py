"""``fedstrata node`` when node code raises, when its aggregator is gone, and when its
folder holds a finished node's record.

The failing node runs in this process (:func:`~fedstrata.device.node.run_node`) as a
test double wrapping the real node: it raises on its Nth delivered message. The
other nodes are real ``fedstrata node`` processes.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import subprocess
import threading
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from fedstrata.device.config import NodeConfig, load_node_config
from fedstrata.device.node import run_node
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.mqtt_nodes import idle_timeout_s
from tests.device.conftest import EXE, node_json, start_node, write_deployment
from tests.device.test_node_mqtt import finish
from tests.raising import RaisingNode

FAST = """\
name: failing-device
seed: 2
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 40}, partition: {kind: iid}}
topology: {clients: {count: 3}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 4, tol: 0.0, deadline_s: 1.0, quorum: 0.5}
"""


def _raising(monkeypatch: pytest.MonkeyPatch, after: int, exc: Exception) -> None:
    build = NodeConfig.build

    def wrapped(self: NodeConfig) -> Any:
        device = build(self)
        return dataclasses.replace(device, node=RaisingNode(device.node, after, exc))

    monkeypatch.setattr(NodeConfig, "build", wrapped)


@pytest.mark.broker
def test_a_client_that_raises_is_crashed_and_the_run_finishes(mosquitto, tmp_path, monkeypatch):
    configs = write_deployment(
        tmp_path, FAST, run=f"t-{secrets.token_hex(4)}", url=mosquitto.url, signing="insecure"
    )
    others = {nid: start_node(path) for nid, path in configs.items() if nid != "client-1"}
    _raising(monkeypatch, 2, KeyError("phase"))
    outcome = run_node(load_node_config(configs["client-1"]), command=["test"])
    results = finish(others, 60)
    assert outcome.status == "crashed" and outcome.exit_code == 1
    assert outcome.reason == "client-1 crashed: KeyError: 'phase'"
    assert node_json(tmp_path, "client-1")["status"] == "crashed"
    code, _, err = results["cloud"]
    assert code == 0 and "Traceback" not in err, err
    root = node_json(tmp_path, "cloud")
    assert root["status"] == "finished" and root["run_status"] == "round_limit"
    assert root["rounds"] == 4


@pytest.mark.broker
def test_clients_of_a_root_that_raises_end_after_the_idle_limit(mosquitto, tmp_path, monkeypatch):
    run = f"t-{secrets.token_hex(4)}"
    configs = write_deployment(tmp_path, FAST, run=run, url=mosquitto.url, signing="insecure")
    online = threading.Semaphore(0)
    watcher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    watcher.on_message = lambda _c, _u, msg: online.release() if msg.payload == b"online" else None
    watcher.connect(mosquitto.host, mosquitto.port)
    watcher.subscribe(f"fs/{run}/presence/+", qos=1)
    watcher.loop_start()
    clients = {nid: start_node(path) for nid, path in configs.items() if nid != "cloud"}
    try:  # the root starts once its clients are up: it must get to its 4th message
        for _ in clients:
            assert online.acquire(timeout=60), "a client never connected"
    finally:
        watcher.loop_stop()
        watcher.disconnect()
    _raising(monkeypatch, 4, TypeError("unhashable type: 'list'"))
    outcome = run_node(load_node_config(configs["cloud"]), command=["test"])
    assert outcome.status == "crashed"
    assert "TypeError: unhashable type: 'list'" in outcome.reason
    root = node_json(tmp_path, "cloud")
    assert root["run_status"] == "stalled" and root["status"] == "crashed"
    limit = idle_timeout_s(parse_scenario(FAST))
    assert limit == 3.0  # 3 round deadlines of 1 s, one aggregator level
    results = finish(clients, 30)
    for nid, (code, out, err) in results.items():
        assert code == 1, (nid, out, err)
        assert "Traceback" not in err
        rec = node_json(tmp_path, nid)
        assert rec["status"] == "parent_lost", rec
        assert "its aggregator is gone" in rec["reason"]
        assert rec["wall_time_s"] < 20


def test_a_finished_nodes_folder_is_refused(tmp_path):
    configs = write_deployment(
        tmp_path, FAST, run="t-refuse", url="mqtt://127.0.0.1:9", signing="insecure"
    )
    out = tmp_path / "records" / "cloud"
    out.mkdir(parents=True)
    finished = {"status": "finished", "node": "cloud", "run_id": "t-refuse", "ended_at": "x"}
    (out / "node.json").write_text(json.dumps(finished))
    (out / "model.npz").write_bytes(b"the finished model")
    (out / "rounds.csv").write_text("round\n1\n")
    res = subprocess.run(
        [EXE, "node", "--config", str(configs["cloud"])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert "finished" in res.stderr
    assert (out / "model.npz").read_bytes() == b"the finished model"
    assert (out / "rounds.csv").read_text() == "round\n1\n"
    assert json.loads((out / "node.json").read_text()) == finished
