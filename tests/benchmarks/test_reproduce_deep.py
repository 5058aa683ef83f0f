"""benchmarks/reproduce_deep.py --smoke: every method runs on both smoke settings."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

from tests.extras import require

require("torch")

ROOT = Path(__file__).resolve().parents[2]

COLUMNS = [
    "setting",
    "method",
    "clients full/partial/single",
    "ACC",
    "NMI",
    "ARI",
    "ARI min",
    "paper HW ACC/NMI/ARI",
    "paper UCI ACC/NMI/ARI",
    "status",
    "rounds",
    "wall s",
    "CPU s/round",
    "bytes",
]
METHODS = ["FMCSC", "EFD-MVC", "HK-MVFC (real-data)", "MV-FCM", "k-means, centralized (all views)"]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_smoke_table_has_a_row_per_setting_and_method():
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "reproduce_deep.py"), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("| ") and "---" not in ln]
    assert _cells(lines[0]) == COLUMNS
    rows = [dict(zip(COLUMNS, _cells(ln), strict=True)) for ln in lines[1:]]
    assert [(r["setting"], r["method"]) for r in rows] == [
        (s, m) for s in ("random views, Dir(10)", "hybrid 2:1, IID") for m in METHODS
    ]
    for r in rows:
        for key in ("ACC", "NMI", "ARI"):
            value = float(r[key])
            assert math.isfinite(value) and 0.0 <= value <= 1.0, r
        assert float(r["wall s"]) >= 0.0
        assert float(r["ARI min"]) == float(r["ARI"])  # one seed: the minimum is the mean
        if r["method"] in ("FMCSC", "EFD-MVC", "HK-MVFC (real-data)", "MV-FCM"):
            assert r["status"] in ("converged", "round_limit"), r
            assert int(r["bytes"].replace(",", "")) > 0
            assert 0.0 < float(r["CPU s/round"]) < float(r["wall s"]) * 4
        else:
            assert r["CPU s/round"] == "-"
    by = {(r["setting"], r["method"]): r for r in rows}
    assert by[("random views, Dir(10)", "EFD-MVC")]["clients full/partial/single"] == "2/8/2"
    assert by[("hybrid 2:1, IID", "FMCSC")]["clients full/partial/single"] == "8/0/4"
    # the paper's figures, as fractions, where the EFD-MVC paper has them
    assert by[("random views, Dir(10)", "EFD-MVC")]["paper HW ACC/NMI/ARI"] == "0.620/0.540/0.403"
    assert by[("random views, Dir(10)", "FMCSC")]["paper UCI ACC/NMI/ARI"] == "0.361/0.261/0.145"
    assert by[("hybrid 2:1, IID", "FMCSC")]["paper HW ACC/NMI/ARI"] == "-"
    assert "smoke sizes" in res.stdout


def test_settings_picks_the_scenarios_and_rejects_an_unknown_one():
    script = str(ROOT / "benchmarks" / "reproduce_deep.py")
    res = subprocess.run(
        [sys.executable, script, "--smoke", "--only", "kmeans", "--settings", "deep-hybrid-2to1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    rows = [ln for ln in res.stdout.splitlines() if ln.startswith("| ") and "---" not in ln]
    assert [_cells(ln)[:2] for ln in rows[1:]] == [["hybrid 2:1, IID", METHODS[-1]]]
    bad = subprocess.run(
        [sys.executable, script, "--smoke", "--settings", "no-such-file"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--settings: unknown ['no-such-file']" in bad.stderr
