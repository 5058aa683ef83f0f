"""MQTT at scale: 50 to 1,000 client nodes on one local Mosquitto, next to the simulator.

    python benchmarks/mqtt_scale.py [--sizes 50,200,500,1000] [--rounds 10] [--json out.json]
    python benchmarks/mqtt_scale.py --smoke                  # 10 clients, 3 rounds, ~10 s
    python benchmarks/mqtt_scale.py --sizes 1000 --profile   # + cProfile of the MQTT rounds

The scenario (per size N): HK-MVFC (rule ``sum``, exact centre update: one exact
iteration per round) on the heat-kernel-synthetic data with ``--samples`` (20) samples
per client (IID split), a flat star (N clients directly under the cloud), client
links with a constant ``--latency`` (0.2 ms) and 10 Gbit/s ("loopback-like"),
``tol: 0`` so that both transports run exactly ``--rounds`` rounds, QoS ``--qos``
(1), and a 600 s deadline, long enough that no client is ever dropped.

Each (size, transport) runs in its own child process, so memory figures belong to
one run, and a size that fails, stalls or hangs prints a status line instead of
ending the benchmark (a child is killed ``--timeout`` + 300 s after it started).
The MQTT child raises its soft open-file limit to the hard one before it starts
Mosquitto (which inherits it): every node holds one socket. Sizes run one after the
other, on an otherwise idle machine if possible; on shared cores expect +-20 %
between runs.

MQTT (``fedstrata.scenarios.run_mqtt.mqtt_run`` against a fresh private Mosquitto
per size; every node one aiomqtt connection; all nodes asyncio tasks of one process):

* ``connect s`` -- wall seconds from the start of the nodes until the root closed the
  setup round: N TCP + MQTT connections, subscriptions, the retained setup model,
  every client's kernel reference and candidates. Not in the per-round figures.
* ``s/round`` -- wall seconds from the root closing the setup round to the root
  closing its last round, divided by the rounds (the *rounds phase*);
  ``rnd/min`` is 60 / ``s/round``.
* ``msg/s`` -- PUBLISH packets sent plus PUBLISH packets delivered, counted by the
  nodes over the rounds phase, per wall second (per round: 1 model + N updates sent,
  N models + N updates delivered). Mosquitto's ``$SYS`` publish and byte counters
  over the whole run are printed too.
* ``broker MiB`` -- Mosquitto's peak resident memory (``VmHWM``); ``proc MiB`` --
  the child's peak resident memory (``ru_maxrss``: data, nodes, N connections, and
  the record built after the run).

SIM (``fedstrata.scenarios.run.simulate``, the same scenario in virtual time):

* ``virt s/rnd`` -- virtual seconds per round over the same rounds phase. Virtual
  time charges the links' latency and each client ``Compute.flops / speed``; the N
  clients compute *in parallel*, each on its own machine. Unless
  ``--speed-gflops`` is given, the client speed is calibrated on this machine: the
  simulator runs once at 1 GFLOP/s while this script times the clients'
  ``handle()``, the speed is set to (modelled flops) / (measured CPU seconds) -- a
  client as fast as one core of this machine on this workload -- and the simulator
  runs again at that speed. Both speeds and virtual round times are printed.
* ``simwall s/rnd`` -- wall seconds per round of that second simulated run: every
  node's ``handle()`` one after the other in one process, plus the virtual-time
  kernel. It is the baseline measured in the same benchmark: the MQTT run's node
  work without a network stack.

Ratios: ``x virt`` = MQTT ``s/round`` / ``virt s/rnd`` (the issue's target: <= 2 at
N = 1,000). ``x simwall`` = MQTT ``s/round`` / ``simwall s/rnd``: what the real MQTT
stack and broker cost on top of the same node work. All N clients of the MQTT run
share one Python thread, while a virtual round lets N clients compute at once, so
``x virt`` grows like N when node work dominates, however cheap the MQTT stack is.

Where a round goes (per round of the rounds phase, one line per transport):
``edge``/``root`` are CPU seconds inside the clients'/root's ``handle()`` (numpy,
wire encode/decode, validation; the collections of the garbage collector they
trigger excluded), measured by wrapping ``handle`` in this script; ``gc`` the cyclic
garbage collector (``gc.callbacks``); ``stack`` the rest of the event-loop thread's
CPU (MQTT: fedstrata's runner, aiomqtt, paho-mqtt, asyncio, socket syscalls; SIM:
the virtual-time kernel); ``threads`` the process's other threads (aiomqtt's connect
executor, the ``$SYS`` monitor); ``idle`` wall - event-loop CPU (the loop waited:
for the broker, or for a core); ``broker`` Mosquitto's CPU, in its own process;
``node share`` = ``handle()`` / event-loop CPU.

``--processes K`` (K > 1) passes ``processes=K`` to ``mqtt_run``, which deals the
nodes out to K worker processes: the per-round wall time then comes from the root's
round records (``rounds.csv`` clocks), ``msg/s`` from the flat star's 3N + 1
messages per round, and there is no CPU split (the workers are not instrumented;
their total CPU and the largest one's peak RSS are printed).

Experiments: ``--qos 0`` (no PUBACKs); ``--gc freeze|tune|off`` calls ``gc.freeze()``,
``gc.freeze()`` and ``gc.set_threshold(20000, 10, 10)``, or ``gc.disable()`` in the
MQTT run when the setup round closes (on top of fedstrata's own ``gc.freeze()`` and
young threshold of 50,000 while the nodes run); ``--signed`` makes both transports
sign and verify every message (by default MQTT runs ``insecure``, as the simulator
does not sign: the same node work); ``--profile``
runs cProfile (CPU time) on the event-loop thread over the MQTT rounds phase and
prints self time by package and the top functions (it slows that run down, so its
timings are not the benchmark's); ``--profile-dump PATH`` also writes the raw pstats
to ``PATH.N``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SCENARIO: dict[str, Any] = {
    "seed": 0,
    "data": {"dataset": "heat-kernel-synthetic", "partition": {"kind": "iid"}},
    "algorithm": {"name": "hk-mvfc", "n_clusters": 4, "center_update": "exact"},
    "protocol": {"rule": "sum", "tol": 0.0, "deadline_s": 600.0},
}
NOMINAL_GFLOPS = 1.0
TICK = os.sysconf("SC_CLK_TCK")


def scenario(n: int, args: argparse.Namespace, speed_gflops: float) -> Any:
    from fedstrata.scenarios.schema import Scenario

    data = json.loads(json.dumps(SCENARIO))
    data["name"] = f"mqtt-scale-{n}"
    data["data"]["params"] = {"n_per_cluster": max(1, -(-n * args.samples // 4))}
    data["topology"] = {
        "clients": {
            "count": n,
            "link": {"latency": args.latency, "bandwidth_mbps": 10_000.0},
            "speed_gflops": speed_gflops,
        }
    }
    data["protocol"]["rounds"] = args.rounds
    data["protocol"]["qos"] = args.qos
    if args.signed:  # both transports sign and verify every message
        data["privacy"] = {"sign": True}
    return Scenario.model_validate(data)


# ----------------------------------------------------------------------------- probes


def proc_cpu(pid: int | str) -> float:
    """utime + stime of a process, in seconds (/proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / TICK


def proc_mem_kib(pid: int | str, key: str) -> int | None:
    """A ``Vm*`` line of /proc/PID/status, in KiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def fd_count(pid: int | None) -> float:
    """Open file descriptors of a process (NaN if unreadable)."""
    try:
        return float(len(os.listdir(f"/proc/{pid}/fd"))) if pid else float("nan")
    except OSError:
        return float("nan")


def self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class GcClock:
    """CPU seconds spent in the cyclic garbage collector (``gc.callbacks``), and collections."""

    def __init__(self) -> None:
        import gc

        self.cpu = 0.0
        self.collections = 0
        self.full = 0  # generation-2 collections
        self.full_cpu = 0.0
        self.by_gen = [[0, 0.0, 0] for _ in range(3)]  # collections, CPU s, collected
        self._t = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t = time.thread_time()
        else:
            dt = time.thread_time() - self._t
            self.cpu += dt
            self.collections += 1
            if info.get("generation") == 2:
                self.full += 1
                self.full_cpu += dt
            g = self.by_gen[info.get("generation", 0)]
            g[0] += 1
            g[1] += dt
            g[2] += info.get("collected", 0)


class Timer:
    """Wraps the nodes' ``handle`` (class level): CPU inside it, by role, and snapshots.

    The root's ``handle`` returning an ``init`` record (setup round closed) and a
    ``Finished`` effect delimit the rounds phase; ``snapshot`` is called at both.
    """

    def __init__(self, snapshot: Any) -> None:
        self.gc = GcClock()
        self.cpu = {"edge": 0.0, "root": 0.0}
        self.flops = 0.0
        self.snapshot = snapshot
        self.marks: dict[str, dict[str, float]] = {}

    def install(self) -> None:
        from fedstrata.nodes.aggregator import AggregatorNode
        from fedstrata.nodes.client import ClientNode
        from fedstrata.nodes.events import Compute, Finished, Record

        timer = self
        client_handle, agg_handle = ClientNode.handle, AggregatorNode.handle

        def edge(node: Any, event: Any) -> list[Any]:
            t, g = time.thread_time(), timer.gc.cpu
            effects = client_handle(node, event)
            timer.cpu["edge"] += time.thread_time() - t - (timer.gc.cpu - g)
            for eff in effects:
                if type(eff) is Compute:
                    timer.flops += eff.flops
            return effects

        def agg(node: Any, event: Any) -> list[Any]:
            t, g = time.thread_time(), timer.gc.cpu
            effects = agg_handle(node, event)
            timer.cpu["root"] += time.thread_time() - t - (timer.gc.cpu - g)
            if node.parent is None:
                for eff in effects:
                    if type(eff) is Record and eff.kind == "init":
                        timer.marks["A"] = timer.snapshot(timer)
                    elif type(eff) is Finished:
                        timer.marks["B"] = timer.snapshot(timer)
            return effects

        ClientNode.handle = edge  # type: ignore[method-assign]
        AggregatorNode.handle = agg  # type: ignore[method-assign]


class MemSampler(threading.Thread):
    """Peak VmRSS of some processes, sampled every 0.2 s."""

    def __init__(self, pids: dict[str, int | str]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.peak = dict.fromkeys(pids, 0)
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.2):
            for name, pid in self.pids.items():
                self.peak[name] = max(self.peak[name], proc_mem_kib(pid, "VmRSS") or 0)


# ----------------------------------------------------------------------------- children


def rounds_phase(rows: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """Clock of the root's setup aggregate and of its last iteration aggregate."""
    setup = [r["virtual_time_s"] for r in rows if r["tier"] == "cloud" and r["phase"] == "setup"]
    iters = [r["virtual_time_s"] for r in rows if r["tier"] == "cloud" and r["phase"] == "iter"]
    return (setup[-1] if setup else None), (iters[-1] if iters else None)


def child_sim(n: int, args: argparse.Namespace) -> dict[str, Any]:
    from fedstrata.scenarios.run import simulate

    def snap(timer: Timer) -> dict[str, float]:
        return {
            "t": time.perf_counter(),
            "cpu": time.thread_time(),
            "gc": timer.gc.cpu,
            "gcn": timer.gc.collections,
            "gc2": timer.gc.full,
            "gc2_cpu": timer.gc.full_cpu,
            **timer.cpu,
        }

    timer = Timer(snap)
    timer.install()
    out: dict[str, Any] = {"n": n}

    def one(speed: float) -> tuple[dict[str, Any], dict[str, Any]]:
        timer.cpu, timer.flops, timer.marks = {"edge": 0.0, "root": 0.0}, 0.0, {}
        t0 = time.perf_counter()
        _, summary, rows = simulate(scenario(n, args, speed))
        wall = time.perf_counter() - t0
        a, b = rounds_phase(rows)
        rounds = summary["rounds"]
        res = {
            "speed_gflops": speed,
            "status": summary["status"],
            "rounds": rounds,
            "wall_s": wall,
            "virtual_s": summary["virtual_time_s"],
            "messages": summary["messages"],
            "virt_round_s": (b - a) / rounds
            if a is not None and b is not None and rounds
            else None,
            "client_cpu_s": timer.cpu["edge"],
            "client_flops": timer.flops,
        }
        if "A" in timer.marks and "B" in timer.marks:
            A, B = timer.marks["A"], timer.marks["B"]
            res["wall_round_s"] = (B["t"] - A["t"]) / rounds
            res["edge_round_s"] = (B["edge"] - A["edge"]) / rounds
            res["root_round_s"] = (B["root"] - A["root"]) / rounds
            res["gc_round_s"] = (B["gc"] - A["gc"]) / rounds
            res["gc_collections"] = B["gcn"] - A["gcn"]
            res["gc_full"] = B["gc2"] - A["gc2"]
            res["gc_full_s"] = B["gc2_cpu"] - A["gc2_cpu"]
        return res, summary

    if args.speed_gflops is None:
        first, _ = one(NOMINAL_GFLOPS)
        out["nominal"] = first
        speed = first["client_flops"] / max(first["client_cpu_s"], 1e-9) / 1e9
    else:
        speed = args.speed_gflops
    res, summary = one(speed)
    out["run"] = res
    out["ari"] = summary["metrics"].get("ari")
    out["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out


def child_mqtt(n: int, args: argparse.Namespace) -> dict[str, Any]:
    import asyncio
    import gc

    import fedstrata.scenarios.run_mqtt as rm
    from fedstrata.broker.launcher import PrivateBroker
    from fedstrata.broker.runner import probe_broker

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:  # N sockets here, N in the broker (which inherits the limit)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    out: dict[str, Any] = {"n": n, "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}
    state: dict[str, Any] = {"runners": {}, "broker_pid": None, "profile": None}

    def snap(timer: Timer) -> dict[str, float]:
        runners = state["runners"].values()
        s = {
            "t": time.perf_counter(),
            "loop_cpu": time.thread_time(),
            "proc_cpu": self_cpu(),
            "broker_cpu": proc_cpu(state["broker_pid"]) if state["broker_pid"] else float("nan"),
            "sent": float(sum(r.traffic.publishes for r in runners)),
            "delivered": float(sum(r.traffic.delivered for r in runners)),
            "fds": float(len(os.listdir("/proc/self/fd"))),
            "broker_fds": fd_count(state["broker_pid"]),
            "gc": timer.gc.cpu,
            "gcn": timer.gc.collections,
            "gc2": timer.gc.full,
            "gc2_cpu": timer.gc.full_cpu,
            **timer.cpu,
        }
        if args.gc != "default":  # the experiment of --gc, on the rounds phase only
            if "A" not in timer.marks:
                if args.gc in ("freeze", "tune"):
                    gc.freeze()  # every object alive now (nodes, connections): never scanned
                if args.gc == "tune":
                    gc.set_threshold(20_000, 10, 10)  # young collections 28x less often
                if args.gc == "off":
                    gc.disable()
            elif args.gc == "off":
                gc.enable()
        prof = state["profile"]
        if prof is not None:  # profile the rounds phase only
            if "A" not in timer.marks:
                prof.enable()
            else:
                prof.disable()
        return s

    timer = Timer(snap)
    timer.install()
    make_runners = getattr(rm, "_make_runners", None)  # the in-process runners, to count traffic
    if make_runners is not None:

        def _make_runners(*a: Any, **k: Any) -> Any:
            log, runners = make_runners(*a, **k)
            state["runners"] = runners
            return log, runners

        rm._make_runners = _make_runners
    if args.profile:
        import cProfile

        state["profile"] = cProfile.Profile(time.thread_time)  # CPU: immune to preemption

    with PrivateBroker() as broker:
        state["broker_pid"] = broker.pid
        asyncio.run(probe_broker(broker.host, int(broker.port or 0)))
        sampler = MemSampler({"proc": "self"})
        sampler.start()
        pid = state["broker_pid"]
        cpu0, b0, t0 = self_cpu(), proc_cpu(pid) if pid else float("nan"), time.perf_counter()
        # unsigned unless --signed: the simulated run does not sign either (same node work)
        kwargs: dict[str, Any] = {"timeout_s": args.timeout, "insecure": not args.signed}
        if args.processes > 1:  # fedstrata deals the nodes out to worker processes
            kwargs["processes"] = args.processes
        try:
            _, summary, rows = rm.mqtt_run(
                scenario(n, args, NOMINAL_GFLOPS), broker.host, int(broker.port or 0), **kwargs
            )
        finally:
            sampler.halt.set()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers, joined by now
        out["workers_cpu_s"] = children.ru_utime + children.ru_stime
        out["workers_peak_kib"] = children.ru_maxrss  # the largest worker's peak
        out["total_wall_s"] = time.perf_counter() - t0
        out["total_proc_cpu_s"] = self_cpu() - cpu0
        if state["broker_pid"]:
            out["broker_cpu_s"] = proc_cpu(state["broker_pid"]) - b0
            out["broker_hwm_kib"] = proc_mem_kib(state["broker_pid"], "VmHWM")
            out["broker_rss_kib"] = proc_mem_kib(state["broker_pid"], "VmRSS")
    out["proc_peak_run_kib"] = sampler.peak["proc"]
    out["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rounds = summary["rounds"]
    out.update(
        status=summary["status"],
        reason=summary["reason"],
        rounds=rounds,
        wall_s=summary["wall_time_s"],
        messages=summary["messages"],
        broker_sys=summary.get("broker_sys"),
        ari=summary["metrics"].get("ari"),
        reconnects=sum(t["reconnects"] for t in summary["per_tier"].values()),
        processes=summary.get("processes", 1),
    )
    a, b = rounds_phase(rows)
    if a is not None and b is not None and rounds:
        out["setup_closed_s"] = a
        out["rows_round_s"] = (b - a) / rounds
    if "A" in timer.marks and "B" in timer.marks and rounds:
        A, B = timer.marks["A"], timer.marks["B"]
        d = {k: B[k] - A[k] for k in A}
        out["phase"] = {
            "wall_s": d["t"],
            "round_s": d["t"] / rounds,
            "edge_s": d["edge"],
            "root_s": d["root"],
            "gc_s": d["gc"],
            "gc_collections": d["gcn"],
            "gc_full": d["gc2"],
            "gc_full_s": d["gc2_cpu"],
            "loop_cpu_s": d["loop_cpu"],
            "proc_cpu_s": d["proc_cpu"],
            "broker_cpu_s": d["broker_cpu"],
            "messages": d["sent"] + d["delivered"],
            "fds": A["fds"],
            "broker_fds": A["broker_fds"],
        }
    prof = state["profile"]
    if prof is not None and "B" in timer.marks:
        out["profile"] = profile_summary(prof)
        if args.profile_dump is not None:
            prof.dump_stats(f"{args.profile_dump}.{n}")
    return out


def profile_summary(prof: Any) -> dict[str, Any]:
    import pstats

    groups = [
        ("select/epoll wait", lambda f, fn: "poll' of 'select." in fn),
        ("socket send/recv", lambda f, fn: f == "~" and ("_socket.socket" in fn)),
        (
            "node code: fedstrata algorithms/nodes/wire",
            lambda f, fn: (
                "fedstrata/" in f and "/broker/" not in f and "fedstrata/mqtt.py" not in f
            ),
        ),
        ("numpy", lambda f, fn: "numpy" in f or "numpy" in fn),
        (
            "fedstrata runner + mqtt rules",
            lambda f, fn: "fedstrata/broker/" in f or "fedstrata/mqtt.py" in f,
        ),
        ("aiomqtt", lambda f, fn: "aiomqtt" in f),
        ("paho-mqtt", lambda f, fn: "paho" in f),
        ("asyncio + selectors", lambda f, fn: "asyncio" in f or "selectors" in f),
        ("other Python", lambda f, fn: f != "~"),
        ("other built-ins", lambda f, fn: True),
    ]
    st = pstats.Stats(prof)
    total = 0.0
    by: dict[str, float] = {g: 0.0 for g, _ in groups}
    funcs = []
    for (file, line, name), (_cc, nc, tt, _ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        total += tt
        label = f"{file}:{line}({name})" if file != "~" else name
        funcs.append((tt, nc, label))
        for g, test in groups:
            if test(file, name):
                by[g] += tt
                break
    funcs.sort(reverse=True)
    short = lambda s: s.split("site-packages/")[-1].split("/work/main/")[-1]  # noqa: E731
    return {
        "total_s": total,
        "groups": sorted(by.items(), key=lambda kv: -kv[1]),
        "top": [(tt, nc, short(label)) for tt, nc, label in funcs[:15]],
    }


# ----------------------------------------------------------------------------- parent


def run_child(kind: str, n: int, args: argparse.Namespace, limit: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mqtt-scale-") as tmp:
        path = Path(tmp) / "out.json"
        cmd = [
            sys.executable,
            __file__,
            "--child",
            kind,
            "--sizes",
            str(n),
            "--out",
            str(path),
            *forward(args),
        ]
        t0 = time.perf_counter()
        # its own process group: a child that hangs is killed with its Mosquitto
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"error": f"killed after {limit:.0f} s (child timeout)"}
        if proc.returncode != 0 or not path.exists():
            tail = (stderr or stdout).strip().splitlines()[-3:]
            return {"error": f"exit {proc.returncode}: {' | '.join(tail) or 'no output'}"}
        res = json.loads(path.read_text())
        res["child_s"] = time.perf_counter() - t0
        return res


def forward(args: argparse.Namespace) -> list[str]:
    out = [
        "--rounds",
        str(args.rounds),
        "--samples",
        str(args.samples),
        "--latency",
        repr(args.latency),
        "--timeout",
        repr(args.timeout),
        "--qos",
        str(args.qos),
        "--processes",
        str(args.processes),
    ]
    if args.speed_gflops is not None:
        out += ["--speed-gflops", repr(args.speed_gflops)]
    if args.profile:
        out.append("--profile")
    if args.signed:
        out.append("--signed")
    if args.gc != "default":
        out += ["--gc", args.gc]
    if args.profile_dump:
        out += ["--profile-dump", str(Path(args.profile_dump).resolve())]
    return out


def fmt(x: Any, spec: str = ".3g", none: str = "-") -> str:
    if x is None or (isinstance(x, float) and x != x):
        return none
    return format(x, spec)


def mib(kib: Any) -> str:
    return "-" if not kib else f"{kib / 1024:,.0f}"


def report_size(n: int, sim: dict[str, Any], mq: dict[str, Any]) -> dict[str, Any]:
    """Print one size's details; return its table row."""
    row: dict[str, Any] = {"n": n}
    print(f"\n=== N = {n} clients ===")
    if "error" in sim:
        print(f"  SIM  FAILED: {sim['error']}")
    else:
        r = sim["run"]
        nom = sim.get("nominal")
        if nom is not None:
            print(
                f"  SIM  calibration at {NOMINAL_GFLOPS:g} GFLOP/s: clients' handle() "
                f"{nom['client_cpu_s']:.3f} CPU s for {nom['client_flops'] / 1e9:.4f} GFLOP "
                f"modelled -> client speed {r['speed_gflops']:.4f} GFLOP/s (virtual s/round at "
                f"{NOMINAL_GFLOPS:g} GFLOP/s: {fmt(nom['virt_round_s'])})"
            )
        else:
            print(f"  SIM  client speed {r['speed_gflops']:g} GFLOP/s (--speed-gflops)")
        print(
            f"  SIM  {r['status']}, {r['rounds']} rounds, virtual {r['virtual_s']:.4g} s "
            f"({fmt(r['virt_round_s'])} s/round), wall {r['wall_s']:.2f} s (build and "
            f"evaluation included), {r['messages']:,} messages, peak RSS "
            f"{mib(sim['peak_rss_kib'])} MiB"
        )
        if r.get("wall_round_s"):
            print(
                f"  SIM  rounds phase: {r['wall_round_s']:.4f} wall s/round; per round: edge "
                f"handle {r['edge_round_s']:.4f} s, root handle {r['root_round_s']:.4f} s, "
                f"gc {r['gc_round_s']:.4f} s ({r['gc_collections']} collections, "
                f"{r['gc_full']} full taking {r['gc_full_s']:.3f} s in all)"
            )
            row["sim"] = {
                "round_s": r["wall_round_s"],
                "edge": r["edge_round_s"],
                "root": r["root_round_s"],
                "gc": r["gc_round_s"],
                "rest": r["wall_round_s"] - r["edge_round_s"] - r["root_round_s"] - r["gc_round_s"],
            }
        row.update(
            sim_rounds=r["rounds"],
            virt=r["virt_round_s"],
            simwall=r.get("wall_round_s"),
            speed=r["speed_gflops"],
        )
    if "error" in mq:
        print(f"  MQTT FAILED: {mq['error']}")
        row["status"] = "FAILED"
        return row
    ph = mq.get("phase")
    print(
        f"  MQTT {mq['status']}, {mq['rounds']} rounds in {mq['wall_s']:.2f} s wall "
        f"(setup closed at {fmt(mq.get('setup_closed_s'))} s); reconnects {mq['reconnects']}; "
        f"{mq['messages']:,} messages; ARI {fmt(mq['ari'], '.4f')}"
    )
    if mq["status"] not in ("round_limit", "converged"):
        print(f"  MQTT reason: {mq['reason']}")
    bs = mq.get("broker_sys") or {}
    if bs:
        print(
            f"  MQTT Mosquitto $SYS over the run: {bs.get('publish_received'):,} PUBLISH in, "
            f"{bs.get('publish_sent'):,} out, {bs.get('bytes_received'):,} B in, "
            f"{bs.get('bytes_sent'):,} B out"
        )
    print(
        f"  MQTT memory: Mosquitto peak {mib(mq.get('broker_hwm_kib'))} MiB, this process peak "
        f"{mib(mq['peak_rss_kib'])} MiB (during the run {mib(mq['proc_peak_run_kib'])} MiB); "
        f"open fds: this process {fmt(ph and ph['fds'], '.0f')}, Mosquitto "
        f"{fmt(ph and ph['broker_fds'], '.0f')} (limit {mq['nofile']})"
    )
    row.update(
        status=mq["status"],
        mqtt_rounds=mq["rounds"],
        connect=mq.get("setup_closed_s"),
        broker_mib=(mq.get("broker_hwm_kib") or 0) / 1024,
        proc_mib=mq["peak_rss_kib"] / 1024,
    )
    if ph is None and mq.get("rows_round_s"):
        # nodes in worker processes: the wall clock of the root's rounds only
        per = mq["rows_round_s"]
        msgs = 3 * n + 1  # a flat star's round: 1 model + N updates sent, 2N delivered
        print(
            f"  MQTT rounds phase (from the root's round records; nodes in "
            f"{mq.get('processes')} processes, no CPU split): {per:.4f} s/round "
            f"({60 / per:,.0f} rounds/min), {msgs / per:,.0f} msg/s ({msgs} per round); "
            f"whole run: workers {mq['workers_cpu_s']:.1f} CPU s (largest peak RSS "
            f"{mib(mq['workers_peak_kib'])} MiB), Mosquitto "
            f"{mq.get('broker_cpu_s', float('nan')):.1f} CPU s"
        )
        row.update(round_s=per, rpm=60 / per, msgs=msgs / per)
    if ph is None:
        if "round_s" not in row:
            print("  MQTT no complete rounds phase: no per-round figures")
        else:
            if row.get("virt"):
                row["x_virt"] = row["round_s"] / row["virt"]
            if row.get("simwall"):
                row["x_simwall"] = row["round_s"] / row["simwall"]
        return row
    per = ph["round_s"]
    k = ph["round_s"] / ph["wall_s"]  # totals -> per round
    stack = ph["loop_cpu_s"] - ph["edge_s"] - ph["root_s"] - ph["gc_s"]
    mq_row = {
        "round_s": per,
        "edge": ph["edge_s"] * k,
        "root": ph["root_s"] * k,
        "gc": ph["gc_s"] * k,
        "stack": stack * k,
        "threads": max(0.0, ph["proc_cpu_s"] - ph["loop_cpu_s"]) * k,
        "idle": (ph["wall_s"] - ph["loop_cpu_s"]) * k,
        "broker": ph["broker_cpu_s"] * k,
    }
    print(
        f"  MQTT rounds phase: {per:.4f} s/round ({60 / per:,.0f} rounds/min), "
        f"{ph['messages'] / ph['wall_s']:,.0f} msg/s; per round: edge handle "
        f"{mq_row['edge']:.4f} s, root handle {mq_row['root']:.4f} s, gc {mq_row['gc']:.4f} s "
        f"({ph['gc_collections']:.0f} collections, {ph['gc_full']:.0f} full taking "
        f"{ph['gc_full_s']:.3f} s in all), runner+aiomqtt+paho+asyncio "
        f"{mq_row['stack']:.4f} s, other threads {mq_row['threads']:.4f} s, loop idle "
        f"{mq_row['idle']:.4f} s; Mosquitto CPU {mq_row['broker']:.4f} s"
    )
    row.update(mqtt=mq_row, round_s=per, rpm=60 / per, msgs=ph["messages"] / ph["wall_s"])
    if row.get("virt"):
        row["x_virt"] = per / row["virt"]
    if row.get("simwall"):
        row["x_simwall"] = per / row["simwall"]
    prof = mq.get("profile")
    if prof:
        print(f"  PROFILE (event-loop thread, rounds phase, {prof['total_s']:.2f} s self time):")
        for g, tt in prof["groups"]:
            if tt > 0:
                print(f"    {tt / prof['total_s']:6.1%}  {g}")
        print("    top functions by self time:")
        for tt, nc, label in prof["top"]:
            print(f"    {tt:7.3f} s {nc:>9,}  {label}")
    return row


def table(rows: list[dict[str, Any]], target_n: int) -> None:
    print("\nRounds (rounds phase: setup round closed -> last round closed)")
    print(
        f"{'N':>5} {'status':>11} {'rnd':>7} {'connect s':>9} {'s/round':>8} {'rnd/min':>8} "
        f"{'msg/s':>8} {'virt s/rnd':>10} {'simwall s/rnd':>13} {'x virt':>7} {'x simwall':>9} "
        f"{'broker MiB':>10} {'proc MiB':>8}"
    )
    for r in rows:
        print(
            f"{r['n']:>5} {r.get('status', '-'):>11} "
            f"{fmt(r.get('mqtt_rounds'), 'd'):>3}/{fmt(r.get('sim_rounds'), 'd'):<3} "
            f"{fmt(r.get('connect'), '9.2f'):>9} {fmt(r.get('round_s'), '8.4f'):>8} "
            f"{fmt(r.get('rpm'), '8,.0f'):>8} {fmt(r.get('msgs'), '8,.0f'):>8} "
            f"{fmt(r.get('virt'), '10.5f'):>10} {fmt(r.get('simwall'), '13.4f'):>13} "
            f"{fmt(r.get('x_virt'), '7.0f'):>7} {fmt(r.get('x_simwall'), '9.2f'):>9} "
            f"{fmt(r.get('broker_mib'), '10.1f'):>10} {fmt(r.get('proc_mib'), '8.0f'):>8}"
        )
    print("\nWhere a round goes (seconds per round, rounds phase; CPU except s/round and idle)")
    print(
        f"{'N':>5} {'run':>4} {'s/round':>8} {'edge':>7} {'root':>7} {'gc':>7} "
        f"{'stack':>7} {'threads':>7} {'idle':>7} {'broker':>7} {'node share':>10}"
    )
    for r in rows:
        for run in ("sim", "mqtt"):
            b = r.get(run)
            if b is None:
                continue
            node = b["edge"] + b["root"]
            stack = b.get("stack", b.get("rest", 0.0))
            loop = node + b["gc"] + stack
            print(
                f"{r['n']:>5} {run:>4} {b['round_s']:8.4f} {b['edge']:7.4f} {b['root']:7.4f} "
                f"{b['gc']:7.4f} {stack:7.4f} {fmt(b.get('threads'), '7.4f'):>7} "
                f"{fmt(b.get('idle'), '7.4f'):>7} {fmt(b.get('broker'), '7.4f'):>7} "
                f"{node / loop if loop > 0 else 0:10.0%}"
            )
    print(
        "  edge/root: CPU inside the clients'/root's handle() (numpy, wire codec, validation), "
        "gc excluded;\n  gc: cyclic garbage collector; stack: the rest of the event-loop thread "
        "(mqtt: runner, aiomqtt, paho, asyncio,\n  syscalls; sim: the virtual-time kernel); "
        "threads: other threads (connect executor, $SYS monitor);\n  idle: wall - event-loop "
        "CPU; broker: Mosquitto's CPU (own process); node share: handle() / event-loop CPU."
    )
    for r in rows:
        if r["n"] == target_n:
            x, y = r.get("x_virt"), r.get("x_simwall")
            if x is None:
                print(f"\nTarget at N = {target_n}: no result.")
                continue
            print(
                f"\nTarget at N = {target_n}: MQTT s/round is {x:.0f}x the simulated (virtual) "
                f"round time: {'meets' if x <= 2 else 'misses'} the 2x target"
                + ("" if y is None else f" ({y:.2f}x the simulator's own wall s/round).")
            )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="50,200,500,1000", help="comma-separated client counts")
    ap.add_argument("--rounds", type=int, default=10, help="rounds after the setup round")
    ap.add_argument("--samples", type=int, default=20, help="samples per client")
    ap.add_argument("--latency", type=float, default=0.0002, help="client link latency, s")
    ap.add_argument(
        "--speed-gflops", type=float, default=None, help="client speed (default: calibrated)"
    )
    ap.add_argument("--qos", type=int, choices=[0, 1], default=1, help="MQTT QoS of the protocol")
    ap.add_argument(
        "--gc",
        choices=["default", "freeze", "tune", "off"],
        default="default",
        help="MQTT rounds phase, from the setup round's close: gc.freeze(); tune = freeze + "
        "gc.set_threshold(20000, 10, 10); off = gc.disable() (on top of fedstrata's own freeze)",
    )
    ap.add_argument(
        "--processes",
        type=int,
        default=1,
        help="MQTT: deal the nodes out to this many worker processes (mqtt_run(processes=))",
    )
    ap.add_argument(
        "--signed",
        action="store_true",
        help="privacy.sign: true (both transports sign and verify every message)",
    )
    ap.add_argument("--timeout", type=float, default=900.0, help="MQTT wall-clock limit, s")
    ap.add_argument("--profile", action="store_true", help="cProfile the MQTT rounds phase")
    ap.add_argument(
        "--profile-dump", default=None, help="with --profile: write pstats to PATH.N (for snakeviz)"
    )
    ap.add_argument("--smoke", action="store_true", help="10 clients, 3 rounds: a quick check")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--child", choices=["sim", "mqtt"], help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.smoke:
        args.sizes, args.rounds, args.timeout = "10", 3, 60.0
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.child:
        fn = child_sim if args.child == "sim" else child_mqtt
        res = fn(sizes[0], args)
        args.out.write_text(json.dumps(res))
        return
    print(
        f"sizes {sizes}, {args.rounds} rounds + setup, {args.samples} samples/client, HK-MVFC "
        f"rule sum, QoS {args.qos}, links {args.latency * 1e3:g} ms / 10 Gbit/s, MQTT nodes in "
        f"{'this process' if args.processes == 1 else f'{args.processes} worker processes'}, "
        f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}"
    )
    rows, results = [], []
    for n in sizes:
        sim = run_child("sim", n, args, limit=args.timeout + 300)
        mq = run_child("mqtt", n, args, limit=args.timeout + 300)
        results.append({"n": n, "sim": sim, "mqtt": mq})
        rows.append(report_size(n, sim, mq))
        sys.stdout.flush()
    table(rows, target_n=1000 if 1000 in sizes else max(sizes))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
