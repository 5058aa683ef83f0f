"""Every scenario in ``scenarios/papers`` validates, runs small, and ends as its header says.

The paper scenarios reproduce published settings (see ``docs/reproductions.md``):

* ``fedstrata validate`` (the installed command, in a subprocess) accepts every file;
* with ``data.params.n_per_cluster`` cut to 100 every file runs to a finished status
  (``converged`` or ``round_limit``) with finite metrics;
* at its own size and seed every file ends as its ``# Expected (seed 0): status S after
  N rounds, ARI A, B bytes on the wire`` line says, with ARI > 0.9.

ARI > 0.9 is not asserted at 100 samples per cluster: FedHK-MVFC with the paper's
settings (Type 1 coefficients, one federated start) separates the shapes on 8 of 10 seeds at
n = 10,000 but on none at n = 400 (ARI 0.00-0.68, seeds 0-9); see docs/reproductions.md.
Fed-MVFCM does reach ARI 1.0 there, which is asserted.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate

PAPERS = sorted((Path(__file__).resolve().parents[2] / "scenarios" / "papers").glob("*.yaml"))
EXE = shutil.which("fedstrata") or "fedstrata"
EXPECTED = re.compile(
    r"^# Expected \(seed 0\): status (\w+) after (\d+) rounds, ARI ([\d.]+), ([\d,]+) bytes",
    re.M,
)
FINISHED = {"converged", "round_limit"}


def _reduced(path: Path, n_per_cluster: int) -> dict:
    """The scenario's YAML document with ``n_per_cluster`` overridden."""
    doc = yaml.safe_load(path.read_text())
    doc.setdefault("data", {}).setdefault("params", {})["n_per_cluster"] = n_per_cluster
    return doc


def test_there_are_paper_scenarios():
    assert {p.stem for p in PAPERS} >= {"fedhk-mvfc", "fed-mvfcm"}


@pytest.mark.parametrize("path", PAPERS, ids=lambda p: p.stem)
def test_validates_with_the_installed_command(path: Path):
    res = subprocess.run([EXE, "validate", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ok" in res.stdout


@pytest.mark.parametrize("path", PAPERS, ids=lambda p: p.stem)
def test_runs_at_reduced_size(path: Path):
    sc = parse_scenario(yaml.safe_dump(_reduced(path, 100)), file=str(path), base_dir=path.parent)
    _, summary, _ = simulate(sc)
    assert summary["status"] in FINISHED, summary["reason"]
    assert summary["rounds"] >= 1
    assert summary["bytes_total"] > 0
    assert all(math.isfinite(summary["metrics"][k]) for k in ("ari", "nmi", "acc"))
    if path.stem == "fed-mvfcm":
        assert summary["metrics"]["ari"] > 0.9


@pytest.mark.parametrize("path", PAPERS, ids=lambda p: p.stem)
def test_ends_as_its_header_says(path: Path):
    text = path.read_text()
    match = EXPECTED.search(text)
    assert match, f"{path.name} has no '# Expected (seed 0): status S after N rounds, ...' line"
    status, rounds = match.group(1), int(match.group(2))
    ari, wire = float(match.group(3)), int(match.group(4).replace(",", ""))
    doc = yaml.safe_load(text)
    assert doc["seed"] == 0
    _, summary, _ = simulate(parse_scenario(text, file=str(path), base_dir=path.parent))
    assert (summary["status"], summary["rounds"]) == (status, rounds), summary["reason"]
    assert summary["metrics"]["ari"] > 0.9
    assert abs(summary["metrics"]["ari"] - ari) < 1e-3
    assert summary["bytes_total"] == wire
