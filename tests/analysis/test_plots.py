"""The run record's plots read well: no offset notation, distinct metrics, exact totals."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from fedstrata.analysis import records
from fedstrata.analysis.compare import compare_many, plot_comparison
from fedstrata.analysis.records import plot_rounds
from fedstrata.scenarios import run as run_module
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import run_scenario

TINY = """\
name: plot-tiny
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}, partition: {kind: iid}}
topology:
  tiers: [{name: fog, count: 2, link: {latency: 0.005}}]
  clients: {count: 4, link: {latency: 0.01, loss: 0.05}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 6, deadline_s: 5, quorum: 0.5}
faults: {dropout: 0.1}
"""


def _rows(folder: Path) -> list[dict[str, Any]]:
    """rounds.csv with numbers as numbers and empty cells as None (as run.py passes them)."""

    def cell(v: str) -> Any:
        if v == "":
            return None
        for kind in (int, float):
            try:
                return kind(v)
            except ValueError:
                pass
        return v

    with open(folder / "rounds.csv", newline="") as fh:
        return [{k: cell(v) for k, v in row.items()} for row in csv.DictReader(fh)]


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("plots") / "run"
    summary = run_scenario(parse_scenario(TINY), out, seed=3, progress=False)
    return out, summary


def _offset_free(fig: Any) -> None:
    fig.canvas.draw()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            fmt = axis.get_major_formatter()
            if hasattr(fmt, "get_useOffset"):
                assert fmt.get_useOffset() is False, ax.get_title()
            assert axis.get_offset_text().get_text() == "", ax.get_title()


@pytest.mark.slow
def test_rounds_plot_is_readable(record, tmp_path):
    folder, summary = record
    final = (summary["virtual_time_s"], summary["bytes_total"])
    fig = plot_rounds(
        _rows(folder), tmp_path / "r.png", title=f"{summary['scenario']}: x", final=final
    )
    assert (tmp_path / "r.png").stat().st_size > 1000
    assert "plot-tiny" in fig._suptitle.get_text()
    _offset_free(fig)
    _objective, quality, traffic = fig.axes
    # the bytes line ends exactly at the summary's total, at the run's end
    (line,) = [ln for ln in traffic.get_lines() if ln.get_gid() == "bytes"]
    assert line.get_ydata()[-1] == summary["bytes_total"]
    assert line.get_xdata()[-1] == summary["virtual_time_s"]
    # ARI and NMI are told apart by marker and line style
    ari, nmi = (
        next(ln for ln in quality.get_lines() if ln.get_gid() == f"quality-{k}")
        for k in ("ari", "nmi")
    )
    assert ari.get_marker() != nmi.get_marker()
    assert ari.get_linestyle() != nmi.get_linestyle()
    # the quality axis fits the data instead of squashing it against 1.0
    lo, hi = quality.get_ylim()
    ys = [y for y in [*ari.get_ydata(), *nmi.get_ydata()] if y == y]
    assert lo <= min(ys) and max(ys) <= hi
    assert hi - lo < 1.0 or min(ys) < 0.1


def test_offset_prone_values_print_plainly(tmp_path):
    """Objectives like 88.41..88.43 used to print as ``+8.841e1``."""
    rows = [
        {
            "tier": "cloud",
            "phase": "iter",
            "iteration": i,
            "objective": 88.41 + 0.001 * i,
            "ari": 0.99 + 0.001 * i,
            "nmi": 0.99 + 0.001 * i,
            "bytes": 10_000_000 + 1000 * i,
            "virtual_time_s": 100.0 + i * 0.001,
        }
        for i in range(1, 8)
    ]
    fig = plot_rounds(rows, tmp_path / "r.png", title="offsets", final=(100.01, 10_009_000))
    _offset_free(fig)


def test_run_plots_the_summary_total(tmp_path, monkeypatch):
    """run.py hands plot_rounds the figures summary.json ends up holding."""
    seen: dict[str, Any] = {}
    real = records.plot_rounds

    def spy(rows, path, **kw):
        seen.update(kw)
        return real(rows, path, **kw)

    monkeypatch.setattr(run_module, "plot_rounds", spy)
    run_scenario(parse_scenario(TINY), tmp_path / "run", seed=3, progress=False)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert seen["final"] == (summary["virtual_time_s"], summary["bytes_total"])
    assert summary["scenario"] in seen["title"]


@pytest.mark.slow
def test_comparison_plot_is_readable(record, tmp_path):
    folder, _ = record
    other = tmp_path / "other"
    run_scenario(parse_scenario(TINY), other, seed=4, progress=False)
    cmp = compare_many([folder, other])
    for metric in ("objective", "ari"):
        fig = plot_comparison(cmp, tmp_path / f"{metric}.png", metric=metric)
        _offset_free(fig)
        lines = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith(("run", "oth"))]
        assert len({ln.get_marker() for ln in lines}) == len(lines) == 2
