"""Error lines never show what a secrets file holds: the rule for values in errors.

A base file reached by ``extends`` may be any file; its text values are not shown
(numbers, booleans and null are). Values of keys named like secrets are never shown,
in any file. Every line still names the key and the ``file:line``.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from fedstrata.scenarios.loader import load_scenario
from fedstrata.scenarios.schema import ScenarioErrors

EXE = shutil.which("fedstrata")
SECRETS = """\
password: hunter2-SECRET
seed: s3cr3t-SECRET
protocol: {rounds: SECRETROUNDS, deadline_s: -5}
topology: {clients: {count: 2, link: {loss: "SECRET%"}}}
"""


def _lines(path) -> list[str]:
    with pytest.raises(ScenarioErrors) as info:
        load_scenario(path)
    return [e.located() for e in info.value.errors]


def test_values_of_a_secrets_base_file_are_not_shown(tmp_path):
    (tmp_path / "secrets.yaml").write_text(SECRETS)
    child = tmp_path / "child.yaml"
    child.write_text("extends: secrets.yaml\nname: child\n")
    lines = _lines(child)
    assert not any("SECRET" in line or "hunter2" in line for line in lines), lines
    base = tmp_path / "secrets.yaml"
    assert f"{base}:2: seed: must be an integer, got (value not shown)" in lines
    assert f"{base}:3: protocol.rounds: must be an integer, got (value not shown)" in lines
    assert any(line.startswith(f"{base}:1: password: unknown key") for line in lines)
    # a number from a base file is a setting, not a secret: shown
    assert any(line.startswith(f"{base}:3: protocol.deadline_s") and "-5" in line for line in lines)


def test_values_of_the_scenario_itself_are_shown(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nseed: mine-VISIBLE\n")
    assert _lines(scenario) == [f"{scenario}:2: seed: must be an integer, got 'mine-VISIBLE'"]
    scenario.write_text(
        "name: s\ntopology: {clients: {count: 2}}\n"
        "faults: {crashes: [{node: token-VISIBLE-node, at: 1}]}\n"
    )
    lines = _lines(scenario)
    assert any("token-VISIBLE-node" in line for line in lines), lines  # not a secret key


def test_a_secret_named_key_hides_its_value_in_any_file(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nprivacy: {sign: true, secure_aggregation: {token: x-SECRET}}\n")
    lines = _lines(scenario)
    assert lines and not any("x-SECRET" in line for line in lines), lines


def test_validate_of_a_secrets_base_prints_no_value(tmp_path):
    (tmp_path / "secrets.yaml").write_text(SECRETS)
    child = tmp_path / "child.yaml"
    child.write_text("extends: secrets.yaml\nname: child\n")
    res = subprocess.run([EXE, "validate", str(child)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert "secrets.yaml:2: seed:" in res.stdout + res.stderr
    assert "SECRET" not in res.stdout + res.stderr and "hunter2" not in res.stdout + res.stderr
