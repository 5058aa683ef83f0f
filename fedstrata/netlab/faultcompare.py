"""A faulted run, simulated and measured, round by round: who took part, when each round closed.

Both sides' rounds come from the root's ``rounds.csv``
(:func:`~fedstrata.netlab.compare.per_round`): the simulator's virtual seconds, the
deployment's root clock (seconds since the root connected). :func:`round_table`
prints them side by side, :func:`differences` says in which rounds they part, and
:func:`waiting_round` finds the round that waited for a partitioned node: the first
to close after its link came back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from fedstrata.errors import ValidationError
from fedstrata.netlab.compare import RoundRow

__all__ = ["Waiting", "differences", "round_table", "waiting_round", "with_faults"]

TABLE_HEADER = (
    "| round | sim: took part / expected, ok | real: took part / expected, ok "
    "| sim: closes s | real: closes s | sim: duration s | real: duration s | real - sim s |\n"
    "|---|---|---|---|---|---|---|---|"
)


def _who(r: RoundRow | None) -> str:
    return "-" if r is None else f"{r.participants} / {r.expected}, {'ok' if r.ok else 'failed'}"


def _t(r: RoundRow | None, attr: str) -> str:
    return "-" if r is None else f"{getattr(r, attr):.3f}"


def round_table(sim: list[RoundRow], real: list[RoundRow]) -> str:
    """The two runs' rounds as a markdown table (a round only one side has shows ``-``)."""
    s, m = {r.round: r for r in sim}, {r.round: r for r in real}
    lines = [TABLE_HEADER]
    for k in sorted(s.keys() | m.keys()):
        a, b = s.get(k), m.get(k)
        diff = "-" if a is None or b is None else f"{b.duration_s - a.duration_s:+.3f}"
        lines.append(
            f"| {k} | {_who(a)} | {_who(b)} | {_t(a, 'end_s')} | {_t(b, 'end_s')} "
            f"| {_t(a, 'duration_s')} | {_t(b, 'duration_s')} | {diff} |"
        )
    return "\n".join(lines)


def differences(sim: list[RoundRow], real: list[RoundRow], tol_s: float) -> list[str]:
    """Where the runs differ, one line per difference.

    A round one side lacks, other participants or outcome, or a duration further
    apart than ``tol_s``.
    """
    s, m = {r.round: r for r in sim}, {r.round: r for r in real}
    out = []
    for k in sorted(s.keys() | m.keys()):
        a, b = s.get(k), m.get(k)
        if a is None or b is None:
            out.append(f"round {k}: only the {'real run' if a is None else 'simulator'} has it")
            continue
        if (a.participants, a.expected, a.ok) != (b.participants, b.expected, b.ok):
            out.append(f"round {k}: sim {_who(a)}, real {_who(b)}")
        if abs(b.duration_s - a.duration_s) > tol_s:
            out.append(
                f"round {k}: took {b.duration_s:.3f} s real against {a.duration_s:.3f} s "
                f"simulated ({b.duration_s - a.duration_s:+.3f} s)"
            )
    return out


@dataclass(frozen=True)
class Waiting:
    """The round that waited for a partitioned node.

    ``after_s``: how long after the link came back it closed.
    """

    round: int
    end_s: float
    after_s: float
    participants: int


def waiting_round(rounds: list[RoundRow], healed_s: float) -> Waiting:
    """The first round of ``rounds`` to close after ``healed_s`` (on the same clock)."""
    for r in rounds:
        if r.end_s > healed_s:
            return Waiting(r.round, r.end_s, r.end_s - healed_s, r.participants)
    raise ValidationError(f"no round closed after the link came back at {healed_s:.3f} s")


def with_faults(
    text: str,
    partitions: list[dict[str, Any]] | None = None,
    crashes: list[dict[str, Any]] | None = None,
) -> str:
    """Scenario YAML ``text`` with ``faults.partitions`` and ``faults.crashes`` replaced.

    ``None`` or an empty list removes the key, so one base scenario gives the
    simulator's file (with a crash) and the lab's (the crash left to a SIGKILL).
    """
    doc = yaml.safe_load(text)
    faults = doc.setdefault("faults", {})
    for key, value in (("partitions", partitions), ("crashes", crashes)):
        if value:
            faults[key] = value
        else:
            faults.pop(key, None)
    if not faults:
        doc.pop("faults")
    return yaml.safe_dump(doc, sort_keys=False)
