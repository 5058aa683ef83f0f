"""The tensor family on real data: ``preset="paper"`` against ``preset="real-data"`` and k-means.

Methods: E-FKMVC, FedHK-PARAFAC2, FedHK-Tucker and FedHK-MVC-Person ("Personalized
Federated Heat-Kernel Enhanced Multi-View Clustering via Advanced Tensor
Decomposition"), each with the paper's settings (``preset="paper"``, the defaults) and
with the real-data preset (:mod:`fedstrata.algorithms.tensor.presets`), in the same run
as scikit-learn's ``KMeans(n_clusters, n_init=10, random_state=seed)`` on the
concatenated views, each feature standardized.

Data:

* ``multiple-features``: :func:`fedstrata.scenarios.datasets.multiple_features`
  (n = 2000, six views of 76, 216, 64, 240, 47 and 6 features, 10 digits);
* ``digits``: scikit-learn's ``load_digits`` (n = 1797, 8×8 images, 10 digits) split
  into three views. This is the project's ``load_dataset("digits")`` loader:
  X = the images as float (n, 8, 8); view 1 "pixels" = X.reshape(n, 64); view 2 "ink
  profiles" = the 8 row sums then the 8 column sums (16); view 3 "gradients" =
  sqrt(gx² + gy²) with ``gy, gx = np.gradient(X, axis=(1, 2))``, flattened (64);
* ``synthetic``: :func:`fedstrata.scenarios.datasets.heat_kernel_synthetic` (the
  FedHK-MVFC paper's §6.1 data, two 2-feature views, 4 clusters, 2500 per cluster),
  drawn with the run's seed.

Settings: ``central`` = the scikit-learn style estimator (one client);
``federated`` = :func:`fedstrata.algorithms.tensor.tensor_federated_fit` over 10
clients, an IID split (a seeded permutation cut into 10 equal parts), every client
holding every view, rule sum (the estimator's maths with ten clients). 30 rounds at
most, tol 1e-4 (the estimators' defaults). Each fit is timed with
``time.perf_counter`` around the whole fit (initialisation included).

Output: a markdown table, one row per (data, setting, method): ARI mean and min over
seeds and mean seconds per fit for each preset, then k-means's mean ARI and the gap
real-data − k-means.

Run: ``python benchmarks/tensor_real_data.py [--seeds 10] [--data digits,...]``
(about 20 minutes for 10 seeds on a 2-core machine). ``--smoke``: 200 samples per
data set, one seed, 3 rounds: it only shows that every row runs.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from fedstrata.algorithms.tensor import METHODS, TensorModel, tensor_federated_fit
from fedstrata.algorithms.tensor.estimators import (
    EFKMVC,
    FedHKMVCPerson,
    FedHKPARAFAC2,
    FedHKTucker,
)
from fedstrata.algorithms.tensor.presets import preset_init, preset_model_settings
from fedstrata.scenarios.datasets import heat_kernel_synthetic, load_dataset, multiple_features

N_CLIENTS = 10
PRESETS = ("paper", "real-data")
ESTIMATORS = {
    "e-fkmvc": EFKMVC,
    "fedhk-parafac2": FedHKPARAFAC2,
    "fedhk-tucker": FedHKTucker,
    "fedhk-mvc-person": FedHKMVCPerson,
}
Data = tuple[list[np.ndarray], np.ndarray]


def digits_views() -> Data:
    """scikit-learn's digits as three views (``load_dataset("digits")``)."""
    ds = load_dataset("digits")
    return list(ds.views), np.asarray(ds.labels)


def mfeat_views() -> Data:
    """The UCI multiple-features digits, six views as published."""
    ds = multiple_features()
    return [np.asarray(v, dtype=np.float64) for v in ds.views], np.asarray(ds.labels)


def synthetic_views(seed: int) -> Data:
    """The FedHK-MVFC paper's §6.1 data, drawn with ``seed``."""
    ds = heat_kernel_synthetic(random_state=seed)
    return [np.asarray(v, dtype=np.float64) for v in ds.views], np.asarray(ds.labels)


def standardized_concat(views: list[np.ndarray]) -> np.ndarray:
    """The views side by side, each feature standardized (constant features kept at 0)."""
    Z = np.hstack(views)
    std = Z.std(axis=0)
    std[std == 0] = 1.0
    return (Z - Z.mean(axis=0)) / std


def kmeans(views: list[np.ndarray], c: int, seed: int) -> np.ndarray:
    return KMeans(c, n_init=10, random_state=seed).fit(standardized_concat(views)).labels_


ROUNDS = 30  # the estimators' max_iter default; --smoke: 3


def central(method: str, preset: str) -> Callable[[list[np.ndarray], int, int], np.ndarray]:
    def fit(views: list[np.ndarray], c: int, seed: int) -> np.ndarray:
        est = ESTIMATORS[method](c, preset=preset, max_iter=ROUNDS, random_state=seed)
        return est.fit(views).labels_

    return fit


def federated(method: str, preset: str) -> Callable[[list[np.ndarray], int, int], np.ndarray]:
    def fit(views: list[np.ndarray], c: int, seed: int) -> np.ndarray:
        dims = [X.shape[1] for X in views]
        settings = preset_model_settings(preset, method, c, dims)
        model = TensorModel(method, c, tuple(dims), **settings)
        n = views[0].shape[0]
        parts = np.array_split(np.random.default_rng(seed).permutation(n), N_CLIENTS)
        res = tensor_federated_fit(
            model,
            [[X[p] for X in views] for p in parts],
            rounds=ROUNDS,
            tol=1e-4,
            random_state=seed,
            init=preset_init(preset),
        )
        labels = np.empty(n, dtype=np.int64)
        for p, lab in zip(parts, res.labels, strict=True):
            labels[p] = lab
        return labels

    return fit


def subsample(data: Data, size: int | None, seed: int) -> Data:
    views, y = data
    if size is None or size >= y.size:
        return views, y
    idx = np.sort(np.random.default_rng(seed).choice(y.size, size, replace=False))
    return [X[idx] for X in views], y[idx]


def timed(fit: Callable[..., np.ndarray], data: Data, c: int, seed: int) -> tuple[float, float]:
    views, y = data
    t0 = time.perf_counter()
    labels = fit(views, c, seed)
    return float(adjusted_rand_score(y, labels)), time.perf_counter() - t0


def run(names: list[str], seeds: list[int], size: int | None, methods: list[str]) -> list[str]:
    rows = []
    fixed = {"multiple-features": mfeat_views, "digits": digits_views}
    for name in names:
        base = fixed[name]() if name in fixed else None
        scores: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
        km: list[float] = []
        for seed in seeds:
            data = subsample(base if base is not None else synthetic_views(seed), size, seed)
            c = int(np.unique(data[1]).size)
            km.append(timed(kmeans, data, c, seed)[0])
            for setting, make in (("central", central), ("federated", federated)):
                for method in methods:
                    for preset in PRESETS:
                        key = (setting, method, preset)
                        scores.setdefault(key, []).append(
                            timed(make(method, preset), data, c, seed)
                        )
        for setting in ("central", "federated"):
            for method in methods:
                cells = []
                for preset in PRESETS:
                    a = np.array(scores[(setting, method, preset)])
                    cells += [
                        f"{a[:, 0].mean():.3f}",
                        f"{a[:, 0].min():.3f}",
                        f"{a[:, 1].mean():.1f}",
                    ]
                real = float(np.mean([s[0] for s in scores[(setting, method, "real-data")]]))
                gap = real - float(np.mean(km))
                rows.append(
                    f"| {name} | {setting} | {method} | {' | '.join(cells)} "
                    f"| {np.mean(km):.3f} | {gap:+.3f} |"
                )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default 10)")
    p.add_argument(
        "--data",
        default="multiple-features,digits,synthetic",
        help="comma-separated: multiple-features, digits, synthetic",
    )
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated methods")
    p.add_argument(
        "--smoke", action="store_true", help="200 samples per data set, one seed, 3 rounds"
    )
    args = p.parse_args()
    names = [s.strip() for s in args.data.split(",") if s.strip()]
    methods = [s.strip() for s in args.methods.split(",") if s.strip()]
    for name in names:
        if name not in ("multiple-features", "digits", "synthetic"):
            p.error(f"unknown data set {name!r}")
    for method in methods:
        if method not in METHODS:
            p.error(f"unknown method {method!r}")
    global ROUNDS
    seeds = [0] if args.smoke else list(range(args.seeds))
    size = 200 if args.smoke else None
    if args.smoke:
        ROUNDS = 3
    warnings.simplefilter("ignore")  # tensorly's and the convergence warnings
    print(
        "| data | setting | method | paper ARI | paper min | paper s "
        "| real-data ARI | real-data min | real-data s | k-means ARI | real-data − k-means |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in run(names, seeds, size, methods):
        print(row, flush=True)


if __name__ == "__main__":
    main()
