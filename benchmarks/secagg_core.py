"""CPU cost of the secure-aggregation core: SecAgg against SecAgg+, one process, no network.

For each group size n and each mode, the script builds one ``SecAggServer`` and n
``SecAggClient`` objects and runs the five rounds in memory. A fraction of the clients
(``--dropout``, default 10 %) goes silent from one round on. With ``--stage masked``,
the default, they drop before sending their masked input: the server must then rebuild
their mask keys and strip their pairwise masks, the costly case. With ``--stage reveal``
they drop after sending it, so only their self masks are rebuilt. The script checks
that the result equals the plaintext sum.

Per mode and n, it prints:

* client CPU per client, mean and max, summed over the five rounds, plus the mean per
  round (keys / shares / masked / signed / reveal);
* server CPU, split into receive (parsing and checks), advance (rounds 0-3) and finish
  (rebuilding secrets, unmasking, decoding);
* mean bytes per client, up and down, as ``fedstrata.wire`` envelopes (counted outside
  the timings);
* wall time of the whole run.

SecAgg+ uses degree k = 2 * ceil(log2 n), rounded to even. The threshold is the
smallest allowed, h // 2 + 1, with h = n (SecAgg) or k + 1 (SecAgg+).

    python benchmarks/secagg_core.py [--sizes 100,500,1000] [--length 1000]
                                     [--dropout 0.1] [--stage masked|reveal]
                                     [--modes secagg,secagg+] [--seed 0]

With the defaults this takes several minutes; n = 1000 with SecAgg takes the most time.
"""

from __future__ import annotations

import argparse
import math
import time
from collections import defaultdict
from typing import Any

import numpy as np

from fedstrata import wire
from fedstrata.privacy.secagg import SecAggClient, SecAggConfig, SecAggServer

#: The replies each client round collects: the consistency check (signed survivor sets,
#: Bonawitz et al.'s round 3) sits between the masked inputs and the unmasking.
ROUND_NAMES = ("keys", "shares", "masked", "signed", "reveal")
ROUNDS = len(ROUND_NAMES)


def wire_size(sender: str, body: dict[str, Any]) -> int:
    env = wire.Envelope(kind="secagg", run="bench", round=0, tier="edge", sender=sender, body=body)
    return len(wire.encode(env))


def degree_for(n: int) -> int:
    k = 2 * math.ceil(math.log2(n))
    return k + (k % 2)


def run(n: int, mode: str, length: int, dropout: float, stage: int, seed: int) -> dict[str, Any]:
    degree = degree_for(n) if mode == "secagg+" else None
    cfg = SecAggConfig(vector_length=length, clip=10.0, scale_bits=24, degree=degree)
    roster = [f"client-{i:04d}" for i in range(n)]
    rng = np.random.default_rng(seed)
    xs = {c: rng.uniform(-10, 10, length) for c in roster}
    silent = set(rng.choice(roster, size=int(dropout * n), replace=False).tolist())

    wall = time.perf_counter()
    client_cpu: dict[str, float] = defaultdict(float)
    round_cpu = [0.0] * ROUNDS
    server_cpu = {"receive": 0.0, "advance": 0.0, "finish": 0.0}
    up: dict[str, int] = defaultdict(int)
    down: dict[str, int] = defaultdict(int)

    t0 = time.process_time()
    server = SecAggServer(roster, cfg)
    messages = server.start()
    server_cpu["advance"] += time.process_time() - t0
    clients = {}
    for c in roster:
        t0 = time.process_time()
        clients[c] = SecAggClient(c, cfg)
        clients[c].set_input(xs[c])
        client_cpu[c] += time.process_time() - t0

    result = None
    for r in range(ROUNDS):
        for c, message in messages.items():
            down[c] += wire_size("server", message)
            if r >= stage and c in silent:
                continue
            t0 = time.process_time()
            reply = clients[c].handle(message)
            spent = time.process_time() - t0
            client_cpu[c] += spent
            round_cpu[r] += spent
            up[c] += wire_size(c, reply)
            t0 = time.process_time()
            server.receive(c, reply)
            server_cpu["receive"] += time.process_time() - t0
        t0 = time.process_time()
        if r < ROUNDS - 1:
            messages = server.advance()
            server_cpu["advance"] += time.process_time() - t0
        else:
            result = server.finish()
            server_cpu["finish"] += time.process_time() - t0
    wall = time.perf_counter() - wall

    assert result is not None
    expected = sum(xs[c] for c in result.survivors)
    error = float(np.abs(result.values - expected).max())
    assert error <= len(result.survivors) * 2.0**-24, error
    per_client = np.array([client_cpu[c] for c in roster])
    active = [sum(1 for c in roster if not (r >= stage and c in silent)) for r in range(ROUNDS)]
    return {
        "n": n,
        "mode": mode,
        "degree": degree if degree is not None and degree < n - 1 else n - 1,
        "threshold": server.threshold,
        "survivors": len(result.survivors),
        "dropped": len(result.dropped),
        "client_mean_ms": 1e3 * per_client.mean(),
        "client_max_ms": 1e3 * per_client.max(),
        "round_mean_ms": [1e3 * round_cpu[r] / active[r] for r in range(ROUNDS)],
        "server_s": server_cpu,
        "up_kB": np.mean([up[c] for c in roster]) / 1e3,
        "down_kB": np.mean([down[c] for c in roster]) / 1e3,
        "wall_s": wall,
        "max_error": error,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,500,1000")
    parser.add_argument("--length", type=int, default=1000)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--stage", choices=["masked", "reveal"], default="masked")
    parser.add_argument("--modes", default="secagg,secagg+")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    stage = {"masked": 2, "reveal": 4}[args.stage]
    print(
        f"vector length {args.length}, {args.dropout:.0%} dropouts before the "
        f"{'masked input' if stage == 2 else 'unmasking'} round"
    )
    header = (
        f"{'mode':8} {'n':>5} {'k':>4} {'t':>4} | {'client ms mean':>14} {'max':>7} | "
        f"{'keys':>6} {'shares':>7} {'masked':>7} {'signed':>7} {'reveal':>7} | "
        f"{'server s recv':>13} {'adv':>6} {'finish':>7} {'total':>7} | "
        f"{'up kB':>7} {'down kB':>8} | {'wall s':>7}"
    )
    print(header)
    print("-" * len(header))
    for n in [int(s) for s in args.sizes.split(",")]:
        for mode in args.modes.split(","):
            r = run(n, mode, args.length, args.dropout, stage, args.seed)
            s = r["server_s"]
            rounds = " ".join(
                f"{v:{w}.1f}" for v, w in zip(r["round_mean_ms"], (6, 7, 7, 7, 7), strict=True)
            )
            print(
                f"{mode:8} {n:5d} {r['degree']:4d} {r['threshold']:4d} | "
                f"{r['client_mean_ms']:14.1f} {r['client_max_ms']:7.1f} | {rounds} | "
                f"{s['receive']:13.2f} {s['advance']:6.2f} {s['finish']:7.2f} "
                f"{sum(s.values()):7.2f} | {r['up_kB']:7.1f} {r['down_kB']:8.1f} | "
                f"{r['wall_s']:7.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
