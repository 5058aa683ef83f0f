"""Sample-level DP: ARI against ε for fedstrata's HK-MVFC and diffprivlib's k-means.

Issue 31, item 4. For every setting and every ε ∈ {∞, 1, 3, 10} (∞: no DP, the
reference row) the script runs fedstrata over ``--seeds`` seeds (0, 1, …) in this
process (:func:`fedstrata.scenarios.run.run_scenario`, the code ``fedstrata run``
runs) and, beside it, diffprivlib's ``KMeans`` centrally on the concatenated views
with the same bounds, ε, seeds and number of clusters. It prints one markdown table,
then a PASS/FAIL line per target. It asserts nothing: a missed target is printed.

Settings (HK-MVFC with its default settings, ``algorithm: {name: hk-mvfc,
n_clusters: c}``; ``protocol: {rule: sum, rounds: 3}``; δ = 1e-5; ``unit: sample``):

* ``synthetic, 10 IID clients`` and ``... + secagg``: the FedHK-MVFC §6.1 two-view
  four-shape data (``heat-kernel-synthetic``, 2,500 samples per cluster as in the
  paper), split IID over 10 clients, without and with ``secure_aggregation: secagg``
  (with it, the noise is added once in total, as shares).
* ``synthetic, 2 clients (paper split)`` and ``... + secagg``: the same data over the
  paper's two clients (``partition: {kind: paper}``, the 85/15 split of
  ``scenarios/papers/fedhk-mvfc.yaml``). fedstrata refuses a secure sum of two
  clients (each would learn the other's input); that row then shows the reason.
* ``multiple-features, 10 IID clients + secagg``: the UCI digits (2,000 samples,
  6 views, 649 features, 10 classes).

Public bounds: each feature's minimum and maximum over the whole data set, the usual
convention of DP k-means benchmarks. Strictly, bounds read off the data are not
private themselves; a deployment declares them from the data's domain. They are
written into each scenario (``privacy.dp.bounds``, one ``{lo, hi}`` per view) and
passed to diffprivlib as ``bounds=(lo, hi)`` over the concatenated features. The
synthetic data depends on the seed, so its bounds are taken per seed.

Columns: ARI mean and min over the seeds; ``ε spent``: the largest total over the
seeds of ``privacy.epsilon_spent`` in fedstrata's ``summary.json`` (RDP
accountant over the two setup releases and the rounds), and the ε of each phase alone,
``privacy.phases`` (setup + rounds; composed, the two spend less than their sum). diffprivlib's k-means is pure ε-DP (δ = 0);
its ∞ row is scikit-learn's (non-private) ``KMeans``, which diffprivlib wraps.

diffprivlib is a benchmark-only peer (``pip install diffprivlib==0.6.6``), never a
dependency. Version 0.6.6 imports ``sklearn.tree._tree.DOUBLE`` in its random forest
module at package import, and scikit-learn 1.9 removed that name; the script then
loads the package's unchanged ``models/k_means.py`` without the package's
``__init__`` (which imports every model), and says so.

    python benchmarks/dp_sample.py                  # 10 seeds, every row (a few minutes)
    python benchmarks/dp_sample.py --seeds 3
    python benchmarks/dp_sample.py --smoke          # 2 seeds, synthetic 10 clients, ε = 1

``--smoke`` uses 1,000 samples per cluster (at 500, ε = 1 gives ARI 0.89: 200 samples a
client carry the same noise) and finishes in a few seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import math
import shlex
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "fedstrata" / "__init__.py").is_file() and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # measure this checkout, installed or not

from fedstrata.errors import FedstrataError, ScenarioError  # noqa: E402
from fedstrata.scenarios.datasets import MultiViewDataset, load_dataset  # noqa: E402
from fedstrata.scenarios.loader import parse_scenario  # noqa: E402
from fedstrata.scenarios.preflight import preflight  # noqa: E402
from fedstrata.scenarios.run import run_scenario  # noqa: E402
from fedstrata.scenarios.schema import ScenarioErrors  # noqa: E402

EPSILONS: tuple[float | None, ...] = (None, 1.0, 3.0, 10.0)
DELTA = 1e-5
ROUNDS = 3
N_PER_CLUSTER = 2500  # the paper's n = 10,000
SMOKE_N_PER_CLUSTER = 1000
SMOKE_SEEDS = 2
DEFAULT_SEEDS = 10
DIFFPRIVLIB = "diffprivlib==0.6.6"


@dataclass(frozen=True)
class Setting:
    """One row group of the table: a data set, a federation and secure aggregation."""

    key: str
    label: str
    dataset: str
    clients: int
    partition: str
    secure: bool
    #: ``privacy.dp.radius``: 0.25 for multiple-features, whose samples sit far inside
    #: their bounds (box-unit norms 0.3-0.8 of √d): clipping them all onto the sphere
    #: cuts the noise and normalizes them (chosen on seeds 0-2 among 1, 0.5, 0.25, 0.1)
    radius: float = 1.0

    @property
    def synthetic(self) -> bool:
        return self.dataset == "heat-kernel-synthetic"


SETTINGS = (
    Setting("syn-10", "synthetic, 10 IID clients", "heat-kernel-synthetic", 10, "iid", False),
    Setting(
        "syn-10-sa", "synthetic, 10 IID clients + secagg", "heat-kernel-synthetic", 10, "iid", True
    ),
    Setting(
        "syn-2", "synthetic, 2 clients (paper split)", "heat-kernel-synthetic", 2, "paper", False
    ),
    # no "2 clients + secagg": a secure sum of two gives each its partner's input, and
    # fedstrata refuses it (fewer than 3 members)
    Setting(
        "mf-10-sa",
        "multiple-features, 10 IID clients + secagg (radius 0.25)",
        "multiple-features",
        10,
        "iid",
        True,
        radius=0.25,
    ),
)


@dataclass(frozen=True)
class Target:
    """A printed check: the mean fedstrata ARI of a setting at an ε is at least ``ari``."""

    setting: str
    epsilon: float
    ari: float


TARGETS = (
    Target("syn-10", 1.0, 0.99),
    Target("syn-10-sa", 1.0, 0.99),
    Target("syn-2", 1.0, 0.99),
    Target("mf-10-sa", 3.0, 0.20),
    Target("mf-10-sa", 10.0, 0.30),
)


# ------------------------------------------------------------------------------ data


def dataset_params(setting: Setting, n_per_cluster: int) -> dict[str, Any]:
    """The loader parameters of a setting (``data.params`` of its scenario)."""
    return {"n_per_cluster": n_per_cluster} if setting.synthetic else {}


def load_data(setting: Setting, seed: int, n_per_cluster: int) -> MultiViewDataset:
    """The data set a run of ``setting`` with ``seed`` clusters, as the run loads it."""
    return load_dataset(
        setting.dataset, random_state=seed, **dataset_params(setting, n_per_cluster)
    )


def public_bounds(ds: MultiViewDataset) -> list[dict[str, list[float]]]:
    """Per view, each feature's min and max over the whole data set."""
    return [
        {"lo": [float(v) for v in X.min(axis=0)], "hi": [float(v) for v in X.max(axis=0)]}
        for X in ds.views
    ]


# ------------------------------------------------------------------------------ fedstrata


def scenario_data(
    setting: Setting,
    seed: int,
    n_per_cluster: int,
    rounds: int,
    epsilon: float | None,
    bounds: list[dict[str, list[float]]],
) -> dict[str, Any]:
    """The scenario document of one fedstrata run."""
    privacy: dict[str, Any] = {}
    if setting.secure:
        privacy["secure_aggregation"] = "secagg"
    if epsilon is not None:
        privacy["dp"] = {
            "epsilon": epsilon,
            "delta": DELTA,
            "unit": "sample",
            "bounds": bounds,
            "radius": setting.radius,
        }
    data: dict[str, Any] = {"dataset": setting.dataset, "partition": {"kind": setting.partition}}
    params = dataset_params(setting, n_per_cluster)
    if params:
        data["params"] = params
    doc: dict[str, Any] = {
        "name": f"dp-sample-{setting.key}",
        "seed": seed,
        "data": data,
        "topology": {"clients": {"count": setting.clients}},
        "algorithm": {"name": "hk-mvfc", "n_clusters": n_clusters_of(setting)},
        "protocol": {"rule": "sum", "rounds": rounds},
        "output": {"plots": False},
    }
    if privacy:
        doc["privacy"] = privacy
    return doc


def n_clusters_of(setting: Setting) -> int:
    return 4 if setting.synthetic else 10


def run_fedstrata(doc: dict[str, Any], out: Path) -> dict[str, Any]:
    """Validate, pre-flight and simulate one scenario; its ``summary.json`` as a dict.

    Raises ScenarioError (the schema's or the pre-flight's reasons) before running.
    """
    sc = parse_scenario(yaml.safe_dump(doc, sort_keys=False))
    preflight(sc, seed=doc["seed"])
    return run_scenario(sc, out, seed=doc["seed"], progress=False, plots=False, overwrite=True)


# ------------------------------------------------------------------------------ diffprivlib


def _load_kmeans() -> type:
    """diffprivlib's ``KMeans`` class (see the module docstring for the fallback)."""
    try:
        from diffprivlib.models import KMeans
    except ImportError as exc:
        if "sklearn" not in str(exc):
            raise
    else:
        return KMeans
    # 0.6.6 against scikit-learn >= 1.9: the package __init__ fails in its forest
    # module, unrelated to k-means; load k_means.py itself under empty parent packages.
    spec = importlib.util.find_spec("diffprivlib")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("No module named 'diffprivlib'")
    root = Path(next(iter(spec.submodule_search_locations)))
    for name, path in (("diffprivlib", root), ("diffprivlib.models", root / "models")):
        module = types.ModuleType(name)
        module.__path__ = [str(path)]
        sys.modules[name] = module
    print(
        "note: diffprivlib's package import fails with this scikit-learn (its random "
        "forest module); its k-means module was loaded on its own, unchanged",
        file=sys.stderr,
    )
    return importlib.import_module("diffprivlib.models.k_means").KMeans


def load_kmeans() -> tuple[type | None, str]:
    """``(KMeans, "")``, or ``(None, why)`` when diffprivlib cannot be imported."""
    try:
        return _load_kmeans(), ""
    except ImportError as exc:
        return None, f"{exc}"


def central_ari(
    kmeans: type | None, ds: MultiViewDataset, epsilon: float | None, seed: int
) -> float:
    """ARI of k-means on the concatenated views: diffprivlib's at ε, scikit-learn's at ∞."""
    from sklearn.cluster import KMeans as SkKMeans
    from sklearn.metrics import adjusted_rand_score

    X = np.concatenate(ds.views, axis=1)
    c = int(ds.n_clusters)
    if epsilon is None:
        model = SkKMeans(n_clusters=c, n_init=10, random_state=seed)
    else:
        from diffprivlib.accountant import BudgetAccountant

        model = kmeans(  # type: ignore[misc]
            n_clusters=c,
            epsilon=epsilon,
            bounds=(X.min(axis=0), X.max(axis=0)),
            random_state=seed,
            accountant=BudgetAccountant(),  # a fresh one: no budget shared across runs
        )
    return float(adjusted_rand_score(ds.labels, model.fit_predict(X)))


# ------------------------------------------------------------------------------ results


@dataclass
class Cell:
    """One setting at one ε, over the seeds."""

    setting: Setting
    epsilon: float | None
    fed_ari: list[float] = field(default_factory=list)
    spent: list[float] = field(default_factory=list)
    setup: list[float] = field(default_factory=list)
    rounds: list[float] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    central: list[float] = field(default_factory=list)
    refused: str = ""
    #: why runs ended without labels (the summaries' ``reason``)
    reasons: set[str] = field(default_factory=set)

    def add_summary(self, summary: dict[str, Any]) -> None:
        ari = (summary.get("metrics") or {}).get("ari")
        self.fed_ari.append(float("nan") if ari is None else float(ari))
        self.statuses.append(str(summary.get("status")))
        if ari is None and summary.get("reason"):
            self.reasons.add(str(summary["reason"]))
        privacy = summary.get("privacy") or {}
        dp = privacy.get("dp") or privacy  # the DP keys sit in the privacy block itself
        if "epsilon_spent" in dp:
            self.spent.append(float(dp["epsilon_spent"]))
        phases = dp.get("phases") or {}
        if "setup" in phases and "rounds" in phases:
            self.setup.append(_phase_epsilon(phases["setup"]))
            self.rounds.append(_phase_epsilon(phases["rounds"]))


def _phase_epsilon(phase: float | dict[str, Any]) -> float:
    """A phase's ε: ``{"releases": 2, "epsilon": 0.6}`` in the record, or a number."""
    return float(phase["epsilon"] if isinstance(phase, dict) else phase)


def _mean_min(values: list[float]) -> tuple[str, str]:
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return "n/a", "n/a"
    missing = len(values) - len(vals)
    mean = f"{np.mean(vals):.4f}" + (f" ({missing} without labels)" if missing else "")
    return mean, f"{min(vals):.4f}"


def _spent(cell: Cell) -> tuple[str, str]:
    if cell.epsilon is None:
        return "–", "–"
    if not cell.spent:
        return "not reported", "–"
    total = f"{max(cell.spent):.4f}"
    if not cell.setup:
        return total, "not reported"
    return total, f"{max(cell.setup):.4f} + {max(cell.rounds):.4f}"


def _status(cell: Cell) -> str:
    counts: dict[str, int] = {}
    for s in cell.statuses:
        counts[s] = counts.get(s, 0) + 1
    text = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    return text + "".join(f" ({r})" for r in sorted(cell.reasons))


TABLE_HEAD = (
    "| setting | ε | fedstrata ARI mean | fedstrata ARI min | ε spent | setup + rounds "
    "| diffprivlib ARI mean | diffprivlib ARI min | fedstrata status |"
)


def table(cells: list[Cell], central_note: str) -> list[str]:
    """The result table, one line per setting and ε."""
    lines = [TABLE_HEAD, "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for cell in cells:
        eps = "∞ (no DP)" if cell.epsilon is None else f"{cell.epsilon:g}"
        if central_note and cell.epsilon is not None:
            c_mean, c_min = central_note, "–"
        else:
            c_mean, c_min = _mean_min(cell.central)
        if cell.refused:
            f_mean, f_min, spent, split, status = "refused", "–", "–", "–", cell.refused
        else:
            (f_mean, f_min), (spent, split), status = (
                _mean_min(cell.fed_ari),
                _spent(cell),
                _status(cell),
            )
        lines.append(
            f"| {cell.setting.label} | {eps} | {f_mean} | {f_min} | {spent} | {split} "
            f"| {c_mean} | {c_min} | {status} |"
        )
    return lines


def verdicts(cells: list[Cell]) -> list[str]:
    """One PASS/FAIL line per target (mean fedstrata ARI over the seeds)."""
    by_key = {(c.setting.key, c.epsilon): c for c in cells}
    lines = []
    for t in TARGETS:
        cell = by_key.get((t.setting, t.epsilon))
        if cell is None:
            continue
        what = f"{cell.setting.label}, ε = {t.epsilon:g}: mean ARI ≥ {t.ari:.2f}"
        vals = [v for v in cell.fed_ari if math.isfinite(v)]
        if cell.refused or not vals:
            why = cell.refused or f"no labels: {_status(cell)}"
            lines.append(f"FAIL  {what}: not measured ({why})")
            continue
        mean = float(np.mean(vals))
        verdict = "PASS" if mean >= t.ari and len(vals) == len(cell.fed_ari) else "FAIL"
        lines.append(f"{verdict}  {what}: {mean:.4f} (min {min(vals):.4f})")
    return lines + budget_verdict(cells)


def budget_verdict(cells: list[Cell]) -> list[str]:
    """FAIL for every cell whose record reports more ε spent than its target; else PASS."""
    over = [
        f"FAIL  budget: {c.setting.label}, ε = {c.epsilon:g}: the record reports "
        f"{max(c.spent):.4f} spent"
        for c in cells
        if c.epsilon is not None and c.spent and max(c.spent) > c.epsilon + 1e-9
    ]
    runs = sum(len(c.spent) for c in cells)
    return over or [f"PASS  budget: every DP run ({runs}) reports at most its ε spent"]


# ------------------------------------------------------------------------------ main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="ARI against epsilon under sample-level DP: fedstrata and diffprivlib."
    )
    ap.add_argument(
        "--seeds", type=int, default=None, help=f"number of seeds [default: {DEFAULT_SEEDS}]"
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help=f"{SMOKE_SEEDS} seeds, synthetic 10 IID clients at ε = 1 only, "
        f"{SMOKE_N_PER_CLUSTER} samples per cluster",
    )
    ap.add_argument(
        "--rounds", type=int, default=ROUNDS, help=f"protocol.rounds [default: {ROUNDS}]"
    )
    ap.add_argument("--out", type=Path, default=None, help="also write the output to this file")
    ap.add_argument(
        "--runs-dir", type=Path, default=None, help="keep the run records here [default: temp]"
    )
    args = ap.parse_args(argv)
    if args.seeds is None:
        args.seeds = SMOKE_SEEDS if args.smoke else DEFAULT_SEEDS
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    return args


def grid(smoke: bool) -> list[tuple[Setting, float | None]]:
    """The (setting, ε) cells to run."""
    if smoke:
        return [(SETTINGS[0], 1.0)]
    return [(s, eps) for s in SETTINGS for eps in EPSILONS]


def fill_cell(
    cell: Cell,
    seeds: list[int],
    n_per_cluster: int,
    rounds: int,
    runs: Path,
    central: Callable[[MultiViewDataset, float | None, int], float] | None,
) -> None:
    """Run fedstrata (and the central peer, if given) for one cell over the seeds."""
    for seed in seeds:
        ds = load_data(cell.setting, seed, n_per_cluster)
        if central is not None:
            cell.central.append(central(ds, cell.epsilon, seed))
        if cell.refused:
            continue
        doc = scenario_data(
            cell.setting, seed, n_per_cluster, rounds, cell.epsilon, public_bounds(ds)
        )
        eps = "inf" if cell.epsilon is None else f"{cell.epsilon:g}"
        out = runs / cell.setting.key / f"eps-{eps}" / f"seed-{seed}"
        try:
            cell.add_summary(run_fedstrata(doc, out))
        except ScenarioError as exc:
            cell.refused = refusal(exc)


def refusal(exc: ScenarioError) -> str:
    """A scenario error's reasons by field (the generated text's lines mean nothing)."""
    found = exc.errors if isinstance(exc, ScenarioErrors) else [exc]
    return "; ".join(" ".join(f"{e.path}: {e.reason}".split()) for e in found)


def central_runner(
    kmeans: type | None,
) -> Callable[[MultiViewDataset, float | None, int], float]:
    """The central peer, cached: it depends on the data set, ε and seed, not the federation."""
    cache: dict[tuple[str, int, float | None, int], float] = {}

    def run(ds: MultiViewDataset, epsilon: float | None, seed: int) -> float:
        key = (ds.name, ds.n_samples, epsilon, seed)
        if key not in cache:
            if epsilon is not None and kmeans is None:
                cache[key] = float("nan")
            else:
                cache[key] = central_ari(kmeans, ds, epsilon, seed)
        return cache[key]

    return run


def header(args: argparse.Namespace, seeds: list[int], n: int, wall: float) -> list[str]:
    given = sys.argv[1:] if args.argv is None else args.argv
    command = shlex.join(["python", "benchmarks/dp_sample.py", *given])
    return [
        f"Sample-level DP, HK-MVFC (rule sum, {args.rounds} rounds after the private "
        f"setup), δ = {DELTA:g}, seeds {', '.join(map(str, seeds))}; synthetic data "
        f"{n} samples per cluster; wall {wall:.1f} s.",
        "Public bounds: each feature's min and max over the whole data set (the usual "
        "convention of DP k-means benchmarks; not themselves private).",
        "diffprivlib: KMeans on the concatenated views, the same bounds, ε, seeds and "
        "number of clusters (pure ε-DP); its ∞ row is scikit-learn's KMeans.",
        f"Command: `{command}`",
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.argv = argv
    t0 = time.perf_counter()
    kmeans, why = load_kmeans()
    note = ""
    if kmeans is None:
        note = "missing"
        print(
            f"dp_sample: diffprivlib is not available ({why}); its columns show "
            f"'missing'. Install the benchmark-only peer: pip install {DIFFPRIVLIB}",
            file=sys.stderr,
        )
    n = SMOKE_N_PER_CLUSTER if args.smoke else N_PER_CLUSTER
    seeds = list(range(args.seeds))
    central = central_runner(kmeans)
    cells = [Cell(s, eps) for s, eps in grid(args.smoke)]
    with contextlib.ExitStack() as stack:
        runs = args.runs_dir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="dp-sample-"))
        )
        for cell in cells:
            try:
                fill_cell(cell, seeds, n, args.rounds, runs, central)
            except FedstrataError as exc:
                cell.refused = f"error: {' '.join(str(exc).split())}"
    wall = time.perf_counter() - t0
    text = "\n".join([*header(args, seeds, n, wall), "", *table(cells, note), "", *verdicts(cells)])
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
