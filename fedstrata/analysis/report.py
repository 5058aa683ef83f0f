"""``fedstrata report DIR``: one readable page about one run record.

:func:`write_report` reads a run folder (see ``docs/records.md``) and writes
``report.html`` (self-contained: every image a base64 PNG data URI, no external
reference) and ``report.md`` (the same text, its images saved next to it as
``report-*.png``). The page shows the scenario, the edge-fog-cloud tree with its
links, objective and ARI per round and over time, the bytes of each tier per round,
faults and dropouts on a timeline (with ``events.jsonl``) and the privacy budget.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fedstrata.analysis.records import _no_offset, atomic_write
from fedstrata.errors import FedstrataError

__all__ = ["NotARunRecordError", "ReportError", "write_report"]

#: The images a report writes next to ``report.md``, in page order.
IMAGES = ("topology", "progress", "bytes", "timeline")


class NotARunRecordError(FedstrataError):
    """The path is not a run folder (missing, a file, a sweep folder): a usage error."""


class ReportError(FedstrataError):
    """The run folder is incomplete or malformed (no or invalid summary.json, rounds.csv)."""


# -- reading ---------------------------------------------------------------------------


def _number(v: str) -> Any:
    if v == "":
        return None
    for kind in (int, float):
        try:
            return kind(v)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(v, v)


def _read_record(folder: Path) -> dict[str, Any]:
    if not folder.is_dir():
        what = "no such folder" if not folder.exists() else "not a folder"
        raise NotARunRecordError(f"{folder}: not a run record ({what})")
    if not (folder / "summary.json").exists() and (folder / "node.json").is_file():
        return _read_device_record(folder)
    if not (folder / "summary.json").exists():
        raise NotARunRecordError(
            f"{folder}: not a run record (no summary.json: not a run folder, or the run "
            "did not finish)"
        )
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"{folder / 'summary.json'}: cannot read ({exc})") from None
    if not isinstance(summary, dict):
        raise ReportError(f"{folder / 'summary.json'}: not a JSON object")
    try:
        with open(folder / "rounds.csv", newline="", encoding="utf-8") as fh:
            rows = [{k: _number(v or "") for k, v in r.items()} for r in csv.DictReader(fh)]
    except OSError as exc:
        raise ReportError(f"{folder / 'rounds.csv'}: cannot read ({exc.strerror})") from None
    text = ""
    scenario: dict[str, Any] = {}
    if (folder / "scenario.yaml").exists():
        text = (folder / "scenario.yaml").read_text(encoding="utf-8")
        try:
            loaded = yaml.safe_load(text)
            scenario = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError:
            scenario = {}
    events: list[dict[str, Any]] | None = None
    if (folder / "events.jsonl").exists():
        events = []
        with open(folder / "events.jsonl", encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    try:
                        events.append(json.loads(line))
                    except ValueError:
                        raise ReportError(f"{folder / 'events.jsonl'}: invalid JSON") from None
    return {
        "summary": summary,
        "rows": rows,
        "yaml": text,
        "scenario": scenario,
        "events": events,
        "device": None,
        "scenario_path": folder / "scenario.yaml",
    }


def _read_device_record(folder: Path) -> dict[str, Any]:
    """A ``fedstrata node`` folder as a record: its node's view, and what it lacks."""
    from fedstrata.analysis.compare import NotARunFolderError, RecordError, load_device_record

    try:
        rec = load_device_record([folder])
    except NotARunFolderError as exc:
        raise NotARunRecordError(str(exc)) from None
    except RecordError as exc:
        raise ReportError(str(exc)) from None
    node = json.loads((folder / "node.json").read_text(encoding="utf-8"))
    summary = dict(rec["summary"])
    if summary.get("status") is None:  # a node below the root: its own outcome
        summary["status"] = node.get("status")
        summary["reason"] = f"{node.get('node')}: {node.get('reason')}"
        summary["wall_time_s"] = node.get("wall_time_s")
    rows: list[dict[str, Any]] = []
    if (folder / "rounds.csv").is_file():
        with open(folder / "rounds.csv", newline="", encoding="utf-8") as fh:
            rows = [{k: _number(v or "") for k, v in r.items()} for r in csv.DictReader(fh)]
    text, scenario = "", {}
    source = Path(str(node.get("scenario_file") or ""))
    if node.get("scenario_file") and source.is_file():
        text = source.read_text(encoding="utf-8")
        try:
            loaded = yaml.safe_load(text)
            scenario = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError:
            scenario = {}
    lacks = list(rec["lacks"])
    if not text:
        lacks.append(f"the scenario ({node.get('scenario_file')} is not readable here)")
    return {
        "summary": summary,
        "rows": rows,
        "yaml": text,
        "scenario": scenario,
        "events": None,
        "device": {"node": node.get("node"), "role": node.get("role"), "lacks": lacks},
        "scenario_path": source if text else None,
    }


def _wiring(scenario: Path | None) -> tuple[list[tuple[str, list[str]]], dict[str, str]] | None:
    """``(tiers top-down with their nodes, parent of every node)`` or None if unknown."""
    if scenario is None:
        return None
    try:
        from fedstrata.scenarios.loader import load_scenario
        from fedstrata.scenarios.wiring import wire_topology

        sc = load_scenario(scenario, preflight=False)
        w = wire_topology(sc)
    except Exception:  # an old or foreign scenario: draw nothing rather than fail
        return None
    tiers = [(name, list(group)) for name, group in w.tiers] + [("edge", list(w.clients))]
    return tiers, dict(w.parents)


# -- figures ---------------------------------------------------------------------------


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, dpi=100, format="png")
    return buf.getvalue()


def _latency_text(spec: Any) -> str:
    if isinstance(spec, int | float):
        return f"{spec * 1000:g} ms"
    if isinstance(spec, Mapping):
        dist = spec.get("dist", "?")
        params = ", ".join(
            f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
            for k, v in spec.items()
            if k != "dist"
        )
        return f"{dist}({params}) s"
    return "?"


def _link_text(link: Any) -> str:
    """``latency .., bandwidth .., loss ..`` of one scenario link spec."""
    if not isinstance(link, Mapping):
        return "link: default"
    parts = [f"latency {_latency_text(link.get('latency', 0.0))}"]
    bw = link.get("bandwidth_mbps")
    parts.append("bandwidth unlimited" if bw in (None, 0) else f"bandwidth {bw:g} Mbit/s")
    parts.append(f"loss {100 * float(link.get('loss') or 0):g} %")
    return ", ".join(parts)


def _tier_links(scenario: Mapping[str, Any]) -> dict[str, str]:
    """Each tier's uplink (to its parent), as text."""
    topo = scenario.get("topology") or {}
    links = {t.get("name", "?"): _link_text(t.get("link")) for t in topo.get("tiers") or []}
    links["edge"] = _link_text((topo.get("clients") or {}).get("link"))
    return links


def _topology_figure(
    wiring: tuple[list[tuple[str, list[str]]], dict[str, str]], links: Mapping[str, str]
) -> Any:
    """The tree, top-down; clients grouped by parent when there are many."""
    import networkx as nx
    from matplotlib.figure import Figure

    tiers, parents = wiring
    g = nx.DiGraph()
    many = len(tiers[-1][1]) > 24
    levels: list[list[str]] = []
    for level, (name, group) in enumerate(tiers):
        if name == "edge" and many:
            per: dict[str, int] = Counter(parents[c] for c in group)
            nodes = []
            for parent, n in per.items():
                # the count alone fits in the circle; the tier's caption says what it counts
                node = f"{n}\u200b{parent}"
                g.add_node(node, tier=name, level=level)
                g.add_edge(parent, node)
                nodes.append(node)
            levels.append(nodes)
            continue
        for node in group:
            g.add_node(node, tier=name, level=level)
            if node in parents:
                g.add_edge(parents[node], node)
        levels.append(list(group))
    # order each level under its parents so edges do not cross
    pos: dict[str, tuple[float, float]] = {}
    for level, nodes in enumerate(levels):
        if level:
            nodes.sort(key=lambda n: pos[next(iter(g.predecessors(n)))][0])
        for i, node in enumerate(nodes):
            pos[node] = ((i + 0.5) / len(nodes), -float(level))
    width = max(8.0, min(16.0, 0.75 * max(len(n) for n in levels)))
    fig = Figure(figsize=(width, 1.7 * len(levels) + 0.8))
    ax = fig.subplots()
    colors = ("#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974")
    for level, nodes in enumerate(levels):
        nx.draw_networkx_nodes(
            g,
            pos,
            nodelist=nodes,
            ax=ax,
            node_color=colors[level % len(colors)],
            node_size=600 if len(nodes) <= 12 else 250,
            alpha=0.9,
        )
    nx.draw_networkx_edges(g, pos, ax=ax, arrows=False, edge_color="#999999")
    small = len(levels[-1]) > 12
    labels = {
        n: n.split("\u200b")[0]
        for n in g.nodes
        if not small or g.nodes[n]["level"] < len(levels) - 1 or many
    }
    nx.draw_networkx_labels(g, pos, labels=labels, ax=ax, font_size=7)
    for level, (name, group) in enumerate(tiers):
        ax.text(
            -0.02,
            -level,
            f"{name}\n{len(group)} node(s)"
            + ("\n(clients per parent)" if name == "edge" and many else ""),
            ha="right",
            va="center",
            fontsize=9,
            fontweight="bold",
        )
        if level and name in links:
            ax.text(
                0.5,
                -level + 0.5,
                f"{name} → parent: {links[name]}",
                ha="center",
                va="center",
                fontsize=8,
                bbox={"boxstyle": "round", "fc": "white", "ec": "#cccccc"},
            )
    if small and not many:
        ax.text(
            1.0,
            -(len(levels) - 1) - 0.45,
            f"{len(tiers[-1][1])} clients (labels omitted)",
            ha="right",
            fontsize=8,
        )
    ax.set_xlim(-0.18, 1.02)
    ax.set_ylim(-(len(levels) - 1) - 0.6, 0.5)
    ax.set_axis_off()
    ax.set_title("edge–fog–cloud tree and its links")
    fig.tight_layout()
    return fig


def _root_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        r
        for r in rows
        if r.get("tier") == "cloud" and r.get("phase") == "iter" and r.get("objective") is not None
    ]


def _per_sample_rule(sc: Mapping[str, Any]) -> bool:
    """Whether the run's stop rule read J/n (``tol_mode: per_sample`` or a ``plateau``)."""
    proto = sc.get("protocol") or {}
    return proto.get("tol_mode") == "per_sample" or proto.get("plateau") is not None


def _progress_figure(
    rows: Sequence[Mapping[str, Any]], clock: str, per_sample: bool = False
) -> Any:
    """Objective (J, or J/n when the stop rule read it) and ARI against round and time."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    root = _root_rows(rows)
    if per_sample:  # J jumps with who took part; the stop rule read J/n, so draw that
        root = [{**r, "objective": r["objective"] / r["n"] if r.get("n") else None} for r in root]
    objective = "J/n (per-sample objective)" if per_sample else "objective J"
    fig = Figure(figsize=(11, 6.4))
    axes = fig.subplots(2, 2)
    it = [r["iteration"] for r in root]
    t = [r["virtual_time_s"] for r in root]
    for col, (xs, xlabel) in enumerate(((it, "round"), (t, f"{clock} time (s)"))):
        for row, (key, label, color, marker) in enumerate(
            (("objective", objective, "tab:blue", "o"), ("ari", "ARI", "tab:orange", "s"))
        ):
            ax = axes[row][col]
            ys = [math.nan if r.get(key) is None else r[key] for r in root]
            ax.plot(xs, ys, marker=marker, ms=4, color=color)
            ax.set(xlabel=xlabel, ylabel=label, title=f"{label} vs {xlabel.split(' (')[0]}")
            _no_offset(ax.xaxis)
            _no_offset(ax.yaxis)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not root:
        axes[0][0].text(0.5, 0.5, "no completed round", ha="center", transform=axes[0][0].transAxes)
    fig.tight_layout()
    return fig


def _tier_of(node: str, wiring: Any, cloud: str) -> str:
    if wiring is not None:
        tiers, _ = wiring
        for name, group in tiers:
            if node in group:
                return name
    if node == cloud:
        return "cloud"
    if node.startswith("client-"):
        return "edge"
    return node.rsplit("-", 1)[0]


def _bytes_by_round(
    rows: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    wiring: Any,
    cloud: str,
) -> tuple[list[str], dict[str, list[int]]]:
    """Wire bytes per (root round, tier) from the events: each hop is its client's.

    A PUBLISH on an aggregator's topic crosses the hop between its broker and the
    other end (the publisher going up, the subscriber coming down), which
    ``per_tier`` counts for that other node's tier.
    """
    closes = [
        (r["round"], float(r["virtual_time_s"]))
        for r in rows
        if r.get("tier") == "cloud" and r.get("virtual_time_s") is not None
    ]
    labels = [str(rnd) for rnd, _ in closes] + ["end"]
    per: dict[str, list[int]] = defaultdict(lambda: [0] * len(labels))
    for ev in events:
        if ev.get("ev") != "send" or not ev.get("wire") or not ev.get("bytes"):
            continue
        parts = str(ev.get("topic") or "").split("/")
        owner = parts[3] if len(parts) > 3 else ""
        node = ev["dst"] if ev.get("src") == owner else ev["src"]
        t = float(ev.get("t") or 0.0)
        k = next((i for i, (_, close) in enumerate(closes) if t <= close), len(closes))
        per[_tier_of(str(node), wiring, cloud)][k] += int(ev["bytes"])
    return labels, dict(per)


def _bytes_figure(
    rows: Sequence[Mapping[str, Any]],
    summary: Mapping[str, Any],
    events: Any,
    wiring: Any,
    cloud: str,
) -> tuple[Any, str]:
    """Stacked bytes per tier per round (events) or per tier in total (summary)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4))
    ax = fig.subplots()
    per_tier = summary.get("per_tier") or {}
    if events is not None:
        labels, per = _bytes_by_round(rows, events, wiring, cloud)
        bottom = [0] * len(labels)
        for tier in sorted(per, key=lambda t: -sum(per[t])):
            ax.bar(labels, per[tier], bottom=bottom, label=tier)
            bottom = [a + b for a, b in zip(bottom, per[tier], strict=True)]
        counted = sum(bottom)
        note = (
            f"from events.jsonl: {counted:,} bytes on the wire, "
            f"summary.json bytes_total {summary.get('bytes_total') or 0:,}"
            + (" (equal)" if counted == summary.get("bytes_total") else " (they differ)")
        )
        ax.set(
            xlabel="root round (0: setup; end: after the last round closed)",
            ylabel="bytes on the wire",
            title="bytes per tier per round (stacked)",
        )
    else:
        tiers = [t for t in per_tier if (per_tier[t] or {}).get("bytes_total")]
        left = 0
        for tier in tiers:
            v = per_tier[tier]["bytes_total"]
            ax.barh(["whole run"], [v], left=left, label=tier)
            left += v
        note = (
            "no event log: run with --events for bytes per tier per round; "
            "totals per tier from summary.json"
        )
        ax.set(xlabel="bytes on the wire", title="bytes per tier, whole run (stacked)")
    _no_offset(ax.yaxis if events is not None else ax.xaxis)
    ax.grid(alpha=0.3, axis="y" if events is not None else "x")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(title="tier")
    fig.tight_layout()
    return fig, note


#: How the report names a drop reason of the event log (docs/records.md uses the same words).
DROP_NAMES = {"outage": "outage (a partitioned link)", "offline": "offline (node unavailable)"}


def _fault_windows(
    summary: Mapping[str, Any], sc: Mapping[str, Any], end: float | None
) -> list[tuple[str, float, float, bool]]:
    """``(label, start, end, open)`` of every partition, degradation and crash, with its nodes.

    Partitions and degradations come from the scenario's ``faults``; crashes from the
    record's ``crashed`` (what happened, with its reason) or else the scenario's.
    ``open`` marks a window cut at the end of the run (a crash without restart).
    """
    faults = sc.get("faults") or {}
    windows: list[tuple[str, float, float, bool]] = []
    for kind, key in (("partition", "partitions"), ("degraded", "degradations")):
        for f in faults.get(key) or []:
            if not isinstance(f, Mapping):
                continue
            nodes = ", ".join(str(n) for n in f.get("nodes") or [])
            windows.append((f"{kind}: {nodes}", float(f["start"]), float(f["end"]), False))
    restart = {
        str(c.get("node")): c.get("restart_after")
        for c in faults.get("crashes") or []
        if isinstance(c, Mapping)
    }
    crashed = [c for c in summary.get("crashed") or [] if isinstance(c, Mapping) and "t" in c]
    if not crashed:  # a record without them (MQTT): what the scenario asked for
        crashed = [
            {
                "node": c.get("node"),
                "t": c.get("at"),
                "restarts": c.get("restart_after") is not None,
            }
            for c in faults.get("crashes") or []
            if isinstance(c, Mapping)
        ]
    stop = end if end is not None else 0.0
    for c in crashed:
        node, t = str(c.get("node")), float(c["t"])
        back = restart.get(node)
        if c.get("restarts") and back is not None:
            windows.append((f"crash: {node}", t, t + float(back), False))
        else:
            windows.append((f"crash: {node} (no restart)", t, max(stop, t), True))
    return windows


def _timeline_figure(
    rows: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]] | None,
    windows: Sequence[tuple[str, float, float, bool]],
) -> Any:
    """Fault windows with their nodes (bars), drops by reason (ticks), root round closes dotted."""
    from matplotlib.figure import Figure

    marks: dict[str, list[float]] = defaultdict(list)
    for ev in events or ():
        kind = ev.get("ev")
        if kind == "drop":
            reason = str(ev.get("reason", "?"))
            marks[f"drop: {DROP_NAMES.get(reason, reason)}"].append(float(ev["t"]))
        elif kind in ("restart", "offline", "online"):
            marks[str(kind)].append(float(ev["t"]))
    lanes = [w[0] for w in windows] + [f"{k} ({len(v)})" for k, v in sorted(marks.items())]
    fig = Figure(figsize=(11, 1.4 + 0.45 * max(1, len(lanes))))
    ax = fig.subplots()
    colors = {"partition": "tab:red", "degraded": "tab:orange", "crash": "tab:purple"}
    for i, (label, start, end, open_end) in enumerate(windows):
        color = colors.get(label.split(":")[0], "tab:grey")
        ax.broken_barh([(start, max(end - start, 1e-9))], (i - 0.3, 0.6), color=color, alpha=0.6)
        ax.text(end, i, " …" if open_end else "", va="center", fontsize=8)
    for j, (_label, ts) in enumerate(sorted(marks.items())):
        ax.scatter(ts, [len(windows) + j] * len(ts), marker="|", s=200, color="black")
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    for r in rows:
        if r.get("tier") == "cloud" and r.get("virtual_time_s") is not None:
            ax.axvline(float(r["virtual_time_s"]), color="grey", lw=0.6, ls=":")
    ax.set(
        xlabel="time (s); bars: fault windows and their nodes; dotted: a root round closed",
        title="faults and dropouts",
    )
    _no_offset(ax.xaxis)
    if not lanes:
        ax.text(
            0.5,
            0.5,
            "no drop, crash or partition in the event log",
            ha="center",
            transform=ax.transAxes,
        )
    fig.tight_layout()
    return fig


# -- text ------------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1e4 and math.isfinite(v) else f"{v:.4g}"
    if isinstance(v, Mapping):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(_fmt(x) for x in v)
    return str(v)


def _settings(summary: Mapping[str, Any], sc: Mapping[str, Any]) -> list[tuple[str, str]]:
    topo = sc.get("topology") or {}
    algo = sc.get("algorithm") or {}
    proto = sc.get("protocol") or {}
    faults = sc.get("faults") or {}
    m = summary.get("metrics") or {}
    tiers = " → ".join(
        ["cloud"]
        + [f"{t.get('name')} ×{t.get('count')}" for t in topo.get("tiers") or []]
        + [f"clients ×{(topo.get('clients') or {}).get('count', '?')}"]
    )
    fault_bits = [
        f"dropout {faults['dropout']:g}" if faults.get("dropout") else "",
        *(
            f"{len(faults[k])} {k if len(faults[k]) > 1 else one}"
            for k, one in (
                ("crashes", "crash"),
                ("partitions", "partition"),
                ("degradations", "degradation"),
            )
            if faults.get(k)
        ),
    ]
    return [
        ("scenario", str(summary.get("scenario", sc.get("name", "?")))),
        ("status", f"{summary.get('status', '?')}: {summary.get('reason', '')}"),
        (
            "quality",
            f"ARI {_fmt(m.get('ari'))}, NMI {_fmt(m.get('nmi'))}, ACC {_fmt(m.get('acc'))}",
        ),
        ("rounds", f"{_fmt(summary.get('rounds'))} (failed {_fmt(summary.get('failed_rounds'))})"),
        (
            "traffic",
            f"{_fmt(summary.get('bytes_total'))} bytes, "
            f"{_fmt(summary.get('messages'))} messages "
            f"({_fmt(summary.get('messages_dropped'))} dropped)",
        ),
        (
            "time",
            f"virtual {_fmt(summary.get('virtual_time_s'))} s, "
            f"wall {_fmt(summary.get('wall_time_s'))} s",
        ),
        ("topology", tiers),
        ("algorithm", f"{algo.get('name', '?')}, {_fmt(algo.get('n_clusters'))} clusters"),
        (
            "protocol",
            f"{proto.get('kind', 'sync')}, rule {proto.get('rule', '?')}, "
            f"rounds ≤ {_fmt(proto.get('rounds'))}, quorum {_fmt(proto.get('quorum'))}, "
            f"deadline {_fmt(proto.get('deadline_s'))} s",
        ),
        ("faults", ", ".join(b for b in fault_bits if b) or "none"),
        ("transport, seed", f"{summary.get('transport', '?')}, {_fmt(summary.get('seed'))}"),
        ("scenario hash", str(summary.get("scenario_hash", "?"))[:16]),
    ]


def _privacy_rows(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    priv = summary.get("privacy")
    if not isinstance(priv, Mapping):
        return []
    keys = (
        "epsilon_spent",
        "epsilon",
        "delta",
        "noise_multiplier",
        "releases",
        "mechanism",
        "noise",
        "protocol",
        "signed",
        "sessions_unmasked",
        "sessions_failed",
        "dropouts_recovered",
        "overhead_bytes",
    )
    return [(k, _fmt(priv[k])) for k in keys if k in priv]


# -- writing ---------------------------------------------------------------------------

_CSS = """body{font-family:system-ui,sans-serif;max-width:1150px;margin:1.5em auto;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee}.note{color:#555}
pre{background:#f7f7f7;padding:8px;overflow:auto}h1{margin-bottom:0.2em}"""


def write_report(folder: str | Path) -> dict[str, Path]:
    """Write ``report.html``, ``report.md`` and the ``report-*.png`` images into ``folder``.

    Returns the written paths by name (``html``, ``md`` and each image's name).
    A sweep folder (one holding ``results.csv``, from ``fedstrata sweep``) gets a
    sweep report instead: each metric of ``summary.csv`` against the grid
    parameter, with its 95 % interval and every run's value.

    Raises
    ------
    NotARunRecordError
        If ``folder`` is missing, a file, or neither a run folder (no
        ``summary.json``) nor a sweep folder (no ``results.csv``).
    ReportError
        If ``summary.json``, ``rounds.csv`` or ``events.jsonl`` cannot be read, or a
        sweep folder has no readable ``summary.csv``.
    OSError
        If a file cannot be written.

    """
    folder = Path(folder)
    if folder.is_dir() and (folder / "results.csv").exists():
        return _write_sweep_report(folder)
    rec = _read_record(folder)
    summary, rows, sc, events = rec["summary"], rec["rows"], rec["scenario"], rec["events"]
    name = str(summary.get("scenario", sc.get("name", folder.name)))
    cloud = str((sc.get("topology") or {}).get("cloud_id", "cloud"))
    device = rec["device"]
    clock = "wall-clock" if summary.get("transport") in ("mqtt", "device") else "virtual"
    wiring = _wiring(rec["scenario_path"])
    images: dict[str, tuple[bytes, str]] = {}
    if wiring is not None:
        images["topology"] = (
            _png(_topology_figure(wiring, _tier_links(sc))),
            "the edge-fog-cloud tree, each tier's uplink annotated",
        )
    per_sample = _per_sample_rule(sc) and any(r.get("n") for r in _root_rows(rows))
    images["progress"] = (
        _png(_progress_figure(rows, clock, per_sample)),
        ("J/n" if per_sample else "objective") + " and ARI per root round and over time",
    )
    mqtt = summary.get("transport") in ("mqtt", "device")
    fig, bytes_note = _bytes_figure(rows, summary, events, wiring, cloud)
    if mqtt and events is None:  # --events is the simulator's: say what is true here
        bytes_note = (
            "an MQTT run writes no event log (events.jsonl is the simulator's), so bytes are "
            "per tier for the whole run (summary.json); the same scenario simulated with "
            "--events has them per round"
        )
    if device is not None:  # no per-tier split: each node counts its own connection
        bytes_note = (
            f"a device record has no per-tier bytes: {_fmt(summary.get('bytes_total'))} bytes "
            "on this node's broker connection (PUBLISH packets out and in); compare the "
            "deployment with its simulation (fedstrata compare SIM NODE...) for the totals"
        )
    images["bytes"] = (_png(fig), "bytes per tier")
    windows = _fault_windows(
        summary, sc, summary.get("virtual_time_s") or summary.get("wall_time_s")
    )
    if events is not None or windows:
        images["timeline"] = (
            _png(_timeline_figure(rows, events, windows)),
            "fault windows and their nodes, drops by reason",
        )
    if events is not None:
        timeline_note = ""
    elif mqtt:
        emulated = summary.get("emulated_links")
        timeline_note = (
            "an MQTT run writes no event log: the windows drawn are the scenario's "
            + (
                "(applied by --emulate-links)"
                if emulated
                else "(not applied: run with --emulate-links to apply partitions and degradations)"
            )
            if windows
            else "an MQTT run writes no event log (events.jsonl is the simulator's): "
            "drops by reason are in summary.json"
        )
    else:
        timeline_note = (
            "no event log: the windows drawn are the scenario's; run with --events to see "
            "each dropped message too"
            if windows
            else "no event log: run with --events to see faults and dropouts on a timeline"
        )
    drops = summary.get("dropped_by_reason") or {}
    drop_note = ", ".join(f"{DROP_NAMES.get(k, k)} {v:,}" for k, v in drops.items()) or "none"
    settings = _settings(summary, sc)
    if device is not None:  # what a device's folder cannot tell, before anything else
        settings.insert(
            0,
            (
                "record",
                f"device node {device['node']} ({device['role']}), written by fedstrata node; "
                f"it lacks: {'; '.join(device['lacks'])}",
            ),
        )
    privacy = _privacy_rows(summary)

    sections: list[tuple[str, str | None, str]] = [  # (heading, image key, note)
        (
            "Topology",
            "topology",
            "; ".join(
                [f"{tier} → parent: {text}" for tier, text in _tier_links(sc).items()]
                + (
                    []
                    if wiring is not None
                    else [
                        "the scenario could not be wired (an older "
                        "or foreign scenario.yaml): no drawing"
                    ]
                )
            ),
        ),
        ("Objective and ARI", "progress", ""),
        ("Bytes per tier", "bytes", bytes_note),
        (
            "Faults and dropouts",
            "timeline",
            "; ".join(x for x in (timeline_note, f"messages dropped by reason: {drop_note}") if x),
        ),
    ]
    paths: dict[str, Path] = {}
    # report.html: every image inline
    h = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>fedstrata report: {html.escape(name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>fedstrata report: {html.escape(name)}</h1>",
        f"<p class='note'>run record {html.escape(str(folder.resolve()))}</p>",
        "<table>",
    ]
    h += [f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in settings]
    h.append("</table>")
    h.append(
        "<details><summary>scenario.yaml (resolved)</summary><pre>"
        f"{html.escape(rec['yaml'] or '(no scenario.yaml)')}</pre></details>"
    )
    md = [
        f"# fedstrata report: {name}",
        "",
        f"run record `{folder.resolve()}`",
        "",
        "| setting | value |",
        "|---|---|",
    ]
    md += [f"| {k} | {v.replace('|', '/')} |" for k, v in settings]
    md += [
        "",
        "<details><summary>scenario.yaml (resolved)</summary>",
        "",
        "```yaml",
        rec["yaml"].rstrip() or "(no scenario.yaml)",
        "```",
        "",
        "</details>",
        "",
    ]
    for heading, key, note in sections:
        h.append(f"<h2>{html.escape(heading)}</h2>")
        md += [f"## {heading}", ""]
        if key in images:
            data, alt = images[key]
            b64 = base64.b64encode(data).decode("ascii")
            h.append(f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{b64}'>")
            file = folder / f"report-{key}.png"
            with atomic_write(file, "wb") as fh:
                fh.write(data)
            paths[key] = file
            md += [f"![{alt}]({file.name})", ""]
        if note:
            h.append(f"<p class='note'>{html.escape(note)}</p>")
            md += [note, ""]
    h.append("<h2>Privacy</h2>")
    md += ["## Privacy", ""]
    if privacy:
        h.append(
            "<table>"
            + "".join(
                f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in privacy
            )
            + "</table>"
        )
        md += ["| field | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in privacy), ""]
    else:
        h.append("<p class='note'>no privacy setting in this run (no budget spent)</p>")
        md += ["no privacy setting in this run (no budget spent)", ""]
    h.append("</body></html>")
    for stale in IMAGES:  # an image an earlier report wrote and this one has not
        if stale not in paths and (folder / f"report-{stale}.png").exists():
            (folder / f"report-{stale}.png").unlink()
    with atomic_write(folder / "report.html") as fh:
        fh.write("\n".join(h) + "\n")
    with atomic_write(folder / "report.md") as fh:
        fh.write("\n".join(md))
    paths["html"], paths["md"] = folder / "report.html", folder / "report.md"
    return paths


# -- sweep folders ---------------------------------------------------------------------


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            rows = [{k: _number(v or "") for k, v in r.items()} for r in reader]
            return list(reader.fieldnames or []), rows
    except (OSError, csv.Error) as exc:
        raise ReportError(f"{path}: cannot read ({exc})") from None


def _interval_columns(columns: Sequence[str]) -> list[tuple[str, str, str, str]]:
    """``(metric, mean, low, high)`` columns: ``m_ci_low``/``m_ci_high`` or ``m_lo``/``m_hi``."""
    found = []
    for col in columns:
        if not col.endswith("_mean"):
            continue
        m = col[: -len("_mean")]
        for lo, hi in ((f"{m}_ci_low", f"{m}_ci_high"), (f"{m}_lo", f"{m}_hi")):
            if lo in columns and hi in columns:
                found.append((m, col, lo, hi))
                break
    return found


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _sweep_figure(
    keys: Sequence[str],
    cells: Sequence[Mapping[str, Any]],
    runs: Sequence[Mapping[str, Any]],
    metrics: Sequence[tuple[str, str, str, str]],
) -> Any:
    """Each metric against the first grid key: mean with its interval, a line per group."""
    from matplotlib.figure import Figure

    x_key = next((k for k in keys if all(_is_number(c.get(k)) for c in cells)), None)
    numeric = x_key is not None
    x_key = x_key if numeric else (keys[0] if keys else None)
    others = [k for k in keys if k != x_key]
    cats: list[Any] = []
    if not numeric and x_key is not None:
        cats = list(dict.fromkeys(str(c.get(x_key)) for c in cells))

    def x_of(row: Mapping[str, Any]) -> float:
        if x_key is None:
            return 0.0
        return float(row[x_key]) if numeric else float(cats.index(str(row.get(x_key))))

    ncols = 2 if len(metrics) > 1 else 1
    nrows = max(1, math.ceil(len(metrics) / ncols))
    fig = Figure(figsize=(11, 3.6 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    groups = list(dict.fromkeys(tuple(c.get(k) for k in others) for c in cells))
    xs_all = [x_of(c) for c in cells] or [0.0]
    dodge = 0.012 * ((max(xs_all) - min(xs_all)) or 1.0)  # groups side by side, not on top
    markers = ("o", "s", "^", "D", "v", "P")
    for ax, (m, mean, lo, hi) in zip(axes, metrics, strict=False):
        for gi, group in enumerate(groups):
            members = [c for c in cells if tuple(c.get(k) for k in others) == group]
            members = [c for c in members if _is_number(c.get(mean))]
            members.sort(key=x_of)
            shift = dodge * (gi - (len(groups) - 1) / 2)
            xs = [x_of(c) + shift for c in members]
            ys = [float(c[mean]) for c in members]
            err = [
                [
                    max(0.0, y - float(c[lo])) if _is_number(c.get(lo)) else 0.0
                    for y, c in zip(ys, members, strict=True)
                ],
                [
                    max(0.0, float(c[hi]) - y) if _is_number(c.get(hi)) else 0.0
                    for y, c in zip(ys, members, strict=True)
                ],
            ]
            label = ", ".join(f"{k}={v}" for k, v in zip(others, group, strict=True)) or "mean"
            line = ax.errorbar(
                xs,
                ys,
                yerr=err,
                marker=markers[gi % len(markers)],
                ls=("-", "--", "-.", ":")[gi % 4],
                capsize=4,
                label=label + " (95 % CI)",
            )
            pts = [
                r for r in runs if tuple(r.get(k) for k in others) == group and _is_number(r.get(m))
            ]
            ax.scatter(
                [x_of(r) + shift for r in pts],
                [float(r[m]) for r in pts],
                s=10,
                alpha=0.4,
                color=line[0].get_color(),
            )
        ax.set(xlabel=x_key or "", ylabel=m, title=f"{m}: cell mean, 95 % interval, runs")
        if cats:
            ax.set_xticks(range(len(cats)), cats)
        else:
            _no_offset(ax.xaxis)
        _no_offset(ax.yaxis)
        ax.grid(alpha=0.3)
    if metrics:
        axes[0].legend(fontsize="small")
    for ax in axes[len(metrics) :]:
        ax.set_axis_off()
    fig.tight_layout()
    return fig


def _write_sweep_report(folder: Path) -> dict[str, Path]:
    """The report of a sweep folder (``results.csv``, ``summary.csv``)."""
    run_cols, runs = _read_csv(folder / "results.csv")
    if not (folder / "summary.csv").exists():
        raise ReportError(f"{folder}: a sweep folder without summary.csv (an unfinished sweep?)")
    cols, cells = _read_csv(folder / "summary.csv")
    metrics = _interval_columns(cols)
    if "cell" in cols and "n" in cols:
        keys = cols[cols.index("cell") + 1 : cols.index("n")]
    else:
        stop = run_cols.index("repeat") if "repeat" in run_cols else len(run_cols)
        keys = [k for k in run_cols[:stop] if k != "cell" and k in cols]
    statuses = Counter(str(r.get("status")) for r in runs)
    name = folder.resolve().name
    data = _png(_sweep_figure(keys, cells, runs, metrics))
    settings = [
        ("sweep", name),
        ("runs", f"{len(runs):,} ({', '.join(f'{k} {v}' for k, v in statuses.items())})"),
        ("cells", f"{len(cells):,}"),
        *((f"grid: {k}", ", ".join(dict.fromkeys(_fmt(c.get(k)) for c in cells))) for k in keys),
    ]
    head = [*keys, "n", *(m for m, *_ in metrics)]
    table = [
        [
            *(_fmt(c.get(k)) for k in keys),
            _fmt(c.get("n")),
            *(
                f"{_fmt(c.get(mean))} [{_fmt(c.get(lo))}, {_fmt(c.get(hi))}]"
                for _, mean, lo, hi in metrics
            ),
        ]
        for c in cells
    ]
    alt = "each metric against the grid: cell means with 95 % intervals, dots the runs"
    b64 = base64.b64encode(data).decode("ascii")
    h = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>fedstrata sweep report: {html.escape(name)}</title>"
        f"<style>{_CSS}</style></head><body>",
        f"<h1>fedstrata sweep report: {html.escape(name)}</h1>",
        f"<p class='note'>sweep folder {html.escape(str(folder.resolve()))}</p><table>",
        *(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in settings),
        "</table><h2>Metrics against the grid</h2>",
        f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{b64}'>",
        "<h2>Cells (mean [95 % interval])</h2><table><tr>",
        *(f"<th>{html.escape(c)}</th>" for c in head),
        "</tr>",
        *("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in table),
        "</table></body></html>",
    ]
    image = folder / "report-sweep.png"
    md = [
        f"# fedstrata sweep report: {name}",
        "",
        "| setting | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in settings),
        "",
        "## Metrics against the grid",
        "",
        f"![{alt}]({image.name})",
        "",
        "## Cells (mean [95 % interval])",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(row) + " |" for row in table),
        "",
    ]
    with atomic_write(image, "wb") as fh:
        fh.write(data)
    with atomic_write(folder / "report.html") as fh:
        fh.write("\n".join(h) + "\n")
    with atomic_write(folder / "report.md") as fh:
        fh.write("\n".join(md))
    return {"sweep": image, "html": folder / "report.html", "md": folder / "report.md"}
