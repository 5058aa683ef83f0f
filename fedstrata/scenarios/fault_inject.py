"""Inject a node's scheduled faults into its run over a real MQTT broker.

The schedule is :func:`~fedstrata.scenarios.fault_plan.fault_plan`'s; what each fault
does mirrors the simulator (:mod:`fedstrata.sim.lifecycle`, :mod:`fedstrata.sim.engine`):

* a **crash** (:class:`CrashingRunner`) at ``at`` seconds since the run started
  shuts the node's TCP connection down without an MQTT DISCONNECT (the broker
  publishes its will), and its timers, pending effects and memory go with it. With
  ``restart_after`` a fresh incarnation starts that much later: a new node object
  built like the simulator's restart (:func:`restart_factory`), on a clean MQTT
  session (the crashed session's subscriptions and queued messages are forgotten,
  as the simulator's broker drops them), which gets ``Started`` and subscribes again.
  A crash while the node is down already is ignored, as in the simulator.
* a **dropout** (:class:`FaultGate`) suppresses a delivery whose topic ends with
  ``/down``, decided by the node's next dropout draw; each delivery draws once.
* **availability**: while the node is offline it is handed nothing. A QoS 0 message
  that arrives is lost. A QoS 1 message follows the scenario's ``network.model``, as
  in the simulator: under ``tcp`` (the default) the node's persistent session keeps
  it and it is handed over when the node is back (``held``); under
  ``message-retry`` it is dropped and comes again every ``retry_interval`` (5 s) up
  to ``max_retries`` (10) times. A timer that fires, and ``Started``, wait until the
  node is back online (for good offline: never; a message then is lost). The node
  still holds its broker connection (the simulator keeps an offline node's session
  too: no will is published). A node sends only in answer to an event, so it never
  sends while offline.

Counts of what was injected are kept in :class:`FaultCounts` per node.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fedstrata.broker.runner import NodeRunner, RunLog, Traffic
from fedstrata.nodes.events import Delivered, Event, PeerLost, TimerFired
from fedstrata.scenarios.fault_plan import DROPOUT_SUFFIX, Crash, NodeFaults
from fedstrata.scenarios.restart import restart_factory

__all__ = [
    "MAX_RETRIES",
    "RETRY_INTERVAL_S",
    "AnyRunner",
    "CrashingRunner",
    "FaultCounts",
    "FaultGate",
    "FaultyRunner",
    "fault_counts",
    "restart_factory",
    "runner_with_faults",
]

#: The simulator's broker resends an undelivered QoS 1 message this often (seconds)...
RETRY_INTERVAL_S = 5.0
#: ... at most this many times (:class:`~fedstrata.sim.broker.SimBroker` defaults).
MAX_RETRIES = 10


@dataclass
class FaultCounts:
    """What the faults did to one node (all its incarnations).

    ``dropped`` counts suppressed deliveries by reason (``dropout``, ``offline``:
    each attempt at an offline node that was lost), ``held`` the QoS 1 messages
    kept for an offline node until it was back (``network.model: tcp``),
    ``abandoned`` the messages given up after ``max_retries``, ``deferred`` the
    timers and starts held back while offline, ``suppressed`` those never handed
    over (offline for good). ``crashes`` lists ``{"node", "t", "reason",
    "restarts"}`` as the simulator's summary does;
    ``timeline`` every one of these as ``(t, fault)`` in the order they happened
    (``fault``: ``dropout``, ``offline``, ``held``, ``abandoned``, ``deferred``,
    ``suppressed``, ``crash``, ``restart``).
    """

    dropped: Counter[str] = field(default_factory=Counter)
    held: int = 0
    abandoned: int = 0
    deferred: int = 0
    suppressed: int = 0
    crashes: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[tuple[float, str]] = field(default_factory=list)

    def note(self, t: float, fault: str) -> None:
        """Add ``fault`` at ``t`` to the timeline."""
        self.timeline.append((round(t, 3), fault))


class FaultGate:
    """Dropout and availability of one node: what happens to each event it is handed.

    Shared by the node's incarnations, like the simulator's per-node streams.

    Parameters
    ----------
    faults
        The node's schedule.
    qos
        The QoS of the protocol's messages (an offline node's message is kept at 1).
    held
        ``True`` (``network.model: tcp``): a QoS 1 message for an offline node waits
        until it is back; ``False`` (``message-retry``): it is resent every 5 s.
    """

    def __init__(self, faults: NodeFaults, qos: int, *, held: bool = True) -> None:
        self.node_id = faults.node_id
        self.p = faults.dropout
        self.draw = faults.dropout_draws()
        self.avail = faults.availability()
        self.qos = qos
        self.held = held
        self.counts = FaultCounts()

    def verdict(self, event: Event, now: float, tries: int) -> float | None:
        """``0``: hand ``event`` over now; ``> 0``: offer it again that much later; ``None``: drop.

        ``tries`` is how many times a delivery was offered already.
        """
        avail = self.avail
        if avail is not None and not avail.is_online(now):
            return self._offline(event, now, tries)
        if (
            self.draw is not None
            and isinstance(event, Delivered)
            and event.topic.endswith(DROPOUT_SUFFIX)
            and self.draw() < self.p
        ):
            self.counts.dropped["dropout"] += 1
            self.counts.note(now, "dropout")
            return None
        return 0.0

    def _offline(self, event: Event, now: float, tries: int) -> float | None:
        assert self.avail is not None
        if isinstance(event, Delivered | PeerLost):
            lost = self.qos == 0 and isinstance(event, Delivered)  # wills are QoS 1
            if self.held and not lost:
                return self._hold(now)
            self.counts.dropped["offline"] += 1
            self.counts.note(now, "offline")
            if lost:
                return None
            if tries >= MAX_RETRIES:
                self.counts.abandoned += 1
                self.counts.note(now, "abandoned")
                return None
            return RETRY_INTERVAL_S
        back = self.avail.next_online(now)
        if back is None:
            self.counts.suppressed += 1
            self.counts.note(now, "suppressed")
            return None
        self.counts.deferred += 1
        self.counts.note(now, "deferred")
        return max(back - now, 1e-3)

    def _hold(self, now: float) -> float | None:
        """Keep a QoS 1 message until the node is back (lost if it never is)."""
        assert self.avail is not None
        back = self.avail.next_online(now)
        if back is None:
            self.counts.dropped["offline"] += 1
            self.counts.note(now, "offline")
            return None
        self.counts.held += 1
        self.counts.note(now, "held")
        return max(back - now, 1e-3)


class FaultyRunner(NodeRunner):
    """A :class:`NodeRunner` whose events pass a :class:`FaultGate` first.

    Parameters
    ----------
    gate
        The node's gate; the other parameters are :class:`NodeRunner`'s.
    """

    def __init__(self, *args: Any, gate: FaultGate, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = gate
        #: Crashed by the schedule: it takes no event any more (its connection may
        #: still be on its way down).
        self.down = False

    def _feed(self, event: Event, tries: int = 0) -> None:
        if self.crashed is not None or self.down:
            return
        wait = self.gate.verdict(event, self.log.now(), tries)
        if wait is None:
            return
        if wait > 0:
            item = ("fault_again", event, tries + 1)
            asyncio.get_running_loop().call_later(wait, self._inbox_put, item)
            return
        super()._feed(event)

    def _dispatch(self, item: tuple[Any, ...]) -> None:
        if item[0] != "fault_again":
            super()._dispatch(item)
            return
        _, event, tries = item
        if isinstance(event, TimerFired) and event.name in self._timers:
            return  # re-armed meanwhile: this firing is stale, as in the simulator
        self._feed(dataclasses.replace(event, now=self.log.now()), tries)


class CrashingRunner:
    """Run a node through its scheduled crashes and restarts, one runner per incarnation.

    Stands in for a :class:`NodeRunner` (:meth:`run`, :meth:`abort` and the outcome
    attributes, those of the last incarnation; :attr:`traffic` sums them all).

    Parameters
    ----------
    node
        The first incarnation's node.
    crashes
        The schedule, sorted by time.
    make_runner
        ``make_runner(node)`` returns the runner of one incarnation.
    restart
        Builds a restarted node (:func:`restart_factory`).
    log
        The run's log (its clock times the crashes).
    counts
        Where the crashes are listed (the node's :class:`FaultCounts`).
    """

    def __init__(
        self,
        node: Any,
        crashes: tuple[Crash, ...],
        make_runner: Callable[[Any], FaultyRunner],
        restart: Callable[[], Any],
        log: RunLog,
        counts: FaultCounts,
    ) -> None:
        self.node_id = str(node.node_id)
        self.crashes, self.make_runner, self.restart = crashes, make_runner, restart
        self.log, self.counts = log, counts
        self.current = make_runner(node)
        self.past: list[FaultyRunner] = []
        self._down: tuple[str, float] | None = None  # a crash without restart: why, when
        self._stopped = False

    def __getattr__(self, name: str) -> Any:
        # finished, result, failure, idled_out, republished, ...: the last incarnation's
        if name in ("current", "past"):
            raise AttributeError(name)
        return getattr(self.current, name)

    @property
    def crashed(self) -> str | None:
        """Why the node is down for good: its crash fault, or its own failure, or ``None``."""
        return self._down[0] if self._down is not None else self.current.crashed

    @property
    def crashed_at(self) -> float | None:
        """When :attr:`crashed` happened, in seconds since the run started."""
        return self._down[1] if self._down is not None else self.current.crashed_at

    @property
    def traffic(self) -> Traffic:
        """The traffic of every incarnation, summed."""
        total = Traffic()
        for r in [*self.past, self.current]:
            for f in dataclasses.fields(Traffic):
                setattr(total, f.name, getattr(total, f.name) + getattr(r.traffic, f.name))
        return total

    @property
    def retained_topics(self) -> set[str]:
        """The retained topics of every incarnation."""
        return set().union(*(r.retained_topics for r in [*self.past, self.current]))

    def abort(self) -> None:
        """Crash the current incarnation now and start no other."""
        self._stopped = True
        self.current.abort()

    async def run(self) -> Any:
        """Run the incarnations: each until it ends or its crash is due."""
        up_since = 0.0
        for crash in self.crashes:
            if crash.at < up_since:  # down already (the simulator ignores it too)
                continue
            task = asyncio.create_task(self.current.run(), name=f"inc-{self.node_id}")
            if not await self._until(task, crash.at):
                return await task  # it ended by itself first: finished, crashed, gave up
            await self._crash(task, crash)
            if crash.restart_after is None or self._stopped:
                return None
            await asyncio.sleep(max(0.0, crash.at + crash.restart_after - self.log.now()))
            up_since = crash.at + crash.restart_after
            self.counts.note(self.log.now(), "restart")
            self.past.append(self.current)
            self.current = self.make_runner(self.restart())
            await self.current.forget_session()
        return await self.current.run()

    async def _until(self, task: asyncio.Task[Any], at: float) -> bool:
        """Wait for ``at`` on the run's clock; ``False`` if ``task`` ended before."""
        delay = at - self.log.now()
        if delay > 0:
            done, _ = await asyncio.wait([task], timeout=delay)
            if done:
                return False
        return not task.done()

    async def _crash(self, task: asyncio.Task[Any], crash: Crash) -> None:
        t = self.log.now()
        self.counts.note(t, "crash")
        self.counts.crashes.append(
            {
                "node": self.node_id,
                "t": round(t, 3),
                "reason": "crash fault",
                "restarts": crash.restart_after is not None,
            }
        )
        self.current.down = True  # dead from now on, whatever still arrives
        # A crash due before the first connection (at 0 s) waits for it, so that the
        # broker has a will to publish: the simulator starts a node before its crash.
        for _ in range(500):
            if self.current.connected or task.done():
                break
            await asyncio.sleep(0.01)
        self.current.abort()  # no DISCONNECT: the broker publishes the will
        done, _ = await asyncio.wait([task], timeout=2.0)
        if not done:  # not connected yet: nothing to drop but the attempt
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if crash.restart_after is None:
            self._down = ("crash fault", t)


#: The runner of one node: plain, with a fault gate, or through its crashes.
AnyRunner = NodeRunner | CrashingRunner


def runner_with_faults(
    node: Any,
    faults: NodeFaults | None,
    qos: int,
    log: RunLog,
    *,
    network_model: str = "tcp",
    **kwargs: Any,
) -> AnyRunner:
    """The runner of ``node`` that injects ``faults`` (a plain one without any).

    ``kwargs`` are :class:`NodeRunner`'s (``broker`` included); ``log`` is the run's;
    ``network_model`` the scenario's (see :class:`FaultGate`'s ``held``).
    """
    if faults is None or faults.empty:
        return NodeRunner(node, log=log, **kwargs)
    gate = FaultGate(faults, qos, held=network_model == "tcp")

    def make(n: Any) -> FaultyRunner:
        return FaultyRunner(n, gate=gate, log=log, **kwargs)

    if not faults.crashes:
        return make(node)
    return CrashingRunner(node, faults.crashes, make, restart_factory(node), log, gate.counts)


def fault_counts(runner: Any) -> FaultCounts | None:
    """What the faults did to the node of ``runner`` (``None``: none were injected)."""
    if isinstance(runner, CrashingRunner):
        return runner.counts
    if isinstance(runner, FaultyRunner):
        return runner.gate.counts
    return None
