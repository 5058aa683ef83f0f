"""Run a scenario over a real MQTT broker and write the same record as the simulator.

The nodes are the simulator's node objects (built by
:func:`~fedstrata.scenarios.build.build_federation`); each runs as an asyncio task
driven by :class:`~fedstrata.broker.runner.NodeRunner`, in this process or spread
over worker processes (:mod:`fedstrata.scenarios.mqtt_nodes`). The record
(``summary.json``, ``rounds.csv``, ``labels.csv``, ``model.npz``) is built by
the same helpers as the simulator's, with ``transport: "mqtt"``.

Differences from a simulated run:

* clocks are wall-clock seconds since the run started: ``wall_time_s`` in the
  summary, and the ``virtual_time_s`` column of ``rounds.csv`` holds the node's
  wall clock;
* the scenario's node faults are injected from the schedule the simulator draws
  (:mod:`fedstrata.scenarios.fault_plan`, under the run's seed; how each is carried
  out: :mod:`fedstrata.scenarios.fault_inject`), at the same seconds since the run
  started: a **crash** drops the node's TCP connection without a DISCONNECT (the
  broker publishes its will) and discards its memory, timers and pending effects;
  ``restart_after`` later a fresh incarnation connects on a clean session and gets
  ``Started``. A **dropout** suppresses a ``/down`` delivery by the node's own dropout
  draws, in the simulator's order. **Availability** (the simulator's Markov chain on
  the node's stream) hands an offline node nothing: its timers and ``Started`` wait
  until it is back, a QoS 0 delivery is lost, a QoS 1 one is kept until it is back
  (``network.model: tcp``) or resent every 5 s (``message-retry``), as in the
  simulator. The faults fall at the same seconds; they fall in the same rounds where
  the rounds keep the simulator's pace (a fault within milliseconds of a round's end
  can land in the next one, as the real clock drifts a few milliseconds a round).
  ``faults_injected`` in the summary counts what they did and lists them by time
  (``timeline``); ``crashed`` lists the crashes as the simulator does, and the
  ``dropped`` block's network part the deliveries suppressed (``dropout``,
  ``offline``). The link faults (partitions, degradations) are applied only with
  ``emulate_links`` (delay, bandwidth, loss, partitions and degradations, in
  userspace; ``emulated_links`` in the summary counts the transmissions they lost and
  the messages given up); without it a warning says they were ignored;
* every node reaches the broker over TCP, so the root's and the aggregators'
  PUBLISH packets count too (the simulator co-locates each aggregator with its
  broker, so its hops carry no wire bytes);
* the run id (the second topic level) is the scenario's name plus ``-`` and 8 random
  hex digits, so runs on a shared broker never mix; it is ``run_id`` in the summary;
* losses, retransmissions and QoS 1 redeliveries happen inside the MQTT client and
  broker and are not observable: those counters are ``null``;
* presence notices (``online`` on connect, the last will) are counted apart, in
  ``presence`` (PUBLISH packets and their bytes, up and down), not in
  ``messages``, ``bytes_*`` or ``payload_bytes``, which count the protocol's own
  messages as the simulator does;
* when the nodes are done, the retained messages of the run (each aggregator's
  last global model) are removed from the broker, so that a shared broker does not
  keep one per run; ``retained_cleared`` counts them;
* ``broker_sys`` holds the broker's own ``$SYS`` byte and message counters over the
  run (:mod:`fedstrata.broker.sysstats`), or is ``null`` with ``broker_sys_reason``;
* every message is signed, whatever ``privacy.sign`` says, with keys that cannot be
  derived from the scenario: fresh random keys for this run (handed to the worker
  processes), or the key files of ``fedstrata keys`` (``key_dir``). Only
  ``insecure`` runs unsigned, and the record says so (``privacy``: ``"signed":
  false, "insecure": true``); a scenario with ``privacy.sign: true`` cannot be run
  insecure. Signing adds 64 bytes to every message: a fault-free run has the
  simulated run's bytes when the simulation signs too (``privacy.sign: true``), or
  when this run is ``insecure`` and the simulation does not sign.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fedstrata.broker.endpoint import Endpoint
from fedstrata.broker.launcher import PrivateBroker
from fedstrata.broker.runner import RunLog, clear_retained, probe_broker
from fedstrata.broker.sysstats import SYS_NOTE, BackgroundSysMonitor
from fedstrata.errors import FedstrataError, ValidationError
from fedstrata.mqtt import PROTOCOL_MQTT311
from fedstrata.nodes.sealing import RunKeys
from fedstrata.scenarios.build import Federation, build_federation
from fedstrata.scenarios.emulate import link_emulators
from fedstrata.scenarios.fault_plan import LINK_FAULTS
from fedstrata.scenarios.fault_report import crash_list, faults_injected, network_drops
from fedstrata.scenarios.mqtt_counters import mqtt_volume, presence_traffic
from fedstrata.scenarios.mqtt_nodes import (
    Execution,
    ensure_open_files,
    long_lived_gc,
    make_runners,
    outcomes_of,
    run_in_processes,
    run_share,
)
from fedstrata.scenarios.orchestrate import Run
from fedstrata.scenarios.run import _rounds_bar, write_run
from fedstrata.scenarios.schema import Scenario
from fedstrata.scenarios.summary import RunResult, outcome_of, warning_lines
from fedstrata.scenarios.wiring import wire_topology

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MqttTransport",
    "mqtt_run",
    "run_keys",
    "run_scenario_mqtt",
    "signing_report",
]

#: Wall-clock limit of a run when none is given.
DEFAULT_TIMEOUT_S = 600.0
#: A run id is one topic level: no wildcards, no separators, no ``$`` prefix.
_RUN_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _faults_ignored(sc: Scenario, emulate_links: bool) -> str | None:
    """The warning for the faults this run leaves out: link faults without emulation.

    Crashes, dropouts and availability are always injected (:mod:`fault_inject`).
    """
    kinds = [] if emulate_links else [k for k in sc.faults.kinds() if k in LINK_FAULTS]
    if not kinds:
        return None
    return (
        f"link faults are not injected over MQTT without --emulate-links; ignored: "
        f"{', '.join(kinds)} (crashes, dropouts and availability are injected)"
    )


def run_keys(
    sc: Scenario, insecure: bool = False, key_dir: str | Path | None = None
) -> RunKeys | None:
    """The signing keys of a run over a real broker (``None``: ``insecure``, unsigned).

    Fresh random keys for every node (:meth:`RunKeys.generate`), or the key files in
    ``key_dir`` (``fedstrata keys``): never the scenario-derived keys of a simulation,
    which anyone holding the scenario can compute.

    Raises
    ------
    ValidationError
        ``insecure`` with ``privacy.sign: true`` or with ``key_dir``, or key files
        that are missing, malformed, readable by others or not the roster's.
    """
    if insecure:
        if sc.privacy.sign:
            raise ValidationError(
                "the scenario signs its messages (privacy.sign: true): it cannot run insecure"
            )
        if key_dir is not None:
            raise ValidationError("key files sign the run: give them or insecure, not both")
        return None
    wiring = wire_topology(sc)
    nodes = [n for _, group in wiring.tiers for n in group] + list(wiring.clients)
    if key_dir is None:
        return RunKeys.generate(nodes)
    try:
        return RunKeys.load(key_dir, nodes)
    except (FedstrataError, OSError, ValueError) as exc:
        raise ValidationError(f"signing keys in {key_dir}: {exc}") from None


def signing_report(keys: RunKeys | None) -> dict[str, Any]:
    """The signing fields of a real run's ``privacy`` block."""
    if keys is None:
        return {"signed": False, "insecure": True}
    return {"signed": True, "keys": keys.source}


#: Kept as a module attribute so tests can watch the runners of an in-process run.
_make_runners = make_runners


async def _run_nodes(
    fed: Federation,
    log: RunLog,
    runners: dict[str, Any],
    timeout_s: float,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[bool, float]:
    """Run every node as a task of this process; return whether the root timed out, wall.

    ``progress(rounds, wall_s)`` is called about five times a second with the root
    rounds closed so far.
    """
    log.t0 = time.monotonic()
    ticker = None if progress is None else asyncio.create_task(_tick(fed, log, progress))
    try:
        timed_out, _, wall = await run_share(
            runners, fed.scenario.topology.cloud_id, log, timeout_s
        )
    finally:
        if ticker is not None:
            ticker.cancel()
    return timed_out, wall


async def _tick(fed: Federation, log: RunLog, progress: Callable[[int, float], None]) -> None:
    root, seen, rounds = fed.scenario.topology.cloud_id, 0, 0
    kinds = ("round", "setup_failed")
    while True:
        new = log.records[seen:]
        seen += len(new)
        rounds += sum(1 for r in new if r["node"] == root and r["kind"] in kinds)
        progress(rounds, log.now())
        await asyncio.sleep(0.2)


class MqttTransport:
    """A real MQTT broker as a :class:`~fedstrata.scenarios.orchestrate.Transport`.

    Builds the federation under the run id and signs it with the run's keys; drives
    its nodes as asyncio tasks of this process, or deals them out to a pool of
    worker processes (``processes`` > 1); contributes the MQTT counters (broker,
    run id, presence, emulated links, retained messages cleared, ``$SYS``
    statistics, republished messages). Settings as in :func:`mqtt_run`.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        protocol: int = PROTOCOL_MQTT311,
        sys_stats: bool = True,
        node_brokers: dict[str, Endpoint] | None = None,
        run_id: str | None = None,
        emulate_links: bool = False,
        processes: int = 1,
        progress: Callable[[int, float], None] | None = None,
        insecure: bool = False,
        key_dir: str | Path | None = None,
    ) -> None:
        if run_id is not None and not _RUN_ID.fullmatch(run_id):
            raise ValidationError(
                f"run id {run_id!r} must be 1-64 letters, digits, '.', '_' or '-' (a topic level)"
            )
        self.endpoint, self.timeout_s, self.protocol = endpoint, timeout_s, protocol
        self.sys_stats, self.node_brokers, self.run_id = sys_stats, node_brokers, run_id
        self.emulate_links, self.processes, self.progress = emulate_links, processes, progress
        self.insecure, self.key_dir = insecure, key_dir
        self.monitor: BackgroundSysMonitor | None = None
        self.keys: RunKeys | None = None
        self.broker_of: dict[str, Endpoint] = {}

    def build(self, sc: Scenario) -> Federation:
        """The federation under the run id, signed with the run's keys.

        ``fed.scenario`` stays ``sc`` (its own name): the record names the study.
        """
        # the first $SYS reading waits for the broker's next update: meanwhile, build
        self.monitor = BackgroundSysMonitor(self.endpoint).start() if self.sys_stats else None
        if self.run_id is None:
            self.run_id = f"{sc.name}-{secrets.token_hex(4)}"
        try:
            self.keys = run_keys(sc, self.insecure, self.key_dir)
            fed = build_federation(sc.model_copy(update={"name": self.run_id}), keys=self.keys)
        except BaseException:
            if self.monitor is not None:
                self.monitor.stop(read=False)
            raise
        fed.scenario = sc
        self.broker_of = {nid: self.endpoint for nid in fed.sim.engine.nodes}
        self.broker_of.update(self.node_brokers or {})
        return fed

    def drive(self, fed: Federation) -> Execution:
        """Run the nodes over the broker (here or in worker processes) until the run ends."""
        interrupted = False
        try:
            ex = self._in_pool(fed) if self.processes > 1 else self._in_process(fed)
            interrupted = ex.interrupted
        finally:
            if self.monitor is not None:
                self.monitor.stop(read=not interrupted)
        return ex

    def _in_process(self, fed: Federation) -> Execution:
        ensure_open_files(len(fed.sim.engine.nodes))
        links = link_emulators(fed) if self.emulate_links else None
        log, runners = _make_runners(fed, self.broker_of, self.protocol, links)
        if self.monitor is not None:
            self.monitor.wait_ready()
        interrupted = False
        try:
            with long_lived_gc():
                timed_out, wall = asyncio.run(
                    _run_nodes(fed, log, runners, self.timeout_s, self.progress)
                )
        except KeyboardInterrupt:  # every node task was cancelled and disconnected
            interrupted, timed_out, wall = True, False, log.now()
        return Execution(
            log.records, outcomes_of(fed, runners, links), timed_out, interrupted, wall
        )

    def _in_pool(self, fed: Federation) -> Execution:
        if self.monitor is not None:
            self.monitor.wait_ready()
        return run_in_processes(
            fed.scenario.model_copy(update={"name": self.run_id}),
            list(fed.sim.engine.nodes),
            self.broker_of,
            self.protocol,
            self.emulate_links,
            self.timeout_s,
            self.processes,
            tiers=dict(fed.tiers),
            keys=self.keys,
        )

    def result(self, fed: Federation, ex: Execution, caught: dict[str, int]) -> RunResult:
        """The run's outcome, traffic and MQTT counters."""
        for key, n in ex.warnings.items():
            caught[key] = caught.get(key, 0) + n
        cleared = _clear_retained(ex, self.broker_of, self.protocol)
        outcomes, records = ex.outcomes, ex.records
        results = {nid: o.result for nid, o in outcomes.items() if o.finished}
        fed.sim.records.clear()  # the simulator never ran: its records stay empty
        root_result = results.get(fed.scenario.topology.cloud_id)
        outcome = outcome_of(
            fed,
            root_result,
            records,
            interrupted=f"interrupted at wall-clock time {ex.wall:.6g} s"
            if ex.interrupted
            else None,
            stalled=lambda: self._stall_reason(fed, ex),
        )
        return RunResult(
            "mqtt",
            outcome,
            root_result is not None,
            mqtt_volume(outcomes, qos1=fed.protocol.qos == 1),
            records,
            results,
            self._notes(fed, ex, caught),
            crash_list(outcomes),
            network_drops(outcomes),
            ex.wall,
            signing_report(self.keys),
            counters=self._counters(fed, ex, cleared),
        )

    def _stall_reason(self, fed: Federation, ex: Execution) -> str:
        """Why the root did not finish: it crashed, lost the broker, or ran out of time."""
        root_id = fed.scenario.topology.cloud_id
        root = ex.outcomes[root_id]
        if root.crashed is not None:
            return f"the root {root_id!r} crashed ({root.crashed}); no round can close"
        if root.failure is not None:
            return f"the root lost the broker: {root.failure}"
        if ex.timed_out:
            limit = self.timeout_s
            return f"the root {root_id!r} did not finish within the {limit:g} s wall-clock limit"
        return f"the root {root_id!r} stopped without finishing"

    def _notes(self, fed: Federation, ex: Execution, caught: dict[str, int]) -> list[str]:
        """The ``warnings``: counted warnings, ignored faults, lost brokers, idle nodes."""
        notes = warning_lines(caught)
        ignored = _faults_ignored(fed.scenario, self.emulate_links)
        if ignored:
            notes.append(ignored)
        notes += [o.failure for o in ex.outcomes.values() if o.failure is not None]
        notes += [o.idled_out for o in ex.outcomes.values() if o.idled_out is not None]
        return notes

    def _broker_sys(self, interrupted: bool) -> tuple[dict[str, Any] | None, str | None]:
        """The broker's ``$SYS`` deltas over the run and why they are missing, if so."""
        if self.monitor is None:
            return None, "not read (sys_stats off)"
        if interrupted:
            return None, "not read: the run was interrupted"
        deltas = self.monitor.monitor.deltas()
        if deltas is not None:
            deltas["note"] = SYS_NOTE
        return deltas, self.monitor.monitor.reason

    def _counters(self, fed: Federation, ex: Execution, cleared: int) -> dict[str, Any]:
        """The summary keys of a run over MQTT (the simulator's own ones are ``null``)."""
        outcomes = ex.outcomes.values()
        broker_sys, broker_sys_reason = self._broker_sys(ex.interrupted)
        return {
            "broker": self.endpoint.url,
            "run_id": fed.protocol.run,
            "presence": presence_traffic(ex.outcomes),
            "emulated_links": None
            if not self.emulate_links
            else {
                "lost": sum(o.link_lost for o in outcomes),
                "gave_up": sum(o.link_gave_up for o in outcomes),
            },
            "processes": ex.processes,
            "retained_cleared": cleared,
            **dict.fromkeys(_NOT_OBSERVABLE),
            "duplicates": sum(1 for r in ex.records if r["kind"] == "duplicate"),
            "virtual_time_s": None,  # no virtual clock: see wall_time_s
            "broker_sys": broker_sys,
            "broker_sys_reason": broker_sys_reason,
            "republished": sum(o.republished for o in outcomes),
            "faults_injected": faults_injected(ex.outcomes),
        }


#: Counters of the simulator that happen inside the MQTT client and broker, unseen.
_NOT_OBSERVABLE = (
    "messages_dropped",
    "dropped_by_reason",
    "messages_not_sent",
    "deliveries_abandoned",
    "events_suppressed",
    "retransmissions",
)


def mqtt_run(
    sc: Scenario,
    broker: str | Endpoint,
    port: int = 1883,
    *,
    seed: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    protocol: int = PROTOCOL_MQTT311,
    sys_stats: bool = True,
    node_brokers: dict[str, Endpoint] | None = None,
    run_id: str | None = None,
    emulate_links: bool = False,
    processes: int = 1,
    progress: Callable[[int, float], None] | None = None,
    insecure: bool = False,
    key_dir: str | Path | None = None,
) -> tuple[Federation, dict[str, Any], list[dict[str, Any]]]:
    """Run ``sc`` over ``broker`` (a host with ``port``, or an :class:`Endpoint`).

    Returns the federation, the summary and the rows of ``rounds.csv``.
    ``node_brokers`` sends some nodes to other brokers (node id → endpoint), for
    sites whose brokers are bridged (``fedstrata broker config --bridge``); the
    ``$SYS`` counters are read on ``broker``. ``run_id`` (the second topic level)
    defaults to the scenario's name, ``-`` and 8 random hex digits; with the
    scenario's name itself, topics and messages are the simulator's byte for byte.
    ``emulate_links`` delays and loses each node's messages by the scenario's link
    models, partitions and degradations (:mod:`fedstrata.scenarios.emulate`).
    ``processes`` > 1 deals the nodes out to that many worker processes
    (:mod:`fedstrata.scenarios.mqtt_nodes`). ``progress(rounds, wall_s)`` is called
    a few times a second while the nodes run in this process (not with ``processes``).
    Every message is signed with fresh per-run keys, or with the key files in
    ``key_dir``; ``insecure`` runs unsigned (see :func:`run_keys`).

    The counterpart of :func:`fedstrata.scenarios.run.simulate`. The broker must be
    reachable (see :func:`~fedstrata.broker.runner.probe_broker`); a node that loses
    it for good records ``transport_failed`` and the run ends ``stalled`` unless the
    root finished. A ``KeyboardInterrupt`` ends the run with status ``interrupted``
    (not re-raised), as in the simulator. With ``sys_stats`` the broker's ``$SYS``
    counters are read before and after the nodes run (up to 1 s more at each end).
    """
    transport = MqttTransport(
        broker if isinstance(broker, Endpoint) else Endpoint(broker, port),
        timeout_s=timeout_s,
        protocol=protocol,
        sys_stats=sys_stats,
        node_brokers=node_brokers,
        run_id=run_id,
        emulate_links=emulate_links,
        processes=processes,
        progress=progress,
        insecure=insecure,
        key_dir=key_dir,
    )
    return Run(sc, transport, seed=seed).execute()


def _clear_retained(ex: Execution, broker_of: dict[str, Endpoint], protocol: int) -> int:
    """Remove the run's retained messages (its last global models) from the brokers."""
    by_broker: dict[Endpoint, set[str]] = {}
    for nid, o in ex.outcomes.items():
        by_broker.setdefault(broker_of[nid], set()).update(o.retained_topics)
    return sum(
        asyncio.run(clear_retained(e, topics, protocol=protocol))
        for e, topics in by_broker.items()
        if topics
    )


@contextlib.contextmanager
def _progress_bar(sc: Scenario, on: bool) -> Iterator[Callable[[int, float], None] | None]:
    """A rich progress bar of the root's rounds (``None`` when off)."""
    if not on:
        yield None
        return
    with _rounds_bar(sc) as update:
        yield lambda rounds, wall: update(rounds, f"round {rounds}  wall {wall:,.1f}s (mqtt)")


@contextlib.contextmanager
def _broker(broker: Endpoint | None) -> Any:
    if broker is None:
        with PrivateBroker() as b:
            yield Endpoint(b.host, int(b.port or 0))
    else:
        yield broker


def run_scenario_mqtt(
    sc: Scenario,
    out_dir: str | Path,
    *,
    seed: int | None = None,
    broker: str | Endpoint | None = None,
    overwrite: bool = False,
    command: list[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    plots: bool = True,
    protocol: int = PROTOCOL_MQTT311,
    run_id: str | None = None,
    emulate_links: bool = False,
    processes: int = 1,
    progress: bool = False,
    insecure: bool = False,
    key_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Run ``sc`` over MQTT and write its record into ``out_dir``; return the summary.

    ``broker`` is an ``mqtt://host:port`` or ``mqtts://host:port`` URL, an
    :class:`~fedstrata.broker.endpoint.Endpoint` (credentials, TLS), or ``None`` to
    start a private Mosquitto on 127.0.0.1 for this run. The record has the
    simulator's files and fields, with ``transport: "mqtt"`` (see the module
    docstring for the differences). ``run_id``, ``emulate_links`` and
    ``processes``, ``insecure`` and ``key_dir`` as in :func:`mqtt_run`; ``progress``
    draws a bar of the root's rounds on stderr (in-process runs only).

    Raises
    ------
    ValidationError
        If ``broker`` is not an ``mqtt://HOST:PORT`` or ``mqtts://HOST:PORT`` URL, or
        ``insecure``/``key_dir`` cannot be used (see :func:`run_keys`).
    TransportError
        If the broker cannot be reached (or Mosquitto cannot be started).
    OutputError
        If ``out_dir`` cannot take this run.

    """
    if isinstance(broker, str):
        broker = Endpoint.from_url(broker)  # a usage error before anything else happens
    if insecure or key_dir is not None:
        run_keys(sc, insecure, key_dir)  # refused before a broker starts or --out is touched
    if broker is None:  # the private broker, started next, inherits the limit
        t = sc.topology
        ensure_open_files(1 + t.clients.count + sum(tier.count for tier in t.tiers))
    with _broker(broker) as endpoint:
        asyncio.run(probe_broker(endpoint, protocol=protocol))

        def execute() -> tuple[Federation, dict[str, Any], list[dict[str, Any]]]:
            with _progress_bar(sc, progress and processes == 1) as tick:
                fed, summary, rows = mqtt_run(
                    sc,
                    endpoint,
                    seed=seed,
                    timeout_s=timeout_s,
                    protocol=protocol,
                    run_id=run_id,
                    emulate_links=emulate_links,
                    processes=processes,
                    progress=tick,
                    insecure=insecure,
                    key_dir=key_dir,
                )
            if broker is None:
                summary["broker"] = "private mosquitto on 127.0.0.1"
            return fed, summary, rows

        return write_run(
            sc,
            out_dir,
            execute,
            seed=seed,
            overwrite=overwrite,
            command=command,
            events=False,
            plots=plots,
            elapsed_key="wall_time_s",
        )
