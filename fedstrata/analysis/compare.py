"""Compare two run records side by side, from their files alone.

>>> cmp = compare_runs("runs/a", "runs/b")     # doctest: +SKIP
>>> cmp["rows"][0]                              # doctest: +SKIP
{'field': 'transport', 'a': 'sim', 'b': 'mqtt', 'same': False}

Only ``summary.json`` and ``labels.csv`` are read (see ``docs/records.md``); runs of
any transport compare, a value one record lacks is ``None``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedstrata.errors import FedstrataError

__all__ = ["NotARunFolderError", "RecordError", "compare_runs", "load_record"]

#: Files that make a folder a run folder (any one of them).
_RECORD_FILES = ("summary.json", "scenario.yaml", "rounds.csv", "labels.csv")


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


def load_record(path: str | Path) -> dict[str, Any]:
    """Read one run folder: ``{"path", "summary", "labels"}``.

    Raises
    ------
    NotARunFolderError
        If ``path`` is not a folder holding any record file.
    RecordError
        If ``summary.json`` or ``labels.csv`` is missing or malformed.

    """
    folder = Path(path)
    if not folder.is_dir():
        raise NotARunFolderError(f"{folder}: not a folder")
    if not any((folder / name).exists() for name in _RECORD_FILES):
        raise NotARunFolderError(
            f"{folder}: not a run folder (no summary.json, scenario.yaml, ...)"
        )
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


def _fields(sa: Mapping[str, Any], sb: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    def both(*keys: str) -> tuple[Any, Any]:
        return _get(sa, *keys), _get(sb, *keys)

    rows: list[tuple[str, Any, Any]] = []
    for key in ("scenario", "scenario_hash", "seed", "transport", "broker", "status", "reason"):
        rows.append((key, *both(key)))
    rows.append(("rounds", *both("rounds")))
    rows.append(("failed_rounds", *both("failed_rounds")))
    for key in ("bytes_up", "bytes_down", "bytes_total"):
        rows.append((key, *both(key)))
    for key in ("up", "down", "total"):
        rows.append((f"payload_bytes.{key}", *both("payload_bytes", key)))
    rows.append(("messages", *both("messages")))
    rows.append(("messages_dropped", *both("messages_dropped")))
    tiers_a, tiers_b = sa.get("per_tier"), sb.get("per_tier")
    tiers = sorted(
        {str(t) for t in (tiers_a if isinstance(tiers_a, dict) else {})}
        | {str(t) for t in (tiers_b if isinstance(tiers_b, dict) else {})}
    )
    for tier in tiers:
        for key in ("bytes_up", "bytes_down", "bytes_total"):
            rows.append((f"per_tier.{tier}.{key}", *both("per_tier", tier, key)))
    if sa.get("broker_sys") or sb.get("broker_sys"):
        for key in ("bytes_received", "bytes_sent"):
            rows.append((f"broker_sys.{key}", *both("broker_sys", key)))
    rows.append(("virtual_time_s", *both("virtual_time_s")))
    rows.append(("wall_time_s", *both("wall_time_s")))
    for key in ("acc", "nmi", "ari"):
        rows.append((key, *both("metrics", key)))
    return rows


def _compare_labels(
    la: Mapping[tuple[str, int], str], lb: Mapping[tuple[str, int], str]
) -> dict[str, Any]:
    keys = set(la) | set(lb)
    differing = sum(1 for k in keys if la.get(k) != lb.get(k))
    return {
        "identical": differing == 0,
        "differing_rows": differing,
        "rows_a": len(la),
        "rows_b": len(lb),
    }


def compare_runs(path_a: str | Path, path_b: str | Path) -> dict[str, Any]:
    """Compare two run folders.

    Returns ``{"a": path, "b": path, "rows": [{"field", "a", "b", "same"}, ...],
    "labels": {"identical", "differing_rows", "rows_a", "rows_b"}}``; a row of
    labels that one record lacks counts as differing. Raises as
    :func:`load_record`.
    """
    ra, rb = load_record(path_a), load_record(path_b)
    rows = [
        {"field": name, "a": a, "b": b, "same": _same(a, b)}
        for name, a, b in _fields(ra["summary"], rb["summary"])
    ]
    return {
        "a": ra["path"],
        "b": rb["path"],
        "rows": rows,
        "labels": _compare_labels(ra["labels"], rb["labels"]),
    }
