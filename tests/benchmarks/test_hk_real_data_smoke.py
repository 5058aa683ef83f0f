"""benchmarks/hk_real_data.py --smoke: it runs and prints every method's row and the ratio."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "hk_real_data.py"
METHODS = (
    "KMeans (std concat)",
    "HKMVFC defaults",
    "HKMVFC preset=paper",
    "MVFCM m=1.25",
    "MVKMED (std)",
    "HKMVFC federated",
)


def test_smoke_prints_the_table_and_the_time_ratio():
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "| method | ARI | min ARI | ACC | NMI | s/fit |" in lines
    for name in METHODS:
        row = next(line for line in lines if line.startswith(f"| {name} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 6
        ari, _, acc, nmi, sec = (float(c) for c in cells[1:])
        assert -1.0 <= ari <= 1.0 and 0.0 <= acc <= 1.0 and 0.0 <= nmi <= 1.0 and sec >= 0.0
    assert any(line.startswith("time ratio HKMVFC defaults / KMeans: ") for line in lines)
