"""benchmarks/tensor_scaling.py --smoke: every method and sweep is timed and fitted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("e-fkmvc", "fedhk-parafac2", "fedhk-tucker", "fedhk-mvc-person")


def test_smoke_prints_a_fitted_and_a_stated_exponent_for_every_sweep():
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tensor_scaling.py"), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    rows = [
        line.split()
        for line in res.stdout.splitlines()
        if line.split()[:1] in ([m] for m in METHODS)
    ]
    sweeps = {(r[0], r[1]) for r in rows if r[1] in ("n", "s", "d", "r")}
    for m in METHODS:
        for sweep in ("n", "s", "d") + (("r",) if m != "e-fkmvc" else ()):
            assert (m, sweep) in sweeps
    for r in rows:
        if r[1] in ("n", "s", "d", "r"):
            float(r[-3]), float(r[-2]), float(r[-1])  # fitted, tail and stated exponents
    assert sum("Table 5" in line for line in res.stdout.splitlines()) == 1
    assert all(f"{m}" in res.stdout and " B" in res.stdout for m in METHODS)
