"""Studies: the installed command, the file format's errors, the shipped study at smoke size."""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from fedstrata.scenarios.study import STUDY_COLUMNS, load_study, run_study

STUDIES = sorted((Path(__file__).parents[2] / "scenarios" / "studies").glob("*.yaml"))

TINY = """\
study:
  target_ari: 0.9
  seeds: [0, 1]
  variants:
    sync: {protocol: {kind: sync}}
    async: {protocol: {kind: async}}
name: tiny
seed: 0
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 200}}
topology: {clients: {count: 6}}
algorithm: {name: hk-mvfc, n_clusters: 4}
protocol: {rule: sum, rounds: 15, deadline_s: 5}
"""


def fedstrata(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["fedstrata", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_study_command_runs_every_variant_and_seed(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    res = fedstrata("study", "tiny.yaml", "--out", "out", "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    for variant in ("sync", "async"):
        for seed in (0, 1):
            summary = json.loads((tmp_path / f"out/{variant}/seed-{seed}/summary.json").read_text())
            assert summary["seed"] == seed
    with open(tmp_path / "out" / "study.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["variant"] for r in rows] == ["sync", "async"]
    assert tuple(rows[0]) == STUDY_COLUMNS
    assert all(r["seeds"] == "2" for r in rows)
    study = json.loads((tmp_path / "out" / "study.json").read_text())
    # a row's mean is the mean of its runs' values
    for row in study["rows"]:
        aris = [r["ari"] for r in study["runs"] if r["variant"] == row["variant"]]
        assert row["ari"] == pytest.approx(sum(aris) / len(aris), abs=1e-6)
    assert (tmp_path / "out" / "study.png").stat().st_size > 0
    # the same folders again: refused without --overwrite, before anything runs
    again = fedstrata("study", "tiny.yaml", "--out", "out", "--quiet", cwd=tmp_path)
    assert again.returncode == 0, again.stderr  # same runs (hash and seed): reused


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("name: x\n", "tiny.yaml: a study file needs a top-level study section"),
        (
            "study: {variants: {a: {protocol: {kind: gossip}}}}\nname: x\n",
            "tiny.yaml: variant a: protocol.kind: must be 'sync', 'async', 'buffered' or "
            "'adaptive', got 'gossip'",
        ),
        ("study: {variants: {}}\n", "tiny.yaml: study.variants: must map variant names to"),
        (
            "study: {variants: {a: {}}, seeds: [1, 1]}\n",
            "tiny.yaml: study.seeds: must be a non-empty list of distinct integers",
        ),
        ("study: {variants: {a: {}}, colour: red}\n", "tiny.yaml: study.colour: unknown key"),
    ],
)
def test_study_file_errors_are_one_line_each(tmp_path, text, line):
    (tmp_path / "tiny.yaml").write_text(text)
    res = fedstrata("study", "tiny.yaml", "--out", "out", cwd=tmp_path)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr and res.stdout == ""
    assert res.stderr.startswith(line), res.stderr
    assert not (tmp_path / "out").exists()


def test_missing_study_file_is_a_usage_error(tmp_path):
    res = fedstrata("study", "nope.yaml", cwd=tmp_path)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "nope.yaml" in res.stderr


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_shipped_studies_at_smoke_size(path, tmp_path):
    st = load_study(path)
    assert len(st.variants) >= 2

    def shrink(sc):
        update = {"protocol": sc.protocol.model_copy(update={"rounds": 4})}
        if sc.data.dataset == "heat-kernel-synthetic":
            update["data"] = sc.data.model_copy(update={"params": {"n_per_cluster": 100}})
        return sc.model_copy(update=update)

    smoke = {name: shrink(sc) for name, sc in st.variants.items()}
    result = run_study(dataclasses.replace(st, variants=smoke, seeds=st.seeds[:1]), tmp_path)
    assert [r["variant"] for r in result["rows"]] == list(st.variants)
    assert all(r["status"] in ("converged", "round_limit") for r in result["runs"])


def test_the_fault_study_shows_quality_moving_with_the_faults(tmp_path):
    """faults-mfeat.yaml, seed 0: the faulty variants end at a lower ARI than the clean one."""
    st = load_study(Path(__file__).parents[2] / "scenarios" / "studies" / "faults-mfeat.yaml")
    keep = {name: st.variants[name] for name in ("clean", "loss-30", "both-sync")}
    result = run_study(dataclasses.replace(st, variants=keep, seeds=(0,)), tmp_path)
    ari = {r["variant"]: r["ari"] for r in result["rows"]}
    # faults-mfeat.yaml says: ARI 0.785 without its faults
    assert ari["clean"] == pytest.approx(0.785, abs=5e-4)
    assert ari["loss-30"] < ari["clean"] - 0.05
    assert ari["both-sync"] < ari["clean"] - 0.05
