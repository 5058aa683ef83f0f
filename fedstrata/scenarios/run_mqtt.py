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
* the scenario's ``faults`` are not injected (a warning in the summary says so),
  and its links are not emulated unless asked (``emulate_links``: delay, bandwidth,
  loss, partitions and degradations, in userspace; ``emulated_links`` in the
  summary counts the transmissions they lost and the messages given up);
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
import gc
import re
import secrets
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fedstrata.broker.endpoint import Endpoint
from fedstrata.broker.launcher import PrivateBroker
from fedstrata.broker.runner import NodeRunner, RunLog, clear_retained, probe_broker
from fedstrata.broker.sysstats import SYS_NOTE, BackgroundSysMonitor
from fedstrata.errors import FedstrataError, ValidationError
from fedstrata.mqtt import PROTOCOL_MQTT311
from fedstrata.nodes.aggregator import RunStatus
from fedstrata.nodes.sealing import RunKeys
from fedstrata.scenarios.build import Federation, build_federation
from fedstrata.scenarios.emulate import link_emulators
from fedstrata.scenarios.mqtt_nodes import (
    Execution,
    ensure_open_files,
    make_runners,
    outcomes_of,
    run_in_processes,
    run_share,
)
from fedstrata.scenarios.preflight import wire_topology
from fedstrata.scenarios.run import (
    _count_warning,
    _failed_rounds,
    _quality,
    _records_outcome,
    _round_rows,
    _rounds_bar,
    _start_record,
    _write_record,
    dropped_report,
    personalization_report,
    pooled_observer,
    privacy_report,
)
from fedstrata.scenarios.schema import Scenario

__all__ = ["DEFAULT_TIMEOUT_S", "mqtt_run", "run_keys", "run_scenario_mqtt", "signing_report"]

#: Wall-clock limit of a run when none is given.
DEFAULT_TIMEOUT_S = 600.0
#: A run id is one topic level: no wildcards, no separators, no ``$`` prefix.
_RUN_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _faults_ignored(sc: Scenario, emulate_links: bool) -> str | None:
    emulated = ("partitions", "degradations") if emulate_links else ()
    kinds = [k for k in sc.faults.kinds() if k not in emulated]
    if not kinds:
        return None
    hint = "" if emulate_links else " (--emulate-links applies partitions and degradations)"
    return f"faults are not injected over MQTT; ignored: {', '.join(kinds)}{hint}"


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
    runners: dict[str, NodeRunner],
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
    # the first reading waits for the broker's next $SYS update: meanwhile, build
    endpoint = broker if isinstance(broker, Endpoint) else Endpoint(broker, port)
    monitor = BackgroundSysMonitor(endpoint).start() if sys_stats else None
    if seed is not None:
        sc = sc.model_copy(update={"seed": seed})
    if run_id is None:
        run_id = f"{sc.name}-{secrets.token_hex(4)}"
    elif not _RUN_ID.fullmatch(run_id):
        raise ValidationError(
            f"run id {run_id!r} must be 1-64 letters, digits, '.', '_' or '-' (a topic level)"
        )
    try:
        keys = run_keys(sc, insecure, key_dir)
        fed = build_federation(sc.model_copy(update={"name": run_id}), keys=keys)
    except BaseException:
        if monitor is not None:
            monitor.stop(read=False)
        raise
    fed.scenario = sc
    caught: dict[str, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, category, *_a, **_k: _count_warning(
            caught, category, message
        )
        broker_of = {nid: endpoint for nid in fed.sim.engine.nodes}
        broker_of.update(node_brokers or {})
        interrupted = False
        try:
            if processes == 1:
                ensure_open_files(len(fed.sim.engine.nodes))
            if processes > 1:
                if monitor is not None:
                    monitor.wait_ready()
                ex = run_in_processes(
                    sc.model_copy(update={"name": run_id}),
                    list(fed.sim.engine.nodes),
                    broker_of,
                    protocol,
                    emulate_links,
                    timeout_s,
                    processes,
                    tiers=dict(fed.tiers),
                    keys=keys,
                )
            else:
                links = link_emulators(fed) if emulate_links else None
                log, runners = _make_runners(fed, broker_of, protocol, links)
                if monitor is not None:
                    monitor.wait_ready()
                # paho leaves a reference cycle per delivered message: with the
                # federation's many long-lived objects frozen, collecting them is cheap
                # (measured at 1,000 nodes: GC time per round halved)
                gc.freeze()
                try:
                    timed_out, wall = asyncio.run(
                        _run_nodes(fed, log, runners, timeout_s, progress)
                    )
                except KeyboardInterrupt:  # every node task was cancelled and disconnected
                    interrupted, timed_out, wall = True, False, log.now()
                outcomes = outcomes_of(fed, runners, links)
                ex = Execution(log.records, outcomes, timed_out, interrupted, wall)
            interrupted = ex.interrupted
        finally:
            if monitor is not None:
                monitor.stop(read=not interrupted)
    for key, n in ex.warnings.items():
        caught[key] = caught.get(key, 0) + n
    cleared = _clear_retained(ex, broker_of, protocol)
    timed_out, wall, outcomes = ex.timed_out, ex.wall, ex.outcomes
    broker_sys = None if monitor is None or interrupted else monitor.monitor.deltas()
    if broker_sys is not None:
        broker_sys["note"] = SYS_NOTE
    if monitor is None:
        broker_sys_reason = "not read (sys_stats off)"
    elif interrupted:
        broker_sys_reason = "not read: the run was interrupted"
    else:
        broker_sys_reason = monitor.monitor.reason
    records = ex.records
    results = {nid: o.result for nid, o in outcomes.items() if o.finished}
    fed.sim.records.clear()  # the simulator never ran: its records stay empty
    root_id = sc.topology.cloud_id
    root_result = results.get(root_id)
    if interrupted:
        final_state, rounds = _records_outcome(fed, records)
        status = RunStatus.INTERRUPTED.value
        reason = f"interrupted at wall-clock time {wall:.6g} s"
    elif root_result is not None:
        status, reason = root_result["status"], root_result["reason"]
        final_state, rounds = root_result["state"], int(root_result["iterations"])
    else:
        final_state, rounds = _records_outcome(fed, records)
        status = RunStatus.STALLED.value
        failure = outcomes[root_id].failure
        if outcomes[root_id].crashed is not None:
            reason = (
                f"the root {root_id!r} crashed ({outcomes[root_id].crashed}); no round can close"
            )
        elif failure is not None:
            reason = f"the root lost the broker: {failure}"
        elif timed_out:
            reason = (
                f"the root {root_id!r} did not finish within the {timeout_s:g} s wall-clock limit"
            )
        else:
            reason = f"the root {root_id!r} stopped without finishing"
    status, reason, metrics, metrics_reason, labels = _quality(
        fed, status, reason, final_state, root_finished=root_result is not None
    )
    rows = _round_rows(fed, pooled_observer(fed), records)
    per_tier: dict[str, dict[str, int]] = {}
    for r in outcomes.values():
        row = per_tier.setdefault(
            r.tier,
            {
                "nodes": 0,
                "publishes": 0,
                "delivered": 0,
                "bytes_up": 0,
                "bytes_down": 0,
                "payload_bytes_up": 0,
                "payload_bytes_down": 0,
                "messages_up": 0,
                "messages_down": 0,
                "reconnects": 0,
            },
        )
        t = r.traffic
        row["nodes"] += 1
        row["publishes"] += t.publishes
        row["delivered"] += t.delivered
        row["messages_up"] += t.publishes
        row["messages_down"] += t.delivered
        row["reconnects"] += t.reconnects
        row["bytes_up"] += t.packet_bytes_out
        row["bytes_down"] += t.packet_bytes_in
        row["payload_bytes_up"] += t.payload_bytes_out
        row["payload_bytes_down"] += t.payload_bytes_in
    for row in per_tier.values():
        row["bytes_total"] = row["bytes_up"] + row["bytes_down"]
    per_tier = dict(sorted(per_tier.items()))
    up = sum(r["bytes_up"] for r in per_tier.values())
    down = sum(r["bytes_down"] for r in per_tier.values())
    pay_up = sum(r["payload_bytes_up"] for r in per_tier.values())
    pay_down = sum(r["payload_bytes_down"] for r in per_tier.values())
    presence = {
        "publishes": sum(r.traffic.presence_publishes for r in outcomes.values()),
        "bytes_up": sum(r.traffic.presence_bytes_out for r in outcomes.values()),
        "delivered": sum(r.traffic.presence_delivered for r in outcomes.values()),
        "bytes_down": sum(r.traffic.presence_bytes_in for r in outcomes.values()),
    }
    qos1 = fed.protocol.qos == 1
    messages_up = sum(r["messages_up"] for r in per_tier.values())
    messages_down = sum(r["messages_down"] for r in per_tier.values())
    notes = [f"{k} (x{n})" if n > 1 else k for k, n in sorted(caught.items())]
    ignored = _faults_ignored(sc, emulate_links)
    if ignored:
        notes.append(ignored)
    notes += [r.failure for r in outcomes.values() if r.failure is not None]
    notes += [r.idled_out for r in outcomes.values() if r.idled_out is not None]
    crashed = sorted(
        (
            {"node": nid, "t": round(float(o.crashed_at or 0.0), 3), "reason": o.crashed}
            for nid, o in outcomes.items()
            if o.crashed is not None
        ),
        key=lambda c: (c["t"], c["node"]),
    )
    link_lost: dict[str, dict[str, int]] = {}
    for o in outcomes.values():
        if o.link_lost:
            row = link_lost.setdefault(o.tier, {})
            row["loss"] = row.get("loss", 0) + o.link_lost
    summary: dict[str, Any] = {
        "status": status,
        "reason": reason,
        "converged": status == RunStatus.CONVERGED.value,
        "scenario": sc.name,
        "seed": sc.seed,
        "transport": "mqtt",
        "broker": endpoint.url,
        "run_id": fed.protocol.run,
        "rounds": rounds,
        "bytes_up": up,
        "bytes_down": down,
        "bytes_total": up + down,
        "bytes_per_round": (up + down) / rounds if rounds else None,
        "payload_bytes": {"up": pay_up, "down": pay_down, "total": pay_up + pay_down},
        # a successful PUBACK is 4 bytes (MQTT 3.1.1 §3.4, MQTT 5 §3.4.2.1)
        "ack_bytes": {
            "up": 4 * messages_down if qos1 else 0,
            "down": 4 * messages_up if qos1 else 0,
        },
        "messages": messages_up + messages_down,
        "presence": presence,
        "emulated_links": None
        if not emulate_links
        else {
            "lost": sum(r.link_lost for r in outcomes.values()),
            "gave_up": sum(r.link_gave_up for r in outcomes.values()),
        },
        "processes": ex.processes,
        "retained_cleared": cleared,
        "messages_dropped": None,
        "dropped_by_reason": None,
        "messages_not_sent": None,
        "deliveries_abandoned": None,
        "events_suppressed": None,
        "retransmissions": None,
        "duplicates": sum(1 for r in records if r["kind"] == "duplicate"),
        "virtual_time_s": None,  # no virtual clock: see wall_time_s
        "wall_time_s": round(wall, 3),
        "metrics": metrics,
        "metrics_reason": metrics_reason,
        "clients": len(fed.client_indices),
        "per_tier": per_tier,
        "broker_sys": broker_sys,
        "broker_sys_reason": broker_sys_reason,
        "warnings": notes,
        "failed_rounds": _failed_rounds(rows),
        "crashed": crashed,
        "dropped": dropped_report(records, fed.tiers, network=link_lost),
        "republished": sum(o.republished for o in outcomes.values()),
    }
    fed.final_state = final_state
    fed.final_labels = labels
    block, fed.client_rows = personalization_report(fed, results)
    if block is not None:
        summary["personalization"] = block
    privacy = privacy_report(sc, rounds, records, signing_report(keys))
    if privacy is not None:
        summary["privacy"] = privacy
    return fed, summary, rows


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
        stage, digest = _start_record(sc, out_dir, seed, overwrite)
        try:
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
        except BaseException:
            stage.abort()  # the earlier record, if any, stays
            raise
    try:
        if broker is None:
            summary["broker"] = "private mosquitto on 127.0.0.1"
        return _write_record(
            fed,
            summary,
            rows,
            stage,
            digest=digest,
            command=command,
            events=False,
            plots=plots,
            elapsed_key="wall_time_s",
        )
    finally:
        stage.abort()
