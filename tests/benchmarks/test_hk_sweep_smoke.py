"""benchmarks/hk_sweep.py --smoke: it prints both data sets' ceilings and every sweep row."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "hk_sweep.py"


@pytest.mark.slow  # about 6 s: 32 fits and two k-means on 400 samples
def test_smoke_prints_ceilings_and_rows():
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    for name in ("multiple-features", "digits"):
        assert any(line.startswith(f"## {name}: n=400") for line in lines)
    assert sum(line.startswith("k-means ARI ") and "ceiling m*0" in line for line in lines) == 2
    rows = [line for line in lines if line.startswith(("| m = ", "| alpha = ", "| bandwidth = "))]
    assert len(rows) == 2 * (2 + 3 + 3)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        ari, ari_min, ratio, top = (float(c) for c in cells[1:])
        assert -1.0 <= ari_min <= ari <= 1.0 and 0.1 - 1e-9 <= top <= 1.0 and ratio == ratio
