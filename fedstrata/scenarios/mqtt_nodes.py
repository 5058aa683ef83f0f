"""Run a federation's nodes over MQTT: in this process, or spread over worker processes.

:func:`run_share` runs nodes as asyncio tasks of this process;
:func:`run_in_processes` deals the nodes out to ``K`` worker processes (each
builds the same federation from the scenario and runs its share), so that the
nodes' numpy work uses more than one core. Both return an :class:`Execution`: the
records, each node's :class:`NodeOutcome`, and how the run ended.

Every worker process builds the nodes, then waits until all have; the parent
then fixes the clock origin (``CLOCK_MONOTONIC`` is system-wide on one machine,
so all processes share it) and starts them together. The worker that hosts the
root tells the others when the root finished; a parent that is interrupted
(Ctrl-C, SIGTERM) tells the workers to stop, and they report what they have.
Workers ignore SIGINT themselves: the parent decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing as mp
import queue
import signal
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import fedstrata.registry  # noqa: F401  (the composition root: registers plug-ins and kinds)
from fedstrata.broker.endpoint import Endpoint
from fedstrata.broker.runner import RunLog, Traffic
from fedstrata.errors import FedstrataError, TransportError
from fedstrata.mqtt import presence_topic
from fedstrata.nodes.sealing import RunKeys
from fedstrata.scenarios.build import Federation, build_federation
from fedstrata.scenarios.emulate import LinkEmulator, link_emulators
from fedstrata.scenarios.fault_inject import FaultCounts, fault_counts, runner_with_faults
from fedstrata.scenarios.fault_plan import fault_plan
from fedstrata.scenarios.orchestrate import counting_warnings
from fedstrata.scenarios.schema import Scenario

__all__ = [
    "GRACE_S",
    "STOP_S",
    "Execution",
    "NodeOutcome",
    "ensure_open_files",
    "long_lived_gc",
    "make_runners",
    "outcomes_of",
    "run_in_processes",
    "run_share",
]

#: How long the other nodes may take to finish after the root did.
GRACE_S = 5.0
#: How long stopped nodes may take to disconnect before they are aborted.
STOP_S = 15.0
#: How long a worker may take to start and build its nodes.
_STARTUP_S = 300.0


@dataclass
class NodeOutcome:
    """How one node's run ended, and its traffic."""

    tier: str
    finished: bool
    result: Any
    failure: str | None
    traffic: Traffic
    link_lost: int = 0
    link_gave_up: int = 0
    retained_topics: tuple[str, ...] = ()
    #: Why the node crashed (its ``handle`` raised, or its worker process died).
    crashed: str | None = None
    #: When it crashed, in seconds since the run started.
    crashed_at: float | None = None
    #: Why the idle limit stopped it (:func:`idle_timeout_s`), or ``None``.
    idled_out: str | None = None
    #: Messages it published again after reconnecting to the broker.
    republished: int = 0
    #: What the scenario's injected faults did to it (``None``: none were injected).
    faults: FaultCounts | None = None


@dataclass
class Execution:
    """What running the nodes produced."""

    records: list[dict[str, Any]]
    outcomes: dict[str, NodeOutcome]
    timed_out: bool
    interrupted: bool
    wall: float
    processes: int = 1
    warnings: dict[str, int] = field(default_factory=dict)


def ensure_open_files(n_nodes: int) -> None:
    """Raise this process's open-file limit for ``n_nodes`` MQTT connections.

    Each node holds one socket (plus a few for the process itself); the common
    default soft limit of 1,024 makes a run of 1,000+ nodes lose connections to
    ``EMFILE``. The soft limit is raised up to the hard limit (a private broker,
    started afterwards, inherits it).

    Raises
    ------
    TransportError
        If the hard limit is too low; the message names ``ulimit -n``.

    """
    try:
        import resource
    except ImportError:  # not on POSIX: nothing to do
        return
    need = n_nodes + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise TransportError(
                f"{n_nodes} nodes need about {need} open files, but this process may open "
                f"at most {hard} (raise it with 'ulimit -n {need}', or use --processes)"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


#: Allocations between two young collections while the nodes run (CPython's default: 700).
YOUNG_GC_THRESHOLD = 50_000


@contextlib.contextmanager
def long_lived_gc() -> Iterator[None]:
    """Collect garbage for a run's nodes: freeze what exists, collect the young rarely.

    The federation (nodes, data, connections) lives for the whole run; frozen, the
    cyclic collector never walks it again. The run's own garbage is mostly acyclic
    (freed by reference counting), so young collections every 700 allocations only
    re-scan live messages in flight: with 1,000 nodes they cost a tenth of a round.
    The previous thresholds are restored afterwards (the frozen objects stay frozen:
    they are the run's, and go with it).
    """
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_GC_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


#: Round deadlines a node waits for its aggregator before it gives up (see
#: :func:`idle_timeout_s`).
IDLE_ROUNDS = 3


def idle_timeout_s(sc: Scenario) -> float:
    """How long a node below the root waits to hear from its aggregator before it ends.

    ``IDLE_ROUNDS`` times the longest silence a healthy parent keeps: one round
    deadline per aggregator level above the clients (``protocol.deadline_s``, or a
    tier's own when longer), times the product of the tiers' longest ``period``
    (a fog runs ``period`` rounds of its own before it hears from the cloud). With
    the defaults (60 s deadline, no middle tier): 180 s; with one fog tier, 360 s.
    """
    tiers = sc.topology.tiers
    deadline = max([sc.protocol.deadline_s, *(t.deadline_s for t in tiers if t.deadline_s)])
    periods = 1
    for t in tiers:
        periods *= t.max_period()
    return float(IDLE_ROUNDS * (1 + len(tiers)) * periods * deadline)


def parent_topics(node: Any) -> tuple[str, ...]:
    """The topic a node hears its aggregator on (its parent's ``down`` topic), or ``()``."""
    from fedstrata.mqtt import down_topic

    parent = getattr(node, "parent", None)
    protocol = getattr(node, "protocol", None)
    if parent is None or protocol is None:
        return ()
    return (down_topic(protocol.run, parent.tier, parent.group),)


def make_runners(
    fed: Federation,
    broker_of: dict[str, Endpoint],
    protocol: int,
    links: dict[str, LinkEmulator] | None = None,
    only: list[str] | None = None,
    log: RunLog | None = None,
) -> tuple[RunLog, dict[str, Any]]:
    """One runner per node of the federation (or of ``only``), sharing one run log.

    A node with faults in the scenario's :func:`~fedstrata.scenarios.fault_plan.fault_plan`
    (under the run's seed) gets a runner that injects them
    (:func:`~fedstrata.scenarios.fault_inject.runner_with_faults`).
    """
    run = fed.protocol.run
    links = links or {}
    log = log if log is not None else RunLog()
    nodes = fed.sim.engine.nodes
    idle = idle_timeout_s(fed.scenario)
    plan = fault_plan(fed.scenario, fed.sim.seed)
    runners = {}
    for nid in only if only is not None else list(nodes):
        node = nodes[nid].node
        heard_on = parent_topics(node)  # the root has no parent: no idle limit
        runners[nid] = runner_with_faults(
            node,
            plan.of(nid),
            fed.protocol.qos,
            log,
            network_model=plan.network_model,
            broker=broker_of[nid],
            tier=fed.tiers[nid],
            client_id=f"fs-{run}-{nid}",
            protocol=protocol,
            presence=presence_topic(run, nid),  # last will there, b"online" on connect
            link=links.get(nid),
            idle_timeout_s=idle if heard_on else None,
            idle_topics=heard_on,
        )
    return log, runners


def outcomes_of(
    fed: Federation, runners: dict[str, Any], links: dict[str, LinkEmulator] | None
) -> dict[str, NodeOutcome]:
    """The :class:`NodeOutcome` of every runner."""
    links = links or {}
    return {
        nid: NodeOutcome(
            fed.tiers[nid],
            r.finished,
            r.result if r.finished else None,
            r.failure,
            r.traffic,
            links[nid].lost if nid in links else 0,
            links[nid].gave_up if nid in links else 0,
            tuple(sorted(r.retained_topics)),
            r.crashed,
            r.crashed_at,
            r.idled_out,
            r.republished,
            fault_counts(r),
        )
        for nid, r in runners.items()
    }


async def run_share(
    runners: dict[str, Any],
    root_id: str,
    log: RunLog,
    timeout_s: float,
    *,
    root_done: Any = None,
    stop: Any = None,
) -> tuple[bool, bool, float]:
    """Run ``runners`` as tasks; return ``(timed_out, interrupted, wall)``.

    Ends when every node finished, ``GRACE_S`` after the root finished (here, or
    in another process: ``root_done``), when ``stop`` is set, or at the wall-clock
    limit. ``wall`` is when the root finished (or when the share ended).
    """
    tasks = {nid: asyncio.create_task(r.run(), name=f"node-{nid}") for nid, r in runners.items()}
    clock = _ShareClock(tasks.get(root_id), log, log.t0 + timeout_s, root_done, stop)
    try:
        while True:
            pending = [t for t in tasks.values() if not t.done()]
            clock.note_root()
            if not pending:
                break
            now = time.monotonic()
            if clock.should_end(now):
                break
            await asyncio.wait(pending, timeout=clock.wake(now), return_when="FIRST_COMPLETED")
    finally:
        await _stop(tasks, runners)
    for t in tasks.values():
        end = None if not t.done() or t.cancelled() else t.exception()
        if end is not None:
            raise end  # a node broke its protocol or a bug: not a run outcome
    return clock.timed_out, clock.interrupted, log.now() if clock.wall is None else clock.wall


async def _stop(tasks: dict[str, asyncio.Task[Any]], runners: dict[str, Any]) -> None:
    """Cancel the node tasks and wait for them, at most ``2 * STOP_S``.

    A cancelled node disconnects (its DISCONNECT waits for the broker); one that
    has not ended after ``STOP_S`` is aborted (its socket shut, as a crash) and
    cancelled again, so that a stop (Ctrl-C) never waits on the network for good.
    """
    if not tasks:
        return
    for t in tasks.values():
        t.cancel()
    _, late = await asyncio.wait(tasks.values(), timeout=STOP_S)
    if not late:
        return
    for nid, t in tasks.items():
        if not t.done():
            runners[nid].abort()
            t.cancel()
    await asyncio.wait(late, timeout=STOP_S)


@dataclass
class _ShareClock:
    """When a share of nodes stops, and why (see :func:`run_share`)."""

    root: asyncio.Task[Any] | None
    log: RunLog
    deadline: float
    root_done: Any
    stop: Any
    grace_end: float | None = None
    wall: float | None = None
    timed_out: bool = False
    interrupted: bool = False

    def _root_finished(self) -> bool:
        return self.root is not None and self.root.done()

    def note_root(self) -> None:
        """Keep when the root finished here, and tell the other processes."""
        if self._root_finished() and self.wall is None:
            self.wall = self.log.now()
            if self.root_done is not None:
                self.root_done.set()

    def should_end(self, now: float) -> bool:
        """Whether the share ends now: stopped, grace over after the root, or out of time."""
        root_elsewhere = self.root_done is not None and self.root_done.is_set()
        if self.grace_end is None and (self._root_finished() or root_elsewhere):
            self.grace_end = now + GRACE_S
        if self.stop is not None and self.stop.is_set():
            self.interrupted = True
            return True
        if self.grace_end is not None and now >= self.grace_end:
            return True
        if now >= self.deadline:
            self.timed_out = not self._root_finished()
            return True
        return False

    def wake(self, now: float) -> float:
        """How long to wait for a node to finish before looking again."""
        wake = min(self.deadline, self.grace_end or self.deadline) - now
        if self.stop is not None or self.root_done is not None:
            wake = min(wake, 0.1)  # other processes signal through shared events
        return max(wake, 0.001)


def _worker(
    index: int,
    sc: Scenario,
    share: list[str],
    broker_of: dict[str, Endpoint],
    protocol: int,
    emulate_links: bool,
    timeout_s: float,
    sync: dict[str, Any],
    keys: RunKeys | None = None,
) -> None:
    """One worker process: build the federation, run ``share``, report on the queue.

    ``keys`` are the run's signing keys, handed over by the parent (they are not
    derivable from the scenario, so a worker cannot make them itself).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    out = sync["queue"]
    try:
        with counting_warnings() as caught:  # counted as the in-process runner counts them
            ensure_open_files(len(share))
            fed = build_federation(sc, keys=keys)
            links = link_emulators(fed) if emulate_links else None
            log = RunLog(byte_events=[])
            log, runners = make_runners(fed, broker_of, protocol, links, only=share, log=log)
            out.put(("ready", index, None))
            if not sync["start"].wait(_STARTUP_S):
                return
            log.t0 = sync["t0"].value
            with long_lived_gc():
                timed_out, interrupted, wall = asyncio.run(
                    run_share(
                        runners,
                        sc.topology.cloud_id,
                        log,
                        timeout_s,
                        root_done=sync["root_done"],
                        stop=sync["stop"],
                    )
                )
        report = {
            "records": log.records,
            "byte_events": log.byte_events,
            "outcomes": outcomes_of(fed, runners, links),
            "timed_out": timed_out,
            "interrupted": interrupted,
            "wall": wall,
            "root": sc.topology.cloud_id in share,
            "warnings": caught,
        }
        out.put(("done", index, report))
    except BaseException as exc:  # reported to the parent, which raises
        out.put(("error", index, "".join(traceback.format_exception(exc)).strip()))


def _rewire_bytes(records: list[dict[str, Any]], events: list[tuple[float, str, int]]) -> None:
    """Give each record the cumulative tier bytes of all processes at its time."""
    events.sort(key=lambda e: e[0])
    tot: dict[str, int] = {}
    i = 0
    for rec in records:  # sorted by time
        while i < len(events) and events[i][0] <= rec["t"]:
            _, tier, n = events[i]
            tot[tier] = tot.get(tier, 0) + n
            i += 1
        rec["wire_bytes"] = dict(tot)


def run_in_processes(
    sc: Scenario,
    node_ids: list[str],
    broker_of: dict[str, Endpoint],
    protocol: int,
    emulate_links: bool,
    timeout_s: float,
    processes: int,
    tiers: dict[str, str] | None = None,
    keys: RunKeys | None = None,
) -> Execution:
    """Deal ``node_ids`` out to ``processes`` worker processes and run them together.

    ``sc`` must carry the run id as its name (every worker builds the federation
    from it). The root goes to the first worker. Raises :class:`FedstrataError`
    if a worker fails to start.

    A worker that dies once the run started (killed, out of memory) or breaks is a
    crash of the nodes it hosted, not the end of the run: their outcomes say
    ``crashed`` (``"worker process 2 died (SIGKILL)"``) and when; their broker
    connections drop without a DISCONNECT, so their wills tell their aggregators.
    The other workers go on (if the root's worker died, they stop ``GRACE_S``
    later, as after the root finished). ``tiers`` (node id → tier) labels the
    outcomes of the nodes of a dead worker.
    """
    root_id = sc.topology.cloud_id
    order = [root_id] + [n for n in node_ids if n != root_id]
    k = max(1, min(int(processes), len(order)))
    pool = _Pool([order[i::k] for i in range(k)], root_id)
    pool.start(sc, broker_of, protocol, emulate_links, timeout_s, keys)
    try:
        try:
            pool.await_ready()
            pool.collect(timeout_s + GRACE_S + 60.0)
        except KeyboardInterrupt:
            pool.interrupt()
    finally:
        pool.join()
    return pool.execution(tiers or {})


class _Pool:
    """The worker processes of one run, their shares of the nodes and what they reported."""

    def __init__(self, shares: list[list[str]], root_id: str) -> None:
        self.shares, self.root_id = shares, root_id
        ctx = mp.get_context("spawn")  # no fork of a process with threads (the $SYS monitor)
        self.ctx = ctx
        self.sync: dict[str, Any] = {
            "queue": ctx.Queue(),
            "start": ctx.Event(),
            "root_done": ctx.Event(),
            "stop": ctx.Event(),
            "t0": ctx.Value("d", 0.0),
        }
        self.procs: list[Any] = []
        self.reports: dict[int, dict[str, Any]] = {}
        self.lost: dict[int, tuple[float, str]] = {}  # died or broke: (when, why)
        self.caught: dict[str, int] = {}
        self.interrupted = self.started = False

    def start(
        self,
        sc: Scenario,
        broker_of: dict[str, Endpoint],
        protocol: int,
        emulate_links: bool,
        timeout_s: float,
        keys: RunKeys | None,
    ) -> None:
        """Start one worker process per share."""
        for i, share in enumerate(self.shares):
            brokers = {n: broker_of[n] for n in share}
            args = (i, sc, share, brokers, protocol, emulate_links, timeout_s, self.sync, keys)
            p = self.ctx.Process(
                target=_worker, args=args, name=f"fedstrata-nodes-{i}", daemon=True
            )
            p.start()
            self.procs.append(p)

    @property
    def _pending(self) -> bool:
        return len(self.reports) + len(self.lost) < len(self.shares)

    def _next(self, timeout_s: float) -> tuple[str, int, Any]:
        return _get(
            self.sync["queue"], self.procs, timeout_s, skip=set(self.reports) | set(self.lost)
        )

    def await_ready(self) -> None:
        """Wait until every worker built its nodes, then start them together."""
        for _ in self.shares:
            kind, index, payload = _get(self.sync["queue"], self.procs, _STARTUP_S)
            if kind == "error":
                raise FedstrataError(f"worker process {index} failed:\n{payload}")
        self.sync["t0"].value = time.monotonic()
        self.started = True
        self.sync["start"].set()

    def collect(self, limit_s: float) -> None:
        """Take every worker's report; a worker that died or broke is a crash of its nodes."""
        while self._pending:
            kind, index, payload = self._next(limit_s)
            if kind == "done":
                self.reports[index] = payload
                continue
            t = max(0.0, time.monotonic() - self.sync["t0"].value)
            if kind == "error":  # the worker broke (a bug): its nodes are gone with it
                last = payload.strip().splitlines()[-1] if payload.strip() else "no trace"
                self.lost[index] = (t, f"worker process {index} failed: {last}")
                self.caught[f"worker process {index} failed:\n{payload}"] = 1
            else:  # "died"
                self.lost[index] = (t, f"worker process {index} died ({payload})")
            if self.root_id in self.shares[index]:  # no round can close: end as after the root
                self.sync["root_done"].set()

    def interrupt(self) -> None:
        """Tell the workers to stop and take what they report."""
        self.interrupted = True
        self.sync["stop"].set()
        while self.started and self._pending:
            kind, index, payload = self._next(30.0)
            if kind == "done":
                self.reports[index] = payload
            else:
                self.lost[index] = (0.0, f"worker process {index} ended without a report")

    def join(self) -> None:
        """Stop and join every worker (terminated if it does not end in 10 s)."""
        self.sync["stop"].set()
        self.sync["start"].set()  # a worker still waiting to start gives up
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)

    def execution(self, tiers: dict[str, str]) -> Execution:
        """The run as one :class:`Execution`: records in time order, every node's outcome."""
        reports = self.reports.values()
        records = sorted((rec for rep in reports for rec in rep["records"]), key=lambda r: r["t"])
        _rewire_bytes(records, [e for rep in reports for e in rep["byte_events"]])
        outcomes: dict[str, NodeOutcome] = {}
        caught = dict(self.caught)
        for index, (t, why) in sorted(self.lost.items()):
            for nid in self.shares[index]:
                outcomes[nid] = NodeOutcome(
                    tiers.get(nid, "unknown"),
                    False,
                    None,
                    None,
                    Traffic(),
                    crashed=why,
                    crashed_at=t,
                )
        for rep in reports:
            outcomes.update(rep["outcomes"])
            for key, n in rep["warnings"].items():
                caught[key] = caught.get(key, 0) + n
        root_rep = next((rep for rep in reports if rep["root"]), None)
        ends = [*(rep["wall"] for rep in reports), *(t for t, _ in self.lost.values())]
        wall = root_rep["wall"] if root_rep is not None else max(ends, default=0.0)
        return Execution(
            records,
            outcomes,
            bool(root_rep and root_rep["timed_out"]),
            self.interrupted or any(rep["interrupted"] for rep in reports),
            wall,
            processes=len(self.shares),
            warnings=caught,
        )


def _exit_text(code: int) -> str:
    """``SIGKILL`` for a process killed by signal 9, ``exit code 3`` otherwise."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
        return f"signal {-code}"
    return f"exit code {code}"


def _get(
    q: Any, procs: list[Any], timeout_s: float, skip: set[int] | None = None
) -> tuple[str, int, Any]:
    """The next report of a worker, or ``("died", index, how)`` for one that died without.

    Before the run starts (``skip`` is ``None``) a worker that died is an error. A
    worker in ``skip`` already reported (or is known dead).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(queue.Empty):
            return q.get(timeout=0.5)
        dead = [
            (i, p)
            for i, p in enumerate(procs)
            if p.exitcode not in (None, 0) and (skip is None or i not in skip)
        ]
        if dead:
            with contextlib.suppress(queue.Empty):  # a report sent just before it died
                return q.get(timeout=0.2)
            i, p = dead[0]
            if skip is None:
                raise FedstrataError(f"worker process {i} died ({_exit_text(p.exitcode)})")
            return "died", i, _exit_text(p.exitcode)
        if time.monotonic() >= deadline:
            raise FedstrataError(f"no word from the worker processes in {timeout_s:g} s")
