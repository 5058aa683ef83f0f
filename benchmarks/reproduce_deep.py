"""Deep hybrid-view federated clustering (FMCSC, EFD-MVC) next to the papers' figures.

Runs the scenario files of ``scenarios/papers`` on the UCI multiple features (2,000
handwritten digits, 6 views, 10 classes) over 12 clients, the project's choice of data
and client count. The EFD-MVC paper's "HW" and "UCI" rows are two different data sets
it does not describe, shown for orientation only; the FMCSC paper uses neither:

* EFD-MVC's uncertainty setting ("Enhanced Federated Deep Multi-View Clustering under
  Uncertainty Scenario", Wei et al., AAAI 2026, Table 1): random view subsets
  (``deep-random-views.yaml``: 2 full-view, 8 partial-view, 2 single-view clients, the
  expected mix if the paper's random |V_k| in [1, V] is read as uniform, the project's
  reading), partitions IID and Dirichlet
  β = 1, 10, 100 (``deep-random-views-dir{1,10,100}.yaml``);
* FMCSC's multi-view to single-view client ratios 2:1, 1:1, 1:2 ("Bridging Gaps:
  Federated Multi-View Clustering in Heterogeneous Hybrid Views", Chen et al., NeurIPS
  2024), IID (``deep-hybrid-{2to1,1to1,1to2}.yaml``).

Each setting's population is clustered by FMCSC, EFD-MVC, HK-MVFC (``preset: real-data``),
MV-FCM (``mvfcm``), both with the sum rule and the protocol of ``hybrid-2to1.yaml``, and,
as a centralized reference that sees every view of every sample, scikit-learn's KMeans on
the standardized concatenation of all six views. Scores are the run's final labels over
all clients (as ``fedstrata run`` scores them). The table also gives the EFD-MVC paper's Table 1
figures (for FMCSC, EFD-MVC's runs of it) where they exist, the wall time and the bytes on the wire of each run.

Usage::

    python benchmarks/reproduce_deep.py [--seeds N] [--smoke] [--only M,...]
                                        [--settings STEM,...] [--write-docs]

``--seeds N``: seeds 0..N-1 (default 1: a deep run takes about a minute on 2 cores, the
whole table about 20 minutes). ``--smoke``: seed 0, two settings, tiny networks and capped
rounds (well under a minute). ``--only``: a comma list of methods among fmcsc, efd-mvc,
hk-mvfc, mvfcm, kmeans; ``--settings``: a comma list of the scenario stems below
(e.g. ``deep-random-views`` for EFD-MVC's IID column alone). ``--write-docs``: put the table into ``docs/reproductions.md``
between the ``reproduce_deep`` markers (appending a section with them if missing).
Runs go one after another (the deep ones use both cores).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedstrata.analysis.metrics import ari, clustering_accuracy, nmi
from fedstrata.scenarios.loader import load_scenario
from fedstrata.scenarios.run import simulate
from fedstrata.scenarios.schema import Scenario
from fedstrata.scenarios.wiring import prepare_data

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ROOT / "scenarios" / "papers"
DOCS = ROOT / "docs" / "reproductions.md"
BEGIN = "<!-- reproduce_deep:begin -->"
END = "<!-- reproduce_deep:end -->"

# (setting label, scenario file stem, key into PAPER)
SETTINGS: list[tuple[str, str, str | None]] = [
    ("random views, IID", "deep-random-views", "IID"),
    ("random views, IID, 25 local epochs", "deep-random-views-25-epochs", "IID"),
    ("random views, Dir(1)", "deep-random-views-dir1", "Dir(1)"),
    ("random views, Dir(10)", "deep-random-views-dir10", "Dir(10)"),
    ("random views, Dir(100)", "deep-random-views-dir100", "Dir(100)"),
    ("hybrid 2:1, IID", "deep-hybrid-2to1", None),
    ("hybrid 1:1, IID", "deep-hybrid-1to1", None),
    ("hybrid 1:2, IID", "deep-hybrid-1to2", None),
]
SMOKE_SETTINGS = ("deep-random-views-dir10", "deep-hybrid-2to1")

METHODS: dict[str, str] = {
    "fmcsc": "FMCSC",
    "efd-mvc": "EFD-MVC",
    "hk-mvfc": "HK-MVFC (real-data)",
    "mvfcm": "MV-FCM",
    "kmeans": "k-means, centralized (all views)",
}
DEEP = ("fmcsc", "efd-mvc")

# EFD-MVC paper (Wei et al., AAAI 2026) Table 1, ACC/NMI/ARI in %: (method, row) -> column
PAPER: dict[tuple[str, str], dict[str, tuple[float, float, float]]] = {
    ("efd-mvc", "HW"): {
        "Dir(1)": (46.80, 47.38, 30.18),
        "Dir(10)": (61.95, 54.00, 40.26),
        "Dir(100)": (58.55, 54.23, 41.02),
        "IID": (60.70, 56.92, 44.47),
    },
    ("fmcsc", "HW"): {
        "Dir(1)": (34.60, 34.40, 18.84),
        "Dir(10)": (38.20, 34.39, 19.73),
        "Dir(100)": (37.05, 32.03, 19.05),
        "IID": (35.70, 31.13, 16.47),
    },
    ("efd-mvc", "UCI"): {
        "Dir(1)": (52.05, 47.28, 33.13),
        "Dir(10)": (63.60, 55.11, 44.08),
        "Dir(100)": (55.95, 52.19, 39.08),
        "IID": (55.45, 51.02, 37.09),
    },
    ("fmcsc", "UCI"): {
        "Dir(1)": (48.90, 39.95, 27.40),
        "Dir(10)": (36.15, 26.13, 14.54),
        "Dir(100)": (31.50, 21.39, 12.40),
        "IID": (38.40, 31.62, 18.73),
    },
}

# The non-deep methods run with the protocol of hybrid-2to1.yaml.
FLAT_PROTOCOL: dict[str, Any] = {
    "rule": "sum",
    "rounds": 100,
    "tol": 1.0e-6,
    "tol_mode": "relative",
    "deadline_s": 60,
}
SMOKE_DEEP: dict[str, Any] = {
    "hidden": [32],
    "latent": 8,
    "head": 32,
    "pretrain_rounds": 1,
    "train_rounds": 1,
    "pretrain_epochs": 2,
    "local_epochs": 1,
    "copy_epochs": 1,
    "kmeans_rounds": 3,
}
SMOKE_DEEP_ROUNDS = 8
SMOKE_FLAT_ROUNDS = 5


def _scenario(stem: str, method: str, smoke: bool) -> Scenario:
    """The setting's scenario with ``method``'s algorithm and protocol, re-validated."""
    base = load_scenario(PAPERS / f"{stem}.yaml")
    raw = base.model_dump(mode="json", exclude_unset=True)
    k = base.algorithm.n_clusters
    if method in DEEP:
        # the file's training settings (e.g. local_epochs) apply to both deep methods
        algo: dict[str, Any] = {**raw["algorithm"], "name": method, "n_clusters": k}
        proto = dict(raw.get("protocol", {}))
        if smoke:
            algo.update(SMOKE_DEEP)
            proto["rounds"] = SMOKE_DEEP_ROUNDS
        if method != "fmcsc":
            algo.pop("copy_epochs", None)  # FMCSC's own setting
    else:
        algo = {"name": method, "n_clusters": k}
        if method == "hk-mvfc":
            algo["preset"] = "real-data"
        proto = dict(FLAT_PROTOCOL)
        if smoke:
            proto["rounds"] = SMOKE_FLAT_ROUNDS
    raw["algorithm"] = algo
    raw["protocol"] = proto
    return Scenario.model_validate(raw)


def _composition(held: list[tuple[int, ...]], n_views: int) -> str:
    full = sum(len(h) == n_views for h in held)
    single = sum(len(h) == 1 for h in held)
    return f"{full}/{len(held) - full - single}/{single}"


def _kmeans(stem: str, seed: int) -> dict[str, Any]:
    """Centralized reference: KMeans on the standardized concatenation of every view."""
    from sklearn.cluster import KMeans
    from sklearn.preprocessing import StandardScaler

    sc = load_scenario(PAPERS / f"{stem}.yaml")
    t0 = time.perf_counter()
    data = prepare_data(sc, seed=seed)
    ds = data.dataset
    x = StandardScaler().fit_transform(np.hstack([np.asarray(v, float) for v in ds.views]))
    pred = KMeans(n_clusters=ds.n_clusters, n_init=10, random_state=seed).fit_predict(x)
    y = np.asarray(ds.labels)
    return {
        "status": "centralized",
        "rounds": 0,
        "bytes": 0,
        "acc": clustering_accuracy(y, pred),
        "nmi": nmi(y, pred),
        "ari": ari(y, pred),
        "composition": "-",
        "seconds": time.perf_counter() - t0,
        "cpu_per_round": float("nan"),
    }


def run_one(stem: str, method: str, seed: int, smoke: bool) -> dict[str, Any]:
    """One setting, one method, one seed."""
    if method == "kmeans":
        return _kmeans(stem, seed)
    sc = _scenario(stem, method, smoke)
    data = prepare_data(sc, seed=seed)
    t0, c0 = time.perf_counter(), time.process_time()
    _, summary, _ = simulate(sc, seed=seed)
    cpu = time.process_time() - c0
    return {
        "status": summary["status"],
        "rounds": summary["rounds"],
        "bytes": summary["bytes_total"],
        "acc": summary["metrics"]["acc"],
        "nmi": summary["metrics"]["nmi"],
        "ari": summary["metrics"]["ari"],
        "composition": _composition(data.held, data.dataset.n_views),
        "seconds": time.perf_counter() - t0,
        "cpu_per_round": cpu / max(1, summary["rounds"]),
    }


def _paper(method: str, column: str | None, row: str) -> str:
    figs = PAPER.get((method, row), {}).get(column or "")
    if figs is None:
        return "-"
    return "/".join(f"{f / 100:.3f}" for f in figs)


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.fmean(float(r[key]) for r in rows)


def table(results: dict[tuple[str, str], list[dict[str, Any]]], methods: list[str]) -> str:
    head = (
        "| setting | method | clients full/partial/single | ACC | NMI | ARI | ARI min "
        "| paper HW ACC/NMI/ARI | paper UCI ACC/NMI/ARI | status | rounds | wall s "
        "| CPU s/round | bytes |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for label, stem, column in SETTINGS:
        for method in methods:
            rows = results.get((stem, method))
            if not rows:
                continue
            comp = ", ".join(sorted({r["composition"] for r in rows}))
            statuses = ", ".join(sorted({r["status"] for r in rows}))
            byt = "-" if method == "kmeans" else f"{_mean(rows, 'bytes'):,.0f}"
            rnd = "-" if method == "kmeans" else f"{_mean(rows, 'rounds'):.1f}"
            cpu = "-" if method == "kmeans" else f"{_mean(rows, 'cpu_per_round'):.2f}"
            ari_min = min(float(r["ari"]) for r in rows)
            lines.append(
                f"| {label} | {METHODS[method]} | {comp} | {_mean(rows, 'acc'):.3f} "
                f"| {_mean(rows, 'nmi'):.3f} | {_mean(rows, 'ari'):.3f} | {ari_min:.3f} "
                f"| {_paper(method, column, 'HW')} | {_paper(method, column, 'UCI')} "
                f"| {statuses} | {rnd} | {_mean(rows, 'seconds'):.1f} | {cpu} | {byt} |"
            )
    return "\n".join(lines)


def write_docs(block: str, path: Path = DOCS) -> None:
    """Put ``block`` between the markers of ``path``; append a section if they are missing."""
    text = path.read_text(encoding="utf-8")
    inner = f"{BEGIN}\n\n{block}\n\n{END}"
    if BEGIN in text and END in text and text.index(BEGIN) < text.index(END):
        text = text[: text.index(BEGIN)] + inner + text[text.index(END) + len(END) :]
    else:
        text = (
            text.rstrip("\n")
            + "\n\n## Deep hybrid-view clustering (FMCSC, EFD-MVC) on the multiple features\n\n"
            + inner
            + "\n"
        )
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 (default 1)")
    p.add_argument("--smoke", action="store_true", help="seed 0, 2 settings, tiny networks")
    p.add_argument("--only", help=f"comma list of methods among {', '.join(METHODS)}")
    p.add_argument(
        "--settings",
        help="comma list of scenario stems to run (default all: "
        + ", ".join(stem for _, stem, _ in SETTINGS)
        + ")",
    )
    p.add_argument("--write-docs", action="store_true", help=f"write the table into {DOCS}")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error("--seeds must be >= 1")
    methods = list(METHODS)
    if args.only:
        methods = [m.strip() for m in args.only.split(",") if m.strip()]
        unknown = [m for m in methods if m not in METHODS]
        if unknown or not methods:
            p.error(f"--only: unknown methods {unknown}; known: {', '.join(METHODS)}")
    seeds = [0] if args.smoke else list(range(args.seeds))
    stems = [s for _, s, _ in SETTINGS if not args.smoke or s in SMOKE_SETTINGS]
    if args.settings:
        chosen = [s.strip() for s in args.settings.split(",") if s.strip()]
        unknown = [s for s in chosen if s not in {stem for _, stem, _ in SETTINGS}]
        if unknown or not chosen:
            p.error(f"--settings: unknown {unknown}; known: {', '.join(s for _, s, _ in SETTINGS)}")
        stems = [s for s in stems if s in chosen]
    t0 = time.perf_counter()
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    n_runs = len(stems) * len(methods) * len(seeds)
    done = 0
    for stem in stems:
        for method in methods:
            for seed in seeds:
                r = run_one(stem, method, seed, args.smoke)
                done += 1
                results.setdefault((stem, method), []).append(r)
                bad = [k for k in ("acc", "nmi", "ari") if not math.isfinite(r[k])]
                print(
                    f"[{done}/{n_runs}] {stem} {method} seed {seed}: {r['status']}, "
                    f"{r['rounds']} rounds, ACC {r['acc']:.3f} NMI {r['nmi']:.3f} "
                    f"ARI {r['ari']:.3f}, {r['seconds']:.1f} s, {r['bytes']:,} bytes"
                    + (f" (non-finite {bad})" if bad else ""),
                    file=sys.stderr,
                    flush=True,
                )
    total = time.perf_counter() - t0
    text = table(results, methods)
    seed_note = f"Seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"Seed {seeds[0]}"
    note = (
        f"{seed_note} (metrics are means over the seeds), "
        + ("smoke sizes (tiny networks, capped rounds)" if args.smoke else "the files' settings")
        + f"; {n_runs} runs in {total:.0f} s. Paper columns: EFD-MVC paper Table 1, "
        "ACC/NMI/ARI as fractions (FMCSC's as reported there); '-' where no paper figure "
        "exists. Wall s: seconds per run on this machine (2 cores), building the "
        "federation (data loading) included. CPU s/round: this process's CPU time "
        "(all threads) over the run divided by its rounds, pre-training and k-means "
        "rounds included. Bytes: everything on the wire until the run "
        "stopped."
    )
    print(text)
    print(f"\n{note}")
    if args.write_docs:
        write_docs(f"{text}\n\n{note}")
        print(f"\nwrote {DOCS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
