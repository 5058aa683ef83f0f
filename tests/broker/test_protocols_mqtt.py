"""Every protocol kind over a real Mosquitto, through the installed command."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.broker

EXE = shutil.which("fedstrata")

SCENARIO = """
name: kinds-mqtt
seed: 2
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 200}}, partition: {{kind: iid}}}}
topology:
  tiers: [{{name: fog, count: 2}}]
  clients: {{count: 6}}
algorithm: {{name: hk-mvfc, n_clusters: 4, center_update: exact}}
protocol:
  kind: {kind}
  rule: sum
  rounds: 12
  plateau: 4
  deadline_s: 20
{extra}
"""


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("sync", "  stragglers: use_last\n  quorum: 0.5"),
        ("async", "  staleness: {function: hinge, a: 10, b: 4}"),
        ("buffered", "  buffer_size: 2"),
        ("adaptive", "  lambda_net: 0.5"),
    ],
)
def test_kind_runs_over_mqtt_and_ends_with_a_strict_record(mosquitto, tmp_path, kind, extra):
    path = tmp_path / "kinds.yaml"
    path.write_text(SCENARIO.format(kind=kind, extra=extra))
    res = subprocess.run(
        [
            EXE or "fedstrata",
            "run",
            str(path),
            "--transport",
            "mqtt",
            "--broker",
            f"mqtt://{mosquitto.host}:{mosquitto.port}",
            "--out",
            str(tmp_path / "out"),
            "--quiet",
            "--no-plots",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["transport"] == "mqtt"
    assert summary["status"] in ("converged", "round_limit"), summary["reason"]
    assert summary["metrics"]["ari"] >= 0.9
    with open(tmp_path / "out" / "rounds.csv", newline="") as fh:
        root = [r for r in csv.DictReader(fh) if r["tier"] == "cloud" and r["phase"] == "iter"]
    assert root
    if kind in ("async", "buffered"):
        assert any(r["staleness_max"] != "" for r in root)
    if kind == "adaptive":
        assert all(r["plan_quorum"] != "" for r in root)
