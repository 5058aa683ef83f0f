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

The files on the UCI multiple features (``data.dataset: multiple-features``: the hybrid-view
populations of FMCSC and EFD-MVC, Fed-MVKM's setting) and on the Fed-MVKM tutorial's simulated
DHA-like set (``fed-mvkm-dha-like``, 600 samples) have a fixed size and no ``n_per_cluster``:
they run reduced with ``protocol.rounds`` capped at 3 instead, and their header ARI (0.57-0.75,
HK-MVFC and mvkm-ed on ten digit classes; 1.0 on the DHA-like set) is checked, not ARI > 0.9.
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
from tests.extras import require

PAPERS = sorted((Path(__file__).resolve().parents[2] / "scenarios" / "papers").glob("*.yaml"))
EXE = shutil.which("fedstrata") or "fedstrata"
EXPECTED = re.compile(
    r"^# Expected \(seed 0\): status (\w+) after (\d+) rounds, ARI ([\d.]+), ([\d,]+) bytes",
    re.M,
)
FINISHED = {"converged", "round_limit"}
FIXED_SIZE = {"multiple-features", "fed-mvkm-dha-like"}  # datasets without n_per_cluster


def _is_deep(path: Path) -> bool:
    """Whether the file (or the file it extends) clusters with a deep method.

    Read from the YAML, not validated: without the [deep] extra a deep file does not
    validate, and collecting this module must not need PyTorch.
    """
    from fedstrata.algorithms.deep import DEEP_METHODS

    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    name = (doc.get("algorithm") or {}).get("name")
    if name is None and doc.get("extends"):
        return _is_deep(path.parent / doc["extends"])
    return name in DEEP_METHODS


# The deep files take a minute each at their own size: benchmarks/reproduce_deep.py runs
# them so (docs/reproductions.md has the figures); here they run reduced.
SHALLOW = [p for p in PAPERS if not _is_deep(p)]
TINY_NETWORK = {
    "hidden": [32],
    "pretrain_rounds": 1,
    "train_rounds": 1,
    "pretrain_epochs": 2,
    "local_epochs": 1,
    "kmeans_rounds": 3,
}


def _reduced(path: Path, n_per_cluster: int) -> dict:
    """The scenario's YAML document with ``n_per_cluster`` overridden.

    A deep file gets a small network and one training round instead (its rounds stay
    enough for pre-training, training and k-means).
    """
    if _is_deep(path):
        from fedstrata.scenarios.loader import load_scenario

        doc = load_scenario(path).model_dump(mode="json", exclude_unset=True)
        algorithm = doc["algorithm"]
        algorithm.update(TINY_NETWORK)
        if algorithm["name"] == "fmcsc":
            algorithm["copy_epochs"] = 1
        doc.setdefault("protocol", {})["rounds"] = 8
        return doc
    doc = yaml.safe_load(path.read_text())
    if doc.get("data", {}).get("dataset") in FIXED_SIZE:
        # No size parameter: cap the rounds instead.
        doc["protocol"]["rounds"] = min(doc["protocol"].get("rounds", 3), 3)
        return doc
    doc.setdefault("data", {}).setdefault("params", {})["n_per_cluster"] = n_per_cluster
    return doc


def test_there_are_paper_scenarios():
    assert {p.stem for p in PAPERS} >= {"fedhk-mvfc", "fed-mvfcm"}


@pytest.mark.parametrize("path", PAPERS, ids=lambda p: p.stem)
def test_validates_with_the_installed_command(path: Path):
    if _is_deep(path):
        require("torch")
    res = subprocess.run([EXE, "validate", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ok" in res.stdout


@pytest.mark.parametrize("path", PAPERS, ids=lambda p: p.stem)
def test_runs_at_reduced_size(path: Path):
    if _is_deep(path):
        require("torch")
    sc = parse_scenario(yaml.safe_dump(_reduced(path, 100)), file=str(path), base_dir=path.parent)
    _, summary, _ = simulate(sc)
    assert summary["status"] in FINISHED, summary["reason"]
    assert summary["rounds"] >= 1
    assert summary["bytes_total"] > 0
    assert all(math.isfinite(summary["metrics"][k]) for k in ("ari", "nmi", "acc"))
    if path.stem == "fed-mvfcm":
        assert summary["metrics"]["ari"] > 0.9


@pytest.mark.parametrize("path", SHALLOW, ids=lambda p: p.stem)
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
    if doc["data"].get("dataset") not in FIXED_SIZE:
        assert summary["metrics"]["ari"] > 0.9
    assert abs(summary["metrics"]["ari"] - ari) < 1e-3
    assert summary["bytes_total"] == wire


def test_hybrid_and_fed_mvkm_files_are_present():
    assert {p.stem for p in PAPERS} >= {
        "hybrid-2to1",
        "hybrid-1to1",
        "hybrid-1to2",
        "random-view-subsets",
        "fed-mvkm-mfeat",
    }


@pytest.mark.parametrize(
    ("stem", "full", "partial", "single"),
    [
        ("hybrid-2to1", 8, 0, 4),
        ("hybrid-1to1", 6, 0, 6),
        ("hybrid-1to2", 4, 0, 8),
        ("random-view-subsets", 3, 9, 0),
        ("fed-mvkm-mfeat", 5, 0, 0),
    ],
)
def test_hybrid_populations_have_the_stated_client_mix(stem, full, partial, single):
    from fedstrata.scenarios.loader import load_scenario
    from fedstrata.scenarios.wiring import prepare_data

    path = next(p for p in PAPERS if p.stem == stem)
    held = prepare_data(load_scenario(path)).held
    n_views = 6  # multiple-features
    counts = (
        sum(len(h) == n_views for h in held),
        sum(1 < len(h) < n_views for h in held),
        sum(len(h) == 1 for h in held),
    )
    assert counts == (full, partial, single)
