"""Secure aggregation and signing in whole simulated runs, through the installed command."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest

EXE = shutil.which("fedstrata") or "fedstrata"

BASE = """
name: {name}
seed: 4
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 150}}, partition: {{kind: iid}}}}
topology:
{topology}
algorithm: {{name: hk-mvfc, n_clusters: 4, kernel: type1, center_update: paper}}
protocol: {{rule: sum, rounds: 25, tol: 1.0e-6, deadline_s: 10}}
privacy: {{secure_aggregation: {mode}, sign: {sign}}}
"""

FLAT = "  clients: {count: 10, link: {latency: 0.02, bandwidth_mbps: 10}}"
TIERS = (
    "  tiers: [{name: fog, count: 4, link: {latency: 0.01, bandwidth_mbps: 100}}]\n"
    "  clients: {count: 16, link: {latency: 0.05, bandwidth_mbps: 5}}"
)


def run(tmp: Path, name: str, text: str) -> dict:
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    res = subprocess.run(
        [EXE, "run", str(path), "--out", str(tmp / name), "--no-plots"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    summary = json.loads((tmp / name / "summary.json").read_text())
    summary["_stdout"] = res.stdout
    return summary


@pytest.mark.parametrize(("shape", "topology"), [("flat", FLAT), ("tiers", TIERS)])
def test_secure_aggregation_changes_nothing_but_the_bytes(tmp_path, shape, topology):
    """The exact-statistics scenario: masking changes the bytes, never the sums.

    SecAgg and SecAgg+ give the same labels and rounds (the same private setup, the
    same exact sums); the plain run seeds from the clients' own k-means candidates,
    which a private setup may not send, so it is compared on quality only.
    """
    runs = {}
    for mode in ("none", "secagg", "secagg+"):
        name = f"{shape}-{mode.replace('+', '-plus')}"
        text = BASE.format(name=name, topology=topology, mode=mode, sign="false")
        runs[mode] = run(tmp_path, name, text)
    masked = (tmp_path / f"{shape}-secagg" / "labels.csv").read_bytes()
    for mode in ("secagg", "secagg+"):
        s = runs[mode]
        name = f"{shape}-{mode.replace('+', '-plus')}"
        label_file = tmp_path / name / "labels.csv"
        assert label_file.read_bytes() == masked
        assert (s["rounds"], s["status"]) == (runs["secagg"]["rounds"], runs["secagg"]["status"])
        assert s["metrics"]["ari"] >= runs["none"]["metrics"]["ari"] - 0.01
        p = s["privacy"]
        groups = 1 if shape == "flat" else 5
        sums = s["rounds"] + 2  # the private setup's two stages are secure sums too
        assert p["sessions_unmasked"] == groups * sums and p["sessions_failed"] == 0
        assert p["rounds_unmasked"] == sums
        tiers = p["per_tier"].values()
        overhead = sum(t["keys"] + t["shares"] + t["consistency"] + t["unmasking"] for t in tiers)
        assert p["overhead_bytes"] == overhead > 0
        assert p["masked_bytes"] == sum(t["masked"] for t in tiers) > 0
        assert all(min(t["keys"], t["shares"], t["unmasking"]) > 0 for t in tiers)
        rows = list(csv.DictReader((tmp_path / name / "rounds.csv").open()))
        assert sum(int(r["privacy_bytes"] or 0) for r in rows) == p["overhead_bytes"]
        assert s["payload_bytes"]["total"] > runs["none"]["payload_bytes"]["total"]
        assert f"privacy: {mode}: {p['sessions_unmasked']} sums unmasked" in s["_stdout"]
    assert "privacy" not in runs["none"]


def test_signed_runs_give_the_same_labels_with_64_bytes_per_message(tmp_path):
    a = run(tmp_path, "a", BASE.format(name="a", topology=FLAT, mode="secagg", sign="false"))
    b = run(tmp_path, "b", BASE.format(name="b", topology=FLAT, mode="secagg", sign="true"))
    assert (tmp_path / "a/labels.csv").read_bytes() == (tmp_path / "b/labels.csv").read_bytes()
    extra = b["payload_bytes"]["up"] - a["payload_bytes"]["up"]
    assert extra == 64 * sum(t["publishes"] for t in b["per_tier"].values())  # every PUBLISH
    assert b["privacy"]["signed"] is True and b["privacy"]["rejected"] == {}


def test_faults_under_secure_aggregation_never_crash_and_are_accounted(tmp_path):
    text = BASE.format(name="faults", topology=TIERS, mode="secagg+", sign="true")
    text = text.replace("deadline_s: 10}", "deadline_s: 10, quorum: 0.5}")
    text += (
        "faults:\n  dropout: 0.3\n  crashes:\n    - {node: client-3, at: 2.0}\n"
        "    - {node: fog-1, at: 5.0, restart_after: 3.0}\n"
    )
    s = run(tmp_path, "faults", text)
    p = s["privacy"]
    assert p["sessions_unmasked"] > 0
    assert p["sessions_unmasked"] + p["sessions_failed"] == sum(
        t["sessions"] for t in p["per_tier"].values()
    )
    assert s["metrics"]["ari"] is not None
