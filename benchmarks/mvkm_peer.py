"""fedstrata's MVKMED against the author's PyPI package ``mvkm-ed`` (1.1.0).

Benchmark-only setup (never a project dependency)::

    pip install torch==2.13.0 mvkm-ed==1.1.0

The package's top-level ``mvkm_ed.MVKMED`` (``mvkm_ed/core.py``) is not usable: it
imports torch and tqdm (neither declared) and calls ``_compute_beta``,
``_update_centers``, ``_update_weights`` and ``_compute_objective``, which that class
does not define. The working algorithm is ``mvkm_ed/mvkm_ed.py`` (numpy only, the code
of the Fed-MVKM paper minus its two zero-division fallbacks); it is loaded here straight from
its file, so neither torch nor tqdm is needed to run this benchmark.

What is compared: same data (FedHK-MVFC paper's §6.1 set, n = 10,000, two 2-D views, c = 4),
alpha = 2, the same β schedule β_h = |Σ_j mean_j| c / (t n), the same initial centres
(c random samples shared by the views, passed to the package by overriding its
``_initialize_centers``), and each side's own default stopping rule, |ΔJ| <= 1e-4 or
100 iterations (on this data both always run the 100). The one deviation of MVKMED
from the package is the update order (the package: U -> A -> V with the new centres,
J(U_t, A_t, V_t); fedstrata: U -> V -> A, J(U_t, A_{t-1}, V_t)); section 3 drives the
package's own update methods in fedstrata's order to show that this is the only one.

Printed: fit time and per-iteration time of each (best of ``--repeats``), the ratio
(target: fedstrata >= 10x faster), the ARI of each against the labels per seed and
on average (target: within 0.02), and the agreement checks.

Run: ``python benchmarks/mvkm_peer.py [--seeds 10] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import time
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np
from sklearn.metrics import adjusted_rand_score

from fedstrata.algorithms.mvkm_ed import MVKMED
from fedstrata.errors import ConvergenceWarning
from fedstrata.scenarios.datasets import heat_kernel_synthetic

C, ALPHA, TOL, MAX_ITER = 4, 2.0, 1e-4, 100


def load_peer() -> ModuleType:
    """``mvkm_ed/mvkm_ed.py`` of the installed package, without its broken ``__init__``."""
    spec = importlib.util.find_spec("mvkm_ed")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("mvkm-ed is not installed: pip install torch==2.13.0 mvkm-ed==1.1.0")
    path = Path(next(iter(spec.submodule_search_locations))) / "mvkm_ed.py"
    mspec = importlib.util.spec_from_file_location("mvkm_ed_peer", path)
    assert mspec is not None
    assert mspec.loader is not None
    module = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(module)
    # it calls logging.basicConfig(INFO) and logs every iteration to stderr: silence it,
    # so that its timing is of the algorithm, not of the terminal
    logging.getLogger(module.__name__).setLevel(logging.WARNING)
    return module


def peer_model(peer: ModuleType, init: list[np.ndarray], n_views: int):
    """The package's MVKMED with given initial centres (it takes none: override)."""

    class Seeded(peer.MVKMED):
        def _initialize_centers(self, X):
            return [a.copy() for a in init]

    params = peer.MVKMEDParams(
        cluster_num=C,
        points_view=n_views,
        alpha=ALPHA,
        beta=0.1,  # unused in training (Fed-MVKM paper's tutorial code), kept at the package's value
        max_iterations=MAX_ITER,
        convergence_threshold=TOL,
    )
    return Seeded(params)


def peer_in_fedstrata_order(peer: ModuleType, views: list[np.ndarray], init: list[np.ndarray]):
    """The package's own update methods, called U -> V -> A with fedstrata's J and stop."""
    est = peer_model(peer, init, len(views))
    est.A, est.V = [a.copy() for a in init], np.full(len(views), 1.0 / len(views))
    prev, t = np.inf, 0
    while t < MAX_ITER:
        t += 1
        est.param_beta = est._compute_beta(views, t)
        est.U = est._update_memberships(views)
        est.V = est._update_weights(views)  # with the centres U was computed with
        J = est._compute_objective(views)  # J(U_t, A_{t-1}, V_t)
        est.A = est._update_centers(views)
        if abs(prev - J) < TOL:
            break
        prev = J
    est.param_beta = est._compute_beta(views, t)  # labels from the final state, as fedstrata
    est.U = est._update_memberships(views)
    return est.U.argmax(axis=1), est.A, est.V, t


def best_time(repeats: int, fn):
    best, out = np.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=10, help="initialisations compared")
    ap.add_argument("--repeats", type=int, default=3, help="timing repeats per fit")
    args = ap.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)  # both always run 100 here
    peer = load_peer()
    ds = heat_kernel_synthetic(random_state=args.data_seed)
    views, y = ds.views, ds.labels
    n = views[0].shape[0]
    print(
        f"data: heat_kernel_synthetic(random_state={args.data_seed}), n={n}, views "
        f"{[X.shape[1] for X in views]}, c={C}; alpha={ALPHA}, tol={TOL}, max_iter={MAX_ITER}; "
        f"init: {C} random samples (default_rng(seed)), the same for both"
    )
    print(
        "\nseed | package: fit s  iters  ms/iter  ARI   | fedstrata: fit s  iters  ms/iter  ARI"
        "   | ratio | ARI(pkg, fed)"
    )
    rows = []
    for s in range(args.seeds):
        idx = np.random.default_rng(s).choice(n, size=C, replace=False)
        init = [X[idx] for X in views]
        t_p, pk = best_time(args.repeats, lambda init=init: peer_model(peer, init, 2).fit(views))
        t_f, fe = best_time(
            args.repeats, lambda init=init: MVKMED(C, alpha=ALPHA, init=init, n_init=1).fit(views)
        )
        it_p, it_f = len(pk.objective_values), fe.n_iter_
        ari_p, ari_f = adjusted_rand_score(y, pk.index), adjusted_rand_score(y, fe.labels_)
        ari_pf = adjusted_rand_score(pk.index, fe.labels_)
        nan = " (package centres NaN)" if any(np.isnan(a).any() for a in pk.A) else ""
        rows.append((t_p, it_p, t_f, it_f, ari_p, ari_f))
        print(
            f"{s:4d} | {t_p:13.3f} {it_p:6d} {1e3 * t_p / it_p:8.2f} {ari_p:6.4f} | "
            f"{t_f:15.3f} {it_f:6d} {1e3 * t_f / it_f:8.2f} {ari_f:6.4f} | {t_p / t_f:5.1f} | "
            f"{ari_pf:.4f}{nan}"
        )
    r = np.array(rows)
    ratio = r[:, 0].sum() / r[:, 2].sum()
    d_ari = abs(r[:, 4].mean() - r[:, 5].mean())
    print(
        f"\ntotal fit time: package {r[:, 0].sum():.2f} s, fedstrata {r[:, 2].sum():.2f} s -> "
        f"{ratio:.1f}x (target >= 10x: {'met' if ratio >= 10 else 'MISSED'}); per iteration "
        f"{1e3 * r[:, 0].sum() / r[:, 1].sum():.2f} vs {1e3 * r[:, 2].sum() / r[:, 3].sum():.2f} ms"
    )
    print(
        f"mean ARI: package {r[:, 4].mean():.4f}, fedstrata {r[:, 5].mean():.4f}, difference "
        f"{d_ari:.4f} (target <= 0.02: {'met' if d_ari <= 0.02 else 'MISSED'}); "
        f"largest per-seed difference {np.abs(r[:, 4] - r[:, 5]).max():.4f}"
    )

    print("\n3. the package's own update methods called in fedstrata's order (U -> V -> A):")
    worst_c, worst_lab = 0.0, 0
    for s in range(args.seeds):
        idx = np.random.default_rng(s).choice(n, size=C, replace=False)
        init = [X[idx] for X in views]
        lab_q, A_q, V_q, it_q = peer_in_fedstrata_order(peer, views, init)
        fe = MVKMED(C, alpha=ALPHA, init=init, n_init=1).fit(views)
        dA = max(np.abs(a - b).max() for a, b in zip(A_q, fe.centers_, strict=True))
        worst_c = max(worst_c, dA, np.abs(V_q - fe.view_weights_).max())
        worst_lab = max(worst_lab, int((lab_q != fe.labels_).sum()) + abs(it_q - fe.n_iter_))
    print(
        f"   over {args.seeds} seeds: max |Δcentre|, |Δview weight| = {worst_c:.1e}; "
        f"labels differing + iteration-count differences = {worst_lab}"
    )


if __name__ == "__main__":
    main()
