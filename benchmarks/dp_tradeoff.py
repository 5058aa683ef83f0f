"""Privacy against utility: ARI and NMI of a DP run as a function of ε.

The script runs one scenario (default ``scenarios/paper-flat-sum.yaml``: the paper's
two clients, exact summed statistics, 100 rounds) without DP and then with
``privacy.dp`` for every ε of a grid and every clip norm, each over several seeds, in
this process through :func:`fedstrata.scenarios.run.run_scenario`. The records go
into a temporary folder (or ``--runs-dir``). It prints a markdown table::

    | ε target | ε spent | noise multiplier | clip | rounds | ARI | NMI | status |

``held`` is the mean share of centre coordinates the root kept at their previous
value because their summed denominators were within the noise (100 %: the noisy
rounds moved no centre, and ARI is that of the initial model, which comes from the
setup round and is not protected by DP).

``ε spent`` is the largest ``privacy.epsilon_spent`` of the row's summaries (RDP
accountant, ``rounds`` releases per client) and never exceeds the target. The noise
multiplier z comes from the same block: each client adds N(0, (z·clip)²) to every
coordinate of its clipped statistics vector in every round. ARI and NMI are mean ± sd
(sample sd) over the seeds; seeds change the data, the partition and the noise.

Clip norms
----------
``--clips`` takes numbers and percentiles ``pNN``. A percentile is taken of the
L2 norms of the clients' statistics vectors (the vector the Gaussian mechanism
clips: centre numerators and denominators, view costs, cluster mass) over every
client and round of the no-DP runs of the same seeds. The script prints that
distribution, overall and per client, before the table. The default is ``p5``
(the reasoning is in ``DEFAULT_CLIPS``'s comment). A clip chosen from the data is
itself a release: in a deployment it must be a public constant, such as the number
this script prints for the scenario.

Flags
-----
``--smoke``
    ε ∈ {1000, 1} and no DP, one seed, and the dataset reduced to 500 samples per
    cluster when its loader takes ``n_per_cluster``. Well under a minute.
``--secure``
    Adds ``privacy.secure_aggregation: secagg`` to the scenario (distributed noise
    under secure aggregation). While the schema does not take it, the scenario error
    is printed and the script exits with status 2. Nothing is run in its place.
``--out FILE.md``
    Also writes the table (with the command and the clip calibration) to a file.

    python benchmarks/dp_tradeoff.py                       # full grid, 3 seeds
    python benchmarks/dp_tradeoff.py --smoke
    python benchmarks/dp_tradeoff.py --clips p5,p50,p100 --epsilons none,100,10
    python benchmarks/dp_tradeoff.py --secure

Everything is deterministic by seed: the same arguments print the same table (the
wall time aside). The default grid takes about 20 s.

What it shows on paper-flat-sum (2 clients, 100 rounds): no ε the schema allows
(up to 1000) leaves a usable signal. Even ε = 1000 needs z ≈ 0.25 for 100 releases,
so the noise on each summed centre denominator is larger than the denominator
itself; the root holds back essentially every centre coordinate (``held`` ≈ 100 %)
and the ARI in the table is that of the initial model and of the noisy view
weights, not of anything the noisy rounds learnt.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import math
import shlex
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "fedstrata" / "__init__.py").is_file() and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # measure this checkout, installed or not

from fedstrata.errors import ScenarioError  # noqa: E402
from fedstrata.scenarios.datasets import DATASETS  # noqa: E402
from fedstrata.scenarios.loader import load_scenario, parse_scenario  # noqa: E402
from fedstrata.scenarios.preflight import preflight  # noqa: E402
from fedstrata.scenarios.run import run_scenario  # noqa: E402
from fedstrata.scenarios.schema import Scenario, ScenarioErrors  # noqa: E402

DEFAULT_SCENARIO = ROOT / "scenarios" / "paper-flat-sum.yaml"
DEFAULT_EPSILONS = "none,1000,100,30,10,3,1"
SMOKE_EPSILONS = "none,1000,1"
SMOKE_N_PER_CLUSTER = 500
# p5: just below the smallest client's norms. On paper-flat-sum the norms are bimodal
# (client-0 holds 85 % of the samples, ~13,000; client-1 ~2,300). A clip below both
# modes clips every contribution in every round; the run is then invariant to the clip's
# value (statistics and noise scale together, centres are ratios) and the summed signal
# is largest relative to the noise. Its cost is that both clients weigh the same in the
# sum, harmless for the paper's stratified (IID) split. Measured on paper-flat-sum
# (5 seeds, noise multiplier forced below the schema's range): at z = 1e-3 mean ARI
# p5 0.74, p50 0.53, p100 0.44; at z = 3e-3 p5 0.52, p50 0.31, p100 0.46.
DEFAULT_CLIPS = "p5"
PERCENTILES = (0, 5, 10, 25, 50, 75, 90, 95, 100)


# ------------------------------------------------------------------------------ scenarios


def _merge(base: Any, over: Any) -> Any:
    """``over`` merged recursively into ``base`` (mappings merge, anything else replaces)."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def base_overrides(sc: Scenario, *, smoke: bool, secure: bool) -> dict[str, Any]:
    """What every run of the benchmark changes in the scenario file."""
    over: dict[str, Any] = {}
    if smoke and "n_per_cluster" in inspect.signature(DATASETS[sc.data.dataset]).parameters:
        n = min(int(sc.data.params.get("n_per_cluster", SMOKE_N_PER_CLUSTER)), SMOKE_N_PER_CLUSTER)
        over = _merge(over, {"data": {"params": {"n_per_cluster": n}}})
    if secure:
        over = _merge(over, {"privacy": {"secure_aggregation": "secagg"}})
    return over


def variant(
    sc: Scenario,
    file: str,
    over: dict[str, Any],
    dp: dict[str, float] | None,
    base_dir: Path | None = None,
) -> Scenario:
    """``sc`` with ``over`` and (if given) ``privacy.dp``, validated by the schema.

    Raises ScenarioError (ScenarioErrors) exactly as ``fedstrata run`` would report it.
    """
    data = yaml.safe_load(sc.resolved_yaml())
    data = _merge(data, over)
    if dp is not None:
        data = _merge(data, {"privacy": {"dp": dp}})
    try:
        return parse_scenario(yaml.safe_dump(data, sort_keys=False), base_dir=base_dir)
    except ScenarioError as exc:  # lines of the generated text mean nothing: path and reason
        found = exc.errors if isinstance(exc, ScenarioErrors) else [exc]
        changes = _merge(over, {"privacy": {"dp": dp}} if dp is not None else {})
        where = f"{file} with {yaml.safe_dump(changes, default_flow_style=True).strip()}"
        raise ScenarioErrors(
            [ScenarioError(e.reason, file=where, path=e.path) for e in found]
        ) from None


# ------------------------------------------------------------------------------ norms


BLOCKS = ("num", "den", "costs", "mass")


def _block_norms(partial: dict[str, Any]) -> tuple[float, ...]:
    """L2 norms of the four blocks DP clips (``privacy.dp.clip`` as a mapping)."""
    blocks = [partial["num"], partial["den"], [partial["costs"]], [partial["mass"]]]
    return tuple(
        math.sqrt(math.fsum(float(np.sum(np.square(np.asarray(a, float)))) for a in b))
        for b in blocks
    )


def _statistics_norm(partial: dict[str, Any]) -> float:
    """L2 norm of the vector ``MultiViewLearner._private`` clips (num, den, costs, mass)."""
    return math.sqrt(math.fsum(n * n for n in _block_norms(partial)))


@contextlib.contextmanager
def recording_norms(
    sink: list[tuple[str, float]], blocks: list[tuple[float, ...]] | None = None
) -> Iterator[None]:
    """Record ``(client, norm)`` of every statistics partial the clients compute.

    An observer only: it wraps ``MultiViewLearner.update`` and returns its result
    unchanged. Used on the no-DP runs, whose partials are what DP would clip.
    """
    from fedstrata.plugins import multiview as mvp

    cls = mvp.MultiViewLearner
    original = cls.update

    def update(self: Any, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        partial, flops = original(self, body)
        if isinstance(partial, dict) and partial.get("mode") == "stats":
            sink.append((str(self.node_id), _statistics_norm(partial)))
            if blocks is not None:
                blocks.append(_block_norms(partial))
        return partial, flops

    cls.update = update  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls.update = original  # type: ignore[method-assign]


def norm_report(norms: list[tuple[str, float]]) -> list[str]:
    """Lines describing the norm distribution: overall and per client."""
    head = "| clients | vectors | " + " | ".join(f"p{p}" for p in PERCENTILES) + " |"
    lines = [head, "|" + "---|" * (2 + len(PERCENTILES))]

    def row(name: str, values: list[float]) -> str:
        q = np.percentile(values, PERCENTILES)
        return f"| {name} | {len(values)} | " + " | ".join(f"{v:,.1f}" for v in q) + " |"

    lines.append(row("all", [n for _, n in norms]))
    for client in sorted({c for c, _ in norms}, key=_client_key):
        lines.append(row(client, [n for c, n in norms if c == client]))
    return lines


def _client_key(node: str) -> tuple[str, int]:
    prefix, _, index = node.rpartition("-")
    return (prefix, int(index)) if index.isdigit() else (node, -1)


def parse_clip(text: str) -> tuple[str, float]:
    """``("p", 5.0)`` for ``p5``, ``("b", 5.0)`` for ``b5`` (per block), ``("v", 300.0)``."""
    t = text.strip().lower()
    try:
        if t.startswith("b"):
            q = float(t[1:])
            if not 0 <= q <= 100:
                raise ValueError
            return "b", q
        if t.startswith("p"):
            q = float(t[1:])
            if not 0 <= q <= 100:
                raise ValueError
            return "p", q
        v = float(t)
        if not math.isfinite(v) or v <= 0:
            raise ValueError
        return "v", v
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a clip is a positive number, a percentile p0..p100 or a per-block "
            f"percentile b0..b100, got {text!r}"
        ) from None


def parse_epsilon(text: str) -> float | None:
    t = text.strip().lower()
    if t in ("none", "inf", "no", "off"):
        return None
    try:
        v = float(t)
    except ValueError:
        v = float("nan")
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"an epsilon is a positive number or none, got {text!r}")
    return v


# ------------------------------------------------------------------------------ runs


@dataclass
class Row:
    """One line of the table: one ε (None: no DP) and clip, over the seeds."""

    epsilon: float | None
    clip: float | dict[str, float] | None
    clip_label: str = ""
    summaries: list[dict[str, Any]] = field(default_factory=list)


def run_one(sc: Scenario, seed: int, out: Path) -> dict[str, Any]:
    return run_scenario(sc, out, seed=seed, progress=False, plots=False, overwrite=True)


def _mean_sd(values: list[float]) -> str:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return "n/a"
    mean = float(np.mean(vals))
    sd = f"{float(np.std(vals, ddof=1)):.4f}" if len(vals) > 1 else "–"
    missing = len(values) - len(vals)
    return f"{mean:.4f} ± {sd}" + (f" ({missing} without a model)" if missing else "")


def _status(summaries: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for s in summaries:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def _rounds(summaries: list[dict[str, Any]]) -> str:
    r = sorted({int(s["rounds"]) for s in summaries})
    return str(r[0]) if len(r) == 1 else f"{r[0]}–{r[-1]}"


def _metric(summaries: list[dict[str, Any]], key: str) -> list[float]:
    out = []
    for s in summaries:
        v = (s.get("metrics") or {}).get(key)
        out.append(float("nan") if v is None else float(v))
    return out


TABLE_HEAD = (
    "| ε target | ε spent | noise multiplier | clip | rounds | held | ARI mean ± sd "
    "| NMI mean ± sd | status |"
)


def table(rows: list[Row]) -> list[str]:
    lines = [TABLE_HEAD, "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        s = row.summaries
        if row.epsilon is None:
            eps, spent, z, clip = "none (no DP)", "–", "0", "–"
        else:
            priv = [x["privacy"] for x in s]
            eps = f"{row.epsilon:g}"
            spent = f"{max(p['epsilon_spent'] for p in priv):.6f}"
            zs = sorted({float(p["noise_multiplier"]) for p in priv})
            z = f"{zs[0]:.4f}" if len(zs) == 1 else f"{zs[0]:.4f}–{zs[-1]:.4f}"
            value = row.clip
            shown = (
                " / ".join(f"{k} {v:,.1f}" for k, v in value.items())
                if isinstance(value, dict)
                else f"{value:,.1f}"
            )
            clip = shown + (f" ({row.clip_label})" if row.clip_label else "")
        held = [x.get("privacy", {}).get("held_mean") for x in s]
        held_cell = "–" if row.epsilon is None else f"{np.mean([h or 0.0 for h in held]):.0%}"
        lines.append(
            f"| {eps} | {spent} | {z} | {clip} | {_rounds(s)} | {held_cell} "
            f"| {_mean_sd(_metric(s, 'ari'))} "
            f"| {_mean_sd(_metric(s, 'nmi'))} | {_status(s)} |"
        )
    return lines


# ------------------------------------------------------------------------------ main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="ARI/NMI of fedstrata's DP runs as a function of epsilon (markdown table)."
    )
    ap.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO, help="scenario file")
    ap.add_argument(
        "--epsilons",
        default=None,
        help=f"comma-separated epsilons, 'none' = no DP [default: {DEFAULT_EPSILONS}]",
    )
    ap.add_argument("--delta", type=float, default=1e-5, help="DP delta [default: 1e-5]")
    ap.add_argument(
        "--clips",
        default=DEFAULT_CLIPS,
        help="comma-separated clip norms: numbers, percentiles pNN of the clients' "
        "statistics norms in the no-DP runs, or bNN: one bound per block (num, den, "
        f"costs, mass) at that percentile of the block's norms [default: {DEFAULT_CLIPS}]",
    )
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds [default: 3]")
    ap.add_argument("--smoke", action="store_true", help="smallest grid, one seed, small data")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    ap.add_argument(
        "--secure",
        action="store_true",
        help="add privacy.secure_aggregation: secagg to the scenario (distributed noise)",
    )
    ap.add_argument(
        "--runs-dir", type=Path, default=None, help="keep the run records here [default: temp]"
    )
    args = ap.parse_args(argv)
    eps_text = args.epsilons or (SMOKE_EPSILONS if args.smoke else DEFAULT_EPSILONS)
    try:
        args.epsilon_grid = [parse_epsilon(e) for e in eps_text.split(",") if e.strip()]
        args.clip_grid = [parse_clip(c) for c in args.clips.split(",") if c.strip()]
    except argparse.ArgumentTypeError as exc:
        ap.error(str(exc))
    if not args.clip_grid:
        ap.error("--clips: give at least one clip")
    if args.seeds is None:
        args.seeds = 1 if args.smoke else 3
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    if not 0 < args.delta <= 0.1:
        ap.error("--delta must lie in (0, 0.1]")
    return args


#: The DP unit this study measures (``privacy.dp.unit``); sample-level DP has its own
#: benchmark, benchmarks/dp_sample.py.
CLIENT = {"unit": "client", "bounds": [[0.0, 1.0]]}


def scenario_error(exc: ScenarioError, secure: bool) -> int:
    """Print a scenario error as ``fedstrata run`` would; the exit status 2."""
    what = " (with --secure: privacy.secure_aggregation: secagg)" if secure else ""
    print(f"dp_tradeoff: the scenario was refused{what}:", file=sys.stderr)
    print(exc.located(), file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    path = args.scenario.absolute()
    file = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else args.scenario)
    try:
        base = load_scenario(path)
        over = base_overrides(base, smoke=args.smoke, secure=args.secure)
        plain = variant(base, file, over, None, path.parent)
        for eps in args.epsilon_grid:  # DP's own checks (ε range, rule sum) before any run
            if eps is not None:
                probe = {"epsilon": eps, "delta": args.delta, **CLIENT, "clip": 1.0}
                variant(base, file, over, probe, path.parent)
        seeds = [base.seed + i for i in range(args.seeds)]
        public: list[list[float]] = []  # the private setup's public feature bounds
        for s in seeds:
            views = preflight(plain, seed=s).dataset.views
            public = [[float(V.min()), float(V.max())] for V in views]
    except ScenarioError as exc:
        return scenario_error(exc, args.secure)

    def dp_of(eps: float, clip: float | dict[str, float]) -> dict[str, Any]:
        # the client-level mechanism this study is about; the private setup's public
        # bounds: each view's range over the data (the usual convention of DP
        # benchmarks; a real deployment declares them without looking)
        return {"epsilon": eps, "delta": args.delta, **CLIENT, "clip": clip, "bounds": public}

    with contextlib.ExitStack() as stack:
        if args.runs_dir is None:
            runs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dp-tradeoff-")))
        else:
            runs = args.runs_dir
        # 1. no DP: the baseline row, and the norms DP would clip
        norms: list[tuple[str, float]] = []
        block_norms: list[tuple[float, ...]] = []
        no_dp = Row(None, None)
        try:
            for s in seeds:
                with recording_norms(norms, block_norms):
                    no_dp.summaries.append(run_one(plain, s, runs / "no-dp" / f"seed-{s}"))
        except ScenarioError as exc:
            return scenario_error(exc, args.secure)
        if not norms and any(kind in "pb" for kind, _ in args.clip_grid):
            print(
                "dp_tradeoff: no statistics vector was recorded; give --clips as numbers",
                file=sys.stderr,
            )
            return 2
        values = np.array([n for _, n in norms])
        per_block = np.array(block_norms)
        clips: list[tuple[float | dict[str, float], str]] = []
        for kind, v in args.clip_grid:
            clip: tuple[float | dict[str, float], str]
            if kind == "p":
                clip = (float(np.percentile(values, v)), f"p{v:g}")
            elif kind == "b":
                bounds = np.percentile(per_block, v, axis=0)
                clip = (
                    {k: round(float(b), 6) for k, b in zip(BLOCKS, bounds, strict=True)},
                    f"b{v:g}",
                )
            else:
                clip = (v, "")
            if clip not in clips:
                clips.append(clip)
        # 2. DP: every clip x epsilon x seed
        rows = []
        for i, (clip, label) in enumerate(clips):
            for eps in args.epsilon_grid:
                if eps is None:
                    continue
                row = Row(eps, clip, label)
                try:
                    sc = variant(base, file, over, dp_of(eps, clip), path.parent)
                    for s in seeds:
                        out = runs / f"clip-{i}" / f"eps-{eps:g}" / f"seed-{s}"
                        row.summaries.append(run_one(sc, s, out))
                except ScenarioError as exc:
                    return scenario_error(exc, args.secure)
                rows.append(row)
    wall = time.perf_counter() - t0

    given = sys.argv[1:] if argv is None else argv
    command = shlex.join(["python", "benchmarks/dp_tradeoff.py", *given])
    head = [
        f"Scenario {plain.name} ({file}), seeds {', '.join(map(str, seeds))}, "
        f"δ = {args.delta:g}, {len(seeds) * (1 + len(rows))} runs, wall {wall:.1f} s.",
        f"Command: `{command}`",
    ]
    if over:
        head.append(f"Overrides: `{yaml.safe_dump(over, default_flow_style=True).strip()}`")
    calib = [
        "L2 norms of the clients' statistics vectors (num, den, costs, mass), every "
        "client and round of the no-DP runs:",
        "",
        *norm_report(norms),
    ]
    result = table(([no_dp] if None in args.epsilon_grid else []) + rows)
    text = "\n".join([*head, "", *calib, "", *result]) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
