"""Round times and bytes of a run record, side by side with another run's.

A round's duration is the root's ``virtual_time_s`` at the end of the round minus at
the end of the round before (the setup round 0 is not counted: on a deployment it
includes the nodes' start). The *network-added* time of a round is its duration minus
the same round's duration in a reference run without shaping or loss, on the same
side (simulated against simulated, measured against measured): what the network
adds, without the compute time the two sides count differently (the simulator from
``speed_gflops``, a deployment in wall-clock time).
"""

from __future__ import annotations

import csv
import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedstrata.errors import ValidationError

__all__ = ["RoundRow", "network_added", "per_round", "quantiles", "read_rounds", "round_durations"]


def read_rounds(path: Path) -> list[dict[str, str]]:
    """The rows of a ``rounds.csv``."""
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def round_durations(rows: list[dict[str, str]], root_tier: str = "cloud") -> list[float]:
    """Seconds each round after the setup round took, from the root tier's rows."""
    ends: dict[int, float] = {}
    for row in rows:
        if row["tier"] == root_tier:
            # a round closed twice (a repeated setup round): its last close counts
            ends[int(row["round"])] = float(row["virtual_time_s"])
    rounds = sorted(ends)
    return [ends[r] - ends[p] for p, r in itertools.pairwise(rounds)]


def network_added(durations: list[float], reference: list[float]) -> list[float]:
    """Each round's duration minus the same round's in ``reference``."""
    if len(durations) != len(reference):
        raise ValidationError(
            f"{len(durations)} rounds against {len(reference)} in the reference run"
        )
    return [d - r for d, r in zip(durations, reference, strict=True)]


def quantiles(values: list[float]) -> tuple[float, float]:
    """The median and the 90th percentile (linear interpolation) of ``values``."""
    if not values:
        return float("nan"), float("nan")
    a = np.asarray(values, dtype=float)
    return float(np.median(a)), float(np.percentile(a, 90))


@dataclass(frozen=True)
class RoundRow:
    """One round of the root: who took part, whether it succeeded, when it closed.

    ``duration_s`` is its close minus the previous round's (the setup round's: its
    close, from the run's time zero).
    """

    round: int
    participants: int
    expected: int
    ok: bool
    end_s: float
    duration_s: float


def per_round(rows: list[dict[str, str]], root_tier: str = "cloud") -> list[RoundRow]:
    """The root's rounds of a ``rounds.csv``, setup round included (a repeated close: the last)."""
    last: dict[int, dict[str, str]] = {}
    for row in rows:
        if row["tier"] == root_tier:
            last[int(row["round"])] = row
    out: list[RoundRow] = []
    before = 0.0
    for r in sorted(last):
        row = last[r]
        end = float(row["virtual_time_s"])
        ok = row["ok"].strip().lower() == "true"
        out.append(
            RoundRow(r, int(row["participants"]), int(row["expected"]), ok, end, end - before)
        )
        before = end
    return out
