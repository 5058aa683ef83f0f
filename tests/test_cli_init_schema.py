"""``fedstrata init`` and ``fedstrata schema`` through the installed command."""

from __future__ import annotations

import csv
import itertools
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parents[1]
EXE = shutil.which("fedstrata")


class _Yaml12(yaml.SafeLoader):
    """``1e-6`` is a float (YAML 1.2), as in fedstrata's own loader."""


_Yaml12.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def fedstrata(*args, timeout=120, cwd=None):
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    return subprocess.run(
        [EXE, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def no_traceback(res):
    assert "Traceback" not in res.stdout + res.stderr, res.stderr


def test_init_writes_scenario_yaml_by_default(tmp_path):
    res = fedstrata("init", cwd=tmp_path)
    no_traceback(res)
    assert res.returncode == 0, res.stderr
    text = (tmp_path / "scenario.yaml").read_text()
    assert "tiers:" in text  # edge-fog-cloud by default
    assert "fedstrata validate scenario.yaml" in text
    assert (
        fedstrata("validate", "scenario.yaml", cwd=tmp_path).stdout.strip() == "scenario.yaml: ok"
    )


@pytest.mark.parametrize("tiers", [2, 3])
def test_init_output_validates_and_runs(tmp_path, tiers):
    path = tmp_path / f"s{tiers}.yaml"
    res = fedstrata("init", path, "--tiers", tiers)
    assert res.returncode == 0, res.stderr
    text = path.read_text()
    assert ("tiers:" in text) == (tiers == 3)
    for unit in ("ms", "Mbps", "%"):
        assert unit in text
    sections = [ln for ln in text.splitlines() if ln and not ln[0].isspace() and ln[0] != "#"]
    lines = text.splitlines()
    for section in sections:  # every section has a one-line comment above it
        if section.split(":")[0] in {"seed"}:
            continue
        above = lines[lines.index(section) - 1]
        assert above.startswith("# "), section
    run = fedstrata("run", path, "--out", tmp_path / "out", "--quiet", "--no-plots", timeout=300)
    no_traceback(run)
    assert run.returncode == 0, run.stderr
    assert "converged" in run.stdout


def test_init_refuses_to_overwrite(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\n")
    res = fedstrata("init", path)
    no_traceback(res)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"error: {path} already exists; pass --force to overwrite it"
    ]
    assert path.read_text() == "name: mine\n"
    forced = fedstrata("init", path, "--force", "--tiers", "2")
    assert forced.returncode == 0, forced.stderr
    assert "my-scenario" in path.read_text()


def test_init_rejects_other_tier_counts(tmp_path):
    res = fedstrata("init", tmp_path / "x.yaml", "--tiers", "4")
    no_traceback(res)
    assert res.returncode == 2
    assert "Invalid value for '--tiers'" in res.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_schema_prints_json_schema_with_extends():
    res = fedstrata("schema")
    no_traceback(res)
    assert res.returncode == 0, res.stderr
    schema = json.loads(res.stdout)
    Draft202012Validator.check_schema(schema)
    assert {"name", "topology", "protocol", "extends"} <= set(schema["properties"])


def test_schema_out_file_validates_scenarios(tmp_path):
    out = tmp_path / "scenario.schema.json"
    res = fedstrata("schema", "--out", out)
    assert res.returncode == 0, res.stderr
    validator = Draft202012Validator(json.loads(out.read_text()))
    assert fedstrata("init", tmp_path / "s.yaml").returncode == 0
    files = [
        tmp_path / "s.yaml",
        *sorted((ROOT / "scenarios").glob("*.yaml")),
        *sorted((ROOT / "tests/scenarios/corpus/good").glob("*.yaml")),
    ]
    for f in files:
        errors = [e.message for e in validator.iter_errors(yaml.load(f.read_text(), _Yaml12) or {})]
        assert not errors, (f, errors[:3])
    wrong = {"protocol": {"deadline_s": "40 parsecs"}, "colour": 1}
    assert len(list(validator.iter_errors(wrong))) == 2


def test_init_tol_comment_is_the_rule_the_run_applies(tmp_path):
    """The starter says tol bounds |J - J_prev| of the summed objective: a run stops there.

    With the plateau off and tol widened, the run must end at the first root round
    whose objective moved by less than tol from the previous one (from rounds.csv).
    """
    path = tmp_path / "s.yaml"
    assert fedstrata("init", path).returncode == 0
    text = path.read_text()
    assert "tol: 1.0e-6                # stop once |J - J_prev| < tol" in text
    assert "tol_mode: absolute" in text
    tol = 0.05
    text = text.replace("tol: 1.0e-6 ", f"tol: {tol}").replace("plateau: 5 ", "plateau: null")
    text = text.replace("dropout: 5%", "dropout: 0")
    path.write_text(text)
    run = fedstrata("run", path, "--out", tmp_path / "out", "--quiet", "--no-plots", timeout=300)
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "converged" and "|ΔJ|" in summary["reason"]
    with (tmp_path / "out" / "rounds.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["tier"] == "cloud" and r["objective"]]
    objectives = [float(r["objective"]) for r in rows]
    moves = [abs(b - a) for a, b in itertools.pairwise(objectives)]
    first = next(i for i, m in enumerate(moves) if m < tol)
    assert first + 2 == len(objectives) == summary["rounds"], (moves, summary["rounds"])
