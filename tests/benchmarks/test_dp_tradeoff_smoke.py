"""benchmarks/dp_tradeoff.py --smoke: it runs, prints every row, and stays within budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "dp_tradeoff.py"
HEAD = "| ε target |"


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def table_rows(text: str) -> dict[str, dict[str, str]]:
    """The result table's rows by their ε target cell, each a dict keyed by column name."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEAD))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows: dict[str, dict[str, str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        row = dict(zip(header, cells, strict=True))
        rows[row["ε target"]] = row
    return rows


def mean_of(cell: str) -> float:
    return float(cell.split("±")[0])


def test_smoke_prints_the_table_within_budget(tmp_path):
    out = tmp_path / "table.md"
    res = run_script("--smoke", "--out", str(out))
    assert res.returncode == 0, res.stderr
    rows = table_rows(res.stdout)
    assert list(rows) == ["none (no DP)", "1000", "1"]
    assert out.read_text(encoding="utf-8") == res.stdout
    assert "| client-0 |" in res.stdout and "| client-1 |" in res.stdout  # the norm report

    dp = {eps: rows[eps] for eps in ("1000", "1")}
    for eps, row in dp.items():
        assert float(row["ε spent"]) <= float(eps) + 1e-6
        assert float(row["ε spent"]) > 0.99 * float(eps)  # the accountant's budget is used
        assert row["rounds"] == "100"  # noisy runs never meet tol: every release counted
        assert row["clip"].endswith("(p5)")
    # less budget, more noise (the accountant's z is decreasing in ε)
    assert float(dp["1"]["noise multiplier"]) > float(dp["1000"]["noise multiplier"]) > 0

    # Utility: no DP beats the smallest ε. Deterministic by seed (one seed here), so not
    # flaky; per seed it is not a theorem, since a noisy run can land near a poor local
    # optimum of the exact one. Measured over 5 seeds at several sizes, ε = 1 gives
    # ARI 0.23-0.69 and no DP 0.39-1.0; here (seed 0, 500 per cluster) 1.0 against 0.29.
    ari_plain = mean_of(rows["none (no DP)"]["ARI mean ± sd"])
    ari_small = mean_of(dp["1"]["ARI mean ± sd"])
    assert ari_plain >= ari_small
    assert ari_plain > 0.9


def test_secure_on_the_two_client_paper_scenario_is_refused_with_the_reason():
    """A secure sum of two would give each client's input to the other: no table."""
    res = run_script("--smoke", "--secure", "--epsilons", "none,1")
    assert res.returncode == 2
    assert "privacy.secure_aggregation: cloud aggregates 2 clients" in res.stderr
    assert HEAD not in res.stdout  # nothing measured in its place


def test_per_block_clips_are_percentiles_of_each_block(tmp_path):
    res = run_script("--smoke", "--epsilons", "none,1000", "--clips", "b5")
    assert res.returncode == 0, res.stderr
    row = table_rows(res.stdout)["1000"]
    assert row["clip"].startswith("num ") and " / den " in row["clip"]
    assert row["clip"].endswith("(b5)")
