"""benchmarks/dp_sample.py --smoke: it prints the ARI-ε table with numbers in range."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "dp_sample.py"
HEAD = "| setting | ε |"
SMOKE_ROW = ("synthetic, 10 IID clients", "1")


def run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def table_rows(text: str) -> dict[tuple[str, str], dict[str, str]]:
    """The table's rows by (setting, ε), each a dict keyed by column name."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEAD))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        row = dict(zip(header, cells, strict=True))
        rows[(row["setting"], row["ε"])] = row
    return rows


def test_smoke_prints_the_table_with_fedstrata_and_diffprivlib_in_range(tmp_path):
    out = tmp_path / "table.md"
    res = run_script("--smoke", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert out.read_text(encoding="utf-8") == res.stdout
    assert "seeds 0, 1;" in res.stdout
    assert "min and max over the whole data set" in res.stdout  # the bounds convention
    rows = table_rows(res.stdout)
    assert list(rows) == [SMOKE_ROW]
    row = rows[SMOKE_ROW]

    # fedstrata under sample DP at ε = 1 keeps the synthetic clusters
    assert float(row["fedstrata ARI mean"]) >= 0.9, row
    assert -0.5 <= float(row["fedstrata ARI min"]) <= float(row["fedstrata ARI mean"]) <= 1.0
    # the record's accountant spent the budget, and no more
    spent = float(row["ε spent"])
    assert 0.5 < spent <= 1.0 + 1e-9, row
    setup, rounds = (float(x) for x in row["setup + rounds"].split("+"))
    assert 0 < setup <= spent + 1e-9 and 0 < rounds <= spent + 1e-9

    # diffprivlib ran beside it (installed here for this benchmark) and gave an ARI
    assert -0.5 <= float(row["diffprivlib ARI min"]) <= float(row["diffprivlib ARI mean"]) <= 1.0

    verdict = [line for line in res.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert len(verdict) == 2 and "synthetic, 10 IID clients, ε = 1" in verdict[0]
    assert verdict[1] == "PASS  budget: every DP run (2) reports at most its ε spent"


def test_without_diffprivlib_a_clear_message_and_fedstrata_still_runs(tmp_path):
    """A diffprivlib that cannot be imported: the install command, 'missing' in its columns."""
    shadow = tmp_path / "diffprivlib"
    shadow.mkdir()
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'diffprivlib'\")\n", encoding="utf-8"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    res = run_script("--smoke", "--seeds", "1", env=env)
    assert res.returncode == 0, res.stderr
    assert "pip install diffprivlib==0.6.6" in res.stderr
    row = table_rows(res.stdout)[SMOKE_ROW]
    assert row["diffprivlib ARI mean"] == "missing"
    assert float(row["fedstrata ARI mean"]) >= 0.9, row
