"""Uplink compression: bytes, error and final ARI of each scheme, next to ``none``.

Runs a scenario (default ``scenarios/paper-flat-sum.yaml``: the FedHK-MVFC paper's
§6.1 data, 2 clients, exact sum of statistics, 100 rounds) in the simulator once per
compression scheme and seed, changing nothing but ``protocol.compression``, and prints:

1. **Per scheme** (seed = the first of ``--seeds``): the MQTT PUBLISH size of one
   client update (exact packet bytes, what the simulator counts), its saving against
   ``none``, the edge tier's uplink bytes per round (setup included) and all bytes per
   round, the relative error each client measured on what it sent (mean and max over
   client-rounds of max over arrays of ``||decode(encode(x)) - x|| / ||x||``), the
   float16 fallbacks, status, rounds and final ARI.
2. **Over seeds**: final ARI per seed and the largest |ARI - ARI(none)|.
3. **Exact bytes of the compressed arrays** of a stats partial for larger shapes, from
   :func:`fedstrata.algorithms.compression.encoded_size` and checked against the
   encoded message (a ``multiple-features``-like shape: 10 clusters, views of 76, 216,
   64, 240, 47, 6 features).

    python benchmarks/compression.py [--scenario scenarios/paper-flat-sum.yaml]
                                     [--seeds 0,1,2,3,4] [--rounds N]

About a minute with the defaults (35 runs of ~1 s on one core).
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedstrata import wire
from fedstrata.algorithms.compression import encoded_size
from fedstrata.algorithms.multiview import Stats
from fedstrata.plugins.messages import COMPRESSED_FIELDS, compress_partial, stats_partial
from fedstrata.scenarios.run import simulate
from fedstrata.scenarios.schema import Scenario

ROOT = Path(__file__).resolve().parents[1]
SCHEMES: list[dict[str, Any]] = [
    {"scheme": "none"},
    {"scheme": "float32"},
    {"scheme": "float16"},
    {"scheme": "qsgd", "bits": 8},
    {"scheme": "qsgd", "bits": 6},
    {"scheme": "qsgd", "bits": 4},
    {"scheme": "qsgd", "bits": 2},
]


def _name(comp: dict[str, Any]) -> str:
    return f"qsgd-{comp['bits']}" if comp["scheme"] == "qsgd" else comp["scheme"]


def run_one(base: dict[str, Any], comp: dict[str, Any], seed: int) -> dict[str, Any]:
    """Simulate ``base`` with ``comp`` and ``seed``; return the figures of the run."""
    data = yaml.safe_load(yaml.safe_dump(base))  # a deep copy
    data["protocol"]["compression"] = comp
    sc = Scenario.model_validate(data)
    t0 = time.perf_counter()
    fed, summary, _ = simulate(sc, seed=seed, events=True)
    wall = time.perf_counter() - t0
    sends: dict[str, list[int]] = collections.defaultdict(list)
    for ev in fed.sim.engine.events:
        if (
            ev["ev"] == "send"
            and ev["wire"]
            and not ev["dup"]
            and str(ev["src"]).startswith("client-")
            and "/up/" in ev["topic"]
        ):
            sends[ev["src"]].append(ev["bytes"])
    updates = [b for sizes in sends.values() for b in sizes[1:]]  # the first is the setup reply
    recs = [r["fields"] for r in fed.sim.records if r["kind"] == "compression"]
    errors = np.array([f["rel_error"] for f in recs]) if recs else np.zeros(1)
    rounds = summary["rounds"]
    return {
        "update_bytes": collections.Counter(updates).most_common(1)[0][0] if updates else 0,
        "edge_up_per_round": summary["per_tier"]["edge"]["bytes_up"] / max(rounds, 1),
        "bytes_per_round": summary["bytes_per_round"] or 0.0,
        "err_mean": float(errors.mean()),
        "err_max": float(errors.max()),
        "fallbacks": sum(f["fallbacks"] for f in recs),
        "status": summary["status"],
        "rounds": rounds,
        "ari": summary["metrics"]["ari"],
        "wall": wall,
    }


def exact_bytes_table() -> None:
    """Bytes of the compressed arrays of one stats partial, by formula and by encoding."""
    print("\nExact bytes of a stats partial's float arrays (num, den, costs, mass)")
    print(f"{'shape':<34}{'scheme':>9}{'arrays B':>10}{'message B':>11}{'vs none':>9}")
    rng = np.random.default_rng(0)
    for k, dims in ((4, (2, 2)), (10, (76, 216, 64, 240, 47, 6))):
        H = len(dims)
        stats = Stats(
            center_num=tuple(rng.normal(size=(k, d)) * 50 for d in dims),
            center_den=tuple(rng.random((k, d)) * 50 for d in dims),
            view_costs=rng.random(H) * 100,
            cluster_mass=rng.random(k) * 100,
            view_counts=np.full(H, 100),
            n_samples=100,
        )
        ref = None
        for comp in SCHEMES:
            scheme, bits = comp["scheme"], comp.get("bits", 8)
            shapes = [(k, d) for d in dims] * 2 + [(H,), (k,)]
            by_formula = sum(encoded_size(s, scheme, bits=bits) for s in shapes)
            body, _ = compress_partial(stats_partial(stats), scheme, bits=bits, rng=rng)
            env = wire.Envelope(kind="update", run="r", round=1, tier="edge", sender="c", body=body)
            message = len(wire.encode(env))
            rest = {key: v for key, v in body.items() if key not in COMPRESSED_FIELDS["stats"]}
            others = len(wire.encode(wire.Envelope(**{**_env_fields(env), "body": rest})))
            # the arrays' bytes = message - the message without them - their keys' bytes
            keys = sum(1 + len(key) for key in COMPRESSED_FIELDS["stats"])
            lists = 2  # num and den: one fixarray header each (fewer than 16 views)
            assert message - others - keys - lists == by_formula, (comp, message, others)
            ref = ref or message
            print(
                f"{f'k={k}, dims={dims}':<34}{_name(comp):>9}{by_formula:>10}{message:>11}"
                f"{message / ref:>9.3f}"
            )


def _env_fields(env: wire.Envelope) -> dict[str, Any]:
    return {
        "kind": env.kind,
        "run": env.run,
        "round": env.round,
        "tier": env.tier,
        "sender": env.sender,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "paper-flat-sum.yaml"))
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    base = yaml.safe_load(Path(args.scenario).read_text(encoding="utf-8"))
    base.setdefault("protocol", {})
    if args.rounds is not None:
        base["protocol"]["rounds"] = args.rounds
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"scenario {args.scenario}, seeds {seeds}")
    results = {_name(c): [run_one(base, c, s) for s in seeds] for c in SCHEMES}
    ref = results["none"][0]
    print(
        f"\nPer scheme, seed {seeds[0]}\n{'scheme':<9}{'update B':>9}{'saving':>8}"
        f"{'edge up B/rnd':>14}{'all B/rnd':>10}{'err mean':>10}{'err max':>10}"
        f"{'fallb':>6}{'status':>13}{'rounds':>7}{'ARI':>8}{'wall s':>7}"
    )
    for name, runs in results.items():
        r = runs[0]
        print(
            f"{name:<9}{r['update_bytes']:>9}{1 - r['update_bytes'] / ref['update_bytes']:>8.1%}"
            f"{r['edge_up_per_round']:>14.1f}{r['bytes_per_round']:>10.1f}"
            f"{r['err_mean']:>10.2e}{r['err_max']:>10.2e}{r['fallbacks']:>6}"
            f"{r['status']:>13}{r['rounds']:>7}{r['ari']:>8.4f}{r['wall']:>7.2f}"
        )
    print(f"\nFinal ARI over seeds {seeds}")
    print(f"{'scheme':<9}" + "".join(f"{s:>8}" for s in seeds) + f"{'max |dARI|':>12}")
    for name, runs in results.items():
        diff = max(abs(r["ari"] - n["ari"]) for r, n in zip(runs, results["none"], strict=True))
        print(f"{name:<9}" + "".join(f"{r['ari']:>8.4f}" for r in runs) + f"{diff:>12.4f}")
    exact_bytes_table()


if __name__ == "__main__":
    main()
