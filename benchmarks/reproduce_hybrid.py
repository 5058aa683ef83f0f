"""Hybrid-view client populations (FMCSC, EFD-MVC) and Fed-MVKM's setting, over seeds.

Runs the scenario files of ``scenarios/papers``:

* ``hybrid-2to1``, ``hybrid-1to1``, ``hybrid-1to2``: multi-view to single-view clients
  2:1, 1:1 and 1:2, as in "Bridging Gaps: Federated Multi-View Clustering in
  Heterogeneous Hybrid Views" (FMCSC, Chen et al., NeurIPS 2024);
* ``random-view-subsets``: most clients hold a random subset of the views, as in
  "Enhanced Federated Deep Multi-View Clustering under Uncertainty Scenario" (EFD-MVC,
  Wei et al., AAAI 2026);
* the full-view baseline: ``hybrid-2to1`` with every client holding every view;
* ``fed-mvkm-mfeat``: the federated setting of "Fed-MVKM: Federated Multi-View K-Means
  Clustering" (K. P. Sinaga, 2025) on the UCI multiple features.

All on the UCI multiple-features digits (2,000 samples, 6 views, 10 classes). The hybrid
populations are clustered with HK-MVFC, not with the papers' deep models, which fedstrata
does not implement; the figures are not comparable with the papers' tables.

Prints a markdown table: population, clients multi/partial/single, ARI, NMI and ACC as
mean (min) over the seeds, rounds (mean, min-max) and bytes on the wire (mean).

Usage::

    python benchmarks/reproduce_hybrid.py [--seeds N] [--smoke] [--jobs J] [--markdown FILE]

``--smoke``: one seed, rounds capped at 10. ``--markdown FILE`` appends the table, under
a heading, to FILE.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from fedstrata.scenarios.loader import load_scenario
from fedstrata.scenarios.run import simulate
from fedstrata.scenarios.wiring import prepare_data

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ROOT / "scenarios" / "papers"

# (population label, scenario file stem, views override or None)
POPULATIONS: list[tuple[str, str, dict[str, float] | None]] = [
    ("full-view baseline (HK-MVFC)", "hybrid-2to1", {"all": 1.0}),
    ("hybrid 2:1 (HK-MVFC)", "hybrid-2to1", None),
    ("hybrid 1:1 (HK-MVFC)", "hybrid-1to1", None),
    ("hybrid 1:2 (HK-MVFC)", "hybrid-1to2", None),
    ("random view subsets (HK-MVFC)", "random-view-subsets", None),
    ("Fed-MVKM setting (mvkm-ed, 5 clients)", "fed-mvkm-mfeat", None),
]


def _scenario(stem: str, views: dict[str, float] | None, max_rounds: int | None) -> Any:
    sc = load_scenario(PAPERS / f"{stem}.yaml")
    if views is not None:
        sc = sc.model_copy(update={"data": sc.data.model_copy(update={"views": views})})
    if max_rounds is not None:
        rounds = min(sc.protocol.rounds, max_rounds)
        sc = sc.model_copy(update={"protocol": sc.protocol.model_copy(update={"rounds": rounds})})
    return sc


def _composition(sc: Any, seed: int) -> tuple[int, int, int]:
    """Clients holding all views, a partial subset, a single view."""
    data = prepare_data(sc, seed=seed)
    held, n_views = data.held, data.dataset.n_views
    full = sum(len(h) == n_views for h in held)
    single = sum(len(h) == 1 for h in held)
    return full, len(held) - full - single, single


def run_one(job: tuple[int, str, dict[str, float] | None, int, int | None]) -> dict[str, Any]:
    """One population at one seed (top-level, so a process pool can run it)."""
    index, stem, views, seed, max_rounds = job
    sc = _scenario(stem, views, max_rounds)
    t0 = time.perf_counter()
    _, summary, _ = simulate(sc, seed=seed)
    return {
        "index": index,
        "seed": seed,
        "status": summary["status"],
        "rounds": summary["rounds"],
        "bytes": summary["bytes_total"],
        "ari": summary["metrics"]["ari"],
        "nmi": summary["metrics"]["nmi"],
        "acc": summary["metrics"]["acc"],
        "composition": _composition(sc, seed),
        "seconds": time.perf_counter() - t0,
    }


def _stat(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3f} ({min(values):.3f})"


def table(results: list[dict[str, Any]]) -> str:
    head = (
        "| population | clients multi/partial/single | ARI mean (min) | NMI mean (min) "
        "| ACC mean (min) | rounds mean (min-max) | status | bytes mean |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for i, (label, _, _) in enumerate(POPULATIONS):
        rows = [r for r in results if r["index"] == i]
        if not rows:
            continue
        comps = sorted({r["composition"] for r in rows})
        comp = ", ".join("/".join(str(c) for c in cs) for cs in comps)
        rounds = [r["rounds"] for r in rows]
        statuses = sorted({r["status"] for r in rows})
        lines.append(
            f"| {label} | {comp} | {_stat([r['ari'] for r in rows])} "
            f"| {_stat([r['nmi'] for r in rows])} | {_stat([r['acc'] for r in rows])} "
            f"| {statistics.fmean(rounds):.1f} ({min(rounds)}-{max(rounds)}) "
            f"| {', '.join(statuses)} | {statistics.fmean(r['bytes'] for r in rows):,.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3)")
    p.add_argument("--smoke", action="store_true", help="one seed, rounds capped at 10")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--markdown", type=Path, help="append the table to this file")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.jobs < 1:
        p.error("--seeds and --jobs must be >= 1")
    seeds = [0] if args.smoke else list(range(args.seeds))
    max_rounds = 10 if args.smoke else None
    jobs = [
        (i, stem, views, s, max_rounds)
        for i, (_, stem, views) in enumerate(POPULATIONS)
        for s in seeds
    ]
    t0 = time.perf_counter()
    if args.jobs == 1:
        results = [run_one(j) for j in jobs]
    else:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(run_one, jobs))
    text = table(results)
    note = (f"Seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"Seed {seeds[0]}") + (
        ", rounds capped at 10 (smoke run)." if args.smoke else ", the files' own settings."
    )
    print(text)
    print(f"\n{note} {len(jobs)} runs in {time.perf_counter() - t0:.1f} s.")
    if args.markdown is not None:
        with args.markdown.open("a", encoding="utf-8") as fh:
            fh.write(f"\n{text}\n\n{note}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
