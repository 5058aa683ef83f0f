"""benchmarks/tensor_real_data.py --smoke: every (data, setting, method) row runs and parses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "tensor_real_data.py"
METHODS = ("e-fkmvc", "fedhk-parafac2", "fedhk-tucker", "fedhk-mvc-person")


def test_smoke_prints_a_row_per_data_setting_and_method():
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("| data | setting | method | paper ARI |")
    rows = [line for line in lines[2:] if line.startswith("| ")]
    want = {
        (data, setting, method)
        for data in ("multiple-features", "digits", "synthetic")
        for setting in ("central", "federated")
        for method in METHODS
    }
    seen = set()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 11
        seen.add(tuple(cells[:3]))
        aris = [float(cells[i]) for i in (3, 4, 6, 7, 9)]
        assert all(-1.0 <= a <= 1.0 for a in aris)
        assert float(cells[5]) >= 0.0 and float(cells[8]) >= 0.0
        # the gap real-data − k-means, from the unrounded means
        assert abs(float(cells[10]) - (float(cells[6]) - float(cells[9]))) <= 0.0015
    assert seen == want
