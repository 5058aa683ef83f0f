"""Kernel throughput at scale: a 3-tier star of null-protocol nodes.

One cloud broker, one broker per fog, clients attached to their fog's broker
over LogNormal links; fogs are co-located with their broker and linked to
the cloud. Each round the cloud publishes on its down topic, every fog
relays it to its clients, every client answers with ~100 bytes, a fog
publishes one message up once all its clients answered, and the cloud starts
the next round once all fogs did.

Prints deliveries, wall time, deliveries per wall-second and memory, and, as
a baseline measured in the same process, a bare ``heapq`` loop running the
same number of scheduled callbacks as the kernel's heap did (the ratio is
kernel time / baseline time: what the kernel, the null nodes' handle calls
included, costs on top of bare event scheduling).

    python benchmarks/sim_scale.py --clients 10000 --fogs 100 --rounds 20
"""

from __future__ import annotations

import argparse
import gc
import heapq
import random
import resource
import sys
import time
import tracemalloc
from typing import Any

from fedstrata.mqtt import down_topic, group_prefix, up_filter, up_topic
from fedstrata.nodes.events import Delivered, Finished, Publish, Started, Subscribe
from fedstrata.sim.kernel import Connection, Simulation
from fedstrata.sim.links import Link, LogNormal

RUN = "bench"
UP_PAYLOAD = bytes(100)


class NullClient:
    """Answers every round broadcast with a fixed 100-byte update."""

    def __init__(self, node_id: str, fog: int) -> None:
        self.node_id = node_id
        self.down = down_topic(RUN, "fog", fog)
        self.up = up_topic(RUN, "fog", fog, node_id)
        self.answer = [Publish(topic=self.up, payload=UP_PAYLOAD, qos=1)]

    def handle(self, ev: Any) -> list[Any]:
        if type(ev) is Delivered:
            return self.answer
        if type(ev) is Started:
            return [Subscribe(pattern=self.down, qos=1)]
        return []


class NullFog:
    """Relays the cloud's broadcast down; sends one message up when all its clients answered."""

    def __init__(self, node_id: str, fog: int, n_clients: int) -> None:
        self.node_id = node_id
        self.n_clients = n_clients
        self.count = 0
        self.cloud_down = down_topic(RUN, "cloud", "root")
        self.my_up = up_filter(RUN, "fog", fog)
        self.my_up_prefix = group_prefix(RUN, "fog", fog) + "up/"
        self.my_down = down_topic(RUN, "fog", fog)
        self.to_cloud = [
            Publish(topic=up_topic(RUN, "cloud", "root", node_id), payload=bytes(200), qos=1)
        ]

    def handle(self, ev: Any) -> list[Any]:
        if type(ev) is Delivered:
            if ev.topic.startswith(self.my_up_prefix):
                self.count += 1
                if self.count == self.n_clients:
                    self.count = 0
                    return self.to_cloud
                return []
            return [Publish(topic=self.my_down, payload=ev.payload, qos=1)]
        if type(ev) is Started:
            return [Subscribe(pattern=self.cloud_down), Subscribe(pattern=self.my_up)]
        return []


class NullCloud:
    """Starts a round once every fog answered; finishes after ``rounds`` rounds."""

    def __init__(self, n_fogs: int, rounds: int, start_delay: float) -> None:
        self.node_id = "cloud"
        self.n_fogs = n_fogs
        self.rounds = rounds
        self.round = 0
        self.count = 0
        self.start_delay = start_delay
        self.down = down_topic(RUN, "cloud", "root")

    def _broadcast(self) -> list[Any]:
        self.round += 1
        return [Publish(topic=self.down, payload=self.round.to_bytes(8, "big"), qos=1)]

    def handle(self, ev: Any) -> list[Any]:
        if type(ev) is Delivered:
            self.count += 1
            if self.count < self.n_fogs:
                return []
            self.count = 0
            if self.round >= self.rounds:
                return [Finished(result=self.round)]
            return self._broadcast()
        if type(ev) is Started:
            return [Subscribe(pattern=up_filter(RUN, "cloud", "root")), *self._broadcast()]
        return []


def build(clients: int, fogs: int, rounds: int, seed: int, links: str = "tcp") -> Simulation:
    """Build the 3-tier star under the link model ``links``."""
    sim = Simulation(seed, links=links)
    sim.add_broker("cloud", [group_prefix(RUN, "cloud", "root")])
    for f in range(fogs):
        sim.add_broker(f"fog-{f}", [group_prefix(RUN, "fog", f)])
    wan = Link(LogNormal(0.040, 0.5), bandwidth_bps=100e6)
    lan = Link(LogNormal(0.010, 0.6), bandwidth_bps=10e6)
    per_fog = [clients // fogs + (1 if f < clients % fogs else 0) for f in range(fogs)]
    # Clients start first so that they have subscribed when the first round starts.
    sim.add_node(
        NullCloud(fogs, rounds, 1.0), connections=[Connection("cloud")], tier="cloud", start_at=1.0
    )
    for f in range(fogs):
        sim.add_node(
            NullFog(f"fog-{f}", f, per_fog[f]),
            connections=[Connection(f"fog-{f}"), Connection("cloud", wan)],
            tier="fog",
        )
    c = 0
    for f in range(fogs):
        for _ in range(per_fog[f]):
            sim.add_node(
                NullClient(f"client-{c}", f),
                connections=[Connection(f"fog-{f}", lan)],
                tier="client",
            )
            c += 1
    return sim


def baseline(n_events: int, width: int, seed: int) -> float:
    """Run ``n_events`` callbacks through a bare heapq loop, ``width`` pending; return seconds."""
    rnd = random.Random(seed)
    delays = [rnd.random() for _ in range(1024)]
    queue: list[tuple[float, int, Any, Any]] = []
    state = {"done": 0, "eid": 0}

    def callback(arg: Any) -> None:
        state["done"] += 1
        if state["eid"] < n_events:
            state["eid"] += 1
            heapq.heappush(
                queue, (now[0] + delays[state["eid"] & 1023], state["eid"], callback, arg)
            )

    now = [0.0]
    for _ in range(min(width, n_events)):
        state["eid"] += 1
        heapq.heappush(queue, (delays[state["eid"] & 1023], state["eid"], callback, None))
    t0 = time.perf_counter()
    pop = heapq.heappop
    while queue:
        now[0], _, fn, arg = pop(queue)
        fn(arg)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--clients", type=int, default=10_000)
    p.add_argument("--fogs", type=int, default=100)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-tracemalloc", action="store_true", help="skip the second, traced run")
    p.add_argument("--profile", action="store_true", help="print a cProfile of the timed run")
    p.add_argument("--links", choices=("tcp", "message-retry"), default="tcp")
    p.add_argument(
        "--compare",
        action="store_true",
        help="also time the other link model on the same star and print the ratio",
    )
    args = p.parse_args(argv)

    t0 = time.perf_counter()
    sim = build(args.clients, args.fogs, args.rounds, args.seed, args.links)
    t_build = time.perf_counter() - t0
    gc.collect()
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        t1 = time.perf_counter()
        prof.runcall(sim.run)
        t_run = time.perf_counter() - t1
    else:
        t1 = time.perf_counter()
        sim.run()
        t_run = time.perf_counter() - t1
    stats = sim.stats()
    delivered = stats["delivered"] + stats["duplicates"]
    # Heap events of this loss-free run: one uplink arrival per publish, one per wire
    # delivery hop, one start per node (co-located deliveries take no heap event).
    scheduled = stats["publishes"] + stats["messages"]["down"] + stats["nodes"]
    t_base = baseline(scheduled, args.clients, args.seed)
    maxrss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(f"clients={args.clients} fogs={args.fogs} rounds={args.rounds} seed={args.seed}")
    print(f"rounds completed       {sim.results.get('cloud')}")
    print(f"virtual time           {stats['virtual_time']:.3f} s")
    print(f"deliveries             {delivered:,}")
    print(f"publishes              {stats['publishes']:,}")
    print(f"wire bytes up/down     {stats['bytes']['up']:,} / {stats['bytes']['down']:,}")
    print(f"build wall seconds     {t_build:.2f}")
    print(f"run wall seconds       {t_run:.2f}")
    print(f"deliveries per second  {delivered / t_run:,.0f}")
    rate = scheduled / t_base
    print(f"baseline heapq         {scheduled:,} callbacks in {t_base:.2f} s ({rate:,.0f}/s)")
    print(f"ratio kernel/baseline  {t_run / t_base:.2f}")
    print(f"link model             {args.links}")
    if args.compare:
        other = "message-retry" if args.links == "tcp" else "tcp"
        sim2 = build(args.clients, args.fogs, args.rounds, args.seed, other)
        gc.collect()
        t2 = time.perf_counter()
        sim2.run()
        t_other = time.perf_counter() - t2
        n2 = sim2.stats()["delivered"] + sim2.stats()["duplicates"]
        print(f"{other:<22} {n2 / t_other:,.0f} deliveries/s (same star, same process)")
        print(
            f"ratio {args.links}/{other} time per delivery {t_run / delivered / (t_other / n2):.2f}"
        )
    print(f"maxrss                 {maxrss_mib:,.0f} MiB")
    if args.profile:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)

    if not args.no_tracemalloc:
        del sim
        gc.collect()
        tracemalloc.start()
        sim2 = build(args.clients, args.fogs, args.rounds, args.seed)
        sim2.run()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        same = sim2.stats() == stats
        print(f"tracemalloc peak       {peak / 2**20:,.0f} MiB (traced second run, same: {same})")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"maxrss after both runs {rss:,.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
