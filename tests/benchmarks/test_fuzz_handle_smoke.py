"""benchmarks/fuzz_handle.py --smoke: captures of every role, 2,000 mutants, no escape."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_fuzzes_every_role_and_nothing_escapes():
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fuzz_handle.py"), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    captured = re.search(r"captured (\d+) genuine deliveries \((\d+) kinds\) from (\d+)", out)
    assert captured is not None, out
    assert int(captured.group(1)) > 100 and int(captured.group(3)) >= 10
    assert re.search(r"^cases: 2000\b", out, re.M), out
    assert re.search(r"^escapes: 0$", out, re.M), out
    for role in ("client", "middle", "root"):
        assert re.search(rf"^role {role}: \d+ cases, 0 escapes$", out, re.M), out
    rate = re.search(r"cases/s: (\d+)", out)
    assert rate is not None and int(rate.group(1)) > 0
