"""Studies: one scenario, several variants and seeds, run and compared with one command.

A study file is a scenario file with one more top-level section, ``study``::

    study:
      variants:                 # name -> overrides merged into the scenario
        sync: {protocol: {kind: sync}}
        async: {protocol: {kind: async}}
      seeds: [0, 1, 2]          # default: the scenario's seed
      target_ari: 0.95          # time and bytes to reach it are compared
    name: my-study
    topology: ...

Overrides merge recursively into mappings (a list or a value replaces). Each variant is
validated and pre-flight checked as a scenario of its own before anything runs.
``fedstrata study FILE --out DIR`` writes each run's record into
``DIR/<variant>/seed-<seed>``, then ``DIR/study.csv`` (a row per variant: the mean
over seeds, and the spread), ``DIR/study.json`` and ``DIR/study.png`` (the metric
against time and against bytes, first seed of each variant).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedstrata.errors import ScenarioError
from fedstrata.scenarios.loader import load_scenario, merge_documents, parse_scenario
from fedstrata.scenarios.schema import Scenario, ScenarioErrors

__all__ = ["STUDY_COLUMNS", "Study", "load_study", "run_study", "study_from_data"]

#: Columns of ``study.csv``: a row per variant, means over its seeds.
STUDY_COLUMNS = (
    "variant",
    "seeds",
    "converged",
    "rounds",
    "ari",
    "ari_min",
    "bytes_total",
    "time_s",
    "target_reached",
    "time_to_target_s",
    "bytes_to_target",
    "failed_rounds",
)


@dataclass(frozen=True)
class Study:
    """A validated study: its variants (scenarios), seeds and target ARI."""

    file: str
    variants: dict[str, Scenario]
    seeds: tuple[int, ...]
    target_ari: float


def _study_errors(section: Any, file: str) -> tuple[dict[str, Any], list[int] | None, float]:
    def fail(path: str, reason: str) -> ScenarioErrors:
        return ScenarioErrors([ScenarioError(reason, file=file, path=path)])

    if not isinstance(section, dict):
        raise fail("study", "must be a mapping with variants (and seeds, target_ari)")
    unknown = sorted(set(section) - {"variants", "seeds", "target_ari"})
    if unknown:
        raise fail(f"study.{unknown[0]}", "unknown key; known keys: variants, seeds, target_ari")
    variants = section.get("variants")
    if not isinstance(variants, dict) or not variants:
        raise fail("study.variants", "must map variant names to scenario overrides")
    for name, over in variants.items():
        if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
            raise fail(f"study.variants.{name}", "a variant name is letters, digits, - and _")
        if over is not None and not isinstance(over, dict):
            raise fail(f"study.variants.{name}", "must be a mapping of scenario overrides")
    seeds = section.get("seeds")
    if seeds is not None and (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**32 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise fail("study.seeds", "must be a non-empty list of distinct integers in [0, 2**32)")
    target = section.get("target_ari", 0.99)
    if isinstance(target, bool) or not isinstance(target, int | float) or not -1 <= target <= 1:
        raise fail("study.target_ari", f"must be a number in [-1, 1], got {target!r}")
    return variants, seeds, float(target)


def load_study(path: str | Path, *, preflight: bool = True) -> Study:
    """Read and check a study file; every variant is validated as a scenario.

    Raises
    ------
    ScenarioErrors
        With the problems found; a variant's are prefixed by ``variant <name>``.

    """
    file = str(path)
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        load_scenario(p, preflight=False)  # its located message for unreadable files
        raise
    return study_from_data(data, file=file, base_dir=p.absolute().parent, preflight=preflight)


def study_from_data(
    data: Any, *, file: str, base_dir: str | Path | None = None, preflight: bool = True
) -> Study:
    """:func:`load_study` on a study already read into a mapping (``fedstrata.study``).

    ``file`` names the study in messages; relative paths in ``data`` are read from
    ``base_dir``. ``data`` is not modified. Raises as :func:`load_study`.
    """
    if not isinstance(data, dict) or "study" not in data:
        raise ScenarioErrors(
            [ScenarioError("a study file needs a top-level study section", file=file)]
        )
    data = dict(data)
    variants, seeds, target = _study_errors(data.pop("study"), file)
    base_text = yaml.safe_dump(data, sort_keys=False)
    parse_scenario(base_text, file=file, base_dir=base_dir)  # the shared part
    out: dict[str, Scenario] = {}
    errors: list[ScenarioError] = []
    for name, over in variants.items():
        merged = merge_documents(data, over or {})
        try:
            sc = parse_scenario(
                yaml.safe_dump(merged, sort_keys=False), file=file, base_dir=base_dir
            )
            if preflight:
                from fedstrata.scenarios.preflight import preflight as check

                for s in seeds or [sc.seed]:
                    check(sc, seed=s)
        except ScenarioErrors as exc:
            errors += [
                ScenarioError(f"variant {name}: {e.path or 'scenario'}: {e.reason}", file=file)
                for e in exc.errors
            ]
            continue
        out[name] = sc
    if errors:
        raise ScenarioErrors(errors)
    first = next(iter(out.values()))
    return Study(file, out, tuple(seeds or [first.seed]), target)


def _mean(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return round(float(np.mean(vals)), 6) if vals else None


def run_study(
    study: Study,
    out_dir: str | Path,
    *,
    overwrite: bool = False,
    progress: Callable[[str, int], None] | None = None,
) -> dict[str, Any]:
    """Run every variant with every seed (simulated) and compare them.

    Returns the study summary written to ``study.json``: ``rows`` (one per variant,
    :data:`STUDY_COLUMNS`) and ``runs`` (each run's folder, status, ARI, bytes and
    time to target).
    """
    from fedstrata.analysis.compare import (
        compare_many,
        plot_comparison,
        reach_target,
        read_root_rows,
    )
    from fedstrata.analysis.records import prepare_run_dir, write_table
    from fedstrata.scenarios.run import run_scenario, scenario_hash

    out = Path(out_dir)
    for name, sc in study.variants.items():  # every folder is usable before anything runs
        for seed in study.seeds:
            prepare_run_dir(
                out / name / f"seed-{seed}",
                scenario_hash=scenario_hash(sc, seed),
                seed=seed,
                overwrite=overwrite,
            )
    runs: list[dict[str, Any]] = []
    for name, sc in study.variants.items():
        for seed in study.seeds:
            if progress is not None:
                progress(name, seed)
            folder = out / name / f"seed-{seed}"
            summary = run_scenario(
                sc, folder, seed=seed, progress=False, overwrite=overwrite, plots=False
            )
            root, columns = read_root_rows(folder)
            target = reach_target(root, columns, summary, study.target_ari)
            time_s = summary.get("virtual_time_s")
            runs.append(
                {
                    "variant": name,
                    "seed": seed,
                    "path": str(folder),
                    "status": summary["status"],
                    "rounds": summary["rounds"],
                    "ari": summary["metrics"].get("ari"),
                    "bytes_total": summary["bytes_total"],
                    "time_s": time_s,
                    "failed_rounds": summary.get("failed_rounds"),
                    "target": target,
                }
            )
    rows = []
    for name in study.variants:
        mine = [r for r in runs if r["variant"] == name]
        reached = [r for r in mine if r["target"]["reached"]]
        aris = [r["ari"] for r in mine if r["ari"] is not None]
        rows.append(
            {
                "variant": name,
                "seeds": len(mine),
                "converged": sum(r["status"] == "converged" for r in mine),
                "rounds": _mean([r["rounds"] for r in mine]),
                "ari": _mean(aris),
                "ari_min": round(min(aris), 6) if aris else None,
                "bytes_total": _mean([r["bytes_total"] for r in mine]),
                "time_s": _mean([r["time_s"] for r in mine]),
                "target_reached": len(reached),
                # over the seeds that reached it (target_reached says how many)
                "time_to_target_s": _mean([r["target"]["time_s"] for r in reached]),
                "bytes_to_target": _mean([r["target"]["bytes"] for r in reached]),
                "failed_rounds": _mean([r["failed_rounds"] for r in mine]),
            }
        )
    write_table(rows, STUDY_COLUMNS, out / "study.csv")
    firsts = [out / name / f"seed-{study.seeds[0]}" for name in study.variants]
    if len(firsts) >= 2:
        cmp = compare_many(firsts, target_ari=study.target_ari)
        plot_comparison(cmp, out / "study.png", title=Path(study.file).stem)
    result = {
        "study": study.file,
        "target_ari": study.target_ari,
        "seeds": list(study.seeds),
        "rows": rows,
        "runs": runs,
    }
    text = json.dumps(result, indent=2, allow_nan=False, default=_json_default)
    (out / "study.json").write_text(text + "\n", encoding="utf-8")
    return result


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        value = obj.item()
        return None if isinstance(value, float) and not math.isfinite(value) else value
    raise TypeError(f"not JSON: {type(obj).__name__}")
