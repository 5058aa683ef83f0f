"""Scenario validation: every problem is located (file, line, field path) and explained."""

import subprocess
import sys
from pathlib import Path

import pytest

from fedstrata.errors import ScenarioError
from fedstrata.scenarios.loader import ScenarioErrors, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]

BAD = [
    (
        "unknown key",
        "algorithm:\n  name: hk-mvfc\n  colour: red\n",
        3,
        "algorithm.colour",
        "unknown key",
    ),
    ("wrong type", "protocol:\n  rounds: many\n", 2, "protocol.rounds", "integer"),
    (
        "negative latency",
        "topology:\n  clients:\n    link: {latency: -0.5}\n",
        3,
        "topology.clients.link.latency",
        ">= 0",
    ),
    ("probability", "faults:\n  dropout: 1.5\n", 2, "faults.dropout", "less than or equal to 1"),
    (
        "loss probability",
        "topology:\n  clients:\n    link:\n      loss: -0.1\n",
        4,
        "topology.clients.link.loss",
        "greater than or equal to 0",
    ),
    (
        "missing fog",
        "topology:\n  tiers: [{name: fog, count: 2}]\n  clients:\n    count: 4\n    attach: {client-1: fog-9}\n",
        5,
        "topology.clients.attach.client-1",
        "does not exist",
    ),
    (
        "median with secure aggregation",
        "protocol: {rule: median}\nprivacy: {secure_aggregation: true}\n",
        1,
        "protocol.rule",
        "not a sum",
    ),
    (
        "median with fog period",
        "topology:\n  tiers: [{name: fog, count: 1, period: 3}]\nprotocol: {rule: median}\n",
        3,
        "protocol.rule",
        "not a sum",
    ),
    (
        "sum with local iterations",
        "protocol:\n  rule: sum\n  local_iters: 5\n",
        3,
        "protocol.local_iters",
        "must be 1",
    ),
    (
        "lognormal without sigma",
        "topology:\n  clients:\n    link:\n      latency: {dist: lognormal, median: 0.1}\n",
        4,
        "topology.clients.link.latency",
        "needs sigma",
    ),
    (
        "partition window",
        "faults:\n  partitions:\n    - {nodes: [client-0], start: 5, end: 1}\n",
        3,
        "faults.partitions.0",
        "after start",
    ),
    (
        "fault on unknown node",
        "faults:\n  crashes: [{node: fog-7, at: 3}]\n",
        2,
        "faults.crashes",
        "no node",
    ),
    ("not yaml", "protocol: [1, 2\n", 2, "", "not valid YAML"),
    ("not a mapping", "- 1\n- 2\n", 1, "", "mapping"),
]


@pytest.mark.parametrize(("case", "text", "line", "path", "reason"), BAD, ids=[b[0] for b in BAD])
def test_errors_are_located(case, text, line, path, reason):
    with pytest.raises(ScenarioErrors) as info:
        parse_scenario(text, file="s.yaml")
    errors = info.value.errors
    assert any(
        e.line == line and e.path == path and reason in e.reason and e.file == "s.yaml"
        for e in errors
    ), [e.located() for e in errors]
    assert isinstance(info.value, ScenarioError)


def test_all_errors_reported_at_once():
    text = "faults:\n  dropout: 2\nprotocol:\n  quorum: -1\n  colour: x\n"
    with pytest.raises(ScenarioErrors) as info:
        parse_scenario(text)
    assert {e.path for e in info.value.errors} == {
        "faults.dropout",
        "protocol.quorum",
        "protocol.colour",
    }


def test_example_scenarios_are_valid():
    files = sorted((ROOT / "scenarios").glob("*.yaml"))
    assert len(files) >= 3
    for f in files:
        load_scenario(f)


def test_missing_file():
    with pytest.raises(ScenarioErrors, match="cannot read file"):
        load_scenario("/nonexistent/s.yaml")


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-c", "from fedstrata.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_validate_cli_prints_one_line_per_error_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("faults:\n  dropout: 2\nprotocol:\n  colour: x\n")
    good = ROOT / "scenarios" / "paper-flat.yaml"
    res = _cli("validate", str(good), str(bad))
    assert res.returncode != 0
    assert "Traceback" not in res.stderr + res.stdout
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2 and all(ln.startswith(f"{bad}:") for ln in lines), lines
    assert "paper-flat.yaml: ok" in res.stdout


def test_run_cli_reports_bad_scenario_in_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("topology:\n  clients: {count: 3, attach: {client-0: fog-1}}\n")
    res = _cli("run", str(bad), "--out", str(tmp_path / "o"), "--quiet")
    assert res.returncode == 1  # an invalid scenario: 1 from run and validate alike
    assert "Traceback" not in res.stderr
    assert "client-0 attached to 'fog-1', which does not exist" in res.stderr
