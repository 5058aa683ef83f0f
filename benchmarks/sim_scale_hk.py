"""The 10,000-client federation with the real HK-MVFC nodes (not a null algorithm).

10,000 clients under 100 fog nodes, 20 rounds of exact sum-of-statistics HK-MVFC on
the FedHK-MVFC paper's §6.1 data with 5 samples per client. Prints wall time, deliveries per
wall-second, peak memory, and the share of wall time spent inside node code
(algorithm + encoding/decoding) versus the kernel, measured in the same run by timing
every node.handle call, and the bytes of one model message to a client.

With ``--baseline DIR`` the same benchmark also runs on the fedstrata source tree in
``DIR`` (a checkout of an older commit, e.g. ``git worktree add /tmp/base e128cad``),
in a subprocess of the same machine, and the speed-up over it is printed (the runs
alternate, ``--repeats`` times each; the fastest of each counts).

    python benchmarks/sim_scale_hk.py [--clients 10000] [--fogs 100] [--rounds 20]
                                      [--baseline DIR [--repeats 1]]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate

SCENARIO = """
name: scale
seed: 0
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: {per}}}, partition: {{kind: iid}}}}
topology:
  tiers: [{{name: fog, count: {fogs}, link: {{latency: {{dist: lognormal, median: 0.02, sigma: 0.5}}, bandwidth_mbps: 100}}}}]
  clients: {{count: {clients}, link: {{latency: {{dist: lognormal, median: 0.05, sigma: 0.5}}, bandwidth_mbps: 5}}}}
algorithm: {{name: hk-mvfc, n_clusters: 4, center_update: exact}}
protocol: {{rule: sum, rounds: {rounds}, tol: 0.0, deadline_s: 30}}
"""


def measure(clients: int, fogs: int, rounds: int) -> dict:
    """One run of the benchmark in this process: its wall time, node time, counts."""
    sc = parse_scenario(
        SCENARIO.format(per=clients * 5 // 4, fogs=fogs, clients=clients, rounds=rounds)
    )
    import fedstrata.nodes.aggregator as agg
    import fedstrata.nodes.client as cli

    spent = {"node": 0.0}

    def timed(cls):  # time spent inside node code, to split node work from kernel work
        original = cls.handle

        def handle(self, event):
            t = time.perf_counter()
            try:
                return original(self, event)
            finally:
                spent["node"] += time.perf_counter() - t

        cls.handle = handle

    timed(cli.ClientNode)
    timed(agg.AggregatorNode)
    model_bytes: list[int] = []  # the payload of model messages reaching a client
    original = cli.ClientNode.handle

    def handle(self, event):
        if self.node_id == "client-0" and getattr(event, "topic", "").endswith("/down"):
            model_bytes.append(len(event.payload))
        return original(self, event)

    cli.ClientNode.handle = handle
    t0, c0 = time.perf_counter(), time.process_time()
    fed, summary, _ = simulate(sc)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    cli.ClientNode.handle = original
    return {
        "wall": wall,
        "cpu": cpu,
        "node": spent["node"],
        "delivered": fed.sim.stats()["delivered"],
        "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rounds": summary["rounds"],
        "ari": summary["metrics"]["ari"],
        "bytes": summary["bytes_total"],
        "model_bytes": sorted(model_bytes)[len(model_bytes) // 2] if model_bytes else None,
    }


def in_subprocess(args: argparse.Namespace, tree: Path | None = None) -> dict:
    """:func:`measure` in a fresh process, on the fedstrata sources in ``tree`` if given."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--json"]
    cmd += ["--clients", str(args.clients), "--fogs", str(args.fogs), "--rounds", str(args.rounds)]
    out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--clients", type=int, default=10_000)
    ap.add_argument("--fogs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--baseline", type=Path, help="an older fedstrata source tree to compare with")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each, with --baseline")
    ap.add_argument("--json", action="store_true", help="print one JSON line (for --baseline)")
    args = ap.parse_args()
    if args.json:
        print(json.dumps(measure(args.clients, args.fogs, args.rounds)))
        return
    if args.baseline is None:
        runs, base = [measure(args.clients, args.fogs, args.rounds)], []
    else:  # alternate, each run in a fresh process
        runs, base = [], []
        for _ in range(args.repeats):
            base.append(in_subprocess(args, args.baseline.resolve()))
            runs.append(in_subprocess(args))
    r = min(runs, key=lambda x: x["wall"])
    wall, node = r["wall"], r["node"]
    print(f"clients={args.clients} fogs={args.fogs} rounds={r['rounds']}")
    print(
        f"wall {wall:.1f} s, CPU {r['cpu']:.1f} s (issue target: < 30 s wall on its "
        "reference machine); build+run+evaluation"
    )
    print(
        f"deliveries {r['delivered']:,}  -> {r['delivered'] / wall:,.0f} deliveries per wall-second"
    )
    print(
        f"inside node code (algorithm, wire encode/decode, validation): {node:.1f} s "
        f"= {node / wall:.0%} of wall"
    )
    print(f"peak RSS {r['rss']:,.0f} MiB (target < 4096 MiB)")
    print(
        f"ARI {r['ari']:.4f}  bytes {r['bytes']:,}  model message to a client {r['model_bytes']} B"
    )
    if base:
        b = min(base, key=lambda x: x["wall"])
        print(
            f"baseline {args.baseline}: wall {b['wall']:.1f} s, CPU {b['cpu']:.1f} s, "
            f"node {b['node']:.1f} s, "
            f"ARI {b['ari']:.4f}, bytes {b['bytes']:,}, model message {b['model_bytes']} B"
        )
        cpu = min(x["cpu"] for x in base) / min(x["cpu"] for x in runs)
        print(
            f"speed-up {b['wall'] / wall:.2f}x wall, {cpu:.2f}x CPU, "
            f"{b['node'] / node:.2f}x node code (walls {[round(x['wall'], 1) for x in runs]}, "
            f"baseline {[round(x['wall'], 1) for x in base]})"
        )


if __name__ == "__main__":
    main()
