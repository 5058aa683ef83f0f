"""Over a real Mosquitto, a node that raises or a worker that dies is a crash, not the end.

The failing node is a test double wrapping the real node (it raises on its Nth
delivered message); the dead worker is a real worker process killed with SIGKILL.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import threading
import time
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from fedstrata.scenarios import run_mqtt as run_mqtt_module
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run_mqtt import mqtt_run, run_scenario_mqtt
from tests.raising import raise_in_run

pytestmark = pytest.mark.broker

SCENARIO = """
name: failing-mqtt
seed: 3
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 40}, partition: {kind: iid}}
topology: {clients: {count: 3, link: {latency: 0.01}}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 5, tol: 0.0, deadline_s: 1.5, quorum: 0.5}
"""


def test_a_client_that_raises_is_crashed_and_the_others_finish(mosquitto, monkeypatch):
    raise_in_run(monkeypatch, run_mqtt_module, "client-1", 3, TypeError("unhashable type: 'list'"))
    _, summary, rows = mqtt_run(
        parse_scenario(SCENARIO), mosquitto.host, mosquitto.port, timeout_s=60
    )
    assert summary["status"] == "round_limit", summary["reason"]
    assert summary["rounds"] == 5
    [crash] = summary["crashed"]
    assert crash["node"] == "client-1"
    assert crash["reason"] == "TypeError: unhashable type: 'list'"
    assert 0 < crash["t"] < summary["wall_time_s"]
    last = [r for r in rows if r["tier"] == "cloud" and r["phase"] == "iter"][-1]
    assert last["participants"] == 2  # the round closed at its deadline without it
    assert summary["metrics"]["ari"] is not None


def test_a_root_that_raises_ends_the_run_stalled_at_once(mosquitto, monkeypatch):
    raise_in_run(monkeypatch, run_mqtt_module, "cloud", 4, ValueError("phase must be a string"))
    t0 = time.monotonic()
    _, summary, _ = mqtt_run(parse_scenario(SCENARIO), mosquitto.host, mosquitto.port, timeout_s=60)
    assert time.monotonic() - t0 < 30  # not the 60 s wall-clock limit
    assert summary["status"] == "stalled"
    assert "ValueError: phase must be a string" in summary["reason"]
    assert [c["node"] for c in summary["crashed"]] == ["cloud"]


def _kill_worker_after_models(broker: Any, run_id: str, name: str, models: int) -> threading.Thread:
    """In the background: once the root published ``models`` models, SIGKILL worker ``name``."""

    def work() -> None:
        seen = threading.Semaphore(0)
        watcher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        watcher.on_connect = lambda c, *_: c.subscribe(f"fs/{run_id}/cloud/+/down", qos=1)
        watcher.on_message = lambda _c, _u, msg: None if msg.retain else seen.release()
        watcher.connect(broker.host, broker.port)
        watcher.loop_start()
        try:
            for _ in range(models):
                if not seen.acquire(timeout=90):
                    return
        finally:
            watcher.loop_stop()
            watcher.disconnect()
        for child in mp.active_children():
            if child.name == name and child.pid is not None:
                os.kill(child.pid, signal.SIGKILL)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_a_killed_worker_is_a_crash_of_its_nodes(mosquitto, tmp_path):
    sc = parse_scenario(SCENARIO.replace("rounds: 5", "rounds: 6"))
    run_id = f"killed-worker-{os.getpid()}"
    # three workers: [cloud, client-2], [client-0], [client-1]; kill the last one
    killer = _kill_worker_after_models(mosquitto, run_id, "fedstrata-nodes-2", 2)
    summary = run_scenario_mqtt(
        sc,
        tmp_path / "run",
        broker=mosquitto.url,
        timeout_s=90,
        processes=3,
        run_id=run_id,
        plots=False,
    )
    killer.join(timeout=5)
    assert summary["status"] == "round_limit", summary["reason"]
    assert summary["rounds"] == 6
    assert summary["crashed"] == [
        {
            "node": "client-1",
            "t": summary["crashed"][0]["t"],
            "reason": "worker process 2 died (SIGKILL)",
        }
    ]
    assert 0 < summary["crashed"][0]["t"] < summary["wall_time_s"]
    # a complete record: every file it lists, summary.json last
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["crashed"] == summary["crashed"]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == sorted(written["files"])
    rounds = (tmp_path / "run" / "rounds.csv").read_text().splitlines()
    last = [line for line in rounds if ",cloud,iter," in line][-1]
    header = rounds[0].split(",")
    assert dict(zip(header, last.split(","), strict=True))["participants"] == "2"


def test_a_killed_root_worker_ends_the_run_stalled_with_a_record(mosquitto, tmp_path):
    sc = parse_scenario(SCENARIO.replace("rounds: 5", "rounds: 5000"))
    run_id = f"killed-root-worker-{os.getpid()}"
    killer = _kill_worker_after_models(mosquitto, run_id, "fedstrata-nodes-0", 2)
    summary = run_scenario_mqtt(
        sc,
        tmp_path / "run",
        broker=mosquitto.url,
        timeout_s=90,
        processes=2,
        run_id=run_id,
        plots=False,
    )
    killer.join(timeout=5)
    assert summary["status"] == "stalled"
    assert "worker process 0 died (SIGKILL)" in summary["reason"]
    # worker 0 hosted [cloud, client-1]; worker 1 [client-0, client-2] went on, then stopped
    assert sorted(c["node"] for c in summary["crashed"]) == ["client-1", "cloud"]
    assert summary["wall_time_s"] < 60
    assert (tmp_path / "run" / "summary.json").exists()
