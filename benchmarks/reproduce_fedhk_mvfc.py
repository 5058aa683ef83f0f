"""Reproduce Tables 2, 8 and 9 of the FedHK-MVFC paper, our figures next to the paper's.

Paper: K. P. Sinaga, "FedHK-MVFC: Federated Heat Kernel Multi-View Clustering", 2025.
Data: the paper's §6.1 two-view four-shape synthetic set
(:func:`fedstrata.scenarios.datasets.heat_kernel_synthetic`, 2,500 samples per cluster,
n = 10,000), drawn afresh for every seed.

* **Table 2** (AR, NMI, seconds). Centralized: ``HKMVFC(4, preset="paper")`` (m = 2,
  alpha = 5, Type 1 as printed for the paper's federated analysis, Eq. 16 centres; the
  10 k-means restarts keeping the best are the project's choice, the paper averages ten
  runs), ``MVFCM(4, m=2, alpha=5)``
  (multi-view FCM, squared Euclidean distances), :func:`minmax_fcm` (our implementation of
  Wang & Chen 2017, "Multi-view fuzzy clustering with minimax optimization", the paper's
  MinMax-FCM) and, as a second stand-in, FCM on the min-max scaled concatenated views
  (``MVFCM`` on that single view). Federated: ``scenarios/papers/fedhk-mvfc.yaml`` and
  ``scenarios/papers/fed-mvfcm.yaml`` simulated in this process
  (:func:`fedstrata.scenarios.run.simulate`, ``seed`` = the seed). Co-FKM, WV-Co-FCM and
  Co-FW-MVFCM are not implemented.
* **Table 8**: ``HKMVFC(4, preset="paper", kernel=...)`` with ``none`` (δ ≡ 1), ``type1``
  and ``type2``, centralized.
* **Table 9**: from the federated runs' summaries. "Bytes per round" is
  ``bytes_total / rounds``: every MQTT packet on the wire (the setup round 0 and the final
  model broadcast included) divided by the iteration rounds (the setup round not counted
  as a round). The steady-state bytes of one iteration round (setup and final broadcast
  excluded) are shown too.
* **View weights**: the final view weights of centralized HK-MVFC and of both federated
  runs' global models.

Every figure is the mean over the seeds (``--seeds``, default 3: seeds 0, 1, ...); the
paper averages ten runs. Seconds are wall time on this machine (Python, numpy) around the
whole fit or simulation: not comparable with the paper's MATLAB timings.

Run: ``python benchmarks/reproduce_fedhk_mvfc.py [--seeds N] [--smoke] [--markdown FILE]``
(the full size takes well under a minute). ``--smoke``: 100 samples per cluster, one seed,
a few seconds. ``--markdown FILE`` writes the tables to FILE, keeping whatever follows the
line ``<!-- end of generated tables -->`` in an existing FILE (the hand-written notes).
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from sklearn.cluster import kmeans_plusplus

from fedstrata.algorithms import HKMVFC, MVFCM
from fedstrata.analysis.metrics import evaluate
from fedstrata.errors import ConvergenceWarning
from fedstrata.scenarios.datasets import heat_kernel_synthetic
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = {
    "FedHK-MVFC": ROOT / "scenarios" / "papers" / "fedhk-mvfc.yaml",
    "Fed-MVFCM": ROOT / "scenarios" / "papers" / "fed-mvfcm.yaml",
}
MARKER = "<!-- end of generated tables -->"
C = 4

# The paper's figures: (AR, NMI, seconds).
PAPER_T2: dict[str, tuple[float | None, float | None, float | None]] = {
    "HK-MVFC": (1.0, 1.0, 15.7),
    "MV-FCM (Euclidean)": (None, None, None),
    "MinMax-FCM (ours, Wang & Chen 2017)": (0.9776, 0.9881, 36.03),
    "FCM on min-max scaled concatenation (stand-in)": (0.9776, 0.9881, 36.03),
    "FedHK-MVFC": (1.0, 1.0, 28.4),
    "Fed-MVFCM": (0.9926, 0.9723, 136.828),
}
UNIMPLEMENTED: dict[str, tuple[float, float, float]] = {
    "Co-FKM": (0.4391, 0.3979, 12.3),
    "WV-Co-FCM": (0.25, 0.0, 256.2),
    "Co-FW-MVFCM": (0.7835, 0.8270, 122.5),
}
PAPER_T8: dict[str, tuple[float, float, float]] = {
    "none": (0.743, 0.682, 12.3),
    "type1": (1.0, 1.0, 15.7),
    "type2": (1.0, 1.0, 18.2),
}
T8_NAMES = {
    "none": "Euclidean distance (baseline; here δ ≡ 1)",
    "type1": "Min-max normalization (Type 1)",
    "type2": "Mean-variance (Type 2)",
}
PAPER_T9: dict[str, dict[str, float]] = {
    "Fed-MVFCM": {"per_round": 15432, "total": 771600, "rounds": 32},
    "FedHK-MVFC": {"per_round": 4629, "total": 231450, "rounds": 23},
}


# --------------------------------------------------------------------------------------------
# Baselines
# --------------------------------------------------------------------------------------------


def minmax_fcm(
    views: Sequence[np.ndarray],
    n_clusters: int,
    *,
    m: float = 2.0,
    gamma: float = 0.5,
    max_iter: int = 300,
    tol: float = 1e-6,
    random_state: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """MinMax-FCM (Wang & Chen 2017): minimise over U, A the maximum over view weights r.

    Objective: ``min_{U,A} max_{r in simplex} sum_h r_h^gamma J_h`` with
    ``J_h = sum_i sum_k u_ik^m ||x_i^h - a_k^h||^2`` and ``gamma in (0, 1)``. Updates:
    ``r_h ∝ J_h^{1/(1-gamma)}`` (the worse view weighs more), ``u_ik ∝ D_ik^{-1/(m-1)}``
    with ``D_ik = sum_h r_h^gamma ||x_i^h - a_k^h||^2``, and per-view centres the
    ``u^m``-weighted means. One start, k-means++ on the concatenated views; stops when the
    objective changes by less than ``tol`` (relative).

    Returns
    -------
    labels, view_weights
        The hard labels (argmax of U) and the final r.
    """
    X = np.hstack(views)
    rng = np.random.default_rng(random_state)
    centres, _ = kmeans_plusplus(X, n_clusters, random_state=int(rng.integers(2**31 - 1)))
    bounds = np.cumsum([0] + [v.shape[1] for v in views])
    A = [centres[:, bounds[h] : bounds[h + 1]] for h in range(len(views))]
    r = np.full(len(views), 1.0 / len(views))
    prev = np.inf
    U = np.full((X.shape[0], n_clusters), 1.0 / n_clusters)
    for _ in range(max_iter):
        d = np.stack(
            [((x[:, None, :] - a[None]) ** 2).sum(-1) for x, a in zip(views, A, strict=True)]
        )
        D = np.maximum(np.tensordot(r**gamma, d, axes=1), 1e-300)
        W = D ** (-1.0 / (m - 1.0))
        U = W / W.sum(1, keepdims=True)
        Um = U**m
        A = [(Um.T @ x) / Um.sum(0)[:, None] for x in views]
        d = np.stack(
            [((x[:, None, :] - a[None]) ** 2).sum(-1) for x, a in zip(views, A, strict=True)]
        )
        J = (Um[None] * d).sum((1, 2))
        r = J ** (1.0 / (1.0 - gamma))
        r = r / r.sum()
        obj = float((r**gamma * J).sum())
        if abs(prev - obj) <= tol * abs(obj):
            break
        prev = obj
    return U.argmax(1), r


def minmax_scaled_concat(views: Sequence[np.ndarray]) -> np.ndarray:
    """The views side by side, each feature scaled to [0, 1] (min-max)."""
    X = np.hstack(views)
    lo, hi = X.min(0), X.max(0)
    return (X - lo) / np.where(hi > lo, hi - lo, 1.0)


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------


def timed(fit: Callable[[], Any]) -> tuple[Any, float]:
    """Call ``fit`` and return its result and the wall seconds it took."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        out = fit()
    return out, time.perf_counter() - t0


def centralized(seed: int, n_per_cluster: int) -> dict[str, dict[str, Any]]:
    """Fit every centralized method on one draw of the data; metrics, seconds, weights."""
    ds = heat_kernel_synthetic(n_per_cluster, random_state=seed)
    views, y = ds.views, ds.labels
    out: dict[str, dict[str, Any]] = {}
    for kernel in ("none", "type1", "type2"):
        est, s = timed(
            lambda k=kernel: HKMVFC(C, preset="paper", kernel=k, random_state=seed).fit(views)
        )
        out[f"hk-{kernel}"] = {
            **evaluate(y, est.labels_),
            "s": s,
            "weights": np.asarray(est.view_weights_, float),
        }
    est, s = timed(lambda: MVFCM(C, m=2.0, alpha=5.0, random_state=seed).fit(views))
    out["MV-FCM (Euclidean)"] = {**evaluate(y, est.labels_), "s": s, "weights": est.view_weights_}
    (labels, r), s = timed(lambda: minmax_fcm(views, C, random_state=seed))
    out["MinMax-FCM (ours, Wang & Chen 2017)"] = {**evaluate(y, labels), "s": s, "weights": r}
    est, s = timed(
        lambda: MVFCM(C, m=2.0, alpha=5.0, random_state=seed).fit([minmax_scaled_concat(views)])
    )
    out["FCM on min-max scaled concatenation (stand-in)"] = {**evaluate(y, est.labels_), "s": s}
    return out


def federated(name: str, seed: int, n_per_cluster: int) -> dict[str, Any]:
    """Simulate one of the paper scenarios with ``seed``; its metrics, traffic and weights."""
    path = SCENARIOS[name]
    doc = yaml.safe_load(path.read_text())
    doc = copy.deepcopy(doc)
    doc.setdefault("data", {}).setdefault("params", {})["n_per_cluster"] = n_per_cluster
    doc.setdefault("output", {})["plots"] = False
    sc = parse_scenario(yaml.safe_dump(doc), file=str(path), base_dir=path.parent)
    (fed, summary, rows), s = timed(lambda: simulate(sc, seed=seed))
    iter_bytes = [
        r["bytes_round"] for r in rows if r.get("phase") == "iter" and r.get("tier") == "cloud"
    ]
    state = fed.final_state
    return {
        **summary["metrics"],
        "s": s,
        "status": summary["status"],
        "rounds": summary["rounds"],
        "bytes_total": summary["bytes_total"],
        "bytes_per_round": summary["bytes_per_round"],
        "iter_bytes": float(np.mean(iter_bytes)) if iter_bytes else float("nan"),
        "setup_bytes": sum(
            r["bytes_round"] for r in rows if r.get("phase") == "setup" and r.get("tier") == "cloud"
        ),
        "weights": None if state is None else np.asarray(state.view_weights, float),
    }


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def fmt(x: float | None, digits: int = 4) -> str:
    """A number for a table cell; ``—`` for None or NaN."""
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "—"
    return f"{x:.{digits}f}"


def mean(runs: list[dict[str, Any]], key: str) -> float:
    """Mean of ``key`` over runs (NaN when a run has no value)."""
    vals = [np.nan if r.get(key) is None else float(r[key]) for r in runs]
    return float(np.mean(vals))


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def quality_row(name: str, paper: Sequence[float | None], runs: list[dict[str, Any]]) -> list[str]:
    """One row of Table 2 or 8: paper and fedstrata side by side."""
    ar, nmi, s = paper
    return [
        name,
        fmt(ar),
        fmt(mean(runs, "ari")),
        fmt(min(float(r["ari"]) for r in runs)),
        fmt(nmi),
        fmt(mean(runs, "nmi")),
        fmt(s, 2) if s is not None else "—",
        fmt(mean(runs, "s"), 2),
    ]


QUALITY_HEADER = [
    "algorithm",
    "AR paper",
    "AR fedstrata",
    "AR fedstrata (min)",
    "NMI paper",
    "NMI fedstrata",
    "s paper",
    "s fedstrata",
]


def build_report(seeds: list[int], n_per_cluster: int) -> str:
    """Run everything and return the markdown report (the generated part)."""
    cent = [centralized(s, n_per_cluster) for s in seeds]
    fed = {name: [federated(name, s, n_per_cluster) for s in seeds] for name in SCENARIOS}
    n = 4 * n_per_cluster
    out = [
        "# Reproductions",
        "",
        '## "FedHK-MVFC: Federated Heat Kernel Multi-View Clustering" (K. P. Sinaga, 2025)',
        "",
        f"Generated by `python benchmarks/reproduce_fedhk_mvfc.py --seeds {len(seeds)}"
        f"{' --smoke' if n_per_cluster != 2500 else ''} --markdown ...`: the paper's §6.1 "
        f"synthetic data, n = {n:,}, seeds {', '.join(map(str, seeds))} (data, initialisation "
        "and the federated runs all follow the seed); each fedstrata figure is the mean over "
        "the seeds, `AR fedstrata (min)` the worst seed. Seconds are wall time on this "
        "machine (Python/numpy), not comparable with the paper's MATLAB runtimes.",
        "",
        "### Table 2: performance on the synthetic multi-view data",
        "",
    ]
    rows = [quality_row("HK-MVFC", PAPER_T2["HK-MVFC"], [c["hk-type1"] for c in cent])]
    for name in (
        "MV-FCM (Euclidean)",
        "MinMax-FCM (ours, Wang & Chen 2017)",
        "FCM on min-max scaled concatenation (stand-in)",
    ):
        rows.append(quality_row(name, PAPER_T2[name], [c[name] for c in cent]))
    for name, (ar, nmi, sec) in UNIMPLEMENTED.items():
        rows.append([name, fmt(ar), "not implemented", "—", fmt(nmi), "—", fmt(sec, 2), "—"])
    for name in ("FedHK-MVFC", "Fed-MVFCM"):
        row = quality_row(name + " (federated)", PAPER_T2[name], fed[name])
        rows.append(row)
    out.append(table(QUALITY_HEADER, rows))
    out += [
        "",
        "The paper has no MV-FCM row; both MinMax-FCM rows are compared with the paper's "
        "MinMax-FCM figures.",
        "",
        "Federated runs, seed by seed (status, iteration rounds, ARI):",
        "",
        table(
            ["seed", *SCENARIOS],
            [
                [str(s)]
                + [
                    f"{fed[n][i]['status']}, {fed[n][i]['rounds']}, {fed[n][i]['ari']:.4f}"
                    for n in SCENARIOS
                ]
                for i, s in enumerate(seeds)
            ],
        ),
        "",
        "### Table 8: heat-kernel coefficient estimators (HK-MVFC, centralized)",
        "",
    ]
    rows = [
        quality_row(T8_NAMES[k], PAPER_T8[k], [c[f"hk-{k}"] for c in cent])
        for k in ("none", "type1", "type2")
    ]
    header = ["estimator", *QUALITY_HEADER[1:]]
    out += [table(header, rows), "", "### Table 9: communication efficiency", ""]
    p9, f9 = PAPER_T9, fed
    rows = []
    for label, key, pkey in (
        ("Bytes per round (bytes_total / rounds)", "bytes_per_round", "per_round"),
        ("Total communication (bytes)", "bytes_total", "total"),
        ("Convergence rounds (mean over seeds)", "rounds", "rounds"),
    ):
        digits = 1 if key == "rounds" else 0
        rows.append(
            [
                label,
                f"{p9['Fed-MVFCM'][pkey]:,}",
                f"{mean(f9['Fed-MVFCM'], key):,.{digits}f}",
                f"{p9['FedHK-MVFC'][pkey]:,}",
                f"{mean(f9['FedHK-MVFC'], key):,.{digits}f}",
            ]
        )
    rows.append(
        [
            "Convergence rounds (median over seeds)",
            f"{p9['Fed-MVFCM']['rounds']}",
            f"{np.median([r['rounds'] for r in f9['Fed-MVFCM']]):.1f}",
            f"{p9['FedHK-MVFC']['rounds']}",
            f"{np.median([r['rounds'] for r in f9['FedHK-MVFC']]):.1f}",
        ]
    )
    rows.append(
        [
            "Bytes of one iteration round (no setup, no final broadcast)",
            "—",
            f"{mean(f9['Fed-MVFCM'], 'iter_bytes'):,.0f}",
            "—",
            f"{mean(f9['FedHK-MVFC'], 'iter_bytes'):,.0f}",
        ]
    )
    rows.append(
        [
            "Bytes of the setup round",
            "—",
            f"{mean(f9['Fed-MVFCM'], 'setup_bytes'):,.0f}",
            "—",
            f"{mean(f9['FedHK-MVFC'], 'setup_bytes'):,.0f}",
        ]
    )
    header = [
        "metric",
        "Fed-MVFCM paper",
        "Fed-MVFCM fedstrata",
        "FedHK-MVFC paper",
        "FedHK-MVFC fedstrata",
    ]
    out += [
        table(header, rows),
        "",
        "Bytes are exact MQTT packet sizes on every wire hop (msgpack float64 payloads, "
        "MQTT framing, QoS 1 acknowledgements), up and down, both clients. `rounds` counts "
        "the iteration rounds; the setup round 0 (kernel references and initial-centre "
        "candidates) is not counted as a round but its bytes, and those of the final model "
        "broadcast, are in `bytes_total` and therefore in bytes per round.",
        "",
        "### Final view weights",
        "",
    ]
    rows = [
        [
            "HK-MVFC (centralized, Type 1)",
            "[0.635, 0.365]",
            str(np.round(np.mean([c["hk-type1"]["weights"] for c in cent], 0), 3).tolist()),
        ]
    ]
    for name in SCENARIOS:
        ws = [r["weights"] for r in fed[name] if r["weights"] is not None]
        rows.append(
            [
                f"{name} (federated, global model)",
                "view 1 > view 2 (Fig. 11, no figures)" if name == "FedHK-MVFC" else "—",
                str(np.round(np.mean(ws, 0), 3).tolist()) if ws else "—",
            ]
        )
    out += [table(["model", "paper", "fedstrata"], rows), ""]
    return "\n".join(out)


def write_markdown(path: Path, generated: str) -> None:
    """Write ``generated`` to ``path``, keeping the hand-written part after the marker."""
    tail = ""
    if path.exists():
        text = path.read_text()
        if MARKER in text:
            tail = text.split(MARKER, 1)[1]
    path.write_text(generated.rstrip() + "\n\n" + MARKER + (tail if tail else "\n"))


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line, run the tables, print them (and write them with --markdown)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="number of seeds (0, 1, ...)")
    ap.add_argument("--smoke", action="store_true", help="100 samples per cluster, one seed")
    ap.add_argument("--markdown", type=Path, default=None, help="write the tables to FILE")
    args = ap.parse_args(argv)
    seeds = [0] if args.smoke else list(range(args.seeds))
    n_per_cluster = 100 if args.smoke else 2500
    t0 = time.perf_counter()
    report = build_report(seeds, n_per_cluster)
    print(report)
    print(f"(total {time.perf_counter() - t0:.1f} s)")
    if args.markdown is not None:
        write_markdown(args.markdown, report)


if __name__ == "__main__":
    main()
