"""benchmarks/flower_peer.py --smoke: fedstrata's half always; Flower's when its venv exists."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLOWER_PYTHON = os.environ.get("FLOWER_PYTHON", "/tmp/flwr-venv/bin/python")


def _flower_installed() -> bool:
    if not Path(FLOWER_PYTHON).exists():
        return False
    probe = [FLOWER_PYTHON, "-c", "import flwr.simulation, ray"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


@pytest.mark.slow
def test_smoke_prints_the_ten_client_row_and_flower_matches_bit_for_bit():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "flower_peer.py"), "--smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    rows = [line.split() for line in res.stdout.splitlines() if line.split()[:1] == ["10"]]
    assert len(rows) == 1, res.stdout
    assert float(rows[0][1]) > 0.0  # fedstrata's wall time
    if _flower_installed():
        assert "identical: yes" in res.stdout, res.stdout
        assert float(rows[0][2]) > 0.0  # Flower's wall time
        assert "flower: not installed" not in res.stdout
    else:
        assert "flower: not installed" in res.stdout
        assert "pip install" in res.stdout
        assert rows[0][2:] == ["n/a", "n/a", "n/a"]
