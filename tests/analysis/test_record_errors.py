"""A file system that refuses to write a record: one line, and the earlier record stays.

ENOSPC and EROFS are simulated in-process at the write layer (``os.fsync`` and
``os.replace`` of :mod:`fedstrata.analysis.records`); ENAMETOOLONG and ENOTDIR are
real, through the installed command.
"""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from fedstrata.analysis import records
from fedstrata.analysis.records import OutputError, RecordWriteError, atomic_write
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import run_scenario

EXE = shutil.which("fedstrata")

SMALL = """
name: small
seed: {seed}
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 30}}, partition: {{kind: iid}}}}
topology: {{clients: {{count: 2}}}}
algorithm: {{name: hk-mvfc, n_clusters: 4, center_update: exact}}
protocol: {{rule: sum, rounds: 4, tol: 0.0, deadline_s: 30}}
"""


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_atomic_write_turns_a_full_disk_into_one_line_and_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    target.write_text("old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(records.os, "fsync", full)
    with pytest.raises(RecordWriteError) as info, atomic_write(target) as fh:
        fh.write("new")
    assert str(info.value) == (
        f"cannot write {target}: No space left on device (free some space and run again)"
    )
    assert isinstance(info.value, OSError)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary left


@pytest.mark.parametrize(
    ("where", "code", "text"),
    [
        ("fsync", errno.ENOSPC, "No space left on device"),
        ("replace", errno.EROFS, "Read-only file system"),
    ],
)
def test_a_failed_overwrite_leaves_the_earlier_record_whole(
    tmp_path, monkeypatch, where, code, text
):
    out = tmp_path / "run"
    run_scenario(parse_scenario(SMALL.format(seed=1)), out, progress=False, plots=False)
    before = _snapshot(out)
    assert "summary.json" in before and "model.npz" in before
    real = getattr(records.os, where)
    calls = {"n": 0}

    def failing(*args):
        calls["n"] += 1
        if calls["n"] == 3:  # the third file of the new record
            raise OSError(code, text)
        return real(*args)

    monkeypatch.setattr(records.os, where, failing)
    with pytest.raises(RecordWriteError, match=text):
        run_scenario(
            parse_scenario(SMALL.format(seed=2)), out, progress=False, plots=False, overwrite=True
        )
    assert _snapshot(out) == before  # the same files, byte for byte; no stage left behind
    monkeypatch.setattr(records.os, where, real)
    summary = run_scenario(
        parse_scenario(SMALL.format(seed=2)), out, progress=False, plots=False, overwrite=True
    )
    assert summary["seed"] == 2 and json.loads((out / "summary.json").read_text())["seed"] == 2
    assert sorted(p.name for p in out.iterdir()) == sorted(summary["files"])


def test_prepare_run_dir_refuses_a_name_too_long():
    with pytest.raises(OutputError, match="at most 255"):
        records.prepare_run_dir("x" * 300, scenario_hash="h", seed=0)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=120)


def test_cli_out_name_too_long_is_a_one_line_usage_error(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SMALL.format(seed=0))
    res = _cli("run", str(scenario), "--out", str(tmp_path / ("n" * 300)), "--quiet")
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --out"), res.stderr
    assert "Traceback" not in res.stderr


def test_cli_out_under_a_regular_file_is_a_one_line_usage_error(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SMALL.format(seed=0))
    (tmp_path / "plain").write_text("a file, not a folder")
    res = _cli("run", str(scenario), "--out", str(tmp_path / "plain" / "run"), "--quiet")
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot create the folder" in lines[0], res.stderr
    assert (tmp_path / "plain").read_text() == "a file, not a folder"


def test_the_stage_of_a_killed_run_is_removed_by_the_next_run(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    stale = out / ".fedstrata-stage-killed"
    stale.mkdir()
    (stale / "rounds.csv").write_text("half")
    summary = run_scenario(parse_scenario(SMALL.format(seed=1)), out, progress=False, plots=False)
    assert sorted(p.name for p in out.iterdir()) == sorted(summary["files"])
