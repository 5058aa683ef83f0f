"""Sweeps: grid parsing, the confidence interval, and the installed command end to end."""

from __future__ import annotations

import csv
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from fedstrata.scenarios.sweep import (
    RUN_FIELDS,
    GridError,
    cell_id,
    confidence_interval,
    expand_grid,
    parse_grid,
    parse_grid_value,
    summarize,
)
from tests.extras import require

EXE = shutil.which("fedstrata")

TINY = """\
name: tiny
seed: 0
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 30}}
topology: {clients: {count: 4}}
algorithm: {name: hk-mvfc, n_clusters: 4}
protocol: {rule: sum, rounds: 4, deadline_s: 5}
"""

GRID = ("--grid", "faults.dropout=0,0.2", "--grid", "protocol.kind=sync,async")


def fedstrata(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    return subprocess.run([EXE, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# ------------------------------------------------------------------------------ units


@pytest.mark.parametrize(
    ("text", "value"),
    [("0.1", 0.1), ("1e-6", 1e-6), ("3", 3), ("sync", "sync"), ("true", True), ("null", None)],
)
def test_values_parse_as_yaml_scalars(text, value):
    got = parse_grid_value(text)
    assert got == value and type(got) is type(value)


def test_grid_parsing_and_cells():
    grid = parse_grid(["faults.dropout=0,0.1,0.3", "protocol.kind=sync,async"])
    assert grid == {"faults.dropout": (0, 0.1, 0.3), "protocol.kind": ("sync", "async")}
    cells = expand_grid(grid)
    assert len(cells) == 6
    assert cells[1] == {"faults.dropout": 0, "protocol.kind": "async"}
    assert cell_id(cells[1]) == "faults.dropout=0__protocol.kind=async"
    assert expand_grid({}) == [{}] and cell_id({}) == "base"
    assert cell_id({"data.path": "a/b c"}).startswith("data.path=a-b-c-")  # hashed: changed


@pytest.mark.parametrize(
    ("specs", "needle"),
    [
        (["nokey"], "expected KEY=V1,V2"),
        (["9bad=1"], "expected KEY=V1,V2"),
        (["a.b=1", "a.b=2"], "given twice"),
        (["a.b=1,1"], "repeated"),
        (["a.b=1,,2"], "empty value"),
        (["a.b=[1, 2]"], "not a single value"),
    ],
)
def test_grid_errors(specs, needle):
    with pytest.raises(GridError, match=needle):
        parse_grid(specs)


def test_confidence_interval_matches_a_hand_computation():
    mean, low, high = confidence_interval([1.0, 2.0, 3.0])
    # mean 2, s = 1, t(0.975, 2) = 4.303: half-width 4.303 / sqrt(3)
    half = 4.302652729911275 / math.sqrt(3)
    assert mean == pytest.approx(2.0)
    assert (low, high) == (pytest.approx(2 - half), pytest.approx(2 + half))
    assert high - mean == pytest.approx(2.484, abs=1e-3)
    assert confidence_interval([0.5]) == (0.5, None, None)
    assert confidence_interval([]) == (None, None, None)
    m, lo, hi = confidence_interval([4.0, 4.0, 4.0, 4.0])
    assert m == lo == hi == 4.0


def test_summarize_counts_only_finished_runs():
    rows = [
        {"cell": "c", "k": 1, "status": "converged", "ari": 0.5, "rounds": 3},
        {"cell": "c", "k": 1, "status": "stalled", "ari": None, "rounds": 5},
        {"cell": "c", "k": 1, "status": "error"},
    ]
    (row,) = summarize(rows, ["k"], ["c"])
    assert (row["n"], row["n_ari"], row["k"]) == (2, 1, 1)
    assert row["ari_mean"] == 0.5 and row["ari_ci_low"] is None
    assert row["rounds_mean"] == 4.0
    # 3 and 5: s = sqrt(2), t(0.975, 1) = 12.706, half-width 12.706 * sqrt(2) / sqrt(2)
    assert row["rounds_ci_high"] == pytest.approx(4 + 12.706204736, abs=1e-5)


# ------------------------------------------------------------------------------ the command


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    (tmp_path / "tiny.yaml").write_text(TINY)
    return tmp_path


def test_sweep_runs_resumes_and_tabulates(tiny):
    res = fedstrata("sweep", "tiny.yaml", *GRID, "--repeats", "3", "--jobs", "2", "--out", "o",
                    cwd=tiny)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    rows = read_csv(tiny / "o" / "results.csv")
    assert len(rows) == 4 * 3
    assert list(rows[0]) == ["cell", "faults.dropout", "protocol.kind", *RUN_FIELDS]
    assert {(r["faults.dropout"], r["protocol.kind"]) for r in rows} == {
        ("0", "sync"), ("0", "async"), ("0.2", "sync"), ("0.2", "async")
    }  # fmt: skip
    assert sorted({r["seed"] for r in rows}) == ["0", "1", "2"]
    assert all(r["status"] in ("converged", "round_limit", "stalled", "diverged") for r in rows)
    for r in rows:
        assert (tiny / "o/runs" / r["cell"] / f"rep-{r['repeat']}" / "summary.json").exists()
    import pyarrow.parquet as pq  # a dev dependency: the Parquet copy is the same table

    table = pq.read_table(tiny / "o" / "results.parquet").to_pylist()
    assert len(table) == len(rows)
    assert [str(t["cell"]) for t in table] == [r["cell"] for r in rows]
    summary = read_csv(tiny / "o" / "summary.csv")
    assert len(summary) == 4
    for cell in summary:
        assert cell["n"] == "3"
        mine = [float(r["bytes_total"]) for r in rows if r["cell"] == cell["cell"]]
        mean, low, high = confidence_interval(mine)
        assert float(cell["bytes_total_mean"]) == pytest.approx(mean, abs=1e-5)
        assert float(cell["bytes_total_ci_low"]) == pytest.approx(low, abs=1e-5)
        assert float(cell["bytes_total_ci_high"]) == pytest.approx(high, abs=1e-5)
        aris = [float(r["ari"]) for r in rows if r["cell"] == cell["cell"] and r["ari"]]
        assert float(cell["ari_mean"]) == pytest.approx(sum(aris) / len(aris), abs=1e-5)
    assert (tiny / "o" / "sweep.png").stat().st_size > 0

    again = fedstrata("sweep", "tiny.yaml", *GRID, "--repeats", "3", "--out", "o", cwd=tiny)
    assert again.returncode == 0, again.stderr
    assert "skipped 12 finished runs" in again.stdout
    assert "ran 0," in again.stdout

    gone = tiny / "o/runs" / rows[4]["cell"] / f"rep-{rows[4]['repeat']}"
    shutil.rmtree(gone)
    before = {p: p.stat().st_mtime_ns for p in (tiny / "o/runs").glob("*/*/summary.json")}
    third = fedstrata("sweep", "tiny.yaml", *GRID, "--repeats", "3", "--out", "o", "--quiet",
                      cwd=tiny)  # fmt: skip
    assert third.returncode == 0, third.stderr
    assert "skipped 11 finished runs" in third.stdout and "ran 1," in third.stdout
    assert (gone / "summary.json").exists()
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())  # the others untouched
    assert len(read_csv(tiny / "o" / "results.csv")) == 12


def test_unknown_key_is_a_usage_error(tiny):
    res = fedstrata("sweep", "tiny.yaml", "--grid", "faults.bogus=1,2", "--out", "o", cwd=tiny)
    assert res.returncode == 2
    assert "--grid faults.bogus: unknown key; known keys: dropout" in res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert not (tiny / "o").exists()


def test_invalid_value_names_the_cell_and_runs_nothing(tiny):
    res = fedstrata("sweep", "tiny.yaml", "--grid", "faults.dropout=0,2", "--out", "o", cwd=tiny)
    assert res.returncode == 1
    assert "cell faults.dropout=2: faults.dropout: must be <= 1, got 2" in res.stderr
    assert "cell faults.dropout=0:" not in res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert not (tiny / "o").exists()


def test_a_changed_scenario_is_not_mixed_into_old_runs(tiny):
    args = ("sweep", "tiny.yaml", "--grid", "protocol.kind=sync", "--out", "o", "--quiet")
    assert fedstrata(*args, cwd=tiny).returncode == 0
    (tiny / "tiny.yaml").write_text(TINY.replace("rounds: 4", "rounds: 3"))
    res = fedstrata(*args, cwd=tiny)
    assert res.returncode == 2 and "--overwrite" in res.stderr
    res = fedstrata(*args, "--overwrite", cwd=tiny)
    assert res.returncode == 0, res.stderr
    assert read_csv(tiny / "o" / "results.csv")[0]["rounds"] == "3"


def test_ray_runs_the_same_cells_on_a_cluster(tiny):
    ray = require("ray")  # .ci/run installs the [ray] extra: never skipped there
    args = ("sweep", "tiny.yaml", "--grid", "faults.dropout=0,0.2", "--repeats", "2", "--quiet")
    local = fedstrata(*args, "--out", "local", cwd=tiny)
    assert local.returncode == 0, local.stderr
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        address = ray.get_runtime_context().gcs_address
        res = fedstrata(*args, "--ray", address, "--out", "onray", cwd=tiny)
    finally:
        ray.shutdown()
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    same = ("cell", "seed", "status", "rounds", "bytes_total", "virtual_time_s", "ari", "nmi")
    want = [{k: r[k] for k in same} for r in read_csv(tiny / "local" / "results.csv")]
    got = [{k: r[k] for k in same} for r in read_csv(tiny / "onray" / "results.csv")]
    assert got == want and len(got) == 4
    for r in read_csv(tiny / "onray" / "results.csv"):  # each record written back here
        folder = tiny / "onray/runs" / r["cell"] / f"rep-{r['repeat']}"
        assert {"summary.json", "rounds.csv", "labels.csv"} <= {p.name for p in folder.iterdir()}
    again = fedstrata(*args, "--ray", "127.0.0.1:1", "--out", "onray", cwd=tiny)
    assert again.returncode == 2 and "--ray 127.0.0.1:1: cannot connect" in again.stderr


def test_ray_and_jobs_do_not_mix(tiny):
    res = fedstrata("sweep", "tiny.yaml", "--ray", "auto", "--jobs", "2", cwd=tiny)
    assert res.returncode == 2 and "--jobs does not apply with --ray" in res.stderr


def test_parquet_rows_make_a_mixed_grid_column_text():
    import pyarrow as pa

    from fedstrata.scenarios.sweep import parquet_rows

    rows = [{"faults.dropout": 0, "ari": 1.0}, {"faults.dropout": "10%", "ari": None}]
    got = parquet_rows(rows, ["faults.dropout", "ari"])
    assert [r["faults.dropout"] for r in got] == ["0", "10%"]
    assert pa.Table.from_pylist(got).num_rows == 2  # one type per column
    same = parquet_rows([{"x": 0}, {"x": 0.5}], ["x"])
    assert [r["x"] for r in same] == [0, 0.5]  # int and float stay numbers
