"""``extends:``: a scenario file built on another, with errors located in the right file."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fedstrata.scenarios.loader import (
    MAX_EXTENDS,
    ScenarioErrors,
    load_scenario,
    parse_scenario,
    scenario_json_schema,
)

CORPUS = Path(__file__).resolve().parent / "corpus"

BASE = """\
# the base
name: base
topology:
  clients:
    count: 3
    link: {latency: 40ms, bandwidth_mbps: 5Mbps}
protocol:
  rounds: 5
  deadline_s: 5
faults:
  crashes:
    - {node: client-0, at: 1s}
"""


def _write(folder: Path, name: str, text: str) -> Path:
    p = folder / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


def _errors(path: Path, **kw) -> list[str]:
    with pytest.raises(ScenarioErrors) as info:
        load_scenario(path, **kw)
    return info.value.located().splitlines()


def test_keys_merge_over_the_base(tmp_path):
    _write(tmp_path, "bases/base.yaml", BASE)
    child = _write(
        tmp_path,
        "child.yaml",
        "extends: bases/base.yaml\n"
        "name: child\n"
        "topology:\n  clients:\n    link: {loss: 10%}\n"
        "protocol: {rounds: 7}\n"
        "faults:\n  crashes: []\n",
    )
    sc = load_scenario(child)
    assert sc.name == "child"
    assert sc.topology.clients.count == 3  # from the base
    link = sc.topology.clients.link
    assert link.latency.value == 0.04 and link.bandwidth_mbps == 5.0  # merged mapping
    assert link.loss == 0.1  # the child's key
    assert sc.protocol.rounds == 7 and sc.protocol.deadline_s == 5.0
    assert list(sc.faults.crashes) == []  # a list replaces, it does not append


def test_chain_of_bases(tmp_path):
    _write(tmp_path, "a.yaml", BASE)
    _write(tmp_path, "sub/b.yaml", "extends: ../a.yaml\nprotocol: {rounds: 6}\n")
    c = _write(tmp_path, "c.yaml", "extends: sub/b.yaml\nname: c\n")
    sc = load_scenario(c)
    assert (sc.name, sc.protocol.rounds, sc.topology.clients.count) == ("c", 6, 3)


def test_error_from_the_base_points_at_the_base(tmp_path):
    _write(tmp_path, "base.yaml", BASE.replace("rounds: 5", "rounds: 0"))
    child = _write(tmp_path, "child.yaml", "extends: base.yaml\nname: child\nseed: -1\n")
    assert _errors(child) == [
        f"{child}:3: seed: must be >= 0, got -1",
        f"{tmp_path / 'base.yaml'}:8: protocol.rounds: must be >= 1, got 0",
    ]


def test_overridden_mistake_in_the_base_is_no_error(tmp_path):
    _write(tmp_path, "base.yaml", BASE.replace("rounds: 5", "rounds: 0"))
    child = _write(tmp_path, "child.yaml", "extends: base.yaml\nprotocol: {rounds: 2}\n")
    assert load_scenario(child).protocol.rounds == 2


def test_preflight_error_in_the_base_is_located_there(tmp_path):
    _write(tmp_path, "base.yaml", BASE.replace("client-0", "client-9"))
    child = _write(tmp_path, "child.yaml", "extends: base.yaml\nname: child\n")
    assert _errors(child) == [
        # a base file's text values are not shown (it may be any file: see test_secrets)
        f"{tmp_path / 'base.yaml'}:12: faults.crashes.0.node: no node (value not shown)"
    ]


def test_base_yaml_problems_name_the_base(tmp_path):
    _write(tmp_path, "base.yaml", "name: a\nname: b\n")
    child = _write(tmp_path, "child.yaml", "extends: base.yaml\n")
    assert _errors(child) == [
        f"{tmp_path / 'base.yaml'}:2: name: duplicate key (first given on line 1)"
    ]


@pytest.mark.parametrize(
    ("base", "reason"),
    [("", "1: empty scenario"), ("- a\n", "1: a scenario must be a mapping of sections")],
)
def test_unusable_base(tmp_path, base, reason):
    _write(tmp_path, "base.yaml", base)
    child = _write(tmp_path, "child.yaml", "extends: base.yaml\n")
    assert _errors(child) == [f"{tmp_path / 'base.yaml'}:{reason}"]


def test_missing_base(tmp_path):
    child = _write(tmp_path, "child.yaml", "name: c\nextends: nope.yaml\n")
    assert _errors(child) == [f"{child}:2: extends: no such file 'nope.yaml'"]


def test_base_is_a_directory(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    child = _write(tmp_path, "child.yaml", "extends: dir.yaml\n")
    assert _errors(child) == [f"{tmp_path / 'dir.yaml'}: cannot read file: it is a directory"]


def test_cycle(tmp_path):
    a = _write(tmp_path, "a.yaml", "extends: b.yaml\n")
    b = _write(tmp_path, "b.yaml", "name: b\nextends: a.yaml\n")
    assert _errors(a) == [
        f"{b}:2: extends: files extend each other in a cycle: a.yaml -> b.yaml -> a.yaml"
    ]


def test_cycle_below_the_top(tmp_path):
    top = _write(tmp_path, "top.yaml", "extends: a.yaml\n")
    _write(tmp_path, "a.yaml", "extends: b.yaml\n")
    b = _write(tmp_path, "b.yaml", "extends: a.yaml\n")
    assert _errors(top) == [
        f"{b}:1: extends: files extend each other in a cycle: a.yaml -> b.yaml -> a.yaml"
    ]


def test_too_long_a_chain(tmp_path):
    for i in range(MAX_EXTENDS + 2):
        _write(tmp_path, f"f{i}.yaml", f"extends: f{i + 1}.yaml\n")
    _write(tmp_path, f"f{MAX_EXTENDS + 2}.yaml", "name: last\n")
    (line,) = _errors(tmp_path / "f0.yaml")
    assert line.endswith(f"extends: more than {MAX_EXTENDS} files extend each other")


@pytest.mark.parametrize(("value", "shown"), [("5", "5"), ("''", "''"), ("[a.yaml]", "a list")])
def test_extends_must_be_a_file_name(tmp_path, value, shown):
    child = _write(tmp_path, "child.yaml", f"extends: {value}\n")
    assert _errors(child) == [
        f"{child}:1: extends: must be the name of a scenario file (relative to this one), got {shown}"
    ]


def test_parse_scenario_reads_extends_from_base_dir(tmp_path):
    _write(tmp_path, "base.yaml", BASE)
    sc = parse_scenario("extends: base.yaml\nname: s\n", base_dir=tmp_path)
    assert (sc.name, sc.topology.clients.count) == ("s", 3)


def test_json_schema_has_extends():
    schema = scenario_json_schema()
    assert schema["properties"]["extends"]["type"] == "string"
    assert schema["additionalProperties"] is False


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("fedstrata")
    assert exe is not None, "the fedstrata command is not installed (pip install -e .)"
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [exe, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["extends-error-in-base.yaml", "extends-cycle.yaml"])
def test_run_reports_like_validate(name, tmp_path):
    """``run`` shares the loader: the same lines, base file names included."""
    val = _cli("validate", f"bad/{name}", cwd=CORPUS)
    run = _cli("run", f"bad/{name}", "--out", str(tmp_path / "o"), "--quiet", cwd=CORPUS)
    assert val.returncode == run.returncode == 1
    assert "Traceback" not in run.stderr
    assert run.stderr.splitlines() == val.stderr.splitlines()
    assert any(line.startswith("bad/bases/") for line in val.stderr.splitlines())


def test_run_an_extending_file(tmp_path):
    res = _cli(
        "run",
        "good/extends-base.yaml",
        "--out",
        str(tmp_path / "o"),
        "--quiet",
        "--no-plots",
        cwd=CORPUS,
    )
    assert res.returncode == 0, res.stderr
    assert "extended" in res.stdout
