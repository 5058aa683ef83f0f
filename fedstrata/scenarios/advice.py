"""Warnings about a valid scenario that is likely not what its author meant.

Latencies that look like milliseconds written as seconds, and aggregators whose rounds
cannot fit their deadline. Warnings never make a scenario invalid; ``fedstrata
validate`` and ``fedstrata run`` print them located at their file and line.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from fedstrata.errors import ScenarioError
from fedstrata.scenarios.budget import round_overruns, seconds
from fedstrata.scenarios.schema import Scenario
from fedstrata.scenarios.wiring import PreparedData, prepare_data

__all__ = ["MS_LOOKING_LATENCY_S", "deadline_warnings", "scenario_warnings"]

#: A bare latency number (seconds) at least this large is likely meant in milliseconds.
MS_LOOKING_LATENCY_S = 1.0

#: The latency keys of a ``LatencySpec`` mapping that hold seconds.
_LATENCY_SECONDS = ("value", "mean", "std", "median", "scale")


def _links(sc: Scenario) -> list[tuple[str, Any]]:
    links = [(f"topology.tiers.{i}.link", t.link) for i, t in enumerate(sc.topology.tiers)]
    links.append(("topology.clients.link", sc.topology.clients.link))
    return links


def _bare_seconds(root: Any, path: str) -> float | None:
    """The number at ``path`` of the YAML tree when it is written without a unit."""
    import yaml

    from fedstrata.scenarios.loader import _node_at

    node = _node_at(root, tuple(int(p) if p.isdigit() else p for p in path.split(".")))
    if not isinstance(node, yaml.ScalarNode) or node.style is not None:
        return None  # a mapping, a quoted string, or absent
    try:
        return float(node.value)  # "40ms" does not parse: it has a unit
    except ValueError:
        return None


def _ms_latency_warnings(sc: Scenario, root: Any) -> list[ScenarioError]:
    """Latencies given as a bare number of seconds >= 1 s: probably meant as milliseconds."""
    warnings = []
    for path, _link in _links(sc):
        for key in ("latency", "jitter"):
            where = [f"{path}.{key}"] + [f"{path}.{key}.{k}" for k in _LATENCY_SECONDS]
            for at in where:
                value = _bare_seconds(root, at)
                if value is not None and value >= MS_LOOKING_LATENCY_S:
                    warnings.append(
                        ScenarioError(
                            f"warning: {key} {value:g} is read as {value:g} s (a bare number is "
                            f"seconds); if you meant milliseconds write {value:g}ms",
                            path=at,
                        )
                    )
    return warnings


def deadline_warnings(sc: Scenario, data: PreparedData | None = None) -> list[ScenarioError]:
    """Aggregators whose rounds miss their deadline at the links' typical latency.

    One warning per tier (its slowest such node), at the deadline's key; see
    :mod:`fedstrata.scenarios.budget` for the estimate. A round that cannot fit even
    at zero latency is pre-flight's error, not a warning.
    """
    from fedstrata.scenarios.build import model_of

    if data is None:
        data = prepare_data(sc)
    model = model_of(sc, [X.shape[1] for X in data.dataset.views], data.dataset.n_samples)
    warnings: list[ScenarioError] = []
    for o in round_overruns(sc, data, model):
        if o.never:
            continue
        kind = "its quorum of children needs" if o.need > 1 else "a child needs"
        warnings.append(
            ScenarioError(
                f"warning: every round of {o.node} ({o.tier}) misses its "
                f"{seconds(o.deadline)} deadline: {kind} at least about "
                f"{seconds(o.hop.total)} to answer ({o.hop.parts()}), so rounds fail and "
                "the run stalls; raise the deadline or check the links and speeds",
                path=o.path,
            )
        )
    return warnings


def scenario_warnings(path: str | Path, sc: Scenario) -> list[ScenarioError]:
    """The warnings of a valid scenario file, each located (``file:line: path: warning: ...``).

    Latencies that look like milliseconds written as seconds (a bare number >= 1 s)
    and aggregators whose rounds cannot fit their deadline
    (:func:`deadline_warnings`). Warnings never make a scenario invalid.
    """
    from fedstrata.scenarios.loader import _compose_extending, _read, _where

    file = str(path)
    p = Path(path)
    try:
        _, root, _, _ = _compose_extending(_read(p, file), file, p.absolute().parent)
    except Exception:  # the file validated a moment ago: if it no longer reads, no warnings
        return []
    found = _ms_latency_warnings(sc, root)
    with contextlib.suppress(ScenarioError):  # an invalid scenario is the loader's to report
        found += deadline_warnings(sc)
    located = []
    for w in found:
        parts = tuple(int(x) if x.isdigit() else x for x in (w.path or "").split("."))
        where, line = _where(root, parts, file)
        located.append(ScenarioError(w.reason, path=w.path, file=where, line=line))
    return located
