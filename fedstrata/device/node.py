"""Run one node of a federation on a device, over a real MQTT broker, and record it.

:func:`run_node` builds the node of a :class:`~fedstrata.device.config.NodeConfig`
(:func:`~fedstrata.device.build.build_node`), checks that the broker answers, runs
the node with a :class:`~fedstrata.broker.runner.NodeRunner` (client id
``fs-{run}-{node}``, a last will on ``fs/{run}/presence/{node}``, a persistent
session cleared after a normal finish) and writes into the output folder:

``node.json`` (every node)
    How the node ended (``status``, ``reason``), its traffic, reconnects and wall
    time, the run id, the scenario (name, file, hash, seed), the broker, the
    fedstrata version, how its messages were protected (``"signed": true, "keys":
    "key files"``, or ``"signed": false, "insecure": true``) and the messages it
    refused, by reason (``rejected``: ``forged``, ``wrong_run``, ...). It is written
    with ``status: running`` before the node connects, and rewritten at the end: a
    ``running`` file means the process died without a chance to write (``SIGKILL``,
    power loss).
``model.npz``, ``rounds.csv`` (the root)
    The global model (the arrays of a run record's ``model.npz``) and one row per
    aggregation of the root's own rounds (the columns of a run record's
    ``rounds.csv``; ``virtual_time_s`` holds wall-clock seconds since the node
    connected, ``bytes`` the node's own PUBLISH bytes so far, the quality columns
    are empty: the root holds no labelled data). A middle-tier aggregator writes its
    own ``rounds.csv``.
``labels.csv`` (a client)
    ``client,index,label``: each local sample's cluster under the final global model
    (``index`` is the row of the device's data files, 0-based). A client computes
    labels only when it receives the final model; without it (interrupted, timed
    out, broker lost) no ``labels.csv`` is written and ``node.json`` says why.

Statuses of ``node.json``: ``finished`` (the node completed its part of the run),
``interrupted`` (Ctrl-C or SIGTERM: the node disconnected cleanly; its broker session
is kept, so a restarted node resumes it), ``timed_out`` (``timeout_s`` passed),
``transport_failed`` (the broker could not be reached, or was lost for good),
``crashed`` (the node's ``handle`` raised: ``reason`` has the exception's type and
message; the connection was dropped without a DISCONNECT so that the broker publishes
the node's will, as for a device that died), ``parent_lost`` (a node below the root
heard nothing from its aggregator for the idle limit,
:func:`~fedstrata.scenarios.mqtt_nodes.idle_timeout_s`: three round deadlines per
aggregator level, times the tiers' periods), and ``error`` (a bug of the runner: the
exception is re-raised).

A folder whose ``node.json`` says ``finished`` is refused (an
:class:`~fedstrata.analysis.records.OutputError`, exit 2): a node restarted into it
would replace a finished node's model and rounds. A folder of a node that did not
finish (interrupted, crashed, timed out) is taken: the restarted node resumes its
broker session and rewrites the files. The root also
records how the run ended: ``run_status`` (``converged``, ``round_limit``,
``stalled``, ``diverged``, ``interrupted``), ``run_reason`` and ``rounds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import shlex
import signal
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedstrata.analysis.records import (
    aggregate_row,
    write_labels,
    write_model,
    write_rounds,
    write_summary,
)
from fedstrata.broker.runner import RunLog, probe_broker
from fedstrata.device.build import DeviceNode, scenario_digest
from fedstrata.device.config import NodeConfig
from fedstrata.errors import TransportError
from fedstrata.mqtt import PROTOCOL_MQTT5, presence_topic
from fedstrata.nodes.aggregator import RunStatus
from fedstrata.nodes.algorithm import Algorithm
from fedstrata.plugins.spec import model_arrays_of
from fedstrata.scenarios.build import model_of
from fedstrata.scenarios.fault_inject import AnyRunner, fault_counts, runner_with_faults
from fedstrata.scenarios.fault_plan import fault_plan
from fedstrata.scenarios.fault_report import fault_row
from fedstrata.scenarios.mqtt_nodes import idle_timeout_s, parent_topics
from fedstrata.version import __version__

__all__ = [
    "EXIT_CODES",
    "MQTT_LOG_LINES",
    "NODE_FILES",
    "PROBE_TIMEOUT_S",
    "STOP_GRACE_S",
    "NodeOutcome",
    "run_node",
]

#: Files a node writes into its output folder; only these are ever replaced.
NODE_FILES = ("node.json", "model.npz", "rounds.csv", "labels.csv")
#: How long the first connection to the broker may take before the node gives up.
PROBE_TIMEOUT_S = 10.0
#: How long a stopping node waits for its connection to close before it asks again.
STOP_GRACE_S = 5.0
#: How many messages of the MQTT library ``node.json`` keeps (``mqtt_log``).
MQTT_LOG_LINES = 20
#: Exit code of ``fedstrata node`` for each status.
EXIT_CODES = {
    "finished": 0,
    "interrupted": 130,
    "timed_out": 1,
    "transport_failed": 1,
    "crashed": 1,
    "parent_lost": 1,
}


@dataclass(frozen=True)
class NodeOutcome:
    """How a node ended.

    Parameters
    ----------
    status
        ``finished``, ``interrupted``, ``timed_out`` or ``transport_failed``.
    reason
        One line saying why.
    record
        What was written to ``node.json``.
    exit_code
        The exit code of ``fedstrata node`` (:data:`EXIT_CODES`).
    """

    status: str
    reason: str
    record: dict[str, Any]
    exit_code: int


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _last_model(records: list[dict[str, Any]], node_id: str) -> tuple[Any, int, int]:
    """The last global model the root reached, its round, and the rounds counted."""
    state, model_round, rounds = None, 0, 0
    for rec in records:
        if rec["node"] != node_id:
            continue
        f = rec["fields"]
        if rec["kind"] == "init":
            state, model_round = f["state"], 0
        elif rec["kind"] == "round" and f.get("objective") is not None:
            state, model_round = f["state"], int(f["iteration"])
        if rec["kind"] in ("round", "setup_failed"):
            rounds = max(rounds, int(f["iteration"]))
    return state, model_round, rounds


def _round_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """rounds.csv rows of an aggregator, from its own records."""
    rows: list[dict[str, Any]] = []
    for rec in records:
        f = rec["fields"]
        if rec["kind"] == "aggregate":
            rows.append(aggregate_row(rec))
        elif rec["kind"] == "round":
            for row in reversed(rows):
                if row["tier"] == f["tier"] and row["round"] == f["round"]:
                    row.update(iteration=f["iteration"], objective=f.get("objective"))
                    break
    last = 0
    for row in rows:
        row["bytes_round"] = row["bytes"] - last
        last = row["bytes"]
    return rows


def _model_arrays(
    cfg: NodeConfig, algorithm: Algorithm, state: Any, rounds: int
) -> dict[str, np.ndarray]:
    """The arrays of a run record's model.npz."""
    sc = cfg.scenario
    arrays = dict(algorithm.state_arrays(state))
    arrays["rounds"] = np.int64(rounds)
    arrays["algorithm"] = np.str_(sc.algorithm.name)
    arrays["n_clusters"] = np.int64(sc.algorithm.n_clusters)
    arrays.update(model_arrays_of(sc.algorithm.name, model_of(sc, cfg.dims)))  # its own only
    return arrays


async def _stop(task: asyncio.Task[Any], runner: AnyRunner) -> None:
    """Cancel the runner (it disconnects cleanly); if it does not stop, drop the connection."""
    for _ in range(3):
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=STOP_GRACE_S)
        if done:
            return
    runner.abort()
    await asyncio.wait([task], timeout=STOP_GRACE_S)


class _MqttLog(logging.Handler):
    """Messages of the MQTT client library (logger ``mqtt``): kept, not printed.

    paho reports socket and TLS errors there (e.g. a broker refusing the client
    certificate); without a handler Python would print them on stderr. The last
    :data:`MQTT_LOG_LINES` go into ``node.json``; an error while the first connection
    is being opened ends it at once (``on_error``).
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: deque[str] = deque(maxlen=MQTT_LOG_LINES)
        self.on_error: Callable[[str], None] | None = None
        self._logger = logging.getLogger("mqtt")
        self._saved = (self._logger.propagate, self._logger.level)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a malformed record: keep what we can
            text = str(record.msg)
        self.lines.append(f"{record.levelname.lower()}: {text}")
        if record.levelno >= logging.ERROR and self.on_error is not None:
            self.on_error(text)

    def install(self) -> None:
        self._logger.addHandler(self)
        self._logger.propagate = False
        if self._logger.level == logging.NOTSET or self._logger.level > logging.WARNING:
            self._logger.setLevel(logging.WARNING)

    def remove(self) -> None:
        self._logger.removeHandler(self)
        self._logger.propagate, level = self._saved
        self._logger.setLevel(level)


class _Signals:
    """SIGINT and SIGTERM while a node runs: the first stops it, a second drops the link.

    Python-level handlers (not the event loop's), so that they stay installed from
    before the loop starts until the last file is written: there is never a moment
    when SIGTERM would kill the process with its default action.
    """

    def __init__(self, runner: AnyRunner) -> None:
        self.runner = runner
        self.received: list[str] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.main: asyncio.Task[Any] | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread receives signals (and may set handlers)
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._handler)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def _handler(self, signum: int, frame: Any) -> None:
        self.received.append(signal.Signals(signum).name)
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._fire)

    def _fire(self) -> None:
        if len(self.received) == 1:
            if self.main is not None:
                self.main.cancel()
        else:
            self.runner.abort()


async def _probe(cfg: NodeConfig, mqtt_log: _MqttLog) -> str | None:
    """Open one MQTT connection and close it; ``None``, or why the broker cannot be reached.

    An error the MQTT library reports meanwhile (a refused TLS handshake, a reset
    connection) ends the attempt at once, with that error as the reason.
    """
    loop = asyncio.get_running_loop()
    failed: asyncio.Future[str] = loop.create_future()

    def on_error(text: str) -> None:
        def settle() -> None:
            if not failed.done():
                failed.set_result(text)

        loop.call_soon_threadsafe(settle)

    mqtt_log.on_error = on_error
    probe = asyncio.create_task(
        probe_broker(cfg.endpoint, protocol=cfg.mqtt_protocol, timeout_s=PROBE_TIMEOUT_S)
    )
    try:
        await asyncio.wait([probe, failed], return_when=asyncio.FIRST_COMPLETED)
    finally:
        mqtt_log.on_error = None
        if not probe.done():
            probe.cancel()
            await asyncio.wait([probe], timeout=STOP_GRACE_S)
        failed.cancel()
    where = f"cannot reach the MQTT broker at {cfg.endpoint.url}"
    if probe.done() and not probe.cancelled():
        exc = probe.exception()
        if exc is None:
            return None
        if not isinstance(exc, TransportError):
            raise exc
        reason = str(exc)
        if reason.endswith((": TimeoutError", ": timed out")) and mqtt_log.lines:
            reason += f" ({mqtt_log.lines[-1].split(': ', 1)[-1]})"
        return reason
    return f"{where}: {failed.result()}" if failed.done() and not failed.cancelled() else where


async def _serve(
    cfg: NodeConfig,
    runner: AnyRunner,
    signals: _Signals,
    mqtt_log: _MqttLog,
    on_connected: Callable[[], None] | None = None,
) -> tuple[str, str]:
    """Probe the broker and run the node; return ``(status, reason)``.

    The first signal cancels this task; the runner task is then cancelled, which
    sends an MQTT DISCONNECT. A second signal drops the connection at once.
    """
    main = asyncio.current_task()
    assert main is not None
    signals.loop, signals.main = asyncio.get_running_loop(), main
    received = signals.received

    def interrupted(when: str) -> tuple[str, str]:
        while main.cancelling():
            main.uncancel()
        return "interrupted", f"interrupted by {received[0]} {when}"

    stopped, problem = await _connect(cfg, mqtt_log, received)
    if stopped:
        return interrupted("before the node connected")
    if problem is not None:
        return "transport_failed", problem
    if on_connected is not None:
        on_connected()
    await _drive(cfg, runner, received)
    end = _end_of(cfg, runner)
    if end is not None:
        return end
    if received:
        return interrupted(f"after {runner.log.now():.1f} s")
    if runner.failure is not None:
        return "transport_failed", runner.failure
    assert cfg.timeout_s is not None
    return (
        "timed_out",
        f"{cfg.node_id} did not finish within its {cfg.timeout_s:g} s limit (timeout_s)",
    )


async def _connect(
    cfg: NodeConfig, mqtt_log: _MqttLog, received: list[str]
) -> tuple[bool, str | None]:
    """Probe the broker unless a signal came: ``(interrupted, problem)``."""
    if received:
        return True, None
    try:
        problem = await _probe(cfg, mqtt_log)
    except asyncio.CancelledError:
        if not received:
            raise
        return True, None
    # a signal whose cancellation the probe swallowed (Python 3.11, gh-86296)
    return bool(received), problem


async def _drive(cfg: NodeConfig, runner: AnyRunner, received: list[str]) -> None:
    """Run the node until it ends, its time is up or a signal came; a node's bug is raised."""
    runner.log.t0 = time.monotonic()
    task = asyncio.create_task(runner.run(), name=f"node-{cfg.node_id}")
    try:
        await asyncio.wait([task], timeout=cfg.timeout_s)
    except asyncio.CancelledError:
        if not received:
            task.cancel()
            raise
    if not task.done():
        await _stop(task, runner)
    if task.done() and not task.cancelled():
        exc = task.exception()
        if exc is not None:
            raise exc


def _end_of(cfg: NodeConfig, runner: AnyRunner) -> tuple[str, str] | None:
    """How the node itself ended (finished, crashed, lost its parent), or ``None``."""
    if runner.finished:
        return "finished", ""
    if runner.crashed is not None:
        return "crashed", f"{cfg.node_id} crashed: {runner.crashed}"
    if runner.idled_out is not None:
        return "parent_lost", runner.idled_out
    return None


def _refuse_finished(out: Path) -> None:
    """Raise OutputError if ``out`` holds the record of a node that finished."""
    import json

    from fedstrata.analysis.records import OutputError

    try:
        old = json.loads((out / "node.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # no readable record: nothing finished to protect
    if isinstance(old, dict) and old.get("status") == "finished":
        raise OutputError(
            f"{out} holds the record of node {old.get('node')!r} that finished "
            f"(run id {old.get('run_id')!r}, ended {old.get('ended_at')}); give this node "
            "another out folder, or move that record away"
        )


def _prepare_out(out: Path) -> None:
    _refuse_finished(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in NODE_FILES:
        with contextlib.suppress(FileNotFoundError):
            (out / name).unlink()


def _base_record(
    cfg: NodeConfig, device: DeviceNode, command: list[str], started: str
) -> dict[str, Any]:
    sc = cfg.scenario
    record: dict[str, Any] = {
        "status": "running",
        "reason": "the node is running",
        "node": cfg.node_id,
        "role": device.role,
        "tier": device.tier,
        "parent": device.parent,
        "run_id": cfg.run,
        "client_id": f"fs-{cfg.run}-{cfg.node_id}",
        "scenario": sc.name,
        "scenario_file": str(cfg.scenario_file),
        "scenario_hash": scenario_digest(sc),
        "seed": sc.seed,
        "broker": cfg.endpoint.url,
        "mqtt": "5" if cfg.mqtt_protocol == PROTOCOL_MQTT5 else "3.1.1",
        "view_dims": list(cfg.dims),
        "view_dims_from": cfg.dims_from,
        "fedstrata_version": __version__,
        "command": shlex.join(command),
        "started_at": started,
        "ended_at": None,
        "wall_time_s": None,
        "warnings": list(cfg.warnings),
        "files": ["node.json"],
        # how its messages were protected: key files, or unsigned on purpose
        **(
            {"signed": False, "insecure": True}
            if cfg.seal is None
            else {"signed": True, "keys": "key files"}
        ),
    }
    if device.role == "client":
        record["samples"] = cfg.n_samples
        record["views"] = list(cfg.view_ids)
        record["data_files"] = [str(p) for p in cfg.data_files]
    else:
        record["children"] = len(device.children)
    return record


def _fault_fields(runner: AnyRunner) -> dict[str, Any]:
    """``faults_injected`` and ``crashed``: what the scenario's faults did to the node."""
    counts = fault_counts(runner)
    if counts is None:  # none injected (none scheduled, or faults: ignore)
        return {}
    return {"faults_injected": fault_row(counts), "crashed": counts.crashes}


def _finish_record(
    cfg: NodeConfig,
    device: DeviceNode,
    runner: AnyRunner,
    record: dict[str, Any],
    status: str,
    reason: str,
) -> None:
    """Fill ``record`` with the outcome and write the node's result files."""
    out = cfg.out
    records = runner.log.records
    files: list[str] = []
    t = runner.traffic
    record["traffic"] = {**asdict(t), "reconnects": t.reconnects}
    record["reconnects"] = t.reconnects
    record["failure"] = runner.failure
    record.update(_fault_fields(runner))
    refused = Counter(r["fields"]["reason"] for r in records if r["kind"] == "rejected")
    record["rejected"] = dict(sorted(refused.items()))  # messages refused, by reason
    if device.role == "root":
        result = runner.result if runner.finished else None
        state, model_round, rounds = _last_model(records, cfg.node_id)
        if result is not None:
            run_status, run_reason = str(result["status"]), str(result["reason"])
            state, rounds = result["state"], int(result["iterations"])
            model_round = rounds
            reason = f"the run ended: {run_status} after {rounds} rounds ({run_reason})"
        elif status == "interrupted":
            run_status, run_reason = RunStatus.INTERRUPTED.value, reason
        else:
            run_status, run_reason = RunStatus.STALLED.value, reason
        record.update(
            run_status=run_status,
            run_reason=run_reason,
            converged=run_status == RunStatus.CONVERGED.value,
            rounds=rounds,
            model_round=None if state is None else model_round,
        )
        if state is not None:
            write_model(
                _model_arrays(cfg, runner.node.algorithm, state, model_round), out / "model.npz"
            )
            files.append("model.npz")
        else:
            record["warnings"].append("no global model: the setup round never completed")
    if device.role in ("root", "aggregator"):
        write_rounds(_round_rows(records), out / "rounds.csv")
        files.append("rounds.csv")
        if device.role == "aggregator" and status == "finished":
            reason = "relayed the final model to its children"
    if device.role == "client":
        record["updates_sent"] = t.publishes
        done = [r for r in records if r["kind"] == "client_done"]
        record["final_model_round"] = int(done[-1]["fields"]["round"]) if done else None
        if runner.finished and runner.result is not None:
            labels = np.asarray(runner.result["labels"])
            write_labels([cfg.node_id], [np.arange(labels.size)], labels, out / "labels.csv")
            files.append("labels.csv")
            reason = f"received the final model (round {record['final_model_round']})"
            if t.publishes == 0:
                record["warnings"].append(
                    "received a final model without having sent any update: it may be a "
                    f"retained message of an earlier run with run id {cfg.run!r}; give every "
                    "run a new run id"
                )
        else:
            record["warnings"].append(
                "no labels: a client labels its samples when it receives the final model, "
                "and this one did not"
            )
    record["status"] = status
    record["reason"] = reason
    record["files"] = [*files, "node.json"]


def run_node(
    cfg: NodeConfig,
    *,
    command: list[str] | None = None,
    on_connected: Callable[[], None] | None = None,
) -> NodeOutcome:
    """Run the node of ``cfg`` until it finishes, is stopped, times out or loses the broker.

    SIGINT (Ctrl-C) and SIGTERM stop it cleanly (status ``interrupted``). The output
    folder is created; the files of :data:`NODE_FILES` left there by an earlier run
    are removed first (other files are never touched).

    Parameters
    ----------
    cfg
        A checked node config (:func:`~fedstrata.device.config.load_node_config`).
    command
        The command line recorded in ``node.json`` (default ``sys.argv``).
    on_connected
        Called once the broker answered, before the node starts.

    Returns
    -------
    NodeOutcome
        The status, the reason, the ``node.json`` record and the exit code.

    Raises
    ------
    OutputError
        If the output folder holds the record of a node that finished.
    NodeProtocolError
        If the runner met an effect it cannot carry out (a bug); ``node.json`` says
        ``error``.

    """
    _refuse_finished(cfg.out)  # before anything is built or connected
    device = cfg.build()
    heard_on = parent_topics(device.node)  # the root has no parent: no idle limit
    plan = fault_plan(cfg.scenario)
    runner = runner_with_faults(
        device.node,
        plan.of(cfg.node_id) if cfg.faults == "inject" else None,
        device.node.protocol.qos,
        RunLog(),
        network_model=plan.network_model,
        broker=cfg.endpoint,
        tier=device.tier,
        client_id=f"fs-{cfg.run}-{cfg.node_id}",
        protocol=cfg.mqtt_protocol,
        presence=presence_topic(cfg.run, cfg.node_id),
        max_attempts=cfg.max_attempts,
        backoff_max_s=5.0,
        idle_timeout_s=idle_timeout_s(cfg.scenario) if heard_on else None,
        idle_topics=heard_on,
    )
    started = _now_iso()
    t0 = time.monotonic()
    record = _base_record(cfg, device, list(sys.argv if command is None else command), started)
    signals = _Signals(runner)
    mqtt_log = _MqttLog()
    signals.install()
    mqtt_log.install()
    try:
        _prepare_out(cfg.out)
        write_summary(record, cfg.out / "node.json")
        try:
            status, reason = asyncio.run(_serve(cfg, runner, signals, mqtt_log, on_connected))
        except BaseException as exc:
            record.update(
                status="error",
                reason=f"{type(exc).__name__}: {str(exc)[:300]}",
                ended_at=_now_iso(),
                wall_time_s=round(time.monotonic() - t0, 3),
                mqtt_log=list(mqtt_log.lines),
            )
            with contextlib.suppress(Exception):
                write_summary(record, cfg.out / "node.json")
            raise
        _finish_record(cfg, device, runner, record, status, reason)
        record["ended_at"] = _now_iso()
        record["wall_time_s"] = round(time.monotonic() - t0, 3)
        record["mqtt_log"] = list(mqtt_log.lines)
        write_summary(record, cfg.out / "node.json")
    finally:
        mqtt_log.remove()
        signals.restore()
    return NodeOutcome(status, str(record["reason"]), record, EXIT_CODES[status])
