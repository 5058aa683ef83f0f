"""Secure aggregation, CPU and bytes per client: plaintext, SecAgg, SecAgg+ and Flower's SecAgg+.

For each group size n and dropout fraction, the script runs one aggregation round in
memory, without a network, in four modes on the same inputs (``--length`` float64
values in [-10, 10) per client, drawn from ``--seed``) and the same dropped clients:

``plaintext``
    Each client encodes its vector as a ``fedstrata.wire`` envelope (kind ``update``).
    The server decodes every envelope and adds the vectors. Dropped clients send
    nothing. The server sends nothing, so "down" is 0.
``secagg`` / ``secagg+``
    fedstrata's own protocol (``fedstrata.privacy.secagg``), run by
    ``benchmarks/secagg_core.py``'s ``run()``. This script imports that function
    and does not copy it. SecAgg+ uses degree k = 2 ceil(log2 n), rounded up to an even
    number. The threshold is the smallest that the protocol allows,
    t = h // 2 + 1, where h = n (SecAgg) or h = k + 1 (SecAgg+). Dropped clients go
    silent before they send their masked input. That is the costly case: the server must
    rebuild their mask keys and strip their pairwise masks.
``flower-secagg+``
    Flower 1.42.0's SecAgg+, in the same process, with the same n, vector, dropped
    clients, shares per client (num_shares = k + 1, own share included) and threshold
    (t). Flower's ``clipping_range`` is set to 10.0, like fedstrata's ``clip``. Flower
    keeps its defaults of ``quantization_range`` 2**22 and ``modulus_range`` 2**32.
    ``max_weight`` is 1 and every client reports ``num_examples`` = 1. Flower then
    returns the mean, and this script multiplies it by the number of survivors. If
    ``flwr`` cannot be imported, every Flower row prints ``n/a`` with the reason.

What is Flower code and what is glue in ``flower-secagg+``:

* **Server: Flower code.** ``SecAggPlusWorkflow(num_shares, reconstruction_threshold,
  clipping_range=10.0, max_weight=1.0)`` is called as it is: all four stages, its
  graph, forwarding, unmasking (``combine_shares``, ``pseudo_rand_gen``, key
  agreement) and dequantisation. It runs with a ``LegacyContext`` that holds Flower's
  ``FedAvg`` and ``SimpleClientManager``. Each node is registered as a
  ``GridClientProxy``, as ``flwr.server.compat.app_utils`` does. The workflow also calls
  ``FedAvg.configure_fit`` and ``aggregate_fit``. This script times those two calls
  and leaves them out of the server CPU, because they are not part of SecAgg+.
* **Clients: Flower code.** Each node is a real ``ClientApp(client_fn,
  mods=[secaggplus_mod])`` with its own ``Context``. Its ``NumPyClient.fit`` only
  returns the node's vector, with ``num_examples`` = 1. ``secaggplus_mod`` does all
  the protocol work: P-384 keys, Shamir sharing, Fernet encryption, quantisation and
  masks.
* **Glue: this script.** ``_LoopbackGrid`` replaces the SuperLink and the network. It
  implements ``flwr.serverapp.Grid.send_and_receive``. Like
  ``InMemoryGrid.push_messages``, it gives each message an id. It serialises each message with
  ``flwr.common.serde.message_to_proto`` and counts the bytes. It delivers a
  deserialised copy to the node's ``ClientApp``, and then does the same with the
  reply. A dropped node gets its messages from the masked-input stage on, but it never
  answers, as when Flower's ``timeout`` expires. The serialisation and delivery are
  left out of both the client and the server CPU. Likewise, fedstrata's wire encoding
  is counted outside its timings.

Measures:

* ``client ms`` is the CPU per client, averaged over all n clients (dropped ones
  included), summed over the rounds.
* ``server s`` is the server's CPU.
* ``total s`` is the CPU of all clients together plus the server's CPU.
* ``up kB`` and ``down kB`` are the mean bytes per client: fedstrata envelopes, and
  Flower ``Message`` protobufs.
* ``max|err|`` is the largest difference from the float64 sum of the survivors'
  vectors, taken in roster order. ``exact`` says whether this error is within what the
  encoding permits. For plaintext, the result must equal that sum bit for bit. For
  fedstrata it must be within survivors * 2**-24, its fixed-point step. For Flower
  it must be within survivors * 2 * 10 / 2**22, the step of its stochastic rounding.

All CPU figures are ``time.process_time()``, summed over all threads. Flower's Shamir
code uses a thread pool, and that time is counted too.

After the table, the script prints three things:

* the ratio of Flower's SecAgg+ to fedstrata's SecAgg+, per n and dropout fraction
  (total, client and server CPU);
* the growth exponent of the per-client CPU and of the server CPU with n: the slope
  of a least-squares log-log fit over the sizes;
* the exponents that the cost models predict over the same sizes, for comparison.

Bell et al., "Secure Single-Server Aggregation with (Poly)Logarithmic Overhead" (CCS
2020), Table 1, semi-honest setting, n clients and vectors of length L:

* Bonawitz et al.'s SecAgg: client computation O(n^2 + nL), client communication
  O(n + L), server computation O(n^2 L).
* Bell et al.'s SecAgg+: client computation O(log^2 n + L log n), client
  communication O(log n + L), server computation O(n log^2 n + nL log n).

Flower on its own venv (flwr must never become a fedstrata dependency; the same
commands are in ``benchmarks/requirements-secagg.txt``)::

    python -m venv /tmp/flwr-venv
    /tmp/flwr-venv/bin/pip install --no-deps flwr==1.42.0
    /tmp/flwr-venv/bin/pip install -r benchmarks/requirements-secagg.txt
    /tmp/flwr-venv/bin/pip install -e .

Run it::

    /tmp/flwr-venv/bin/python benchmarks/secagg.py [--sizes 100,500,1000] [--length 1000]
        [--dropouts 0,0.1] [--modes plaintext,secagg,secagg+,flower-secagg+] [--seed 0]
    python benchmarks/secagg.py --smoke     # n = 10, 20, length 50; seconds; flwr optional

With the defaults this takes about 25 minutes on the 2-core machine. SecAgg at
n = 1,000 takes the most time; ``--modes`` can leave it out.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import random
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from secagg_core import degree_for
from secagg_core import run as run_fedstrata

from fedstrata import wire
from fedstrata.privacy.secagg import SecAggConfig

MODES = ("plaintext", "secagg", "secagg+", "flower-secagg+")
CLIP = 10.0
FIXED_POINT_STEP = 2.0**-24  # secagg_core: SecAggConfig(scale_bits=24)
FLOWER_QUANTIZATION = 2**22  # SecAggPlusWorkflow's default quantization_range
FLOWER_MODULUS = 2**32  # SecAggPlusWorkflow's default modulus_range
MASKED_STAGE = 2  # dropped clients go silent from this round (0-based) on


def inputs(n: int, length: int, dropout: float, seed: int) -> tuple[list[str], dict, set[str]]:
    """The roster, the vectors and the dropped clients: the same draws as secagg_core.run."""
    roster = [f"client-{i:04d}" for i in range(n)]
    rng = np.random.default_rng(seed)
    xs = {c: rng.uniform(-CLIP, CLIP, length) for c in roster}
    silent = set(rng.choice(roster, size=int(dropout * n), replace=False).tolist())
    return roster, xs, silent


def expected_sum(roster: list[str], xs: dict, silent: set[str]) -> np.ndarray:
    return sum(xs[c] for c in roster if c not in silent)


def threshold_for(n: int) -> tuple[int, int]:
    """SecAgg+'s degree k (capped at n - 1) and fedstrata's threshold for it."""
    k = min(degree_for(n), n - 1)
    return k, SecAggConfig(vector_length=1, clip=CLIP, degree=k).threshold_for(n)


def row(n: int, **fields: Any) -> dict[str, Any]:
    out = {"n": n, "k": "-", "t": "-", "exact": "-", "max_err": None, "note": ""}
    out.update(fields)
    if "client_mean_s" in out:
        out["total_s"] = out["client_mean_s"] * n + out["server_s"]
    return out


def run_plaintext(n: int, length: int, dropout: float, seed: int) -> dict[str, Any]:
    roster, xs, silent = inputs(n, length, dropout, seed)
    wall = time.perf_counter()
    client_cpu = server_cpu = 0.0
    up = 0
    total = np.zeros(length)
    for c in roster:
        if c in silent:
            continue
        t0 = time.process_time()
        env = wire.Envelope(
            kind="update", run="bench", round=0, tier="edge", sender=c, body={"values": xs[c]}
        )
        payload = wire.encode(env)
        t1 = time.process_time()
        total += wire.decode(payload).body["values"]
        t2 = time.process_time()
        client_cpu += t1 - t0
        server_cpu += t2 - t1
        up += len(payload)
    error = float(np.abs(total - expected_sum(roster, xs, silent)).max())
    return row(
        n,
        client_mean_s=client_cpu / n,
        server_s=server_cpu,
        up_kB=up / n / 1e3,
        down_kB=0.0,
        max_err=error,
        exact="yes" if error == 0.0 else "no",
        wall_s=time.perf_counter() - wall,
    )


def run_core(n: int, mode: str, length: int, dropout: float, seed: int) -> dict[str, Any]:
    wall = time.perf_counter()
    try:
        r = run_fedstrata(n, mode, length, dropout, MASKED_STAGE, seed)
    except AssertionError as exc:  # secagg_core checks the sum against the plaintext one
        return row(n, note=f"n/a: sum check failed ({exc})")
    return row(
        n,
        k=r["degree"],
        t=r["threshold"],
        client_mean_s=r["client_mean_ms"] / 1e3,
        server_s=sum(r["server_s"].values()),
        up_kB=r["up_kB"],
        down_kB=r["down_kB"],
        max_err=r["max_error"],
        exact="yes" if r["max_error"] <= r["survivors"] * FIXED_POINT_STEP else "no",
        wall_s=time.perf_counter() - wall,
    )


# --- Flower ---------------------------------------------------------------------------


FLOWER_NAMES = {  # name in the namespace: (module, attribute)
    "ArrayRecord": ("flwr.app", "ArrayRecord"),
    "ClientApp": ("flwr.clientapp", "ClientApp"),
    "ConfigRecord": ("flwr.app", "ConfigRecord"),
    "Context": ("flwr.app", "Context"),
    "FedAvg": ("flwr.server.strategy", "FedAvg"),
    "Grid": ("flwr.serverapp.grid", "Grid"),
    "GridClientProxy": ("flwr.server.compat.grid_client_proxy", "GridClientProxy"),
    "LegacyContext": ("flwr.server.compat.legacy_context", "LegacyContext"),
    "MAIN_CONFIGS_RECORD": ("flwr.server.workflow.constant", "MAIN_CONFIGS_RECORD"),
    "MAIN_PARAMS_RECORD": ("flwr.server.workflow.constant", "MAIN_PARAMS_RECORD"),
    "Message": ("flwr.app", "Message"),
    "NumPyClient": ("flwr.client", "NumPyClient"),
    "ProtoMessage": ("flwr.proto.message_pb2", "Message"),
    "RecordDict": ("flwr.app", "RecordDict"),
    "Run": ("flwr.supercore.run", "Run"),
    "SUPERLINK_NODE_ID": ("flwr.common.constant", "SUPERLINK_NODE_ID"),
    "SecAggPlusWorkflow": ("flwr.server.workflow", "SecAggPlusWorkflow"),
    "ServerConfig": ("flwr.server.server_config", "ServerConfig"),
    "SimpleClientManager": ("flwr.server.client_manager", "SimpleClientManager"),
    "TaskIdentity": ("flwr.supercore.task_identity", "TaskIdentity"),
    "WorkflowKey": ("flwr.server.workflow.constant", "Key"),
    "message_from_proto": ("flwr.common.serde", "message_from_proto"),
    "message_to_proto": ("flwr.common.serde", "message_to_proto"),
    "secaggplus_mod": ("flwr.client.mod", "secaggplus_mod"),
}


def load_flower() -> tuple[Any, str]:
    """Flower's classes and functions in a namespace, or None and why Flower cannot run."""
    try:
        names = {
            name: getattr(importlib.import_module(module), attr)
            for name, (module, attr) in FLOWER_NAMES.items()
        }
        names["version"] = importlib.metadata.version("flwr")
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "flwr":
            return None, "flwr not installed"
        return None, f"flwr import failed: {exc}"
    except AttributeError as exc:
        return None, f"not the flwr 1.42 API: {exc}"
    logging.getLogger("flwr").setLevel(logging.WARNING)  # the workflow logs every stage
    return argparse.Namespace(**names), ""


class FlowerRound:
    """One SecAgg+ round of Flower's workflow and ClientApps, driven in this process."""

    def __init__(self, fl: Any, roster: list[str], xs: dict, silent: set[str], seed: int) -> None:
        self.fl = fl
        rng = np.random.default_rng(seed + 1)
        # random node ids, as Flower's; 1 is the SuperLink's
        ids = rng.choice(2**62, size=len(roster), replace=False) + 2
        self.node_ids = {c: int(i) for c, i in zip(roster, ids, strict=True)}
        self.xs = {self.node_ids[c]: xs[c] for c in roster}
        self.silent = {self.node_ids[c] for c in silent}
        self.client_cpu: dict[int, float] = defaultdict(float)
        self.up: dict[int, int] = defaultdict(int)
        self.down: dict[int, int] = defaultdict(int)
        self.grid_cpu = 0.0
        self.strategy_cpu = 0.0
        xs_by_node = self.xs

        class VectorClient(fl.NumPyClient):
            def __init__(self, node_id: int) -> None:
                self.node_id = node_id

            def fit(self, parameters: list, config: dict) -> tuple[list, int, dict]:
                return [xs_by_node[self.node_id]], 1, {}

        def client_fn(context: Any) -> Any:
            return VectorClient(context.node_id).to_client()

        app = fl.ClientApp(client_fn=client_fn, mods=[fl.secaggplus_mod])
        self.nodes = {nid: (app, fl.Context(1, nid, {}, fl.RecordDict(), {})) for nid in self.xs}
        self.grid = self._make_grid()

    def _make_grid(self) -> Any:
        fl, bench = self.fl, self

        class _LoopbackGrid(fl.Grid):
            """Glue: the SuperLink and the network, replaced by direct calls."""

            def __init__(self) -> None:
                self.calls = 0
                self._run = fl.Run.create_empty(1)

            def set_run(self, run: Any) -> None:
                self._run = run

            @property
            def run(self) -> Any:
                return self._run

            def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
                return fl.Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

            def get_node_ids(self) -> Iterable[int]:
                return list(bench.nodes)

            def push_messages(self, messages: Iterable[Any]) -> Iterable[str]:
                raise NotImplementedError("the workflow only calls send_and_receive")

            def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Any]:
                raise NotImplementedError("the workflow only calls send_and_receive")

            def send_and_receive(self, messages, *, timeout=None):
                start = time.process_time()
                stage, self.calls = self.calls, self.calls + 1
                replies = []
                for msg in messages:
                    msg.metadata.__dict__["_message_id"] = f"{stage}-{msg.metadata.dst_node_id}"
                    nid = msg.metadata.dst_node_id
                    payload = fl.message_to_proto(msg).SerializeToString()
                    bench.down[nid] += len(payload)
                    if stage >= MASKED_STAGE and nid in bench.silent:
                        continue  # dropped: no reply before the timeout
                    app, context = bench.nodes[nid]
                    delivered = fl.message_from_proto(fl.ProtoMessage.FromString(payload))
                    t0 = time.process_time()
                    reply = app(delivered, context)
                    bench.client_cpu[nid] += time.process_time() - t0
                    payload = fl.message_to_proto(reply).SerializeToString()
                    bench.up[nid] += len(payload)
                    replies.append(fl.message_from_proto(fl.ProtoMessage.FromString(payload)))
                bench.grid_cpu += time.process_time() - start
                return replies

        return _LoopbackGrid()

    def _strategy(self, n: int) -> Any:
        bench = self

        class TimedFedAvg(self.fl.FedAvg):
            def configure_fit(self, *args: Any, **kwargs: Any) -> Any:
                t0 = time.process_time()
                try:
                    return super().configure_fit(*args, **kwargs)
                finally:
                    bench.strategy_cpu += time.process_time() - t0

            def aggregate_fit(self, *args: Any, **kwargs: Any) -> Any:
                t0 = time.process_time()
                try:
                    return super().aggregate_fit(*args, **kwargs)
                finally:
                    bench.strategy_cpu += time.process_time() - t0

        return TimedFedAvg(
            fraction_fit=1.0,
            fraction_evaluate=0.0,
            min_fit_clients=n,
            min_available_clients=n,
            fit_metrics_aggregation_fn=lambda metrics: {},
        )

    def run(self, num_shares: int, threshold: int, quantization: int) -> np.ndarray | None:
        fl, n = self.fl, len(self.nodes)
        # as flwr.server.compat.app does before it runs a workflow
        fl.TaskIdentity.task_id, fl.TaskIdentity.run_id = 1, 1
        fl.TaskIdentity.node_id = fl.SUPERLINK_NODE_ID
        base = fl.Context(1, 0, {}, fl.RecordDict(), {})
        context = fl.LegacyContext(
            base,
            config=fl.ServerConfig(num_rounds=1),
            strategy=self._strategy(n),
            client_manager=fl.SimpleClientManager(),
        )
        for nid in self.nodes:  # as flwr.server.compat.app_utils registers nodes
            context.client_manager.register(fl.GridClientProxy(nid, self.grid, 1))
        context.state.config_records[fl.MAIN_CONFIGS_RECORD] = fl.ConfigRecord(
            {fl.WorkflowKey.CURRENT_ROUND: 1}
        )
        context.state.array_records[fl.MAIN_PARAMS_RECORD] = fl.ArrayRecord()  # no model
        workflow = fl.SecAggPlusWorkflow(
            num_shares,
            threshold,
            max_weight=1.0,
            clipping_range=CLIP,
            quantization_range=quantization,
            modulus_range=FLOWER_MODULUS,
        )
        t0 = time.process_time()
        workflow(self.grid, context)
        self.workflow_cpu = time.process_time() - t0
        record = context.state.array_records[fl.MAIN_PARAMS_RECORD]
        if len(record) == 0:
            return None  # the workflow halted
        return record.to_numpy_ndarrays()[0]


def run_flower(
    fl: Any, reason: str, n: int, length: int, dropout: float, seed: int
) -> dict[str, Any]:
    k, t = threshold_for(n)
    if fl is None:
        return row(n, k=k, t=t, note=f"n/a: {reason}")
    # Flower sums the quantised values and the weight factors mod 2**32: keep n * q below it
    quantization = FLOWER_QUANTIZATION
    while n * quantization >= FLOWER_MODULUS:
        quantization //= 2
    roster, xs, silent = inputs(n, length, dropout, seed)
    random.seed(seed)  # the workflow shuffles the nodes onto its ring with `random`
    np.random.seed(seed)  # noqa: NPY002  Flower's stochastic rounding uses the global state
    wall = time.perf_counter()
    bench = FlowerRound(fl, roster, xs, silent, seed)
    try:
        mean = bench.run(k + 1, t, quantization)
    except Exception as exc:  # Flower code that cannot run here: say why, invent nothing
        return row(n, k=k, t=t, note=f"n/a: Flower raised {type(exc).__name__}: {exc}")
    if mean is None:
        return row(n, k=k, t=t, note="n/a: Flower's workflow halted (too few nodes or shares)")
    survivors = n - len(silent)
    error = float(np.abs(mean * survivors - expected_sum(roster, xs, silent)).max())
    step = 2 * CLIP / quantization
    notes = [f"FedAvg {bench.strategy_cpu:.2f} s not counted"]
    if quantization != FLOWER_QUANTIZATION:
        notes.append(f"quantization_range 2**{quantization.bit_length() - 1}")
    return row(
        n,
        k=k,
        t=t,
        client_mean_s=sum(bench.client_cpu.values()) / n,
        server_s=bench.workflow_cpu - bench.grid_cpu - bench.strategy_cpu,
        up_kB=sum(bench.up.values()) / n / 1e3,
        down_kB=sum(bench.down.values()) / n / 1e3,
        max_err=error,
        exact="yes" if error <= survivors * step * (1 + 1e-9) else "no",
        wall_s=time.perf_counter() - wall,
        note="; ".join(notes),
    )


# --- report ---------------------------------------------------------------------------


def slope(xs: list[float], ys: list[float]) -> float:
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


HEADER = (
    f"{'n':>5} {'drop':>5} {'mode':15} {'k':>4} {'t':>4} | {'client ms':>9} {'server s':>9} "
    f"{'total s':>8} | {'up kB':>7} {'down kB':>8} | {'max|err|':>8} {'exact':>5} | {'wall s':>7}"
)


def format_row(dropout: float, mode: str, r: dict[str, Any]) -> str:
    head = f"{r['n']:5d} {dropout:5.0%} {mode:15} {r['k']!s:>4} {r['t']!s:>4} | "
    if "total_s" not in r:
        return head + r["note"]
    line = (
        head + f"{1e3 * r['client_mean_s']:9.2f} {r['server_s']:9.2f} {r['total_s']:8.2f} | "
        f"{r['up_kB']:7.1f} {r['down_kB']:8.1f} | {r['max_err']:8.1e} {r['exact']:>5} | "
        f"{r['wall_s']:7.1f}"
    )
    return line + (f"  ({r['note']})" if r["note"] else "")


def report_ratios(results: dict, sizes: list[int], dropouts: list[float]) -> None:
    print("\nFlower SecAgg+ / fedstrata SecAgg+, same run (> 1: fedstrata uses less CPU)")
    for d in dropouts:
        for n in sizes:
            ours, theirs = results.get((n, d, "secagg+")), results.get((n, d, "flower-secagg+"))
            if ours is None or theirs is None:
                continue
            if "total_s" not in ours or "total_s" not in theirs:
                print(f"  n={n:5d} drop {d:4.0%}: {theirs['note'] or ours['note']}")
                continue
            print(
                f"  n={n:5d} drop {d:4.0%}: total {theirs['total_s'] / ours['total_s']:5.1f}x, "
                f"client {theirs['client_mean_s'] / ours['client_mean_s']:5.1f}x, "
                f"server {theirs['server_s'] / ours['server_s']:5.1f}x, "
                f"up bytes {theirs['up_kB'] / ours['up_kB']:4.1f}x, "
                f"down bytes {theirs['down_kB'] / ours['down_kB']:4.1f}x"
            )


def report_growth(results: dict, sizes: list[int], dropouts: list[float], modes: list[str]) -> None:
    if len(sizes) < 2:
        return
    print(f"\nGrowth with n: slope of a log-log least-squares fit over n = {sizes}")
    for d in dropouts:
        for mode in modes:
            rs = [results.get((n, d, mode)) for n in sizes]
            if any(r is None or "total_s" not in r for r in rs):
                print(f"  {mode:15} drop {d:4.0%}: n/a (a size did not run)")
                continue
            client = slope(sizes, [r["client_mean_s"] for r in rs])
            server = slope(sizes, [r["server_s"] for r in rs])
            up = slope(sizes, [r["up_kB"] for r in rs])
            print(
                f"  {mode:15} drop {d:4.0%}: client CPU n^{client:.2f}, server CPU n^{server:.2f}, "
                f"up bytes n^{up:.2f}"
            )
    ks = [threshold_for(n)[0] for n in sizes]
    k = slope(sizes, ks)
    print(
        "Cost models over the same n (k = " + ", ".join(map(str, ks)) + f"), as exponents of n:\n"
        f"  Bell et al. 2020, SecAgg+ client O(log^2 n + L log n): L log n ~ k gives n^{k:.2f}, "
        f"log^2 n ~ k^2 gives n^{2 * k:.2f};\n"
        f"  server O(n log^2 n + n L log n): n^{1 + k:.2f} to n^{1 + 2 * k:.2f}.\n"
        "  Bonawitz et al. 2017, SecAgg client O(n^2 + n L): n^1.00 while n L dominates "
        "(n < L), up to n^2.00;\n"
        "  server O(n^2 L): n^2.00."
    )


def report_target(results: dict) -> None:
    ours = results.get((1000, 0.1, "secagg+"))
    if ours is None or "total_s" not in ours:
        return
    theirs = results.get((1000, 0.1, "flower-secagg+"))
    met = "met" if ours["total_s"] < 5.0 else "NOT met"
    print(
        f"\nTarget, SecAgg+ at n = 1,000 with 10 % dropouts: {ours['total_s']:.2f} CPU s per round "
        f"(< 5 s: {met})",
        end="",
    )
    if theirs is not None and "total_s" in theirs:
        faster = "faster" if ours["total_s"] < theirs["total_s"] else "NOT faster"
        print(f"; Flower's: {theirs['total_s']:.2f} s ({faster} than Flower's)")
    else:
        print(f"; Flower's: {theirs['note'] if theirs else 'not run'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,500,1000")
    parser.add_argument("--length", type=int, default=1000)
    parser.add_argument("--dropouts", default="0,0.1")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="n = 10, 20, length 50")
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.length = "10,20", 50
    sizes = [int(s) for s in args.sizes.split(",")]
    dropouts = [float(s) for s in args.dropouts.split(",")]
    modes = args.modes.split(",")
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; choose from {', '.join(MODES)}")

    fl, reason = load_flower() if "flower-secagg+" in modes else (None, "")
    flower = f"flwr {fl.version}" if fl is not None else f"flower: {reason or 'not run'}"
    print(
        f"vector length {args.length}, dropped clients go silent before the masked input; "
        f"Python {sys.version.split()[0]}; {flower}"
    )
    print(HEADER)
    print("-" * len(HEADER))
    results: dict[tuple[int, float, str], dict[str, Any]] = {}
    for n in sizes:
        for d in dropouts:
            for mode in modes:
                if mode == "plaintext":
                    r = run_plaintext(n, args.length, d, args.seed)
                elif mode == "flower-secagg+":
                    r = run_flower(fl, reason, n, args.length, d, args.seed)
                else:
                    r = run_core(n, mode, args.length, d, args.seed)
                results[n, d, mode] = r
                print(format_row(d, mode, r), flush=True)
    report_ratios(results, sizes, dropouts)
    report_growth(results, sizes, dropouts, modes)
    report_target(results)


if __name__ == "__main__":
    main()
