"""benchmarks/reproduce_hybrid.py --smoke: every population runs and its table row prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_prints_a_row_per_population():
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "reproduce_hybrid.py"), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    rows = [line for line in res.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0].startswith("| population |")
    labels = [r.split("|")[1].strip() for r in rows[1:]]
    assert len(labels) == 6
    for want in ("full-view baseline", "hybrid 2:1", "hybrid 1:1", "hybrid 1:2"):
        assert any(label.startswith(want) for label in labels), labels
    assert any("random view subsets" in label for label in labels)
    assert any("Fed-MVKM" in label for label in labels)
    mixes = {r.split("|")[1].strip(): r.split("|")[2].strip() for r in rows[1:]}
    assert mixes["hybrid 2:1 (HK-MVFC)"] == "8/0/4"
    assert mixes["full-view baseline (HK-MVFC)"] == "12/0/0"
    for r in rows[1:]:
        assert "round_limit" in r or "converged" in r, r
    assert "rounds capped at 10" in res.stdout
