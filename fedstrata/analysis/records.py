"""Run records: summary.json, rounds.csv and plots, the same shape for simulated and real runs."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ROUND_COLUMNS", "plot_rounds", "write_rounds", "write_summary"]

#: Columns of rounds.csv, one row per round (and sub-round) and tier. ``bytes`` is the
#: cumulative PUBLISH bytes on the wire when the tier's last aggregation of that round
#: closed, ``bytes_round`` the traffic since the tier's previous row.
ROUND_COLUMNS = (
    "round",
    "iteration",
    "tier",
    "phase",
    "sub",
    "aggregators",
    "participants",
    "expected",
    "ok",
    "bytes",
    "bytes_round",
    "virtual_time_s",
    "objective",
    "ari",
    "nmi",
    "acc",
)


def write_summary(summary: Mapping[str, Any], path: str | Path) -> None:
    """Write ``summary.json`` (sorted keys, 2-space indent)."""
    Path(path).write_text(
        json.dumps(summary, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8"
    )


def write_rounds(rows: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    """Write ``rounds.csv`` with :data:`ROUND_COLUMNS` (missing values left empty)."""
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=ROUND_COLUMNS, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if row.get(k) is None else row[k]) for k in ROUND_COLUMNS})


def plot_rounds(rows: Sequence[Mapping[str, Any]], path: str | Path, *, title: str = "") -> None:
    """Plot objective, ARI and cumulative bytes per root round into one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    root = [
        r
        for r in rows
        if r.get("tier") == "cloud" and r.get("phase") == "iter" and r.get("objective") is not None
    ]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    it = [r["iteration"] for r in root]
    axes[0].plot(it, [r["objective"] for r in root], marker=".")
    axes[0].set(xlabel="round", ylabel="objective J", title="objective")
    axes[1].plot(it, [r["ari"] for r in root], marker=".", label="ARI")
    axes[1].plot(it, [r["nmi"] for r in root], marker=".", label="NMI")
    axes[1].set(xlabel="round", ylim=(-0.05, 1.05), title="clustering quality")
    axes[1].legend()
    axes[2].plot([r["virtual_time_s"] for r in root], [r["bytes"] for r in root], marker=".")
    axes[2].set(xlabel="virtual time (s)", ylabel="bytes on the wire (cumulative)", title="traffic")
    for ax in axes[:2]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
