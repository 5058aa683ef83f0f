"""``fedstrata node`` as real subprocesses against a real Mosquitto.

A deployment of device nodes (one process per node, data in files) computes the
simulator's model; Ctrl-C and SIGTERM stop a node cleanly; bad configs and an
unreachable broker fail with clear lines.
"""

import os
import secrets
import shutil
import signal
import subprocess
import threading

import numpy as np
import paho.mqtt.client as mqtt
import pytest

from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate
from tests.device.conftest import EXE, FLAT, node_json, start_node, write_deployment


def run_id() -> str:
    return f"t-{secrets.token_hex(4)}"


def finish(procs: dict, timeout: float = 60) -> dict:
    """Wait for every process; kill the rest if one hangs. Node id -> (code, out, err)."""
    results = {}
    try:
        for nid, p in procs.items():
            out, err = p.communicate(timeout=timeout)
            results[nid] = (p.returncode, out, err)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
    return results


@pytest.mark.broker
def test_a_device_deployment_computes_the_simulators_model(mosquitto, tmp_path):
    text = FLAT.format(seed=5)
    configs = write_deployment(tmp_path, text, run=run_id(), url=mosquitto.url)
    results = finish({nid: start_node(path) for nid, path in configs.items()})
    for nid, (code, out, err) in results.items():
        assert code == 0, (nid, out, err)
        assert "Traceback" not in out + err and err == "", (nid, err)
    fed, summary, rows = simulate(parse_scenario(text))

    root = node_json(tmp_path, "cloud")
    assert root["status"] == "finished" and root["role"] == "root"
    assert (root["run_status"], root["rounds"]) == (summary["status"], summary["rounds"])
    assert root["files"] == ["model.npz", "rounds.csv", "node.json"]
    # signed by default, with the deployment's key files; nothing was refused
    assert (root["signed"], root["keys"], root["rejected"]) == (True, "key files", {})
    model = np.load(tmp_path / "records" / "cloud" / "model.npz")
    for h, centers in enumerate(fed.final_state.centers):
        np.testing.assert_allclose(model[f"centers_{h}"], centers, rtol=0, atol=1e-10)
    np.testing.assert_allclose(
        model["view_weights"], fed.final_state.view_weights, rtol=0, atol=1e-10
    )
    assert int(model["rounds"]) == summary["rounds"]
    # the root's rounds: the same objectives as the simulator's
    lines = (tmp_path / "records" / "cloud" / "rounds.csv").read_text().splitlines()
    header = lines[0].split(",")
    objectives = [
        float(dict(zip(header, line.split(","), strict=True))["objective"])
        for line in lines[1:]
        if ",iter," in line
    ]
    expected = [r["objective"] for r in rows if r["tier"] == "cloud" and r["phase"] == "iter"]
    np.testing.assert_allclose(objectives, expected, rtol=1e-12)

    for c, idx in fed.client_indices.items():
        rec = node_json(tmp_path, c)
        assert rec["status"] == "finished" and rec["warnings"] == []
        assert rec["final_model_round"] == summary["rounds"] + 1  # setup round 0, final after
        assert rec["samples"] == idx.size and rec["scenario_hash"] == root["scenario_hash"]
        rows_c = (tmp_path / "records" / c / "labels.csv").read_text().splitlines()
        assert rows_c[0] == "client,index,label"
        labels = [int(r.split(",")[2]) for r in rows_c[1:]]
        assert [r.split(",")[:2] for r in rows_c[1:]] == [[c, str(i)] for i in range(idx.size)]
        np.testing.assert_array_equal(labels, fed.final_labels[np.sort(idx)])


class Presence:
    """Watch one node's presence topic: its ``online`` notice, its will, a marker."""

    def __init__(self, broker, topic: str) -> None:
        self.topic = topic
        self.messages: list[bytes] = []
        self.online = threading.Event()
        self.marker = threading.Event()
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"watch-{secrets.token_hex(4)}"
        )
        subscribed = threading.Event()
        self.client.on_subscribe = lambda *a: subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect(broker.host, broker.port)
        self.client.subscribe(topic, qos=1)
        self.client.loop_start()
        assert subscribed.wait(10)

    def _on_message(self, client, userdata, msg):
        self.messages.append(msg.payload)
        if msg.payload == b"online":
            self.online.set()
        if msg.payload == b"marker":
            self.marker.set()

    def before_marker(self) -> list[bytes]:
        """What arrived before a marker published now (a will would come before it)."""
        self.client.publish(self.topic, b"marker", qos=1)
        assert self.marker.wait(10)
        return self.messages[: self.messages.index(b"marker")]

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


@pytest.mark.broker
@pytest.mark.parametrize(
    ("node", "sig"),
    [("client-0", signal.SIGTERM), ("cloud", signal.SIGINT)],
    ids=["client-SIGTERM", "root-SIGINT"],
)
def test_a_signal_stops_the_node_cleanly(mosquitto, tmp_path, node, sig):
    run = run_id()
    configs = write_deployment(tmp_path, FLAT.format(seed=1), run=run, url=mosquitto.url)
    watch = Presence(mosquitto, f"fs/{run}/presence/{node}")
    proc = start_node(configs[node])
    try:
        assert watch.online.wait(30), "the node never came online"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    try:
        assert proc.returncode == 130, (out, err)
        assert err == "" and "Traceback" not in out
        assert f"{node} (" in out and f"interrupted: interrupted by {sig.name}" in out
        rec = node_json(tmp_path, node)
        assert rec["status"] == "interrupted"
        assert rec["reason"].startswith(f"interrupted by {sig.name} after ")
        assert rec["traffic"]["connects"] == 1 and rec["traffic"]["clears"] == 0
        if node == "cloud":
            assert rec["run_status"] == "interrupted" and rec["model_round"] is None
            assert rec["files"] == ["rounds.csv", "node.json"]
            assert rec["warnings"] == ["no global model: the setup round never completed"]
        else:
            assert rec["files"] == ["node.json"] and rec["final_model_round"] is None
        # a clean DISCONNECT: the broker did not publish the node's will (an empty payload)
        assert watch.before_marker() == [b"online"]
    finally:
        watch.close()


@pytest.mark.broker
def test_timeout_is_exit_1(mosquitto, tmp_path):
    run = run_id()
    configs = write_deployment(
        tmp_path, FLAT.format(seed=1), run=run, url=mosquitto.url, timeout_s=0.5
    )
    (code, out, err) = finish({"c": start_node(configs["client-1"])}, timeout=30)["c"]
    assert code == 1
    assert out == f"client-1 (client, run id {run}): connected to {mosquitto.url}\n"
    assert err == "error: client-1 did not finish within its 0.5 s limit (timeout_s)\n"
    rec = node_json(tmp_path, "client-1")
    assert rec["status"] == "timed_out" and rec["files"] == ["node.json"]


def test_an_unreachable_broker_is_one_line_exit_1(tmp_path):
    configs = write_deployment(
        tmp_path, FLAT.format(seed=1), run=run_id(), url="mqtt://127.0.0.1:1"
    )
    (code, out, err) = finish({"c": start_node(configs["cloud"])}, timeout=30)["c"]
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: cannot reach the MQTT broker at mqtt://127.0.0.1:1: ")
    rec = node_json(tmp_path, "cloud")
    assert rec["status"] == "transport_failed" and rec["reason"] == lines[0][len("error: ") :]


def cli(folder, *args):
    assert EXE is not None
    return subprocess.run(
        [EXE, "node", *args], cwd=folder, capture_output=True, text=True, timeout=60
    )


def test_a_bad_config_exits_1_with_located_lines(tmp_path):
    (tmp_path / "fed.yaml").write_text(FLAT.format(seed=1))
    (tmp_path / "v0.csv").write_text("1,2\n3,oops\n")
    (tmp_path / "node.yaml").write_text(
        "scenario: fed.yaml\n"
        "node: client-0\n"
        "brokr: {url: 'mqtt://127.0.0.1:1883'}\n"
        "data:\n"
        "  - {view: 0, path: v0.csv}\n"
        "out: rec\n"
        "insecure: true\n"
    )
    res = cli(tmp_path, "--config", "node.yaml")
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.splitlines() == [
        "node.yaml:1: broker: required key is missing",
        "node.yaml:3: brokr: unknown key; known keys: scenario, node, run, broker, data, "
        "view_dims, out, timeout_s, signing, insecure, faults",
    ]
    (tmp_path / "node.yaml").write_text(
        (tmp_path / "node.yaml").read_text().replace("brokr", "broker")
    )
    res = cli(tmp_path, "--config", "node.yaml")
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.splitlines() == [
        "node.yaml:5: data.0.path: v0.csv: line 2, column 2: 'oops' is not a number"
    ]
    assert not (tmp_path / "rec").exists()


def test_check_prints_the_plan_and_writes_nothing(tmp_path):
    configs = write_deployment(
        tmp_path, FLAT.format(seed=1), run="trial-7", url="mqtts://broker.lan"
    )
    res = cli(tmp_path, "--config", configs["client-0"].name, "--check")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[:2] == [
        "client-0.yaml: ok",
        "  node      client-0 (client of cloud, tier edge), run id trial-7",
    ]
    assert "  broker    mqtts://broker.lan:8883 (MQTT 3.1.1, TLS (CA system))" in res.stdout
    assert not (tmp_path / "records").exists()
    res = cli(tmp_path, "--config", "nope.yaml", "--check")
    assert (res.returncode, res.stderr) == (1, "nope.yaml: cannot read file: no such file\n")


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _tls_files(folder):
    """A CA, a server certificate for 127.0.0.1 and a client certificate (P-256 keys)."""
    folder.mkdir()
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=fedstrata test CA", cwd=folder)  # fmt: skip
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "")):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=folder)  # fmt: skip
        extra = []
        if ext:
            (folder / f"{name}.ext").write_text(ext + "\n")
            extra = ["-extfile", f"{name}.ext"]
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", *extra, cwd=folder)  # fmt: skip


@pytest.mark.broker
def test_tls_with_a_client_certificate_and_a_password(tmp_path):
    """mqtts://, the broker's CA, a client certificate and a password file, end to end."""
    from fedstrata.broker.launcher import find_mosquitto, free_port, wait_for_port
    from tests.device.conftest import _need_mosquitto

    _need_mosquitto()
    if shutil.which("openssl") is None or shutil.which("mosquitto_passwd") is None:
        pytest.skip("needs the openssl and mosquitto_passwd commands")
    certs = tmp_path / "certs"
    _tls_files(certs)
    subprocess.run(
        ["mosquitto_passwd", "-b", "-c", str(certs / "passwd"), "device", "s3cret word"],
        check=True,
        capture_output=True,
    )
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous false\npassword_file {certs / 'passwd'}\n"
        f"cafile {certs / 'ca.crt'}\ncertfile {certs / 'server.crt'}\n"
        f"keyfile {certs / 'server.key'}\nrequire_certificate true\npersistence false\n"
        # as root, mosquitto would switch to user mosquitto, who cannot read tmp_path
        + ("user root\n" if os.geteuid() == 0 else "")
    )
    broker = subprocess.Popen(
        [find_mosquitto(), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        assert wait_for_port("127.0.0.1", port, 10), "the TLS broker did not start"
        site = tmp_path / "site"
        site.mkdir()
        (site / "device.pass").write_text("s3cret word\n")
        (site / "device.pass").chmod(0o600)
        section = (
            f"{{url: 'mqtts://127.0.0.1:{port}', username: device, password_file: device.pass, "
            f"ca: {certs / 'ca.crt'}, cert: {certs / 'client.crt'}, key: {certs / 'client.key'}}}"
        )
        configs = write_deployment(site, FLAT.format(seed=3), run=run_id(), url="", broker=section)
        results = finish({nid: start_node(path) for nid, path in configs.items()})
        for nid, (code, out, err) in results.items():
            assert code == 0 and err == "", (nid, out, err)
        root = node_json(site, "cloud")
        assert root["broker"] == f"mqtts://127.0.0.1:{port}" and root["status"] == "finished"
        fed, _, _ = simulate(parse_scenario(FLAT.format(seed=3)))
        model = np.load(site / "records" / "cloud" / "model.npz")
        np.testing.assert_allclose(model["centers_0"], fed.final_state.centers[0], atol=1e-10)
        # without the client certificate the broker refuses the node: one line, exit 1
        text = configs["client-0"].read_text()
        configs["client-0"].write_text(text.replace(f", cert: {certs / 'client.crt'}", "").replace(
            f", key: {certs / 'client.key'}", ""
        ).replace("out: records/client-0", "out: records/client-0-again"))  # fmt: skip
        (code, out, err) = finish({"c": start_node(configs["client-0"])}, timeout=30)["c"]
        assert code == 1 and len(err.splitlines()) == 1, err
        assert err.startswith(f"error: cannot reach the MQTT broker at mqtts://127.0.0.1:{port}: ")
        assert "certificate required" in err  # the broker's reason, not a timeout
        # (a new out folder: the first one holds client-0's finished record, which a node
        # refuses to overwrite)
        rec = node_json(site, "client-0-again")
        assert rec["status"] == "transport_failed" and rec["mqtt_log"]
    finally:
        broker.terminate()
        broker.communicate(timeout=10)


@pytest.mark.broker
def test_a_client_process_killed_mid_round_the_root_goes_on_by_deadline_and_quorum(
    mosquitto, tmp_path
):
    """SIGKILL one of three client processes mid-run: no goodbye, only its will."""
    text = FLAT.format(seed=5).replace(
        "rounds: 12, tol: 1.0e-6, deadline_s: 30", "rounds: 8, tol: 0.0, deadline_s: 2, quorum: 0.6"
    )
    run = run_id()
    configs = write_deployment(tmp_path, text, run=run, url=mosquitto.url)
    models = threading.Semaphore(0)
    watcher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    watcher.on_connect = lambda c, *_: c.subscribe(f"fs/{run}/cloud/cloud/down", qos=1)
    watcher.on_message = lambda _c, _u, msg: None if msg.retain else models.release()
    watcher.connect(mosquitto.host, mosquitto.port)
    watcher.loop_start()
    procs = {nid: start_node(path) for nid, path in configs.items()}
    try:
        for _ in range(3):  # the setup model and two rounds' models
            assert models.acquire(timeout=60), "the run never got going"
        procs["client-2"].kill()
        results = finish(procs)
    finally:
        watcher.loop_stop()
        watcher.disconnect()
    assert results["client-2"][0] == -signal.SIGKILL
    for nid in ("cloud", "client-0", "client-1"):
        assert results[nid][0] == 0, (nid, results[nid])
    root = node_json(tmp_path, "cloud")
    assert root["status"] == "finished" and root["run_status"] == "round_limit"
    assert root["rounds"] == 8
    # the rounds after the kill closed at the deadline with 2 of 3 (quorum 0.6 needs 2)
    lines = (tmp_path / "records" / "cloud" / "rounds.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=True)) for line in lines[1:]]
    participants = [int(r["participants"]) for r in rows]
    assert participants[:2] == [3, 3] and participants[-1] == 2, participants
    assert all(r["ok"] in ("True", "true", "1") for r in rows), rows
    # the killed process never rewrote its node.json
    assert node_json(tmp_path, "client-2")["status"] == "running"
