"""``fedstrata node`` with secure aggregation and signed messages, keys from files."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate
from tests.device.conftest import EXE, FLAT, node_json, start_node, write_deployment
from tests.device.test_node_mqtt import finish, run_id

SECURE = FLAT + "privacy: {{secure_aggregation: secagg, sign: true}}\n"


def _with_keys(folder, configs):
    res = subprocess.run(
        [EXE, "keys", "federation.yaml", "--out", "keys"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    roster = json.loads((folder / "keys" / "public-keys.json").read_text())
    assert sorted(roster) == sorted(configs)
    for nid, path in configs.items():
        text = path.read_text()
        path.write_text(
            text + f"signing: {{key: keys/{nid}.key, public_keys: keys/public-keys.json}}\n"
        )


@pytest.mark.broker
@pytest.mark.timeout(180)
def test_a_signed_secure_device_deployment_computes_the_simulators_model(mosquitto, tmp_path):
    text = SECURE.format(seed=3)
    configs = write_deployment(tmp_path, text, run=run_id(), url=mosquitto.url, signing="none")
    _with_keys(tmp_path, configs)
    results = finish({nid: start_node(path) for nid, path in configs.items()}, timeout=120)
    for nid, (code, out, err) in results.items():
        assert code == 0, (nid, out, err)
        assert "Traceback" not in out + err, (nid, err)
    fed, summary, _ = simulate(parse_scenario(text))
    assert summary["privacy"]["sessions_unmasked"] == summary["rounds"] + 2  # + private setup
    root = node_json(tmp_path, "cloud")
    assert (root["run_status"], root["rounds"]) == (summary["status"], summary["rounds"])
    model = np.load(tmp_path / "records" / "cloud" / "model.npz")
    for h, centers in enumerate(fed.final_state.centers):
        np.testing.assert_allclose(model[f"centers_{h}"], centers, rtol=0, atol=1e-10)


def _check(folder, node):
    return subprocess.run(
        [EXE, "node", "--config", f"{node}.yaml", "--check"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_signing_keys_are_checked_before_the_node_starts(tmp_path):
    configs = write_deployment(
        tmp_path, SECURE.format(seed=3), run="t", url="mqtt://127.0.0.1:1", signing="none"
    )
    res = _check(tmp_path, "client-0")  # no signing section
    assert res.returncode == 1
    assert "client-0.yaml:2: node: a node signs its messages: give signing.key" in res.stderr
    # the scenario signs: insecure is refused too
    path = configs["client-0"]
    path.write_text(path.read_text() + "insecure: true\n")
    res = _check(tmp_path, "client-0")
    assert res.returncode == 1
    assert "insecure: the scenario signs its messages (privacy.sign: true)" in res.stderr
    path.write_text(path.read_text().replace("insecure: true\n", ""))
    _with_keys(tmp_path, configs)
    assert _check(tmp_path, "client-0").returncode == 0
    # another node's key
    path = configs["client-0"]
    path.write_text(path.read_text().replace("keys/client-0.key", "keys/client-1.key"))
    res = _check(tmp_path, "client-0")
    assert res.returncode == 1 and "this key is not client-0's" in res.stderr
    # a key file others can read
    (tmp_path / "keys" / "client-1.key").chmod(0o644)
    res = _check(tmp_path, "client-0")
    assert res.returncode == 1 and "signing.key" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.broker
@pytest.mark.timeout(180)
def test_a_deployment_refuses_a_final_model_replayed_from_its_previous_run(mosquitto, tmp_path):
    """A site keeps its key files from run to run: the run id in the signed bytes is
    what tells the previous run's final model from this run's."""
    from fedstrata.privacy.signing import SIGNATURE_BYTES
    from tests.broker.test_signed_mqtt import Watcher, _final_model

    text = FLAT.format(seed=3)
    first, second = run_id(), run_id()
    configs = write_deployment(tmp_path, text, run=first, url=mosquitto.url)  # signed
    watcher = Watcher(mosquitto)
    try:
        results = finish({nid: start_node(path) for nid, path in configs.items()}, timeout=90)
        assert all(code == 0 for code, _, _ in results.values()), results
        final = _final_model(watcher.heard, f"fs/{first}/cloud/cloud/down", SIGNATURE_BYTES)
        for path in configs.values():  # the next run: same keys, a new run id and records
            path.write_text(
                path.read_text()
                .replace(f"run: {first}", f"run: {second}")
                .replace("out: records/", "out: records-2/")
            )
        down = f"fs/{second}/cloud/cloud/down"
        watcher.replay = (down, down, final, SIGNATURE_BYTES)
        results = finish({nid: start_node(path) for nid, path in configs.items()}, timeout=90)
    finally:
        watcher.close()
    assert watcher.replayed.is_set(), "the replay was never sent"
    for nid, (code, out, err) in results.items():
        assert code == 0 and "Traceback" not in err, (nid, out, err)

    def record(run: str, node: str) -> dict:
        return json.loads((tmp_path / run / node / "node.json").read_text())

    before, after = record("records", "cloud"), record("records-2", "cloud")
    assert (after["run_status"], after["rounds"]) == (before["run_status"], before["rounds"])
    for c in ("client-0", "client-1", "client-2"):
        rec = record("records-2", c)
        assert rec["rejected"] == {"wrong_run": 1}, (c, rec["rejected"])
        assert rec["final_model_round"] == before["rounds"] + 1  # this run's final, not the old
        assert (tmp_path / "records-2" / c / "labels.csv").read_text() == (
            tmp_path / "records" / c / "labels.csv"
        ).read_text()
