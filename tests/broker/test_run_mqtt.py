"""Scenarios over a real Mosquitto: the same model as the simulator, the same record."""

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
import pytest

from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import run_scenario, simulate
from fedstrata.scenarios.run_mqtt import mqtt_run, run_scenario_mqtt
from tests.broker.conftest import default_sigint

pytestmark = pytest.mark.broker

FLAT = """
name: flat-mqtt
seed: {seed}
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 40}}, partition: {{kind: iid}}}}
topology: {{clients: {{count: 3, link: {{latency: 0.01, bandwidth_mbps: 10}}}}}}
algorithm: {{name: hk-mvfc, n_clusters: 4, center_update: exact}}
protocol: {{rule: sum, rounds: 12, tol: 1.0e-6, deadline_s: 30}}
"""
EXE = shutil.which("fedstrata")


def flat(seed=5):
    return parse_scenario(FLAT.format(seed=seed))


def signed(sc):
    """``sc`` with ``privacy.sign: true``: the simulated twin of a (signed) real run."""
    return sc.model_copy(update={"privacy": sc.privacy.model_copy(update={"sign": True})})


def _wait_for_live_models(broker, pattern, count, timeout_s=90):
    """Block until the root has published ``count`` global models on ``pattern``.

    Interrupting once a run is under way, not after a fixed sleep (too short on a
    loaded machine); retained models of earlier runs on the broker do not count.
    """
    seen = threading.Semaphore(0)
    watcher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    watcher.on_connect = lambda c, *_: c.subscribe(pattern, qos=1)
    watcher.on_message = lambda _c, _u, msg: None if msg.retain else seen.release()
    watcher.connect(broker.host, broker.port)
    watcher.loop_start()
    try:
        for _ in range(count):
            assert seen.acquire(timeout=timeout_s), "the run never got going"
    finally:
        watcher.loop_stop()
        watcher.disconnect()


def test_mqtt_run_equals_the_simulator(mosquitto):
    # a real run signs every message (per-run keys): its twin is the signed simulation,
    # whose messages are as long (the same 64 bytes of signature each)
    sc = flat()
    fed_sim, s_sim, rows_sim = simulate(signed(sc))
    fed, s, rows = mqtt_run(sc, mosquitto.host, mosquitto.port, timeout_s=60)
    assert s["privacy"] == {
        "protocol": "none",
        "signed": True,
        "keys": "per-run random",
        "rejected": {},
    }
    assert s_sim["privacy"]["keys"] == "derived from the scenario seed (simulation only)"
    assert s["transport"] == "mqtt" and s["status"] == s_sim["status"]
    assert s["reason"] == s_sim["reason"] and s["rounds"] == s_sim["rounds"]
    for a, b in zip(fed.final_state.centers, fed_sim.final_state.centers, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)
    np.testing.assert_allclose(
        fed.final_state.view_weights, fed_sim.final_state.view_weights, atol=1e-10
    )
    np.testing.assert_array_equal(fed.final_labels, fed_sim.final_labels)
    assert s["metrics"] == s_sim["metrics"]
    # the same rounds closed with the same participants and objectives
    key = lambda r: (r["round"], r["tier"], r["phase"], r["participants"], r.get("objective"))  # noqa: E731
    assert [key(r) for r in rows] == [key(r) for r in rows_sim]
    # edge traffic: the same messages; each carries the run-id suffix ("-" + 8 hex) twice,
    # in its topic and in its envelope
    edge, edge_sim = s["per_tier"]["edge"], s_sim["per_tier"]["edge"]
    assert edge["messages_up"] == edge_sim["messages_up"]
    assert edge["messages_down"] == edge_sim["messages_down"]
    # (plus 1 byte where the longer packet crosses a Remaining Length varint boundary,
    # e.g. 111 -> 129 bytes for the setup model: MQTT 3.1.1 §2.2.3)
    extra = 2 * len("-0123abcd")
    for d in ("up", "down"):
        n, grown = edge[f"messages_{d}"], edge[f"bytes_{d}"] - edge_sim[f"bytes_{d}"]
        assert extra * n <= grown <= (extra + 1) * n, (d, n, grown)
    assert s["bytes_total"] == sum(t["bytes_total"] for t in s["per_tier"].values())
    assert s["run_id"].startswith("flat-mqtt-") and len(s["run_id"]) == len("flat-mqtt-") + 8


def test_wall_clock_timeout_is_stalled(mosquitto):
    # 10,000 rounds with tol 0 cannot end in 0.05 s (the 12 rounds of flat() can, on a
    # fast machine: then the run converges before the limit and there is nothing to test)
    sc = parse_scenario(
        FLAT.format(seed=5).replace("rounds: 12, tol: 1.0e-6", "rounds: 10000, tol: 0.0")
    )
    assert sc.protocol.rounds == 10000
    _, s, _ = mqtt_run(sc, mosquitto.host, mosquitto.port, timeout_s=0.05)
    assert s["status"] == "stalled" and "wall-clock limit" in s["reason"]
    assert s["converged"] is False


def test_record_files_match_the_simulator(mosquitto, tmp_path):
    sc = flat()
    run_scenario(sc, tmp_path / "sim", progress=False, plots=False)
    s = run_scenario_mqtt(sc, tmp_path / "mqtt", broker=mosquitto.url, plots=False)
    sim_files = sorted(p.name for p in (tmp_path / "sim").iterdir())
    mqtt_files = sorted(p.name for p in (tmp_path / "mqtt").iterdir())
    assert sim_files == mqtt_files and s["files"][-1] == "summary.json"
    for name in ("labels.csv", "scenario.yaml"):
        assert (tmp_path / "sim" / name).read_text() == (tmp_path / "mqtt" / name).read_text()
    header = (tmp_path / "mqtt" / "rounds.csv").read_text().splitlines()[0]
    assert header == (tmp_path / "sim" / "rounds.csv").read_text().splitlines()[0]


def _cli(*args, timeout=60):
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_cli_transport_mqtt_writes_a_strict_record(mosquitto, tmp_path):
    path = tmp_path / "flat.yaml"
    path.write_text(FLAT.format(seed=1))
    res = _cli(
        "run",
        path,
        "--transport",
        "mqtt",
        "--broker",
        mosquitto.url,
        "--out",
        tmp_path / "o",
        "--no-plots",
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    text = (tmp_path / "o" / "summary.json").read_text()
    summary = json.loads(
        text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}")
    )
    assert summary["transport"] == "mqtt"
    assert summary["status"] in ("converged", "round_limit", "stalled", "diverged")
    assert all(v is None or math.isfinite(v) for v in summary["metrics"].values())


def test_cli_private_broker(tmp_path):
    # no --broker: the command starts (and stops) its own Mosquitto
    from tests.broker.conftest import _need_mosquitto

    _need_mosquitto()
    path = tmp_path / "flat.yaml"
    path.write_text(FLAT.format(seed=2))
    res = _cli("run", path, "--transport", "mqtt", "--out", tmp_path / "o", "--no-plots")
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["transport"] == "mqtt"


def test_cli_unreachable_broker_is_one_line_exit_1(tmp_path):
    path = tmp_path / "flat.yaml"
    path.write_text(FLAT.format(seed=1))
    t0 = time.monotonic()
    res = _cli(
        "run",
        path,
        "--transport",
        "mqtt",
        "--broker",
        "mqtt://127.0.0.1:1",
        "--out",
        tmp_path / "o",
    )
    assert time.monotonic() - t0 < 15
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the MQTT broker"), (
        res.stderr
    )
    assert not (tmp_path / "o" / "summary.json").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--broker", "mqtt://127.0.0.1:1883"],  # --broker with the simulator
        ["--transport", "mqtt", "--broker", "tcp://127.0.0.1:1883"],
        ["--transport", "mqtt", "--broker", "mqtt://127.0.0.1:70000"],
        ["--transport", "carrier-pigeon"],
    ],
)
def test_cli_usage_errors_exit_2(tmp_path, args):
    path = tmp_path / "flat.yaml"
    path.write_text(FLAT.format(seed=1))
    res = _cli("run", path, *args, "--out", tmp_path / "o")
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr


def _kill_if_running(proc):
    """Kill a run that did not stop, and its worker processes (its session).

    Left alive it would go on publishing on the shared broker, into later tests.
    """
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def test_cli_ctrl_c_leaves_an_interrupted_record(mosquitto, tmp_path):
    path = tmp_path / "long.yaml"
    path.write_text(
        FLAT.format(seed=1).replace("rounds: 12, tol: 1.0e-6", "rounds: 100000, tol: 0.0")
    )
    out = tmp_path / "o"
    proc = subprocess.Popen(
        [
            EXE,
            "run",
            str(path),
            "--transport",
            "mqtt",
            "--broker",
            mosquitto.url,
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its workers too can be killed if it hangs
        preexec_fn=default_sigint,
    )
    try:
        _wait_for_live_models(mosquitto, "fs/+/cloud/+/down", 3)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        _kill_if_running(proc)
    assert "interrupted" in stdout, (proc.returncode, stderr)
    assert "Traceback" not in stderr
    assert proc.returncode == 130, stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["transport"] == "mqtt"
    assert summary["reason"].startswith("interrupted at wall-clock time")
    assert 0 < summary["rounds"] < 100000


def test_paper_scenario_over_mqtt_gives_the_simulators_labels_rounds_and_payload(
    mosquitto, tmp_path
):
    """The exact-statistics paper scenario through the installed command, both transports."""
    scenario = str(Path(__file__).parents[2] / "scenarios" / "paper-flat-sum.yaml")
    sim, real = tmp_path / "sim", tmp_path / "mqtt"
    for out, extra in (
        (sim, []),
        (
            real,
            # unsigned, as the simulation: the very same bytes
            [
                *("--transport", "mqtt", "--broker", mosquitto.url),
                *("--run-id", "paper-flat-sum", "--insecure"),
            ],
        ),
    ):
        res = subprocess.run(
            [EXE, "run", scenario, "--out", str(out), "--no-plots", "--quiet", *extra],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert res.returncode == 0, res.stderr
    a = json.loads((sim / "summary.json").read_text())
    b = json.loads((real / "summary.json").read_text())
    assert (a["transport"], b["transport"]) == ("sim", "mqtt")
    assert (sim / "labels.csv").read_bytes() == (real / "labels.csv").read_bytes()
    assert a["status"] == b["status"] == "round_limit"
    assert a["rounds"] == b["rounds"] == 100
    assert a["payload_bytes"] == b["payload_bytes"]
    # 2 clients x (setup + 100 rounds) statistics up, plus the root's models down to them
    assert a["per_tier"]["edge"]["messages_up"] == b["per_tier"]["edge"]["messages_up"] == 202
    # the same run id: the clients' PUBLISH packets are the same bytes on both transports
    for key in ("bytes_up", "bytes_down", "payload_bytes_up", "payload_bytes_down"):
        assert a["per_tier"]["edge"][key] == b["per_tier"]["edge"][key], key
    assert a["metrics"] == b["metrics"]
    assert "privacy" not in a
    assert b["privacy"] == {"protocol": "none", "signed": False, "insecure": True, "rejected": {}}


def test_nodes_spread_over_processes_give_the_same_run(mosquitto):
    # the workers sign with the per-run keys the parent hands them: every message is
    # accepted (nothing rejected) and as long as in the signed simulation
    sc = flat(seed=7)
    fed_sim, s_sim, rows_sim = simulate(signed(sc))
    fed, s, rows = mqtt_run(
        sc, mosquitto.host, mosquitto.port, timeout_s=120, processes=2, run_id=sc.name
    )
    assert s["processes"] == 2
    assert (s["status"], s["rounds"]) == (s_sim["status"], s_sim["rounds"])
    np.testing.assert_array_equal(fed.final_labels, fed_sim.final_labels)
    assert s["payload_bytes"] == s_sim["payload_bytes"]
    key = lambda r: (r["round"], r["tier"], r["phase"], r["participants"], r.get("objective"))  # noqa: E731
    assert [key(r) for r in rows] == [key(r) for r in rows_sim]
    # the records of both processes merged: rounds.csv's cumulative bytes end at the total
    assert rows[-1]["bytes"] <= s["bytes_total"]
    assert s["privacy"]["keys"] == "per-run random" and s["privacy"]["rejected"] == {}
    assert rows[-1]["bytes"] >= s["per_tier"]["edge"]["bytes_up"]


def test_cli_ctrl_c_with_processes_stops_the_workers(mosquitto, tmp_path):
    path = tmp_path / "long.yaml"
    path.write_text(
        FLAT.format(seed=1).replace("rounds: 12, tol: 1.0e-6", "rounds: 100000, tol: 0.0")
    )
    out = tmp_path / "o"
    cmd = [EXE, "run", str(path), "--transport", "mqtt", "--broker", mosquitto.url]
    proc = subprocess.Popen(
        [*cmd, "--out", str(out), "--processes", "2", "--run-id", "ctrlc-processes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its workers too can be killed if it hangs
        preexec_fn=default_sigint,
    )
    try:
        _wait_for_live_models(mosquitto, "fs/ctrlc-processes/cloud/+/down", 3)
        proc.send_signal(signal.SIGTERM)  # as a service manager stops it
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        _kill_if_running(proc)
    assert "interrupted" in stdout
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["processes"] == 2
    assert 0 < summary["rounds"] < 100000


def test_a_finished_run_leaves_no_retained_message_on_the_broker(mosquitto):
    sc = flat(seed=11)
    _, s, _ = mqtt_run(sc, mosquitto.host, mosquitto.port, timeout_s=60, sys_stats=False)
    assert s["status"] in ("converged", "round_limit")
    assert s["retained_cleared"] == 2  # the root's down and config topics (a flat federation)
    got = []
    probe = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    subscribed = threading.Event()
    probe.on_connect = lambda c, *_: c.subscribe(f"fs/{s['run_id']}/#", qos=1)
    probe.on_subscribe = lambda *_: subscribed.set()
    probe.on_message = lambda _c, _u, msg: got.append((msg.topic, msg.retain))
    probe.connect(mosquitto.host, mosquitto.port)
    probe.loop_start()
    try:
        assert subscribed.wait(10)
        # retained messages arrive right after the SUBACK; a published marker comes after them
        paho_publish = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        paho_publish.connect(mosquitto.host, mosquitto.port)
        paho_publish.publish(f"fs/{s['run_id']}/marker", b"x", qos=1).wait_for_publish(10)
        paho_publish.disconnect()
        deadline = time.monotonic() + 10
        while not any(t.endswith("/marker") for t, _ in got) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        probe.loop_stop()
        probe.disconnect()
    assert [t for t, _ in got] == [f"fs/{s['run_id']}/marker"]


def test_a_low_open_file_limit_is_raised_for_the_nodes(tmp_path):
    """80 nodes under a soft limit of 48 open files: the run raises it (up to the hard one)."""
    path = tmp_path / "many.yaml"
    path.write_text(
        FLAT.format(seed=2)
        .replace("count: 3", "count: 80")
        .replace("n_per_cluster: 40", "n_per_cluster: 60")
        .replace("rounds: 12", "rounds: 2")
    )
    res = subprocess.run(
        ["bash", "-c", 'ulimit -Sn 48 && "$0" run "$1" --transport mqtt --out "$2" --no-plots',
         EXE, str(path), str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["status"] in ("converged", "round_limit"), summary["reason"]
    assert summary["per_tier"]["edge"]["reconnects"] == 0


def test_mvkm_ed_over_mqtt_is_the_simulated_run(mosquitto):
    """MVKM-ED's β travels in the model messages: same labels and bytes on both transports."""
    sc = parse_scenario(
        FLAT.format(seed=3)
        .replace("name: flat-mqtt", "name: mvkm-mqtt")
        .replace(
            "name: hk-mvfc, n_clusters: 4, center_update: exact", "name: mvkm-ed, n_clusters: 4"
        )
    )
    fed_sim, s_sim, _ = simulate(sc)
    fed, s, _ = mqtt_run(
        sc, mosquitto.host, mosquitto.port, timeout_s=60, run_id=sc.name, insecure=True
    )
    assert (s["status"], s["rounds"]) == (s_sim["status"], s_sim["rounds"])
    np.testing.assert_array_equal(fed.final_labels, fed_sim.final_labels)
    np.testing.assert_array_equal(fed.final_state.view_scale, fed_sim.final_state.view_scale)
    assert s["payload_bytes"] == s_sim["payload_bytes"]


def test_progress_reports_the_roots_rounds(mosquitto):
    seen = []
    sc = flat(seed=5)
    _, s, _ = mqtt_run(
        sc,
        mosquitto.host,
        mosquitto.port,
        timeout_s=60,
        sys_stats=False,
        progress=lambda r, t: seen.append((r, t)),
    )
    rounds = [r for r, _ in seen]
    assert rounds == sorted(rounds) and rounds[0] == 0
    assert max(rounds) <= s["rounds"] + 1  # + the setup round
    assert all(t >= 0 for _, t in seen)


@pytest.mark.parametrize("method", ["e-fkmvc", "fedhk-tucker"])
def test_tensor_family_over_mqtt_equals_the_simulator(mosquitto, method):
    sc = parse_scenario(
        FLAT.replace("name: flat-mqtt", f"name: {method}-mqtt")
        .replace(
            "{{name: hk-mvfc, n_clusters: 4, center_update: exact}}",
            f"{{{{name: {method}, n_clusters: 4, local_epochs: 2}}}}",
        )
        .replace("tol: 1.0e-6", "tol: 1.0e-4, tol_mode: relative")
        .format(seed=2)
    )
    fed_sim, s_sim, _ = simulate(sc)
    fed, s, _ = mqtt_run(sc, mosquitto.host, mosquitto.port, timeout_s=60)
    assert s["transport"] == "mqtt" and (s["status"], s["rounds"]) == (
        s_sim["status"],
        s_sim["rounds"],
    )
    assert set(fed.final_state) == set(fed_sim.final_state)
    for key, value in fed_sim.final_state.items():
        np.testing.assert_allclose(fed.final_state[key], value, rtol=0, atol=1e-10, err_msg=key)
    np.testing.assert_array_equal(fed.final_labels, fed_sim.final_labels)
    assert s["metrics"] == s_sim["metrics"]
