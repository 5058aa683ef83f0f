"""HK-MVFC on real data: the UCI multiple-features digits against k-means and the baselines.

Data: :func:`fedstrata.scenarios.datasets.multiple_features` (n = 2000, six views of
76, 216, 64, 240, 47 and 6 features, 10 digits), the raw views as published. Every
method is fitted once per seed (``--seeds``, default 0..4) in this process, one after
the other, and timed with ``time.perf_counter`` around the whole fit (initialisation
included):

* ``KMeans (std concat)``: scikit-learn ``KMeans(10, n_init=10)`` on the concatenated
  views, each feature standardized (standardization inside the timing);
* ``HKMVFC defaults``: ``HKMVFC(n_clusters=10)`` on the raw views;
* ``HKMVFC preset=paper``: ``HKMVFC(n_clusters=10, preset="paper")``, the paper's
  Algorithm 1 (m = 2, α = 5, Type 1 as printed for its federated analysis, Eq. 16
  centres) with the project's 10 restarts keeping the best;
* ``MVFCM m=1.25``: Euclidean multi-view fuzzy c-means on the raw views;
* ``MVKMED (std)``: MVKM-ED on the standardized views (raw views overflow its β);
* ``HKMVFC federated``: :func:`fedstrata.algorithms.federated_fit` with the
  estimator's default settings, rule ``sum``, on a 10-client IID split (seeded by
  k-means on the largest client; pooled references exchanged in the setup).

It prints a markdown table (mean over seeds of ARI, ACC (Hungarian matching), NMI and
seconds per fit; min ARI over seeds) and the ratio of HKMVFC's mean fit time to
KMeans's, measured in the same run (the issue's target: <= 1).

Run: ``python benchmarks/hk_real_data.py [--seeds 5]`` (about 2 minutes on a 2-core
machine, mostly the paper preset). ``--smoke``: 300 samples (30 per digit), one
seed, a few seconds.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from fedstrata.algorithms import HKMVFC, MVFCM, MVKMED, federated_fit
from fedstrata.analysis.metrics import clustering_accuracy
from fedstrata.errors import ConvergenceWarning
from fedstrata.scenarios.datasets import multiple_features

C = 10
N_CLIENTS = 10


def standardized(views: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for X in views:
        std = X.std(axis=0)
        std[std == 0] = 1.0
        out.append((X - X.mean(axis=0)) / std)
    return out


def kmeans(views: list[np.ndarray], seed: int) -> np.ndarray:
    Z = np.hstack(standardized(views))
    return KMeans(C, n_init=10, random_state=seed).fit(Z).labels_


def federated(views: list[np.ndarray], seed: int) -> np.ndarray:
    n = views[0].shape[0]
    parts = np.array_split(np.random.default_rng(seed).permutation(n), N_CLIENTS)
    res = federated_fit(
        [[X[p] for X in views] for p in parts],
        n_clusters=C,
        rounds=100,
        m="auto",
        alpha=50.0,
        kernel="none",
        center_update="exact",
        bandwidth=8.0,
        relative_tol=True,
        init_method="kmeans-best",
        random_state=seed,
    )
    labels = np.empty(n, dtype=np.int64)
    for p, lab in zip(parts, res.labels, strict=True):
        labels[p] = lab
    return labels


METHODS: dict[str, Callable[[list[np.ndarray], int], np.ndarray]] = {
    "KMeans (std concat)": kmeans,
    "HKMVFC defaults": lambda v, s: HKMVFC(C, random_state=s).fit(v).labels_,
    "HKMVFC preset=paper": lambda v, s: HKMVFC(C, preset="paper", random_state=s).fit(v).labels_,
    "MVFCM m=1.25": lambda v, s: MVFCM(C, m=1.25, random_state=s).fit(v).labels_,
    "MVKMED (std)": lambda v, s: MVKMED(C, random_state=s).fit(standardized(v)).labels_,
    "HKMVFC federated": federated,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    parser.add_argument("--smoke", action="store_true", help="300 samples, one seed")
    args = parser.parse_args()
    ds = multiple_features()
    views, y = ds.views, ds.labels
    seeds = list(range(args.seeds))
    if args.smoke:
        keep = np.concatenate([np.arange(k * 200, k * 200 + 30) for k in range(C)])
        views, y, seeds = [X[keep] for X in views], y[keep], [0]
    print(
        f"data: multiple-features, n={y.size}, views {[X.shape[1] for X in views]}, "
        f"c={C}; seeds {seeds}"
    )
    rows = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for name, fit in METHODS.items():
            ari, acc, nmi, sec = [], [], [], []
            for seed in seeds:
                t0 = time.perf_counter()
                labels = fit(views, seed)
                sec.append(time.perf_counter() - t0)
                ari.append(adjusted_rand_score(y, labels))
                acc.append(clustering_accuracy(y, labels))
                nmi.append(normalized_mutual_info_score(y, labels))
            rows[name] = (np.mean(ari), np.min(ari), np.mean(acc), np.mean(nmi), np.mean(sec))
    print()
    print("| method | ARI | min ARI | ACC | NMI | s/fit |")
    print("|---|---|---|---|---|---|")
    for name, (ari, ari_min, acc, nmi, sec) in rows.items():
        print(f"| {name} | {ari:.3f} | {ari_min:.3f} | {acc:.3f} | {nmi:.3f} | {sec:.2f} |")
    ratio = rows["HKMVFC defaults"][4] / rows["KMeans (std concat)"][4]
    print()
    print(f"time ratio HKMVFC defaults / KMeans: {ratio:.2f} (target <= 1)")


if __name__ == "__main__":
    main()
