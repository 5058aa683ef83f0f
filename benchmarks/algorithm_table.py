"""Every non-deep clustering method on synthetic and held-out real multi-view data.

The table of ``docs/algorithms.md`` ("Comparison"): ACC, NMI and ARI (mean over the
seeds), the smallest ARI over the seeds, and the seconds of each method

* centralized: the scikit-learn style estimator's ``fit`` on all the data, default
  settings;
* federated: a simulated run of 10 clients (IID split, a flat federation, rule ``sum``),
  the same nodes ``fedstrata run`` uses; the seconds are the run's wall time (the
  whole simulation, not only the maths); the run stops at a relative objective change
  below 1e-6 or 100 rounds.

k-means (scikit-learn, ``n_init=10``, on the standardized concatenation of the views) is
the centralized baseline, fitted in the same run on the same data and seeds: the last
column is each row's seconds over k-means's.

The data (``fedstrata.scenarios.datasets.DATASETS``): the two-view shape data of the
FedHK-MVFC paper (§6.1, n = 10,000, a new draw per seed); the UCI multiple-features
digits (n = 2,000, six views of 6 to 240 features); and the held-out sets no method was
tuned on: scikit-learn's breast cancer (mean / standard error / worst, 3 x 10
features), digits (pixels 64, ink profiles 16, gradients 64), iris (sepal 2, petal 2),
and nutrimouse (genes 120, lipids 21; labelled by diet, 5 classes, and by genotype, 2).
The real sets are fixed; a seed moves the methods' starts and the clients' split. All
sets keep 10 clients: nutrimouse's 40 mice give each client 4, fewer than its 5 diets,
which the summed statistics of rule ``sum`` allow (the project's choice, stated in the
table's text).

    python benchmarks/algorithm_table.py [--seeds 10-19] [--data iris,digits]
        [--smoke] [--markdown docs/algorithms.md] [--deep {no,also,only}]
        [--deep-max-samples 1000] [--methods TEXT] [--update]

``--deep also`` adds FMCSC's and EFD-MVC's federated rows (the fedstrata default network,
the protocol of ``scenarios/papers/deep-random-views.yaml``, every client holding every
view) on the sets of at most ``--deep-max-samples`` samples (default 1,000); ``--deep
only`` runs k-means and those rows alone. The deep methods have no centralized estimator.

``--seeds`` takes a range ``A-B`` or a list ``A,B,...`` (default 10-19); ``--data`` a
subset of the sets by key (``synthetic``, ``multiple-features``, ``breast-cancer``,
``digits``, ``iris``, ``nutrimouse-diet``, ``nutrimouse-genotype``). ``--smoke`` runs one
seed on the synthetic shapes at n = 800 and on iris, federations of 3 clients and at most
10 rounds, in well under a minute (the test suite runs it). ``--markdown FILE`` writes the table between the markers
``<!-- algorithm-table:begin -->`` and ``<!-- algorithm-table:end -->`` of FILE (a
file without them is refused; a new file gets the table alone). ``--update`` replaces
only the rows this run measured (same data, method and setting) and keeps the rest;
``--methods TEXT`` runs only the non-deep methods whose label contains TEXT (k-means
always runs, for the time ratio).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # timings of one core, as the peers'

import argparse
import sys
import textwrap
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedstrata import algorithms as alg
from fedstrata.analysis.metrics import evaluate
from fedstrata.scenarios.datasets import dataset_size, load_dataset
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate

BEGIN = "<!-- algorithm-table:begin -->"
END = "<!-- algorithm-table:end -->"
KMEANS = "k-means (standardized concat.)"

# (row label, estimator factory (c, seed) or None, scenario algorithm block or None):
# a method without an estimator has a federated row only
METHODS: list[tuple[str, Callable[[int, int], Any] | None, dict[str, Any] | None]] = [
    (KMEANS, lambda c, s: _KMeansConcat(c, s), None),
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
    # m = 1.25 as in hk_real_data.py (the project's choice): MV-FCM's default m = 2 lies
    # above the fuzzifier ceiling of the raw multiple-features and digits views, where
    # its fit refuses it (memberships would be uniform)
    (
        "MV-FCM (m = 1.25)",
        lambda c, s: alg.MVFCM(c, m=1.25, random_state=s),
        {"name": "mvfcm", "m": 1.25},
    ),
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
    (
        'E-FKMVC (preset="real-data")',
        lambda c, s: alg.EFKMVC(c, preset="real-data", random_state=s),
        {"name": "e-fkmvc", "preset": "real-data"},
    ),
    (
        'FedHK-PARAFAC2 (preset="real-data")',
        lambda c, s: alg.FedHKPARAFAC2(c, preset="real-data", random_state=s),
        {"name": "fedhk-parafac2", "preset": "real-data"},
    ),
    (
        'FedHK-Tucker (preset="real-data")',
        lambda c, s: alg.FedHKTucker(c, preset="real-data", random_state=s),
        {"name": "fedhk-tucker", "preset": "real-data"},
    ),
    (
        'FedHK-MVC-Person (preset="real-data")',
        lambda c, s: alg.FedHKMVCPerson(c, preset="real-data", random_state=s),
        {"name": "fedhk-mvc-person", "preset": "real-data"},
    ),
    # summed statistics, the factor update on the server: the federation is one client
    (
        'FedHK-PARAFAC2 (preset="real-data", message: stats)',
        None,
        {"name": "fedhk-parafac2", "preset": "real-data", "message": "stats"},
    ),
    (
        'FedHK-Tucker (preset="real-data", message: stats)',
        None,
        {"name": "fedhk-tucker", "preset": "real-data", "message": "stats"},
    ),
]

# (short key for --data, row label, dataset name, its parameters)
DATA: list[tuple[str, str, str, dict[str, Any]]] = [
    ("synthetic", "FedHK-MVFC synthetic, n = 10,000", "heat-kernel-synthetic", {}),
    ("multiple-features", "UCI multiple-features, n = 2,000", "multiple-features", {}),
    ("breast-cancer", "breast cancer, n = 569", "breast-cancer", {}),
    ("digits", "digits, n = 1,797", "digits", {}),
    ("iris", "iris, n = 150", "iris", {}),
    ("nutrimouse-diet", "nutrimouse (diet), n = 40", "nutrimouse", {"label": "diet"}),
    (
        "nutrimouse-genotype",
        "nutrimouse (genotype), n = 40",
        "nutrimouse",
        {"label": "genotype"},
    ),
]
SMOKE_DATA: list[tuple[str, str, str, dict[str, Any]]] = [
    ("synthetic", "FedHK-MVFC synthetic, n = 800", "heat-kernel-synthetic", {"n_per_cluster": 200}),
    ("iris", "iris, n = 150", "iris", {}),
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


def parse_seeds(text: str) -> list[int]:
    """``"10-19"`` -> 10..19; ``"3,5"`` -> [3, 5]; ``"4"`` -> [4]."""
    try:
        if "-" in text:
            low, high = (int(part) for part in text.split("-", 1))
            seeds = list(range(low, high + 1))
        else:
            seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must be A-B or A,B,..., got {text!r}") from None
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"no non-negative seed in {text!r}")
    return seeds


def centralized(make: Callable[[int, int], Any], name: str, params: dict, seed: int) -> dict:
    """Scores and seconds of one estimator fit."""
    ds = load_dataset(name, random_state=seed, **params)
    est = make(ds.n_clusters, seed)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a restart stopping at max_iter is not the point here
        est.fit(ds.views)
    return {**evaluate(ds.labels, est.labels_), "s": time.perf_counter() - t0}


#: The deep methods' protocol, as in scenarios/papers/deep-random-views.yaml: enough rounds
#: for pre-training, training and the k-means rounds; a run stops when k-means converges.
DEEP_PROTOCOL: dict[str, Any] = {"rule": "sum", "rounds": 40, "deadline_s": 600}
#: (row label, algorithm block) of the deep methods, federated only (``--deep``).
DEEP_METHODS: list[tuple[str, dict[str, Any]]] = [
    ("FMCSC", {"name": "fmcsc"}),
    ("EFD-MVC", {"name": "efd-mvc"}),
]
#: Default largest data set the deep rows run on (``--deep-max-samples``): a deep run on
#: 2,000 samples costs one to two minutes of both cores here, so the larger sets are
#: opted into.
DEEP_MAX_SAMPLES = 1000


def federated(
    block: dict,
    name: str,
    params: dict,
    seed: int,
    clients: int,
    rounds: int = 100,
    protocol: dict[str, Any] | None = None,
) -> dict:
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
        "protocol": protocol
        or {
            "rule": "sum",
            "rounds": rounds,
            "tol": 1e-6,
            "tol_mode": "relative",
            "deadline_s": 60,
        },
    }
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, summary, _ = simulate(parse_scenario(yaml.safe_dump(sc)))
    m = summary["metrics"]
    return {"acc": m["acc"], "nmi": m["nmi"], "ari": m["ari"], "s": time.perf_counter() - t0}


def summarize(rows: list[dict]) -> dict[str, float]:
    """Means over seeds of ACC, NMI, ARI and seconds, and the smallest ARI."""
    out = {k: float(np.mean([r[k] for r in rows])) for k in ("acc", "nmi", "ari", "s")}
    out["ari_min"] = float(min(r["ari"] for r in rows))
    return out


def row(data: str, method: str, setting: str, cell: dict[str, float], kmeans_s: float) -> str:
    """One markdown row; the last cell is the seconds over k-means's (same data, seeds)."""
    ratio = cell["s"] / kmeans_s if kmeans_s > 0 else float("nan")
    values = [cell["acc"], cell["nmi"], cell["ari"], cell["ari_min"]]
    scores = " | ".join(f"{v:.3f}" for v in values)
    times = f"{cell['s']:.2f} | {ratio:.2f}" if ratio < 10 else f"{cell['s']:.2f} | {ratio:.0f}"
    return f"| {data} | {method} | {setting} | {scores} | {times} |"


HEADER = [
    "| data | method | setting | ACC | NMI | ARI | ARI min | s | s / k-means |",
    "|---|---|---|---|---|---|---|---|---|",
]


def warm_up() -> None:
    """One untimed k-means fit: the first pays scikit-learn's imports and thread setup."""
    rng = np.random.default_rng(0)
    _KMeansConcat(2, 0).fit([rng.standard_normal((50, 3)), rng.standard_normal((50, 2))])


def deep_rows(
    label: str,
    name: str,
    params: dict,
    seeds: list[int],
    clients: int,
    kmeans_s: float,
    max_samples: int = DEEP_MAX_SAMPLES,
) -> list[str]:
    """The deep methods' federated rows on one data set (none above ``max_samples``)."""
    size = dataset_size(name, **params)
    if size is None or size > max_samples:
        return []
    lines = []
    for method, block in DEEP_METHODS:
        runs = [federated(block, name, params, s, clients, protocol=DEEP_PROTOCOL) for s in seeds]
        lines.append(row(label, method, f"federated, {clients} clients", summarize(runs), kmeans_s))
        print(lines[-1], flush=True)
    return lines


def table(
    data: list[tuple[str, str, str, dict[str, Any]]],
    seeds: list[int],
    clients: int,
    rounds: int = 100,
    deep: str = "no",
    deep_max_samples: int = DEEP_MAX_SAMPLES,
    only: str | None = None,
) -> list[str]:
    """Every method on every data set; prints each row as it is measured.

    ``deep``: ``"no"``, ``"also"`` (the deep methods' rows after the others) or
    ``"only"`` (k-means and the deep methods), on sets of at most ``deep_max_samples``.
    ``only``: the non-deep methods whose label contains it (k-means always runs: the
    time ratio needs it).
    """
    warm_up()
    lines = list(HEADER)
    methods = METHODS[:1] if deep == "only" else METHODS
    if only is not None:
        methods = [m for m in methods if m[0] == KMEANS or only in m[0]]
    for _, label, name, params in data:
        kmeans_s = 0.0
        for method, make, block in methods:
            if make is not None:
                cell = summarize([centralized(make, name, params, s) for s in seeds])
                if method == KMEANS:
                    kmeans_s = cell["s"]
                lines.append(row(label, method, "centralized", cell, kmeans_s))
                print(lines[-1], flush=True)
            if block is None:
                continue
            cell = summarize([federated(block, name, params, s, clients, rounds) for s in seeds])
            lines.append(row(label, method, f"federated, {clients} clients", cell, kmeans_s))
            print(lines[-1], flush=True)
        if deep != "no":
            lines += deep_rows(label, name, params, seeds, clients, kmeans_s, deep_max_samples)
    return lines


def describe(seeds: list[int], clients: int, rounds: int) -> str:
    """The paragraph above the table: how it was made."""
    if len(seeds) == 1:
        shown = str(seeds[0])
    elif seeds == list(range(seeds[0], seeds[-1] + 1)):
        shown = f"{seeds[0]}-{seeds[-1]}"
    else:
        shown = ", ".join(map(str, seeds))
    return textwrap.fill(
        f"Generated by `python benchmarks/algorithm_table.py` (seeds {shown}; ACC, NMI and "
        "ARI are means over the seeds, ARI min the worst seed; one core per process, so the "
        "seconds are indicative, and `s / k-means` compares them with k-means's in the same "
        f"run). Federated: {clients} clients, IID, rule `sum`, at most {rounds} rounds "
        "(nutrimouse's 40 mice give each of 10 clients 4, fewer than its 5 diets: the "
        "project's choice, as the summed statistics allow it).",
        width=88,
    )


def _key(line: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in line.strip().strip("|").split("|")[:3])


def update_rows(old: list[str], new: list[str]) -> list[str]:
    """``old``'s table rows with those of ``new`` that share (data, method, setting) replaced.

    A new row with no counterpart goes after the last old row of its data set (or at
    the end); the header and every other old row stay as they were.
    """
    fresh = {_key(line): line for line in new if line.startswith("| ") and "---" not in line}
    fresh.pop(_key(HEADER[0]), None)
    out = [fresh.pop(_key(line), line) if line.startswith("| ") else line for line in old]
    for key, line in fresh.items():
        last = max((i for i, row in enumerate(out) if _key(row)[:1] == key[:1]), default=None)
        out.insert(len(out) if last is None else last + 1, line)
    return out


def _marked(path: Path) -> tuple[str, int, int]:
    """``path``'s text and where its table goes: from after BEGIN up to END."""
    text = path.read_text(encoding="utf-8")
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        sys.exit(f"{path} has no {BEGIN} ... {END} markers: add them where the table goes")
    return text, start + len(BEGIN), end


def _put(path: Path, text: str, start: int, end: int, block: str) -> None:
    path.write_text(text[:start] + "\n" + block + "\n" + text[end:], encoding="utf-8")


def update_markdown(path: Path, lines: list[str]) -> None:
    """Replace, in the table between ``path``'s markers, the rows this run measured."""
    text, start, end = _marked(path)
    block = text[start:end].strip("\n").split("\n")
    _put(path, text, start, end, "\n".join(update_rows(block, lines)))


def write_markdown(path: Path, block: str) -> None:
    """Put ``block`` between the markers of ``path`` (or write it alone to a new file)."""
    if not path.exists():
        path.write_text(block + "\n", encoding="utf-8")
        return
    _put(path, *_marked(path), block)


def main() -> None:
    """Run every method on every data set and print (or write) the markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=parse_seeds, default=list(range(10, 20)), help="A-B or A,B")
    ap.add_argument("--clients", type=int, default=10, help="clients of the federated runs")
    keys = [key for key, *_ in DATA]
    ap.add_argument("--data", help=f"comma-separated subset of {','.join(keys)}")
    ap.add_argument("--rounds", type=int, default=100, help="most rounds of a federated run")
    ap.add_argument("--smoke", action="store_true", help="one seed, small data, 3 clients")
    ap.add_argument("--markdown", type=Path, help="write the table between FILE's markers")
    ap.add_argument(
        "--update",
        action="store_true",
        help="with --markdown: replace only the rows this run measured in FILE's table",
    )
    ap.add_argument(
        "--methods",
        help="only the non-deep methods whose label contains this text (k-means always runs)",
    )
    ap.add_argument(
        "--deep",
        choices=("no", "also", "only"),
        default="no",
        help="FMCSC and EFD-MVC federated rows on sets of <= --deep-max-samples samples "
        "(needs the [deep] extra); 'only': k-means and those rows alone",
    )
    ap.add_argument(
        "--deep-max-samples",
        type=int,
        default=DEEP_MAX_SAMPLES,
        help=f"largest set the deep rows run on (default {DEEP_MAX_SAMPLES}; a deep run on "
        "2,000 samples costs one to two minutes)",
    )
    args = ap.parse_args()
    seeds = args.seeds[:1] if args.smoke else args.seeds
    data = SMOKE_DATA if args.smoke else DATA
    if args.smoke:  # the factor methods' federations cost a decomposition per client-round
        args.clients, args.rounds = 3, 10
    if args.data:
        wanted = args.data.split(",")
        unknown = sorted(set(wanted) - {key for key, *_ in data})
        if unknown:
            ap.error(f"unknown --data {unknown}; choose from {[key for key, *_ in data]}")
        data = [d for d in data if d[0] in wanted]
    if args.update and not args.markdown:
        ap.error("--update needs --markdown FILE")
    lines = table(
        data, seeds, args.clients, args.rounds, args.deep, args.deep_max_samples, args.methods
    )
    block = describe(seeds, args.clients, args.rounds) + "\n\n" + "\n".join(lines)
    print()
    print(block)
    if args.update:
        update_markdown(args.markdown, lines)
    elif args.markdown:
        write_markdown(args.markdown, block)


if __name__ == "__main__":
    main()
