"""Warnings about a valid scenario that is likely not what its author meant.

Latencies that look like milliseconds written as seconds, and aggregators whose rounds
cannot fit their deadline. Warnings never make a scenario invalid; ``fedstrata
validate`` and ``fedstrata run`` print them located at their file and line.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedstrata.errors import ScenarioError
from fedstrata.scenarios.schema import Scenario
from fedstrata.scenarios.wiring import PreparedData, prepare_data, wire_topology

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


def _typical(spec: Any) -> float:
    """A latency model's median, from a fixed sample (0 when it cannot be built)."""
    from fedstrata.scenarios.build import latency_model

    if spec is None:
        return 0.0
    try:
        model = latency_model(spec)
    except Exception:  # a bad trace is an error reported by preflight, not here
        return 0.0
    return float(np.median(model.sample_many(np.random.default_rng(0), 501)))


@dataclass(frozen=True)
class _Hop:
    """The time one child needs to answer its parent: latency, transfer and compute."""

    latency: float
    transfer: float
    compute: float
    below: float = 0.0  # a middle node: the time its own collection takes

    @property
    def total(self) -> float:
        return self.latency + self.transfer + self.compute + self.below

    def parts(self) -> str:
        shown = [
            ("latency", self.latency),
            ("collection below", self.below),
            ("transfer", self.transfer),
            ("compute", self.compute),
        ]
        return " + ".join(f"{name} {_secs(v)}" for name, v in shown if v > 0)


def _secs(value: float) -> str:
    return f"{value:.3g} s" if value >= 0.01 else f"{value * 1e3:.3g} ms"


def deadline_warnings(sc: Scenario, data: PreparedData | None = None) -> list[ScenarioError]:
    """Aggregators whose rounds cannot collect their quorum within their deadline.

    A lower estimate of each child's answer time at the scenario's links and speeds:
    the link's typical latency both ways (the median of its distribution), the
    model down and the partial up at its bandwidth (each at least the centres,
    ``8 x clusters x features`` bytes), the client's local work
    (``n_i x clusters x features x local_iters x flops_per_element`` at its
    ``speed_gflops``) and, for a middle-tier node, its own collection. An aggregator
    whose quorum-th fastest child needs longer than its deadline gets one warning,
    at the deadline's key, per tier (the slowest node of the tier).
    """
    from fedstrata.scenarios.build import node_timing, protocol_config

    if data is None:
        data = prepare_data(sc)
    wiring = wire_topology(sc)
    timing = node_timing(sc, wiring)
    protocol = protocol_config(sc, "preflight")
    c = sc.algorithm.n_clusters
    dims = [int(X.shape[1]) for X in data.dataset.views]
    model_bytes = 8 * c * sum(dims)
    spec_of = {t.name: (i, t) for i, t in enumerate(sc.topology.tiers)}

    def transfer(link: Any, nbytes: float) -> float:
        return 0.0 if link.bandwidth_mbps is None else 8 * nbytes / (link.bandwidth_mbps * 1e6)

    hop: dict[str, _Hop] = {}
    client_link = sc.topology.clients.link
    lat = 2 * _typical(client_link.latency)
    for j, client in enumerate(wiring.clients):
        held = sum(dims[v] for v in data.held[j])
        work = len(data.indices[j]) * c * held * sc.protocol.local_iters
        hop[client] = _Hop(
            latency=lat,
            transfer=transfer(client_link, 2 * model_bytes),
            compute=work * protocol.flops_per_element / (sc.topology.clients.speed_gflops * 1e9),
        )
    children: dict[str, list[str]] = {}
    for child, parent in wiring.parents.items():
        children.setdefault(parent, []).append(child)
    warnings: list[ScenarioError] = []
    for level in range(len(wiring.tiers) - 1, -1, -1):  # bottom-up: children first
        name, group = wiring.tiers[level]
        worst: tuple[float, str, _Hop, float] | None = None
        for node in group:
            answers = sorted((hop[ch] for ch in children.get(node, ())), key=lambda h: h.total)
            if not answers:
                continue
            deadline = timing[node][0]
            need = max(1, math.ceil(sc.protocol.quorum * len(answers) - 1e-9))
            slowest_needed = answers[need - 1]
            if slowest_needed.total > deadline and (
                worst is None or slowest_needed.total / deadline > worst[0] / worst[3]
            ):
                worst = (slowest_needed.total, node, slowest_needed, deadline)
            if level > 0:
                _, spec = spec_of[name]
                hop[node] = _Hop(
                    latency=2 * _typical(spec.link.latency),
                    transfer=transfer(spec.link, 2 * model_bytes),
                    compute=0.0,
                    below=min(slowest_needed.total, deadline),
                )
        if worst is None:
            continue
        total, node, h, deadline = worst
        if level == 0:
            path = "protocol.deadline_s"
        else:
            i, spec = spec_of[name]
            path = (
                f"topology.tiers.{i}.deadline_s"
                if spec.deadline_s is not None
                else ("protocol.deadline_s")
            )
        kind = "its quorum of children needs" if need > 1 else "a child needs"
        warnings.append(
            ScenarioError(
                f"warning: every round of {node} ({name}) misses its {_secs(deadline)} "
                f"deadline: {kind} at least about {_secs(total)} to answer ({h.parts()}), "
                "so rounds fail and the run stalls; raise the deadline or check the links "
                "and speeds",
                path=path,
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
