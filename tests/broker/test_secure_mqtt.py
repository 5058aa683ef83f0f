"""Secure aggregation over a real Mosquitto: parity with the simulator, a killed member."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedstrata.algorithms.multiview import MultiViewModel
from fedstrata.broker.runner import NodeRunner
from fedstrata.nodes.client import ClientNode
from fedstrata.nodes.config import Address
from tests.nodes.test_secure_aggregation import (
    INIT,
    SHAPE,
    Recording,
    assert_same_sum,
    plaintext_sum,
    protocol,
    views,
)

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parents[2]
EXE = shutil.which("fedstrata") or "fedstrata"

SCENARIO = """
name: {name}
seed: 1
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 150}}, partition: {{kind: iid}}}}
topology:
  tiers: [{{name: fog, count: 3}}]
  clients: {{count: 9}}
algorithm: {{name: hk-mvfc, n_clusters: 4, center_update: exact}}
protocol: {{rule: sum, rounds: 6, deadline_s: 20}}
privacy: {{secure_aggregation: {mode}, sign: true}}
"""


def _run(path: Path, out: Path, *extra: str) -> dict:
    res = subprocess.run(
        [EXE, "run", str(path), "--out", str(out), "--quiet", "--no-plots", *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    return json.loads((out / "summary.json").read_text())


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["secagg", "secagg+"])
def test_a_secure_mqtt_run_gives_the_simulated_labels(mosquitto, tmp_path, mode):
    path = tmp_path / "secure.yaml"
    name = "secure-" + mode.replace("+", "-plus")
    path.write_text(SCENARIO.format(mode=mode, name=name))
    sim = _run(path, tmp_path / "sim")
    mqtt = _run(
        path,
        tmp_path / "mqtt",
        "--transport",
        "mqtt",
        "--broker",
        f"mqtt://{mosquitto.host}:{mosquitto.port}",
        "--run-id",  # the simulator's run id: envelopes of the same size, byte for byte
        name,
    )
    # both signed (a real run with fresh keys, the simulation with seed-derived ones):
    # every message carries the same 64 bytes of signature, nothing is refused
    assert mqtt["privacy"]["keys"] == "per-run random" and mqtt["privacy"]["rejected"] == {}
    assert sim["privacy"]["signed"] is True
    assert mqtt["payload_bytes"] == sim["payload_bytes"]
    assert (tmp_path / "sim" / "labels.csv").read_bytes() == (
        tmp_path / "mqtt" / "labels.csv"
    ).read_bytes()
    assert mqtt["rounds"] == sim["rounds"] == 6
    for key in ("protocol", "sessions_unmasked", "rounds_unmasked", "overhead_bytes", "per_tier"):
        assert mqtt["privacy"][key] == sim["privacy"][key], key
    # root and three fogs, every round and both stages of the private setup
    assert sim["privacy"]["sessions_unmasked"] == (6 + 2) * 4
    assert sim["privacy"]["sessions_failed"] == 0


@pytest.mark.timeout(120)
def test_a_member_killed_after_its_masked_input_is_still_in_the_exact_sum(mosquitto):
    victims = (2, 6, 9)  # 30 % of 10
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.broker.secure_victim",
                str(i),
                mosquitto.host,
                str(mosquitto.port),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in victims
    ]
    proto = protocol("secagg")
    model = MultiViewModel(3)
    clients = [
        ClientNode(
            f"client-{i}",
            parent=Address("cloud", "cloud"),
            views=views(i),
            model=model,
            shape=SHAPE,
            protocol=proto,
            seed=i,
        )
        for i in range(10)
    ]
    root = Recording(
        "cloud",
        tier="cloud",
        children=[c.node_id for c in clients],
        parent=None,
        model=model,
        shape=SHAPE,
        protocol=proto,
        deadline_s=8.0,
        quorum=0.5,
        init_state=INIT,
    )
    alive = [c for i, c in enumerate(clients) if i not in victims]

    for p in procs:  # the victims are connected before the root opens the round
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"

    async def main():
        await asyncio.sleep(0.2)  # their subscriptions reach the broker
        runners = [NodeRunner(n, mosquitto.host, mosquitto.port) for n in [root, *alive]]
        await asyncio.wait_for(asyncio.gather(*(r.run() for r in runners)), 90)
        return runners

    try:
        asyncio.run(main())
        outs = [p.communicate(timeout=30)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [-9] * 3  # really killed
    assert all("masked" in out for out in outs)  # ... after the masked input went out
    [closing] = root.closings
    assert closing.ok, closing.fields
    assert closing.fields["secure_failure"] == ""
    assert closing.fields["recovered"] == 0  # their masked inputs arrived: only self masks
    body = {
        "phase": "iter",
        "centers": [np.asarray(c) for c in INIT.centers],
        "view_weights": INIT.view_weights,
    }
    expected = plaintext_sum(clients, root.algorithm.model_body(INIT, {}) or body)
    assert_same_sum(closing.total, expected, 10)
