"""Every clustering method on synthetic and real multi-view data, centralized and federated.

The table of ``docs/algorithms.md``: ACC, NMI, ARI and seconds of each method

* centralized: the scikit-learn style estimator's ``fit`` on all the data;
* federated: a simulated run of 10 clients (IID split, a flat federation, rule
  ``sum``), the same nodes ``fedstrata run`` uses; the seconds are the run's wall time
  (the whole simulation, not only the maths).

on the two-view shape data of the FedHK-MVFC paper (§6.1, n = 10,000) and on the UCI
multiple-features digits (n = 2,000, six views of 6 to 240 features, raw values).
k-means (scikit-learn, on the standardized concatenation of the views, n_init 10) is
the centralized baseline; it has no federated row. Each cell is the mean over the seeds
(default 0, 1, 2). Federated runs stop at a relative objective change below 1e-6
or 100 rounds.

    python benchmarks/algorithm_table.py [--seeds 3] [--smoke] [--markdown FILE]

``--smoke`` runs one seed on small data in well under a minute (the test suite runs it).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # timings of one core, as the peers'

import argparse
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import yaml

from fedstrata import algorithms as alg
from fedstrata.analysis.metrics import evaluate
from fedstrata.scenarios.datasets import load_dataset
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate

# (row label, estimator factory (c, seed), scenario algorithm block or None)
METHODS: list[tuple[str, Callable[[int, int], Any], dict[str, Any] | None]] = [
    ("k-means (standardized concat.)", lambda c, s: _kmeans(c, s), None),
    (
        "HK-MVFC (defaults)",
        lambda c, s: alg.HKMVFC(c, random_state=s),
        {"name": "hk-mvfc", "preset": "real-data"},
    ),
    (
        'HK-MVFC (preset="paper")',
        lambda c, s: alg.HKMVFC(c, preset="paper", random_state=s),
        {"name": "hk-mvfc", "preset": "paper"},
    ),
    ("MV-FCM", lambda c, s: alg.MVFCM(c, random_state=s), {"name": "mvfcm"}),
    ("MVKM-ED", lambda c, s: alg.MVKMED(c, random_state=s), {"name": "mvkm-ed"}),
    ("E-FKMVC", lambda c, s: alg.EFKMVC(c, random_state=s), {"name": "e-fkmvc"}),
    (
        "FedHK-PARAFAC2",
        lambda c, s: alg.FedHKPARAFAC2(c, random_state=s),
        {"name": "fedhk-parafac2"},
    ),
    ("FedHK-Tucker", lambda c, s: alg.FedHKTucker(c, random_state=s), {"name": "fedhk-tucker"}),
    (
        "FedHK-MVC-Person",
        lambda c, s: alg.FedHKMVCPerson(c, random_state=s),
        {"name": "fedhk-mvc-person"},
    ),
]


class _KMeansConcat:
    """scikit-learn KMeans(n_init=10) on the standardized concatenated views."""

    def __init__(self, c: int, seed: int) -> None:
        self.c, self.seed = c, seed

    def fit(self, views: list[np.ndarray]) -> _KMeansConcat:
        from sklearn.cluster import KMeans
        from sklearn.preprocessing import StandardScaler

        X = StandardScaler().fit_transform(np.hstack(views))
        self.labels_ = KMeans(self.c, n_init=10, random_state=self.seed).fit(X).labels_
        return self


def _kmeans(c: int, seed: int) -> _KMeansConcat:
    return _KMeansConcat(c, seed)


def datasets(smoke: bool) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, dataset name, its parameters)."""
    if smoke:
        return [("FedHK-MVFC synthetic, n = 800", "heat-kernel-synthetic", {"n_per_cluster": 200})]
    return [
        ("FedHK-MVFC synthetic, n = 10,000", "heat-kernel-synthetic", {}),
        ("UCI multiple-features, n = 2,000", "multiple-features", {}),
    ]


def centralized(make: Callable[[int, int], Any], name: str, params: dict, seed: int) -> dict:
    """Scores and seconds of one estimator fit."""
    ds = load_dataset(name, random_state=seed, **params)
    est = make(ds.n_clusters, seed)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a restart stopping at max_iter is not the point here
        est.fit(ds.views)
    return {**evaluate(ds.labels, est.labels_), "s": time.perf_counter() - t0}


def federated(block: dict, name: str, params: dict, seed: int, clients: int) -> dict:
    """Scores and wall seconds of a simulated flat federation of ``clients`` (IID)."""
    ds = load_dataset(name, random_state=seed, **params)
    sc = {
        "name": "table",
        "seed": seed,
        "data": {
            "dataset": name,
            "partition": {"kind": "iid"},
            **({"params": params} if params else {}),
        },
        "topology": {"clients": {"count": clients}},
        "algorithm": {**block, "n_clusters": ds.n_clusters},
        "protocol": {
            "rule": "sum",
            "rounds": 100,
            "tol": 1e-6,
            "tol_mode": "relative",
            "deadline_s": 60,
        },
    }
    t0 = time.perf_counter()
    _, summary, _ = simulate(parse_scenario(yaml.safe_dump(sc)))
    m = summary["metrics"]
    return {"acc": m["acc"], "nmi": m["nmi"], "ari": m["ari"], "s": time.perf_counter() - t0}


def cell(rows: list[dict]) -> tuple[str, str, str, str]:
    """Means over seeds, formatted."""
    mean = {k: float(np.mean([r[k] for r in rows])) for k in ("acc", "nmi", "ari", "s")}
    return (f"{mean['acc']:.3f}", f"{mean['nmi']:.3f}", f"{mean['ari']:.3f}", f"{mean['s']:.2f}")


def main() -> None:
    """Run every method on every dataset and print the markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 (mean shown)")
    ap.add_argument("--clients", type=int, default=10, help="clients of the federated runs")
    ap.add_argument("--smoke", action="store_true", help="one seed, small data")
    ap.add_argument("--markdown", help="also write the table to this file")
    args = ap.parse_args()
    seeds = range(1 if args.smoke else args.seeds)
    lines = [
        "| data | method | setting | ACC | NMI | ARI | s |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, name, params in datasets(args.smoke):
        for method, make, block in METHODS:
            rows = [centralized(make, name, params, s) for s in seeds]
            lines.append(f"| {label} | {method} | centralized | " + " | ".join(cell(rows)) + " |")
            print(lines[-1], flush=True)
            if block is None:
                continue
            rows = [federated(block, name, params, s, args.clients) for s in seeds]
            lines.append(
                f"| {label} | {method} | federated, {args.clients} clients | "
                + " | ".join(cell(rows))
                + " |"
            )
            print(lines[-1], flush=True)
    table = "\n".join(lines)
    print()
    print(table)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    main()
