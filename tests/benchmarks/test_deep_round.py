"""benchmarks/deep_round.py --smoke: ratio lines, and upload bytes equal to the prediction."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.extras import require

require("torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "deep_round.py"
CASES = [(m, k) for m in ("fmcsc", "efd-mvc") for k in ("full", "single")]
RATIO = re.compile(
    r"^ratio (\S+) default (\S+): round / kmeans = ([0-9.]+), pretrain / kmeans = ([0-9.]+)$"
)
BYTES = re.compile(
    r"^bytes (\S+) default (\S+): measured (\d+) predicted (\d+) models (\d+) \(expected (\d+)\)$"
)


def test_smoke_prints_ratios_and_exact_upload_bytes():
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    ratios = {(m[1], m[2]): m for m in map(RATIO.match, lines) if m}
    assert set(ratios) == set(CASES), res.stdout
    assert all(float(m[3]) > 0 and float(m[4]) > 0 for m in ratios.values())
    sizes = {(m[1], m[2]): tuple(map(int, m.groups()[2:])) for m in map(BYTES.match, lines) if m}
    assert set(sizes) == set(CASES), res.stdout
    for case, (measured, predicted, models, expected) in sizes.items():
        assert measured == predicted, case
        assert models == expected, case
    # FMCSC: a multi-view client uploads V + 1 = 7 models, a single-view one 1; EFD-MVC 1
    assert [sizes[c][2] for c in CASES] == [7, 1, 1, 1]
    assert any("MNIST-USPS dims (784, 784): formula 6,778,276" in line for line in lines)
    assert "bytes check: all measured sizes equal the predictions" in lines
    assert "what a GPU would change" in res.stdout
