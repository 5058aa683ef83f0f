"""benchmarks/reproduce_fedhk_mvfc.py --smoke: Tables 2, 8 and 9 print, paper next to ours."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _table_after(text: str, heading: str) -> list[str]:
    """The markdown table lines that follow ``heading`` (up to the next heading)."""
    section = text.split(heading, 1)[1].split("\n### ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("|")]


def test_smoke_prints_the_three_tables_side_by_side(tmp_path: Path):
    out = tmp_path / "reproductions.md"
    res = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "reproduce_fedhk_mvfc.py"),
            "--smoke",
            "--markdown",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    for heading in ("### Table 2", "### Table 8", "### Table 9"):
        assert heading in res.stdout, heading
        rows = _table_after(res.stdout, heading)
        assert len(rows) >= 4, rows  # header, rule and at least two rows
        header = rows[0]
        assert "paper" in header and "fedstrata" in header, header
    t2 = "\n".join(_table_after(res.stdout, "### Table 2"))
    for name in ("HK-MVFC", "FedHK-MVFC", "Fed-MVFCM", "MinMax-FCM", "not implemented"):
        assert name in t2, name
    t9 = "\n".join(_table_after(res.stdout, "### Table 9"))
    assert "15,432" in t9 and "4,629" in t9
    # --markdown writes the same tables and the marker below which notes are kept
    text = out.read_text()
    assert "### Table 9" in text and "<!-- end of generated tables -->" in text
