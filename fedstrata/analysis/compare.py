"""Compare run records, from their files alone.

>>> cmp = compare_many(["runs/a", "runs/b", "runs/c"])   # doctest: +SKIP
>>> [r["target"]["time_s"] for r in cmp["runs"]]         # doctest: +SKIP
[0.00028512, 0.028873442, None]

:func:`compare_many` reads ``summary.json``, ``labels.csv`` and the root rows of
``rounds.csv`` of N run folders (any transports) and derives, per run, the time
and bytes it took to reach a target ARI and an energy proxy (bytes × a relative
cost per byte of each tier's link). :func:`plot_comparison` draws a metric against
time and against cumulative bytes, a line per run. :func:`compare_runs` is the
older two-record comparison (``summary.json`` and ``labels.csv`` only). See
``docs/records.md``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedstrata.errors import FedstrataError, ValidationError

__all__ = [
    "DEFAULT_LINK_COST",
    "DEFAULT_TARGET_ARI",
    "METRICS",
    "ROOT_TIER",
    "NotARunFolderError",
    "RecordError",
    "check_run_folder",
    "compare_many",
    "compare_runs",
    "is_device_folder",
    "load_device_record",
    "load_record",
    "parse_link_cost",
    "plot_comparison",
    "read_root_rows",
]

#: Files that make a folder a run folder (any one of them); ``node.json``: a device's.
_RECORD_FILES = ("summary.json", "scenario.yaml", "rounds.csv", "labels.csv", "node.json")

#: The tier of the root aggregator in ``rounds.csv`` (whatever ``topology.cloud_id``).
ROOT_TIER = "cloud"

#: The ARI a run must reach for :func:`compare_many`'s time and bytes to target.
DEFAULT_TARGET_ARI = 0.99

#: Relative cost per byte of a tier's link when none is given.
DEFAULT_LINK_COST = 1.0

#: Columns of ``rounds.csv`` that :func:`plot_comparison` can draw.
METRICS = ("ari", "nmi", "acc", "objective")

#: The time axis of :func:`plot_comparison` is logarithmic when its times span more.
_LOG_SPAN = 100.0

#: Columns of ``rounds.csv`` without which a record cannot be compared.
_NEEDED_COLUMNS = ("round", "tier", "bytes", "virtual_time_s")


class RecordError(FedstrataError):
    """A run record is missing a file or holds a malformed one (one line)."""


class NotARunFolderError(FedstrataError):
    """The path is not a folder holding a run record (a usage error)."""


def _read_summary(folder: Path) -> dict[str, Any]:
    path = folder / "summary.json"
    if not path.is_file():
        raise RecordError(f"{folder}: no summary.json (the run did not finish writing its record)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a JSON object")
    return data


def _read_labels(folder: Path) -> dict[tuple[str, int], str]:
    path = folder / "labels.csv"
    if not path.is_file():
        raise RecordError(f"{folder}: no labels.csv")
    labels: dict[tuple[str, int], str] = {}
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header != ["client", "index", "label"]:
                raise RecordError(f"{path}: header is not client,index,label")
            for line, row in enumerate(reader, start=2):
                if len(row) != 3:
                    raise RecordError(f"{path}:{line}: expected 3 columns, got {len(row)}")
                try:
                    key = (row[0], int(row[1]))
                except ValueError:
                    raise RecordError(
                        f"{path}:{line}: index {row[1]!r} is not an integer"
                    ) from None
                labels[key] = row[2]
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"{path}: cannot be read ({exc})") from None
    return labels


def _number(text: str, path: Path, line: int, column: str, *, integer: bool = False) -> Any:
    """A cell of rounds.csv as a number; empty or non-finite → ``None``."""
    if text == "":
        return None
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise RecordError(f"{path}:{line}: {column} {text!r} is not {kind}") from None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_root_rows(path: str | Path) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """The root tier's rows of a run folder's ``rounds.csv``, and the file's columns.

    Each row is ``{"round", "time_s", "bytes", "ari", "nmi", "acc", "objective"}``:
    ``time_s`` is the ``virtual_time_s`` column (wall-clock seconds since the start
    in records of ``--transport mqtt``), ``bytes`` the cumulative wire bytes, a
    metric the file lacks or leaves empty is ``None``.

    Raises
    ------
    RecordError
        If the file is missing, lacks a needed column or holds a malformed value
        in a root row (``path:line: ...``).

    """
    path = Path(path) / "rounds.csv" if Path(path).is_dir() else Path(path)
    if not path.is_file():
        raise RecordError(f"{path.parent}: no rounds.csv")
    rows: list[dict[str, Any]] = []
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh)
            header = tuple(next(reader, None) or ())
            for column in _NEEDED_COLUMNS:
                if column not in header:
                    raise RecordError(f"{path}: no {column!r} column")
            at = {name: i for i, name in enumerate(header)}
            for line, cells in enumerate(reader, start=2):
                if len(cells) != len(header):
                    raise RecordError(
                        f"{path}:{line}: expected {len(header)} columns, got {len(cells)}"
                    )
                if cells[at["tier"]] != ROOT_TIER:
                    continue
                row: dict[str, Any] = {
                    "round": _number(cells[at["round"]], path, line, "round", integer=True),
                    "bytes": _number(cells[at["bytes"]], path, line, "bytes", integer=True),
                    "time_s": _number(cells[at["virtual_time_s"]], path, line, "virtual_time_s"),
                }
                for metric in METRICS:
                    cell = cells[at[metric]] if metric in at else ""
                    row[metric] = _number(cell, path, line, metric)
                rows.append(row)
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"{path}: cannot be read ({exc})") from None
    return rows, header


def check_run_folder(path: str | Path) -> Path:
    """``path`` as a :class:`~pathlib.Path` if it is a run folder.

    Raises
    ------
    NotARunFolderError
        If ``path`` is not a folder holding any record file.

    """
    folder = Path(path)
    if not folder.is_dir():
        raise NotARunFolderError(f"{folder}: not a folder")
    if not any((folder / name).exists() for name in _RECORD_FILES):
        raise NotARunFolderError(
            f"{folder}: not a run folder (no summary.json, scenario.yaml, ...)"
        )
    return folder


def load_record(path: str | Path) -> dict[str, Any]:
    """Read one run folder: ``{"path", "summary", "labels"}``.

    Raises
    ------
    NotARunFolderError
        If ``path`` is not a folder holding any record file.
    RecordError
        If ``summary.json`` or ``labels.csv`` is missing or malformed.

    """
    folder = check_run_folder(path)
    summary = _read_summary(folder)
    for key in ("status", "transport"):
        if key not in summary:
            raise RecordError(f"{folder / 'summary.json'}: no {key!r}")
    return {"path": str(folder), "summary": summary, "labels": _read_labels(folder)}


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=0, abs_tol=1e-12)
    return bool(a == b)


def _all_same(values: Sequence[Any]) -> bool:
    return all(_same(values[0], v) for v in values[1:])


def _tiers(summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every tier named in any record's ``per_tier``, sorted."""
    names: set[str] = set()
    for s in summaries:
        per_tier = s.get("per_tier")
        if isinstance(per_tier, dict):
            names |= {str(t) for t in per_tier}
    return sorted(names)


def _fields(summaries: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
    """The summary fields compared, each with its value in every record."""

    def each(*keys: str) -> list[Any]:
        return [_get(s, *keys) for s in summaries]

    rows: list[tuple[str, list[Any]]] = []
    for key in ("scenario", "scenario_hash", "seed", "transport", "broker", "status", "reason"):
        rows.append((key, each(key)))
    rows.append(("rounds", each("rounds")))
    rows.append(("failed_rounds", each("failed_rounds")))
    for key in ("bytes_up", "bytes_down", "bytes_total"):
        rows.append((key, each(key)))
    for key in ("up", "down", "total"):
        rows.append((f"payload_bytes.{key}", each("payload_bytes", key)))
    rows.append(("messages", each("messages")))
    rows.append(("messages_dropped", each("messages_dropped")))
    for tier in _tiers(summaries):
        for key in ("bytes_up", "bytes_down", "bytes_total"):
            rows.append((f"per_tier.{tier}.{key}", each("per_tier", tier, key)))
    if any(s.get("broker_sys") for s in summaries):
        for key in ("bytes_received", "bytes_sent"):
            rows.append((f"broker_sys.{key}", each("broker_sys", key)))
    rows.append(("virtual_time_s", each("virtual_time_s")))
    rows.append(("wall_time_s", each("wall_time_s")))
    for key in ("acc", "nmi", "ari"):
        rows.append((key, each("metrics", key)))
    return rows


def _label_diff(
    la: Mapping[tuple[str, int], str], lb: Mapping[tuple[str, int], str]
) -> dict[str, Any]:
    """Rows that differ as written, and up to the best renaming of cluster ids.

    Two runs can find the same clustering under other ids (ARI 1.0, every row
    "different"): ``differing_rows`` counts the rows whose labels differ once the
    clusters of ``lb`` are matched one-to-one to those of ``la`` (Hungarian method,
    :func:`~fedstrata.analysis.metrics.matched_disagreement`); ``raw_differing_rows``
    the rows whose labels differ as written. A row present in one record only counts
    in both. ``differing_rows`` is ``None`` when the matching is too large to compute
    (over 2**24 pairs of clusters).
    """
    from fedstrata.analysis.metrics import matched_disagreement

    keys = set(la) | set(lb)
    raw = sum(1 for k in keys if la.get(k) != lb.get(k))
    common = sorted(set(la) & set(lb))
    only_one = len(keys) - len(common)
    matched: int | None = only_one
    if common and raw > only_one:  # some common row differs as written: try renaming
        try:
            matched = only_one + matched_disagreement(
                [la[k] for k in common], [lb[k] for k in common]
            )
        except ValidationError:
            matched = None
    return {
        "identical": raw == 0,
        "differing_rows": matched,
        "raw_differing_rows": raw,
    }


def _compare_labels(
    la: Mapping[tuple[str, int], str], lb: Mapping[tuple[str, int], str]
) -> dict[str, Any]:
    return {**_label_diff(la, lb), "rows_a": len(la), "rows_b": len(lb)}


def compare_runs(path_a: str | Path, path_b: str | Path) -> dict[str, Any]:
    """Compare two run folders (``summary.json`` and ``labels.csv`` only).

    Returns ``{"a": path, "b": path, "rows": [{"field", "a", "b", "same"}, ...],
    "labels": {"identical", "differing_rows", "raw_differing_rows", "rows_a",
    "rows_b"}}``: ``differing_rows`` up to the best renaming of cluster ids,
    ``raw_differing_rows`` as written; a row of labels that one record lacks counts
    as differing in both. Raises as
    :func:`load_record`. ``fedstrata compare`` uses :func:`compare_many`.
    """
    ra, rb = load_record(path_a), load_record(path_b)
    rows = [
        {"field": name, "a": a, "b": b, "same": _same(a, b)}
        for name, (a, b) in _fields([ra["summary"], rb["summary"]])
    ]
    return {
        "a": ra["path"],
        "b": rb["path"],
        "rows": rows,
        "labels": _compare_labels(ra["labels"], rb["labels"]),
    }


def parse_link_cost(text: str | None) -> dict[str, float]:
    """``"edge=1.0,fog=0.3,cloud=0.1"`` as ``{tier: relative cost per byte}``.

    ``None`` or an empty string gives ``{}`` (every tier at
    :data:`DEFAULT_LINK_COST`).

    Raises
    ------
    ValidationError
        If an item is not ``TIER=COST``, a tier is named twice, or a cost is not a
        finite number ``>= 0``.

    """
    costs: dict[str, float] = {}
    if text is None or not text.strip():
        return costs
    for item in text.split(","):
        name, eq, value = (part.strip() for part in item.partition("="))
        if not eq or not name:
            raise ValidationError(f"{item.strip()!r} is not TIER=COST (e.g. edge=1.0,fog=0.3)")
        if name in costs:
            raise ValidationError(f"tier {name!r} is given twice")
        try:
            cost = float(value)
        except ValueError:
            raise ValidationError(f"{name}: cost {value!r} is not a number") from None
        if not math.isfinite(cost) or cost < 0:
            raise ValidationError(f"{name}: cost {value!r} must be a finite number >= 0")
        costs[name] = cost
    return costs


def _clock(summary: Mapping[str, Any]) -> str:
    """``virtual`` for simulated runs, ``wall`` for runs over real MQTT."""
    if summary.get("transport") == "sim":
        return "virtual"
    if summary.get("transport") in ("mqtt", "device"):
        return "wall"
    return "virtual" if summary.get("virtual_time_s") is not None else "wall"


def reach_target(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    summary: Mapping[str, Any],
    target: float,
) -> dict[str, Any]:
    """When the root first reached ``ari >= target``, or why it never did."""
    result: dict[str, Any] = {
        "reached": False,
        "round": None,
        "time_s": None,
        "bytes": None,
        "reason": None,
    }
    if "ari" not in columns:
        result["reason"] = "no ari column in rounds.csv"
        return result
    scored = [r for r in rows if r["ari"] is not None]
    if not scored and summary.get("transport") == "device":
        result["reason"] = "no ARI: a device record holds no ground truth"
        return result
    if not scored:
        why = summary.get("metrics_reason")
        if isinstance(why, str) and why.startswith("no model"):
            result["reason"] = why
        else:
            result["reason"] = "no model: no root round of rounds.csv has an ARI"
        return result
    for row in scored:
        if row["ari"] >= target:
            result.update(reached=True, round=row["round"], time_s=row["time_s"])
            result["bytes"] = row["bytes"]
            return result
    best = max(r["ari"] for r in scored)
    result["reason"] = f"never reached (best ARI {best:.4g})"
    return result


def _energy(
    summary: Mapping[str, Any], costs: Mapping[str, float], default: float
) -> dict[str, Any]:
    """Σ over tiers of ``per_tier[T].bytes_total`` × the cost per byte of T's link."""
    per_tier = summary.get("per_tier")
    if not isinstance(per_tier, dict) or not per_tier:
        return {"total": None, "per_tier": None, "reason": "no per_tier in summary.json"}
    parts: dict[str, float] = {}
    for tier, counts in sorted(per_tier.items()):
        nbytes = _get(counts, "bytes_total")
        if not isinstance(nbytes, int | float) or isinstance(nbytes, bool):
            return {
                "total": None,
                "per_tier": None,
                "reason": f"no per_tier.{tier}.bytes_total in summary.json",
            }
        parts[str(tier)] = nbytes * costs.get(str(tier), default)
    return {"total": sum(parts.values()), "per_tier": parts, "reason": None}


def _run_names(folders: Sequence[Path]) -> list[str]:
    """Column names: the folder names, the paths as given where names clash."""
    names = [f.name or f.resolve().name or str(f) for f in folders]
    if len(set(names)) < len(names):
        names = [str(f) if names.count(n) > 1 else n for f, n in zip(folders, names, strict=True)]
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return unique


def is_device_folder(path: str | Path) -> bool:
    """Whether ``path`` is a ``fedstrata node`` folder (``node.json``, no ``summary.json``)."""
    p = Path(path)
    return (p / "node.json").is_file() and not (p / "summary.json").exists()


def _device_folders(path: Path) -> list[Path]:
    """A node's folder, or the node folders inside a deployment's records folder."""
    if (path / "node.json").is_file():
        return [path]
    if path.is_dir() and not any((path / n).exists() for n in _RECORD_FILES):
        return sorted(p for p in path.iterdir() if (p / "node.json").is_file())
    return []


def _read_node(folder: Path) -> dict[str, Any]:
    path = folder / "node.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("node"), str):
        raise RecordError(f"{path}: not a node record (no 'node')")
    return data


def _roster(root: Mapping[str, Any] | None) -> list[str] | None:
    """Every node id of the deployment, from the scenario file the root ran (if readable)."""
    if root is None or not root.get("scenario_file"):
        return None
    try:
        from fedstrata.scenarios.loader import load_scenario

        sc = load_scenario(root["scenario_file"], preflight=False)
    except Exception:  # on another machine, or changed: the roster is unknown
        return None
    return [n for ids in sc.node_ids().values() for n in ids]


def load_device_record(
    folders: Sequence[str | Path], reference: Mapping[tuple[str, int], str] | None = None
) -> dict[str, Any]:
    """Read the node folders of one ``fedstrata node`` deployment as one record.

    ``folders`` are node folders (``node.json``), or folders holding them. Returns
    ``{"path", "summary", "labels", "root", "nodes", "lacks"}``: ``summary`` has the
    fields of a run's ``summary.json`` that the nodes' records give (``transport``
    ``device``; status, reason and rounds from the root's ``run_status``,
    ``run_reason`` and ``rounds``; bytes and messages summed over the nodes given;
    no metrics, the devices holding no ground truth); ``labels`` the clients'
    ``labels.csv`` rows. A client's ``index`` is the row of its data files: with a
    ``reference`` (the labels of the simulated run, keyed ``(client, sample)``) the
    ``k``-th row of a client becomes its ``k``-th sample of the simulation, as the
    deployment's data is written (docs/deploy.md). ``lacks`` says, a line each, what
    the record cannot give.

    Raises
    ------
    NotARunFolderError
        If a folder holds no node record.
    RecordError
        If a ``node.json`` or ``labels.csv`` is malformed, or the nodes are of
        different runs.

    """
    nodes: dict[str, tuple[Path, dict[str, Any]]] = {}
    for given in folders:
        found = _device_folders(Path(given))
        if not found:
            raise NotARunFolderError(f"{given}: not a node folder (no node.json)")
        for folder in found:
            rec = _read_node(folder)
            nodes[rec["node"]] = (folder, rec)
    runs = {rec.get("run_id") for _, rec in nodes.values()}
    if len(runs) > 1:
        raise RecordError(f"the node folders are of different runs: {sorted(map(str, runs))}")
    root_entry = next((v for v in nodes.values() if v[1].get("role") == "root"), None)
    root = None if root_entry is None else root_entry[1]
    any_rec = next(iter(nodes.values()))[1]
    lacks = ["ARI/NMI/ACC: the devices hold no ground truth (their labels are compared)"]
    roster = _roster(root)
    missing = [] if roster is None else [n for n in roster if n not in nodes]
    if root is None:
        lacks.append("the root's folder: status, rounds and rounds.csv")
    if missing:
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        lacks.append(f"{len(missing)} node folder(s): {shown} (bytes count the nodes given)")
    elif roster is None:
        lacks.append("the deployment's node list (the scenario file is not readable here)")
    lacks.append("virtual time, per-tier bytes and drops: the simulator's, not a device's")

    def total(key: str) -> int:
        return sum(int((rec.get("traffic") or {}).get(key) or 0) for _, rec in nodes.values())

    up, down = total("packet_bytes_out"), total("packet_bytes_in")
    pay_up, pay_down = total("payload_bytes_out"), total("payload_bytes_in")
    summary: dict[str, Any] = {
        "scenario": any_rec.get("scenario"),
        "scenario_hash": any_rec.get("scenario_hash"),
        "seed": any_rec.get("seed"),
        "transport": "device",
        "broker": any_rec.get("broker"),
        "status": None if root is None else root.get("run_status"),
        "reason": None if root is None else root.get("run_reason"),
        "rounds": None if root is None else root.get("rounds"),
        "bytes_up": up,
        "bytes_down": down,
        "bytes_total": up + down,
        "payload_bytes": {"up": pay_up, "down": pay_down, "total": pay_up + pay_down},
        "messages": total("publishes") + total("delivered"),
        "virtual_time_s": None,
        "wall_time_s": None if root is None else root.get("wall_time_s"),
        "metrics": {"acc": None, "nmi": None, "ari": None},
        "metrics_reason": "a device record holds no ground truth",
        "node_status": {n: rec.get("status") for n, (_, rec) in sorted(nodes.items())},
    }
    labels: dict[tuple[str, int], str] = {}
    remapped = False
    for node, (folder, rec) in sorted(nodes.items()):
        if rec.get("role") != "client":
            continue
        if not (folder / "labels.csv").is_file():
            lacks.append(f"{node}'s labels ({rec.get('status')}: {rec.get('reason')})")
            continue
        rows = _read_labels(folder)
        if reference is not None:
            sim = sorted(i for c, i in reference if c == node)
            if len(sim) == len(rows):
                rows = {(c, sim[k]): lab for (c, k), lab in rows.items()}
                remapped = True
            else:
                lacks.append(
                    f"{node}'s rows as the simulation's: it holds {len(rows)}, the "
                    f"simulated client {len(sim)} (not the simulator's split)"
                )
        labels.update(rows)
    if reference is not None and remapped:
        lacks.append(
            "the samples' own numbers: each client's k-th row is read as its k-th sample "
            "in the simulation (docs/deploy.md)"
        )
    base = root_entry[0] if root_entry is not None else Path(folders[0])
    return {
        "path": str(base),
        "summary": summary,
        "labels": labels,
        "root": None if root_entry is None else root_entry[0],
        "nodes": sorted(nodes),
        "lacks": lacks,
    }


def _entries(paths: Sequence[str | Path]) -> list[list[Path]]:
    """The paths as runs: a run folder alone; consecutive node folders of one run together."""
    entries: list[list[Path]] = []
    last_run: Any = object()
    for p in map(Path, paths):
        found = _device_folders(p) if not (p / "summary.json").exists() else []
        if not found:
            check_run_folder(p)
            entries.append([p])
            last_run = object()
            continue
        run = _read_node(found[0]).get("run_id")
        if entries and run == last_run:
            entries[-1].append(p)
        else:
            entries.append([p])
        last_run = run
    return entries


def compare_many(
    paths: Sequence[str | Path],
    *,
    target_ari: float = DEFAULT_TARGET_ARI,
    link_cost: Mapping[str, float] | None = None,
    default_link_cost: float = DEFAULT_LINK_COST,
) -> dict[str, Any]:
    """Compare run folders: their summaries, time and bytes to a target ARI, energy.

    Every path is checked to be a run folder before any record is read, so a usage
    error wins over a damaged record.

    Returns (strict JSON: no NaN)::

        {"target_ari", "link_cost": {"unit", "default", "tiers"},
         "runs": [{"name", "path", "clock",
                   "target": {"reached", "round", "time_s", "bytes", "reason"},
                   "energy_proxy": {"total", "per_tier", "reason"}}, ...],
         "rows": [{"field", "values": [one per run], "same"}, ...],
         "labels": {"reference", "runs": [{"rows", "identical", "differing_rows",
                                           "raw_differing_rows"}]}}

    ``target.time_s`` is on the run's ``clock``: ``virtual`` (simulated seconds)
    or ``wall`` (wall-clock seconds since the start, for ``--transport mqtt``).
    ``target.bytes`` is the cumulative ``bytes`` of the first root row of
    ``rounds.csv`` whose ``ari >= target_ari``; when there is none, ``reason``
    says why. ``energy_proxy.total`` is the sum over tiers of
    ``per_tier[T].bytes_total × cost(T)`` in relative cost units (``link_cost``,
    ``default_link_cost`` for a tier not named). Labels are compared with the
    first run's, up to the best renaming of cluster ids (``differing_rows``) and as
    written (``raw_differing_rows``).

    Raises
    ------
    NotARunFolderError
        If a path is not a run folder.
    RecordError
        If a record lacks or holds a malformed ``summary.json``, ``labels.csv`` or
        ``rounds.csv``.
    ValidationError
        If ``link_cost`` names a tier that no record has.

    """
    entries = _entries(paths)
    records: list[dict[str, Any]] = []
    rounds: list[tuple[list[dict[str, Any]], tuple[str, ...]]] = []
    for entry in entries:
        # a group of several paths is always a deployment's (see _entries)
        device = len(entry) > 1 or (
            not (entry[0] / "summary.json").exists() and bool(_device_folders(entry[0]))
        )
        if not device:
            records.append(load_record(entry[0]))
            rounds.append(read_root_rows(entry[0]))
            continue
        first = (
            records[0] if records and records[0]["summary"].get("transport") != "device" else None
        )
        rec = load_device_record(entry, None if first is None else first["labels"])
        records.append(rec)
        rounds.append(read_root_rows(rec["root"]) if rec["root"] is not None else ([], ()))
    folders = [Path(r["path"]) for r in records]
    summaries = [r["summary"] for r in records]
    costs = dict(link_cost or {})
    tiers = _tiers(summaries)
    unknown = sorted(set(costs) - set(tiers))
    if unknown:
        raise ValidationError(
            f"tier {unknown[0]!r} is in none of the records (tiers: {', '.join(tiers) or 'none'})"
        )
    names = _run_names(folders)
    runs = []
    for name, rec, (root, columns) in zip(names, records, rounds, strict=True):
        s = rec["summary"]
        runs.append(
            {
                "name": name,
                "path": rec["path"],
                "clock": _clock(s),
                "target": reach_target(root, columns, s, target_ari),
                "energy_proxy": _energy(s, costs, default_link_cost),
                "record": "device" if s.get("transport") == "device" else "run",
                "lacks": rec.get("lacks", []),
            }
        )
    table = _fields(summaries)
    table.append(("clock", [r["clock"] for r in runs]))
    table.append(
        ("target", ["reached" if r["target"]["reached"] else r["target"]["reason"] for r in runs])
    )
    for key in ("round", "time_s", "bytes"):
        table.append((f"target.{key}", [r["target"][key] for r in runs]))
    table.append(("energy_proxy", [r["energy_proxy"]["total"] for r in runs]))
    if any(r["record"] == "device" for r in runs):
        table.append(
            (
                "record",
                [
                    f"device: {len(rec['nodes'])} node(s)" if "nodes" in rec else "run"
                    for rec in records
                ],
            )
        )
        table.append(("lacks", ["; ".join(r["lacks"]) or None for r in runs]))
    ref = records[0]["labels"]
    labels = []
    for rec in records:
        labels.append({"rows": len(rec["labels"]), **_label_diff(ref, rec["labels"])})
    result = {
        "target_ari": target_ari,
        "link_cost": {
            "unit": "relative cost per byte",
            "default": default_link_cost,
            "tiers": costs,
        },
        "runs": runs,
        "rows": [
            {"field": field, "values": values, "same": _all_same(values)} for field, values in table
        ],
        "labels": {"reference": names[0], "runs": labels},
    }
    return _finite(result)


def _finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by ``None`` (strict JSON)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def plot_comparison(
    cmp: Mapping[str, Any], path: str | Path, *, metric: str = "ari", title: str = ""
) -> Any:
    """Draw ``metric`` against time and against cumulative bytes, a line per run.

    ``cmp`` is a :func:`compare_many` result; the root rows of each run's
    ``rounds.csv`` are read again. Runs on a wall clock (``--transport mqtt``) are
    dashed. With ``metric="ari"`` a horizontal line marks ``cmp["target_ari"]``. The
    time axis is logarithmic when the plotted times span more than 100×.
    Each run has its own marker (runs that coincide stay visible) and no axis uses
    offset notation. The PNG is written atomically; the
    :class:`matplotlib.figure.Figure` is returned.

    Raises
    ------
    ValidationError
        If ``metric`` is not one of :data:`METRICS`.
    RecordError
        As :func:`read_root_rows`.
    OSError
        If the file cannot be written.

    """
    if metric not in METRICS:
        raise ValidationError(f"metric {metric!r} is not one of {', '.join(METRICS)}")
    from matplotlib.figure import Figure

    from fedstrata.analysis.records import _no_offset, atomic_write

    series = []
    for run in cmp["runs"]:
        if run.get("record") == "device" and not (Path(run["path"]) / "rounds.csv").is_file():
            series.append((run, []))  # node folders without the root's: no rounds to draw
            continue
        root, _ = read_root_rows(run["path"])
        series.append((run, [r for r in root if r[metric] is not None]))
    fig = Figure(figsize=(12, 4.2))
    ax_t, ax_b = fig.subplots(1, 2)
    label = metric if metric == "objective" else metric.upper()
    markers = ("o", "s", "^", "D", "v", "x", "P", "*")
    for i, (run, pts) in enumerate(series):
        style = "--" if run["clock"] == "wall" else "-"
        legend = f"{run['name']} ({run['clock']})"
        t = [math.nan if r["time_s"] is None else r["time_s"] for r in pts]
        b = [math.nan if r["bytes"] is None else r["bytes"] for r in pts]
        y = [r[metric] for r in pts]
        # runs that coincide stay visible: each its own marker, later ones drawn smaller
        mk = {"marker": markers[i % len(markers)], "ms": max(3.0, 7.0 - i), "mfc": "none"}
        (line,) = ax_t.plot(t, y, ls=style, label=legend, **mk)
        ax_b.plot(b, y, ls=style, color=line.get_color(), label=legend, **mk)
    if metric == "ari":
        target = cmp["target_ari"]
        ax_t.axhline(target, color="grey", lw=0.8, ls=":")
        ax_b.axhline(target, color="grey", lw=0.8, ls=":", label=f"target ARI {target:g}")
    times = [r["time_s"] for _, pts in series for r in pts if (r["time_s"] or 0) > 0]
    log_time = bool(times) and max(times) > _LOG_SPAN * min(times)
    if log_time:  # runs of different scales (virtual µs, wall-clock s) stay readable
        ax_t.set_xscale("log")
    ax_t.set(
        xlabel=("time (s, log scale)" if log_time else "time (s)")
        + ": virtual for sim runs, wall-clock for mqtt runs",
        ylabel=label,
        title=f"{label} vs time",
    )
    ax_b.set(xlabel="bytes on the wire (cumulative)", ylabel=label, title=f"{label} vs bytes")
    for axis in (ax_t.yaxis, ax_b.yaxis, ax_b.xaxis):
        _no_offset(axis)
    if not log_time:
        _no_offset(ax_t.xaxis)
    for ax in (ax_t, ax_b):
        ax.grid(alpha=0.3)
    ax_b.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, dpi=110, format="png")
    return fig
