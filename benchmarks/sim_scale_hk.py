"""The 10,000-client federation with the real HK-MVFC nodes (not a null algorithm).

10,000 clients under 100 fog nodes, 20 rounds of exact sum-of-statistics HK-MVFC on
the FedHK-MVFC paper's §6.1 data with 5 samples per client. Prints wall time, deliveries per
wall-second, peak memory, and the share of wall time spent inside node code
(algorithm + encoding/decoding) versus the kernel, measured in the same run by timing
every node.handle call.

    python benchmarks/sim_scale_hk.py [--clients 10000] [--fogs 100] [--rounds 20]
"""

from __future__ import annotations

import argparse
import resource
import time

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


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--clients", type=int, default=10_000)
    ap.add_argument("--fogs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    sc = parse_scenario(
        SCENARIO.format(
            per=args.clients * 5 // 4, fogs=args.fogs, clients=args.clients, rounds=args.rounds
        )
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
    t0 = time.perf_counter()
    fed, summary, _ = simulate(sc)
    wall = time.perf_counter() - t0
    delivered = fed.sim.stats()["delivered"]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"clients={args.clients} fogs={args.fogs} rounds={summary['rounds']}")
    print(f"wall {wall:.1f} s (target < 60 s); build+run+evaluation")
    print(f"deliveries {delivered:,}  -> {delivered / wall:,.0f} deliveries per wall-second")
    print(
        f"inside node code (algorithm, wire encode/decode, validation): {spent['node']:.1f} s "
        f"= {spent['node'] / wall:.0%} of wall"
    )
    print(f"peak RSS {rss:,.0f} MiB (target < 4096 MiB)")
    print(f"ARI {summary['metrics']['ari']:.4f}  bytes {summary['bytes_total']:,}")


if __name__ == "__main__":
    main()
