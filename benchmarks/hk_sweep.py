"""HK-MVFC over the documented ranges of m, α and the bandwidth, on two real data sets.

The measurements behind the rule in docs/algorithms.md ("Choosing m, α and the
bandwidth"). Data: multiple-features (:func:`fedstrata.scenarios.datasets.multiple_features`,
six raw views, c = 10) and scikit-learn's digits split into three views (pixels 64,
ink profiles 16 = row and column sums, gradient magnitudes 64; c = 10). For each set
it prints

* k-means on the standardized concatenation (scikit-learn ``KMeans(10, n_init=10)``),
  the reference every row is compared with;
* the fuzzifier ceilings of the default metric (bandwidth 8, δ ≡ 1, views balanced by
  dimension): m*₀ with equal view weights and m*(α) with Eq. 17's weights at α = 50
  (:func:`fedstrata.algorithms.fuzzifier.fuzzifier_ceiling`), and the project's rule
  m = 1 + 0.75·(m* - 1) (:func:`~fedstrata.algorithms.fuzzifier.recommended_fuzzifier`);
* one row per setting: m at fractions ρ of the way from 1 to the ceiling (the other
  settings at their defaults), then α and then the bandwidth γ over their documented
  ranges at the rule's m. Each row: mean and min ARI over the seeds, ARI / k-means,
  and the mean largest membership (1/c = 0.1 is uniform).

Run: ``python benchmarks/hk_sweep.py [--seeds 3]`` (about 2 minutes on 2 cores);
``--smoke``: 40 samples per class, one seed, a few settings (seconds).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from fedstrata.algorithms import HKMVFC
from fedstrata.algorithms.fuzzifier import fuzzifier_ceiling, recommended_fuzzifier
from fedstrata.algorithms.fuzzifier_check import metric_weights
from fedstrata.algorithms.presets import DEFAULTS
from fedstrata.errors import ConvergenceWarning
from fedstrata.scenarios.datasets import load_dataset, multiple_features

C = 10
RHO = (0.25, 0.5, 0.75, 0.9)
ALPHAS = (1.01, 1.5, 2.0, 5.0, 10.0, 50.0, 200.0, 1000.0)
BANDWIDTHS = (1.0, 2.0, 4.0, 8.0, 32.0, 1e3, 1e6)


def digits_views() -> tuple[list[np.ndarray], np.ndarray]:
    """scikit-learn's digits as pixels, ink profiles (row and column sums) and gradients."""
    ds = load_dataset("digits")
    return list(ds.views), ds.labels


def kmeans_ari(views: list[np.ndarray], y: np.ndarray, seed: int) -> float:
    Z = np.hstack(views)
    std = Z.std(axis=0)
    std[std == 0] = 1.0
    labels = KMeans(C, n_init=10, random_state=seed).fit((Z - Z.mean(axis=0)) / std).labels_
    return float(adjusted_rand_score(y, labels))


def ceilings(views: list[np.ndarray]) -> tuple[float, float, float]:
    """m*₀, m*(α = 50) and the rule's m for the default metric."""
    model = HKMVFC(C)._build(1.1)  # the defaults' metric; m does not enter it
    w = metric_weights(views, model)
    assert w is not None
    m0 = fuzzifier_ceiling(views, w)
    m_alpha = fuzzifier_ceiling(views, w, float(DEFAULTS["alpha"]))
    return m0, m_alpha, recommended_fuzzifier(min(m0, m_alpha))


def row(views, y, seeds, k_ari, label, **params) -> None:
    aris, top = [], []
    for s in seeds:
        est = HKMVFC(C, random_state=s, **params).fit(views)
        aris.append(adjusted_rand_score(y, est.labels_))
        top.append(est.memberships_.max(axis=1).mean())
    mean = float(np.mean(aris))
    print(f"| {label} | {mean:.3f} | {min(aris):.3f} | {mean / k_ari:.2f} | {np.mean(top):.3f} |")


def sweep(name: str, views: list[np.ndarray], y: np.ndarray, seeds: list[int], smoke: bool):
    k_ari = float(np.mean([kmeans_ari(views, y, s) for s in seeds]))
    m0, m_alpha, rule = ceilings(views)
    top = min(m0, m_alpha)
    print(f"\n## {name}: n={y.size}, views {[X.shape[1] for X in views]}, seeds {seeds}")
    print(f"k-means ARI {k_ari:.3f}; ceiling m*0 {m0:.3f}, m*(alpha=50) {m_alpha:.3f}; ")
    print(f"rule m = 1 + 0.75 (min - 1) = {rule:.3f}\n")
    print("| setting | ARI | min ARI | ARI / k-means | mean max membership |")
    print("|---|---|---|---|---|")
    rhos = RHO[1:3] if smoke else RHO
    for rho in rhos:
        m = 1.0 + rho * (top - 1.0)
        row(views, y, seeds, k_ari, f"m = {m:.3f} (rho {rho})", m=m)
    for a in ALPHAS[::3] if smoke else ALPHAS:
        row(views, y, seeds, k_ari, f"alpha = {a:g}", m=rule, alpha=a)
    for g in BANDWIDTHS[::3] if smoke else BANDWIDTHS:
        row(views, y, seeds, k_ari, f"bandwidth = {g:g}", m=rule, bandwidth=g)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3)")
    parser.add_argument("--smoke", action="store_true", help="40 per class, one seed")
    args = parser.parse_args()
    seeds = [0] if args.smoke else list(range(args.seeds))
    mf = multiple_features()
    sets = {"multiple-features": (list(mf.views), mf.labels), "digits": digits_views()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for name, (views, y) in sets.items():
            if args.smoke:
                keep = np.concatenate([np.flatnonzero(y == k)[:40] for k in range(C)])
                views, y = [X[keep] for X in views], y[keep]
            sweep(name, views, y, seeds, args.smoke)


if __name__ == "__main__":
    main()
