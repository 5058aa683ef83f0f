"""Partitions and external kills during a lab run, timed on the faulted node's own run clock.

A scenario's ``faults.partitions`` (``nodes``, ``start``, ``end``) become two lab
actions per node: at ``start`` its uplink drops every packet on both ends
(:meth:`~fedstrata.netlab.lab.Lab.partition`: nftables drop-all, the interfaces stay
up, so TCP sees silence and keeps retransmitting with back-off, as the simulator's
rule 7 assumes); at ``end`` it goes back to its shaped loss. A *kill* (``node``,
``at``) sends SIGKILL to the node's process: a device that dies without a word,
never restarted (the scenario's own ``faults.crashes`` are injected by ``fedstrata
node`` itself, in process).

**Time zero.** ``fedstrata node`` times its scenario faults (crashes) in seconds since
its run clock started: ``runner.log.t0``, set right after the node printed ``NODE
(ROLE, run id RUN): connected to URL`` (:mod:`fedstrata.device.command`, flushed at
once). The lab reads that line from the node's log and takes the instant it first
sees it as the node's time zero (a poll of :data:`POLL_S`), so a partition or kill of
node X at ``t`` happens at the same instant as a crash fault of X at ``t`` would. The
nodes of a deployment do not share one clock: each starts its own when it has
connected. :class:`FaultDriver` records every node's time zero, so a fault can also
be read on the root's clock (the one of ``rounds.csv``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fedstrata.errors import ValidationError
from fedstrata.scenarios.schema import Scenario

__all__ = [
    "CONNECTED_MARK",
    "POLL_S",
    "Applied",
    "FaultDriver",
    "LabFault",
    "lab_faults",
    "log_started",
]

CONNECTED_MARK = "): connected to "
"""The part of a node's ``connected`` line that marks its run clock's start."""

POLL_S = 0.005
"""How often the driver looks at the nodes' logs and the clock (seconds)."""

Action = Literal["cut", "heal", "kill"]


@dataclass(frozen=True, order=True)
class LabFault:
    """One action at ``at`` seconds on ``node``'s run clock: ``cut``, ``heal`` or ``kill``."""

    at: float
    node: str
    action: Action


@dataclass(frozen=True)
class Applied:
    """A fault as it happened: when it was due, when it took effect, on which clocks.

    ``node_s`` is the node's own clock when the action completed, ``root_s`` the
    root's, ``took_s`` how long the ``nft``/``kill`` commands took.
    """

    fault: LabFault
    node_s: float
    root_s: float | None
    took_s: float


def lab_faults(sc: Scenario, kills: Mapping[str, float] | None = None) -> list[LabFault]:
    """The lab actions of ``sc``'s partitions, plus a SIGKILL of each ``kills`` node at its time.

    A partitioned node always has an uplink: the scenario refuses a partition of the
    root (it sits with its broker).
    """
    out: list[LabFault] = []
    for p in sc.faults.partitions:
        for node in p.nodes:
            out += [LabFault(float(p.start), node, "cut"), LabFault(float(p.end), node, "heal")]
    for node, at in (kills or {}).items():
        if not (at >= 0.0):
            raise ValidationError(f"kill of {node}: at must be >= 0 seconds, got {at!r}")
        out.append(LabFault(float(at), node, "kill"))
    return sorted(out)


def log_started(path: Path) -> bool:
    """Whether the node logging to ``path`` has started its run clock (connected)."""
    try:
        return CONNECTED_MARK in path.read_text(errors="replace")
    except FileNotFoundError:
        return False


@dataclass
class FaultDriver:
    """Apply :class:`LabFault` s in a background thread while a deployment runs.

    Parameters
    ----------
    faults
        What to do, on each node's clock.
    act
        ``act(fault)`` carries one out (partition a link, kill a process).
    logs
        Every node's log file (the driver learns each node's time zero from it).
    root
        The root's node id (its clock is the one of ``rounds.csv``).
    clock
        A monotonic clock (seconds).
    """

    faults: list[LabFault]
    act: Callable[[LabFault], None]
    logs: dict[str, Path]
    root: str
    clock: Callable[[], float] = time.monotonic
    poll_s: float = POLL_S
    starts: dict[str, float] = field(default_factory=dict)
    applied: list[Applied] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _done: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.faults = sorted(self.faults)

    def start(self) -> FaultDriver:
        """Start the thread (a daemon: it never holds the interpreter up)."""
        self._thread = threading.Thread(target=self._loop, name="netlab-faults", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread; faults not yet due are not applied."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FaultDriver:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def step(self) -> bool:
        """Note newly started nodes and apply the faults now due; ``False`` once all is done."""
        now = self.clock()
        for node, path in self.logs.items():
            if node not in self.starts and log_started(path):
                self.starts[node] = now
        for k, fault in enumerate(self.faults):
            t0 = self.starts.get(fault.node)
            # sorted by time: a node's cut comes before its heal even when both are due
            if k not in self._done and t0 is not None and now >= t0 + fault.at:
                self._done.add(k)
                self._apply(fault, t0)
        return len(self._done) < len(self.faults) or len(self.starts) < len(self.logs)

    def _apply(self, fault: LabFault, t0: float) -> None:
        began = self.clock()
        try:
            self.act(fault)
        except Exception as exc:  # reported, and the next faults still get their turn
            self.errors.append(f"{fault}: {exc}")
        done = self.clock()
        root_t0 = self.starts.get(self.root)
        root_s = None if root_t0 is None else done - root_t0
        self.applied.append(Applied(fault, done - t0, root_s, done - began))

    def _loop(self) -> None:
        while not self._stop.is_set() and self.step():
            self._stop.wait(self.poll_s)

    def report(self) -> list[dict[str, Any]]:
        """Each applied fault as a dict (for ``measured.json``)."""
        return [
            {
                "node": a.fault.node,
                "action": a.fault.action,
                "due_s": a.fault.at,
                "node_s": round(a.node_s, 4),
                "root_s": None if a.root_s is None else round(a.root_s, 4),
                "took_s": round(a.took_s, 4),
            }
            for a in self.applied
        ]

    def offsets(self) -> dict[str, float]:
        """Each node's time zero minus the root's (seconds; negative: started before it)."""
        if self.root not in self.starts:
            return {}
        r = self.starts[self.root]
        return {n: round(t - r, 4) for n, t in sorted(self.starts.items())}
