"""Federated HK-MVFC (rule ``sum``) under fedstrata's simulator and Flower's simulation engine.

The same federation runs twice: once in fedstrata's discrete-event simulator (in this
process, :func:`fedstrata.scenarios.run.simulate`), once under Flower 1.42.0's
``flwr.simulation.run_simulation`` with a ``ServerApp`` and a ``ClientApp`` (in Flower's
own venv, as a subprocess that prints one JSON line). Flower never becomes a fedstrata
dependency: only this script's Flower half imports it, and only in that venv.

What is the same on both sides (so that the final centres can be bit-identical):

* the data: the FedHK-MVFC §6.1 synthetic set (``heat-kernel-synthetic``), 5 samples a
  client, IID, the scenario's seed; the Flower side splits it with fedstrata's own
  :func:`~fedstrata.scenarios.wiring.prepare_data`, so client ``j`` holds the same rows;
* the algorithm: every Flower client is a fedstrata
  :class:`~fedstrata.plugins.multiview.MultiViewLearner` (its ``update`` computes the
  statistics); the ``ServerApp`` sums them and takes the root's step with the plug-in's
  ``combine`` and ``next_state``;
* the start: fedstrata's run opens with its setup round (pooled kernel references,
  k-means++ seeding); the Flower side starts from that run's ``init`` record and the
  references the root configured, so the Flower time covers the statistics rounds only;
* the summation order: floating-point addition is not associative. fedstrata's
  aggregators add their children's partials in sorted id order, fog by fog, then the
  root adds the fogs in sorted order. The ``ServerApp`` adds the client replies in that
  same tree and order (``--flat-sum`` adds them in one flat pass instead, to show that
  the order matters).

Times: fedstrata's wall time is the whole ``simulate`` call (building the federation,
setup round, rounds, final labelling); Flower's is the whole ``run_simulation`` call
(Ray start, actors, each actor preparing its data once, the rounds). Flower runs with its
defaults (the Ray backend, one CPU a ClientApp): on a 2-core machine, two actors.

Set-up of Flower's venv (see benchmarks/requirements-flower.txt)::

    python -m venv /tmp/flwr-venv
    /tmp/flwr-venv/bin/pip install -r benchmarks/requirements-flower.txt
    /tmp/flwr-venv/bin/pip install -e .

Usage::

    python benchmarks/flower_peer.py [--clients 10,100,1000] [--rounds 5]
                                     [--flower-python /tmp/flwr-venv/bin/python] [--flat-sum]
    python benchmarks/flower_peer.py --smoke     # n = 10; Flower optional
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_PYTHON = "/tmp/flwr-venv/bin/python"
INSTALL = (
    "python -m venv /tmp/flwr-venv && /tmp/flwr-venv/bin/pip install -r "
    "benchmarks/requirements-flower.txt && /tmp/flwr-venv/bin/pip install -e ."
)
JOB_ENV = "FEDSTRATA_FLOWER_PEER_JOB"
PER_CLIENT = 5  # samples a client (sim_scale_hk's shape)

SCENARIO = """
name: flower-peer
seed: {seed}
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: {per}}}, partition: {{kind: iid}}}}
topology:
  tiers: [{{name: fog, count: {fogs}, link: {{latency: {{dist: constant, value: 0.02}}, bandwidth_mbps: 100}}}}]
  clients: {{count: {clients}, link: {{latency: {{dist: lognormal, median: 0.05, sigma: 0.5}}, bandwidth_mbps: 5}}}}
algorithm: {{name: hk-mvfc, n_clusters: 4, center_update: exact}}
protocol: {{rule: sum, rounds: {rounds}, tol: 0.0, deadline_s: 30}}
"""


def scenario_text(clients: int, rounds: int, seed: int) -> str:
    """The benchmark's scenario: ``clients`` clients of 5 samples, one fog per 100."""
    per = max(clients * PER_CLIENT // 4, 1)
    fogs = max(1, clients // 100)
    return SCENARIO.format(per=per, fogs=fogs, clients=clients, rounds=rounds, seed=seed)


# --- fedstrata side ----------------------------------------------------------------------


def run_fedstrata(clients: int, rounds: int, seed: int) -> dict[str, Any]:
    """fedstrata's run: wall time, final centres, and the Flower side's starting point."""
    from fedstrata.scenarios.loader import parse_scenario
    from fedstrata.scenarios.run import simulate

    text = scenario_text(clients, rounds, seed)
    sc = parse_scenario(text)
    t0 = time.perf_counter()
    fed, summary, _ = simulate(sc)
    wall = time.perf_counter() - t0
    root = sc.topology.cloud_id
    init = next(
        r["fields"]["state"] for r in fed.sim.records if r["node"] == root and r["kind"] == "init"
    )
    return {
        "wall": wall,
        "rounds": int(summary["rounds"]),
        "centers": [np.asarray(c) for c in fed.final_state.centers],
        "job": {
            "scenario": text,
            "init": init,
            "extras": fed.sim.node(root).extras,
            "rounds": int(summary["rounds"]),
        },
    }


def run_flower(python: str, job: dict[str, Any], flat: bool) -> dict[str, Any]:
    """The Flower side in its venv: wall time and final centres (from its JSON line)."""
    with tempfile.TemporaryDirectory(prefix="flower-peer-") as tmp:
        path = Path(tmp) / "job.pkl"
        path.write_bytes(pickle.dumps({**job, "flat": flat, "out": str(Path(tmp) / "out.json")}))
        env = dict(os.environ)
        tree = str(HERE.parent)
        # Ray's actors import this module by name and fedstrata from the source tree
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), tree, env.get("PYTHONPATH", "")])
        env[JOB_ENV] = str(path)
        cmd = [python, str(HERE / "flower_peer.py"), "--flower-side"]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        if out.returncode != 0 or not lines:
            raise RuntimeError(f"the Flower side failed ({out.returncode}):\n{out.stderr[-3000:]}")
        got = json.loads(lines[-1])
    got["centers"] = [np.asarray(c, dtype=np.float64) for c in got["centers"]]
    return got


def flower_missing(python: str) -> str | None:
    """Why the Flower venv cannot run the Flower side (None when it can)."""
    if not Path(python).exists():
        return f"{python} does not exist"
    probe = subprocess.run(
        [python, "-c", "import flwr.simulation, ray"], capture_output=True, text=True, check=False
    )
    return None if probe.returncode == 0 else probe.stderr.strip().splitlines()[-1]


# --- Flower side (runs in Flower's venv) -------------------------------------------------

_CACHE: dict[str, Any] = {}


def _job() -> dict[str, Any]:
    if "job" not in _CACHE:
        _CACHE["job"] = pickle.loads(Path(os.environ[JOB_ENV]).read_bytes())
    return _CACHE["job"]


def _federation() -> dict[str, Any]:
    """The scenario's data split, wiring and plug-in, built once per process."""
    if "fed" not in _CACHE:
        from fedstrata.nodes.algorithm import algorithm_for
        from fedstrata.scenarios.build import model_of, protocol_config
        from fedstrata.scenarios.loader import parse_scenario
        from fedstrata.scenarios.node_builder import NodeBuilder
        from fedstrata.scenarios.wiring import prepare_data, wire_topology

        sc = parse_scenario(_job()["scenario"])
        data = prepare_data(sc)
        ds = data.dataset
        dims = tuple(X.shape[1] for X in ds.views)
        model = model_of(sc, dims, ds.n_samples)
        wiring = wire_topology(sc)
        builder = NodeBuilder.of(sc, model, dims, protocol_config(sc, "flower-peer"), wiring)
        _CACHE["fed"] = {
            "sc": sc,
            "data": data,
            "wiring": wiring,
            "clients": list(wiring.clients),
            "client_algorithm": builder.client_algorithm,
            "root_algorithm": algorithm_for(model, builder.protocol, builder.shape),
            "learners": {},
        }
    return _CACHE["fed"]


def _learner(pid: int) -> Any:
    """Client ``pid``'s fedstrata learner over its own views, configured like fedstrata's."""
    fed = _federation()
    got = fed["learners"].get(pid)
    if got is None:
        data, name = fed["data"], fed["clients"][pid]
        held = data.held[pid]
        views = [data.dataset.views[g][data.indices[pid]] for g in held]
        got = fed["client_algorithm"].learner(
            views, view_ids=held, rng=np.random.default_rng(0), node_id=name
        )
        got.configure(_job()["extras"])
        fed["learners"][pid] = got
    return got


def _to_arrays(body: dict[str, Any]) -> Any:
    from flwr.app import Array, ArrayRecord

    arrays = {f"centers_{h}": c for h, c in enumerate(body["centers"])}
    arrays["view_weights"] = body["view_weights"]
    if "view_scale" in body:
        arrays["view_scale"] = body["view_scale"]
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def _from_arrays(record: Any) -> dict[str, Any]:
    arrays = {k: v.numpy() for k, v in record.items()}
    centers = [arrays[f"centers_{h}"] for h in range(sum(k.startswith("centers_") for k in arrays))]
    body: dict[str, Any] = {"centers": centers, "view_weights": arrays["view_weights"]}
    if "view_scale" in arrays:
        body["view_scale"] = arrays["view_scale"]
    return body


def client_train(msg: Any, context: Any) -> Any:
    """The ClientApp's ``train``: fedstrata's client statistics under the sent model."""
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

    pid = int(context.node_config["partition-id"])
    partial, _ = _learner(pid).update(_from_arrays(msg.content["model"]))
    H = len(partial["num"])
    arrays = {f"num_{h}": partial["num"][h] for h in range(H)}
    arrays.update({f"den_{h}": partial["den"][h] for h in range(H)})
    arrays.update({k: partial[k] for k in ("costs", "mass", "counts")})
    meta = MetricRecord(
        {
            "pid": pid,
            "n": int(partial["n"]),
            "contributors": int(partial["contributors"]),
            "objective": float(partial["objective"]),
        }
    )
    record = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})
    return Message(RecordDict({"stats": record, "meta": meta}), reply_to=msg)


def _partial(reply: Any) -> tuple[int, dict[str, Any]]:
    """A client reply as (partition id, fedstrata partial)."""
    arrays = {k: v.numpy() for k, v in reply.content["stats"].items()}
    meta = reply.content["meta"]
    H = sum(k.startswith("num_") for k in arrays)
    partial = {
        "mode": "stats",
        "num": [arrays[f"num_{h}"] for h in range(H)],
        "den": [arrays[f"den_{h}"] for h in range(H)],
        "costs": arrays["costs"],
        "mass": arrays["mass"],
        "counts": arrays["counts"],
        "n": int(meta["n"]),
        "contributors": int(meta["contributors"]),
        "objective": float(meta["objective"]),
    }
    return int(meta["pid"]), partial


def tree_sum(partials: dict[str, dict[str, Any]], fed: dict[str, Any], flat: bool) -> Any:
    """The root's total: each aggregator adds its children in sorted id order, as fedstrata's do."""
    algorithm = fed["root_algorithm"]
    if flat:
        return algorithm.combine([partials[c] for c in fed["clients"]])
    children, root = fed["wiring"].children, fed["sc"].topology.cloud_id

    def total(node: str) -> dict[str, Any]:
        if node in partials:
            return partials[node]
        return algorithm.combine([total(c) for c in sorted(children[node])])

    return total(root)


def _all_nodes(grid: Any, n: int, timeout: float = 600.0) -> list[int]:
    """The ids of all ``n`` SuperNodes (the simulation registers them while the app starts)."""
    end = time.monotonic() + timeout
    while True:
        nodes = list(grid.get_node_ids())
        if len(nodes) >= n or time.monotonic() > end:
            if len(nodes) != n:
                raise RuntimeError(f"{len(nodes)} of {n} SuperNodes registered")
            return nodes
        time.sleep(0.05)


def server_main(grid: Any, context: Any) -> None:
    """The ServerApp: rounds of send model, receive statistics, tree sum, root step."""
    from flwr.app import Message, RecordDict

    job, fed = _job(), _federation()
    algorithm = fed["root_algorithm"]
    nodes = _all_nodes(grid, len(fed["clients"]))
    state, extras, objective = job["init"], job["extras"], math.inf
    for it in range(1, job["rounds"] + 1):
        state = algorithm.at_iteration(state, it, extras)
        record = _to_arrays(algorithm.model_body(state, extras))
        content = RecordDict({"model": record})
        msgs = [Message(content, dst_node_id=n, message_type="train") for n in nodes]
        replies = list(grid.send_and_receive(msgs))
        bad = [r.error for r in replies if r.has_error()]
        if bad or len(replies) != len(nodes):
            raise RuntimeError(f"round {it}: {len(replies)} replies, errors {bad[:3]}")
        partials = {}
        for reply in replies:
            pid, partial = _partial(reply)
            algorithm.check_partial(partial)
            partials[fed["clients"][pid]] = partial
        step = algorithm.next_state(
            tree_sum(partials, fed, job["flat"]), state, objective, tol=0.0, relative=False
        )
        state, objective = step.state, step.objective
    out = {"centers": [np.asarray(c).tolist() for c in state.centers], "rounds": job["rounds"]}
    Path(job["out"]).write_text(json.dumps(out))


def flower_side() -> None:
    """Run the Flower simulation of the job in ``$FEDSTRATA_FLOWER_PEER_JOB``; print JSON."""
    import logging

    import flower_peer  # by name, so that Ray's actors import it instead of unpickling __main__
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.WARNING)
    job = _job()
    client_app = ClientApp()
    client_app.train()(flower_peer.client_train)
    server_app = ServerApp()
    server_app.main()(flower_peer.server_main)
    n = len(_federation()["clients"])
    t0 = time.perf_counter()
    run_simulation(server_app, client_app, num_supernodes=n)
    wall = time.perf_counter() - t0
    out = json.loads(Path(job["out"]).read_text())
    print(json.dumps({"wall": wall, **out}))


# --- driver ------------------------------------------------------------------------------


def identical(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """Every view's centres equal bit for bit (same shapes, same values)."""
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def main() -> int:
    """Parse arguments, run both sides per client count and print the table."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--clients", default="10,100,1000", help="comma-separated client counts")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--flower-python", default=os.environ.get("FLOWER_PYTHON", DEFAULT_PYTHON))
    ap.add_argument("--flat-sum", action="store_true", help="Flower adds replies in one pass")
    ap.add_argument("--smoke", action="store_true", help="n = 10 only; Flower optional")
    ap.add_argument("--flower-side", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.flower_side:
        flower_side()
        return 0
    sizes = [10] if args.smoke else [int(x) for x in args.clients.split(",")]
    missing = flower_missing(args.flower_python)
    if missing is not None:
        print(f"flower: not installed ({missing}; {INSTALL})")
    print(f"rounds={args.rounds} seed={args.seed} samples/client={PER_CLIENT} rule=sum")
    print(f"{'clients':>8} {'fedstrata s':>12} {'Flower s':>10} {'ratio':>8}  identical")
    failed = False
    for n in sizes:
        fs = run_fedstrata(n, args.rounds, args.seed)
        if missing is not None:
            print(f"{n:>8} {fs['wall']:>12.2f} {'n/a':>10} {'n/a':>8}  n/a", flush=True)
            continue
        fl = run_flower(args.flower_python, fs["job"], args.flat_sum)
        same = identical(fs["centers"], fl["centers"])
        failed |= not same
        ratio = fl["wall"] / fs["wall"]
        print(
            f"{n:>8} {fs['wall']:>12.2f} {fl['wall']:>10.2f} {ratio:>7.1f}x  "
            f"identical: {'yes' if same else 'no'}",
            flush=True,
        )
    print("ratio = Flower wall / fedstrata wall")
    return 1 if failed and not args.flat_sum else 0


if __name__ == "__main__":
    sys.exit(main())
