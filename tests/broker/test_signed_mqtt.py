"""Real MQTT runs are signed by default, and a message replayed from an earlier run is refused.

A watcher (a plain paho client, as an attacker on the broker would be) records every
message of a first run, then re-publishes that run's signed ``final`` model on the
second run's model topic while the second run is under way: the clients refuse it
(``wrong_run``), the run finishes as it would have, and its record counts the
rejections.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time

import numpy as np
import paho.mqtt.client as mqtt
import pytest

from fedstrata import wire
from fedstrata.privacy.signing import SIGNATURE_BYTES
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run_mqtt import mqtt_run

pytestmark = pytest.mark.broker

EXE = shutil.which("fedstrata")
FLAT = """\
name: {name}
seed: 5
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 30}}, partition: {{kind: iid}}}}
topology: {{clients: {{count: 3}}}}
algorithm: {{name: hk-mvfc, n_clusters: 4, center_update: exact}}
protocol: {{rule: sum, rounds: 12, tol: 1.0e-6, deadline_s: 30}}
"""


class Watcher:
    """A paho client on ``fs/#``: records what it hears, and can re-publish on cue."""

    def __init__(self, broker) -> None:
        self.heard: list[tuple[str, bytes]] = []
        # (cue topic, target topic, bytes, signature bytes before the envelope)
        self.replay: tuple[str, str, bytes, int] | None = None
        self.replayed = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        self.client.on_connect = lambda c, *_: c.subscribe("fs/#", qos=1)
        self.client.on_message = self._on_message
        self.subscribed = threading.Event()
        self.client.on_subscribe = lambda *_: self.subscribed.set()
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        assert self.subscribed.wait(10), "the watcher could not subscribe"

    def _on_message(self, client, _userdata, msg) -> None:
        self.heard.append((msg.topic, bytes(msg.payload)))
        if self.replay is None or self.replayed.is_set() or msg.topic != self.replay[0]:
            return
        if not msg.payload:  # the end of a run clearing its retained model
            return
        # the cue: the root's first iteration model. It follows the setup round, which
        # every client answered, so every client is subscribed by now
        env = wire.decode(bytes(msg.payload)[self.replay[3] :])
        if env.body.get("phase") == "iter":
            self.replayed.set()
            client.publish(self.replay[1], self.replay[2], qos=1)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def _final_model(heard, topic: str, offset: int, wait_s: float = 10.0) -> bytes:
    # the watcher has its own connection: the run can return before the broker has
    # delivered the root's last broadcast to it (seen once in a loaded CI run)
    deadline = time.monotonic() + wait_s
    while True:
        for t, payload in list(heard):
            if t == topic and payload:
                env = wire.decode(payload[offset:])
                if env.kind == "model" and env.body.get("phase") == "final":
                    return payload
        if time.monotonic() > deadline:
            raise AssertionError(f"no final model was heard on {topic}")
        time.sleep(0.05)


@pytest.mark.parametrize("insecure", [False, True])
def test_a_final_model_replayed_from_an_earlier_run_is_refused(mosquitto, insecure):
    sc = parse_scenario(FLAT.format(name="replay"))
    watcher = Watcher(mosquitto)
    try:
        fed1, s1, _ = mqtt_run(
            sc,
            mosquitto.host,
            mosquitto.port,
            timeout_s=60,
            sys_stats=False,
            run_id="replay-a",
            insecure=insecure,
        )
        assert s1["status"] in ("converged", "round_limit")
        offset = 0 if insecure else SIGNATURE_BYTES
        final = _final_model(watcher.heard, "fs/replay-a/cloud/cloud/down", offset)
        # once the second run's root broadcasts its first model, the attacker sends the
        # first run's final model to the second run's clients
        down = "fs/replay-b/cloud/cloud/down"
        watcher.replay = (down, down, final, offset)
        fed2, s2, _ = mqtt_run(
            sc,
            mosquitto.host,
            mosquitto.port,
            timeout_s=60,
            sys_stats=False,
            run_id="replay-b",
            insecure=insecure,
        )
    finally:
        watcher.close()
    assert watcher.replayed.is_set(), "the replay was never sent"
    # the clients refused it, and the run went on to the end it had the first time
    assert s2["status"] == s1["status"] and s2["rounds"] == s1["rounds"]
    np.testing.assert_array_equal(fed2.final_labels, fed1.final_labels)
    assert s2["privacy"]["rejected"] == {"wrong_run": 3}  # each of the three clients
    assert s2["privacy"]["signed"] is (not insecure)
    assert s1["privacy"]["rejected"] == {}


def test_another_runs_signed_message_under_the_same_run_id_is_forged(mosquitto):
    """Same run id twice: a signed run's fresh keys tell the earlier run's model apart."""
    sc = parse_scenario(FLAT.format(name="again"))
    watcher = Watcher(mosquitto)
    try:
        _, s1, _ = mqtt_run(
            sc, mosquitto.host, mosquitto.port, timeout_s=60, sys_stats=False, run_id="again-1"
        )
        final = _final_model(watcher.heard, "fs/again-1/cloud/cloud/down", SIGNATURE_BYTES)
        down = "fs/again-1/cloud/cloud/down"
        watcher.replay = (down, down, final, SIGNATURE_BYTES)
        _, s2, _ = mqtt_run(
            sc, mosquitto.host, mosquitto.port, timeout_s=60, sys_stats=False, run_id="again-1"
        )
    finally:
        watcher.close()
    assert watcher.replayed.is_set()
    assert (s2["status"], s2["rounds"]) == (s1["status"], s1["rounds"])
    # with seed-derived keys (the simulator's) this model would verify and every client
    # would take it as the end of the run; per-run keys make it a forgery
    assert s2["privacy"]["rejected"] == {"forged": 3}


def _run(tmp_path, name: str, *extra: str) -> subprocess.CompletedProcess:
    path = tmp_path / f"{name}.yaml"
    if not path.exists():
        path.write_text(FLAT.format(name=name))
    return subprocess.run(
        [EXE, "run", str(path), "--out", str(tmp_path / name), "--no-plots", "--quiet", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_signs_real_runs_unless_insecure(mosquitto, tmp_path):
    assert EXE is not None
    url = ("--transport", "mqtt", "--broker", mosquitto.url)
    res = _run(tmp_path, "signed", *url)
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "signed" / "summary.json").read_text())
    assert summary["privacy"] == {
        "protocol": "none",
        "signed": True,
        "keys": "per-run random",
        "rejected": {},
    }
    assert "privacy: signed, keys per-run random (0 messages rejected)" in res.stdout
    res = _run(tmp_path, "plain", *url, "--insecure")
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert summary["privacy"] == {
        "protocol": "none",
        "signed": False,
        "insecure": True,
        "rejected": {},
    }
    assert "UNSIGNED (--insecure" in res.stdout
    # a scenario that asks for signatures cannot run insecure; the simulator has no such flag
    (tmp_path / "sign.yaml").write_text(FLAT.format(name="sign") + "privacy: {sign: true}\n")
    res = _run(tmp_path, "sign", *url, "--insecure")
    assert res.returncode == 2 and "cannot run insecure" in res.stderr
    assert not (tmp_path / "sign").exists()
    res = _run(tmp_path, "sign", "--insecure")
    assert res.returncode == 2 and "--insecure needs --transport mqtt" in res.stderr


def test_key_files_sign_a_real_run(mosquitto, tmp_path):
    assert EXE is not None
    (tmp_path / "files.yaml").write_text(FLAT.format(name="files"))
    keys = subprocess.run(
        [EXE, "keys", str(tmp_path / "files.yaml"), "--out", str(tmp_path / "keys")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert keys.returncode == 0, keys.stderr
    url = ("--transport", "mqtt", "--broker", mosquitto.url)
    res = _run(tmp_path, "files", *url, "--keys", str(tmp_path / "keys"))
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "files" / "summary.json").read_text())
    assert summary["privacy"]["keys"] == "key files" and summary["privacy"]["signed"] is True
    (tmp_path / "keys" / "client-1.key").unlink()
    res = _run(tmp_path, "files", *url, "--keys", str(tmp_path / "keys"), "--overwrite")
    assert res.returncode == 2 and "client-1.key" in res.stderr
