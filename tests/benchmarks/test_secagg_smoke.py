"""benchmarks/secagg.py --smoke: every mode runs and every secure sum is exact."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_runs_every_mode_and_the_sums_are_exact():
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "secagg.py"), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    rows = [line.split() for line in res.stdout.splitlines() if "%" in line and "|" in line]
    modes = {r[2] for r in rows}
    assert {"plaintext", "secagg", "secagg+", "flower-secagg+"} <= modes
    for r in rows:
        if r[2] in ("plaintext", "secagg", "secagg+"):
            assert " yes " in " ".join(r), r  # within the encoding's precision
    assert "Bell et al. 2020" in res.stdout
