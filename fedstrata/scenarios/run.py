"""Run a scenario in virtual time and write its record.

Whatever the faults, a run of a valid scenario ends with a complete record:
``status`` says how it ended (``converged``, ``round_limit``, ``stalled``,
``diverged``, ``interrupted``) and ``reason`` why, in one line; metrics that cannot
be computed are ``null`` with ``metrics_reason``. See ``docs/records.md``.
"""

from __future__ import annotations

import contextlib
import hashlib
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fedstrata.analysis.records import (
    RecordStage,
    plot_rounds,
    prepare_run_dir,
    write_labels,
    write_model,
    write_rounds,
    write_summary,
    write_table,
)
from fedstrata.nodes.aggregator import RunStatus
from fedstrata.plugins.spec import model_arrays_of
from fedstrata.scenarios.build import Federation, build_federation
from fedstrata.scenarios.orchestrate import Run
from fedstrata.scenarios.schema import Scenario
from fedstrata.scenarios.summary import (
    CLIENT_COLUMNS,
    DROP_RECORD_KINDS,
    RunResult,
    Volume,
    dropped_report,
    evaluate_state,
    outcome_of,
    personalization_report,
    pooled_observer,
    privacy_report,
    warning_lines,
)
from fedstrata.sim.log import check_invariants
from fedstrata.sim.state import Status
from fedstrata.version import __version__

__all__ = [
    "CLIENT_COLUMNS",
    "DROP_RECORD_KINDS",
    "SimTransport",
    "dropped_report",
    "evaluate_state",
    "personalization_report",
    "pooled_observer",
    "privacy_report",
    "resolved_scenario",
    "run_scenario",
    "scenario_hash",
    "simulate",
    "write_run",
]


def resolved_scenario(sc: Scenario, seed: int | None = None) -> str:
    """The scenario as it runs (defaults filled in, ``seed`` applied), as YAML text."""
    return sc.resolved_yaml(seed)


def scenario_hash(sc: Scenario, seed: int | None = None) -> str:
    """SHA-256 of :func:`resolved_scenario`: equal hashes mean the same study."""
    return hashlib.sha256(resolved_scenario(sc, seed).encode()).hexdigest()


def _stall_reason(fed: Federation) -> str:
    """Why the simulated root did not finish: it crashed for good, or events ran out."""
    root_id = fed.scenario.topology.cloud_id
    engine = fed.sim.engine
    if engine.nodes[root_id].status is not Status.CRASHED:
        return f"the run ran out of events before the root {root_id!r} finished"
    why = next((c["reason"] for c in reversed(engine.crashes) if c["node"] == root_id), None)
    detail = f" ({why})" if why and why != "crash fault" else ""
    return f"the root {root_id!r} crashed{detail} and did not come back; no round can close"


class SimTransport:
    """The simulator as a :class:`~fedstrata.scenarios.orchestrate.Transport`.

    Drives the SimPy kernel in virtual time; contributes the simulator's own
    counters (virtual time, losses by reason, retransmissions, duplicates, ...).
    ``progress(fed, virtual_time)`` is called every virtual second.
    """

    def __init__(self, *, events: bool = False, progress: Any = None, batch: bool = True) -> None:
        self.events = events
        self.progress = progress
        self.batch = batch
        self.t0 = time.perf_counter()

    def build(self, sc: Scenario) -> Federation:
        """The federation with its simulation (events recorded on request)."""
        self.t0 = time.perf_counter()
        # batched: cohorts and unpacked messages; the reference path packs every message
        return build_federation(
            sc, record_events=self.events, batch=self.batch, in_process=self.batch
        )

    def drive(self, fed: Federation) -> bool:
        """Run the simulation; return whether a ``KeyboardInterrupt`` ended it."""
        progress = self.progress
        try:
            fed.sim.run(
                progress=None if progress is None else (lambda t: progress(fed, t)),
                progress_every=1.0,
            )
        except KeyboardInterrupt:
            return True
        return False

    def result(self, fed: Federation, driven: bool, caught: dict[str, int]) -> RunResult:
        """The run's outcome, traffic and simulator counters."""
        wall = time.perf_counter() - self.t0
        sim, root_id = fed.sim, fed.scenario.topology.cloud_id
        stats = sim.stats()
        for problem in check_invariants(stats):  # a counting bug: say so in the record
            caught[f"counter invariant violated: {problem}"] = 1
        outcome = outcome_of(
            fed,
            sim.results.get(root_id),
            sim.records,
            interrupted=f"interrupted at virtual time {sim.now:.6g} s" if driven else None,
            stalled=lambda: _stall_reason(fed),
        )
        return RunResult(
            "sim",
            outcome,
            root_id in sim.results,
            _sim_volume(stats),
            sim.records,
            sim.results,
            warning_lines(caught),
            [dict(c) for c in sim.engine.crashes],
            sim.engine.drop_tiers,
            wall,
            counters={
                "messages_dropped": stats["lost"],  # sent on a wire hop, never arrived
                "dropped_by_reason": stats["lost_by_reason"],
                "messages_not_sent": stats["not_sent"],
                "deliveries_abandoned": stats["gave_up"],
                "events_suppressed": stats["suppressed"],
                "retransmissions": stats["retransmissions"],
                "duplicates": stats["duplicates"],
                "virtual_time_s": stats["virtual_time"],
                "network": {
                    "model": stats["link_model"],
                    "ip_bytes": stats["ip_bytes"],
                    "connections_closed": stats["connections_closed"],
                },
            },
        )


def _sim_volume(stats: dict[str, Any]) -> Volume:
    """The simulator's traffic counters as a :class:`Volume`."""
    per_tier = {
        tier: {**row, "bytes_total": row["bytes_up"] + row["bytes_down"]}
        for tier, row in stats["by_tier"].items()
    }
    return Volume(
        stats["bytes"]["up"],
        stats["bytes"]["down"],
        stats["bytes"]["total"],
        stats["payload_bytes"],
        stats["ack_bytes"],
        stats["messages"]["up"] + stats["messages"]["down"],
        per_tier,
    )


def simulate(
    sc: Scenario,
    *,
    seed: int | None = None,
    events: bool = False,
    progress: Any = None,
    batch: bool = True,
) -> tuple[Federation, dict[str, Any], list[dict[str, Any]]]:
    """Build and run ``sc``; return the federation, the summary and the per-round rows.

    ``progress(fed, virtual_time)`` is called every virtual second. A
    ``KeyboardInterrupt`` during the run ends it with status ``interrupted``; the
    summary is then built from what happened so far and the interrupt is not
    re-raised (the caller decides the exit code from the status). ``batch=False``
    computes every client's step on its own and packs every message into its bytes
    (the reference path: the same results; by default unsigned messages travel
    :class:`~fedstrata.wire.Unpacked`, of the same size).
    """
    transport = SimTransport(events=events, progress=progress, batch=batch)
    return Run(sc, transport, seed=seed).execute()


def _model_arrays(fed: Federation, state: Any, rounds: int) -> dict[str, np.ndarray]:
    arrays = fed.algorithm.state_arrays(state)
    arrays["rounds"] = np.int64(rounds)
    arrays["algorithm"] = np.str_(fed.scenario.algorithm.name)
    arrays["n_clusters"] = np.int64(fed.model.n_clusters)
    arrays.update(model_arrays_of(fed.scenario.algorithm.name, fed.model))  # its own only
    return arrays


def run_scenario(
    sc: Scenario,
    out_dir: str | Path,
    *,
    seed: int | None = None,
    events: bool = False,
    plots: bool = True,
    progress: bool = True,
    overwrite: bool = False,
    command: list[str] | None = None,
    batch: bool = True,
) -> dict[str, Any]:
    """Simulate ``sc`` and write its record into ``out_dir``; return the summary.

    ``batch=False`` computes every client's step on its own (the reference path of
    the batched cohorts, :class:`~fedstrata.nodes.cohort.Cohort`: the same record).

    Writes ``scenario.yaml`` first (the resolved scenario), then ``rounds.csv``,
    ``labels.csv``, ``model.npz`` (when a model exists), ``rounds.png`` and
    ``events.jsonl`` (on request), and ``summary.json`` last.

    Raises
    ------
    OutputError
        If ``out_dir`` is a file, unwritable, or holds another run and not
        ``overwrite`` (checked before anything runs).

    """

    def execute() -> tuple[Federation, dict[str, Any], list[dict[str, Any]]]:
        if progress:
            return _simulate_with_bar(sc, seed, events, batch)
        return simulate(sc, seed=seed, events=events, batch=batch)

    return write_run(
        sc,
        out_dir,
        execute,
        seed=seed,
        overwrite=overwrite,
        command=command,
        events=events,
        plots=plots,
        elapsed_key="virtual_time_s",
    )


def write_run(
    sc: Scenario,
    out_dir: str | Path,
    execute: Callable[[], tuple[Federation, dict[str, Any], list[dict[str, Any]]]],
    *,
    seed: int | None,
    overwrite: bool,
    command: list[str] | None,
    events: bool,
    plots: bool,
    elapsed_key: str,
) -> dict[str, Any]:
    """Run ``execute`` (a :meth:`Run.execute`) and write its record into ``out_dir``.

    The one record writer of every transport: ``out_dir`` is checked and
    ``scenario.yaml`` staged before anything runs; the record is put in place only
    once complete, so a run that fails leaves an earlier record as it was.
    ``elapsed_key`` names the summary field plotted as the run's end time.
    """
    stage, digest = _start_record(sc, out_dir, seed, overwrite)
    try:
        fed, summary, rows = execute()
        return _write_record(
            fed,
            summary,
            rows,
            stage,
            digest=digest,
            command=command,
            events=events,
            plots=plots,
            elapsed_key=elapsed_key,
        )
    finally:
        stage.abort()  # after a commit there is nothing left; else the old record stays


def _start_record(
    sc: Scenario, out_dir: str | Path, seed: int | None, overwrite: bool
) -> tuple[RecordStage, str]:
    """Check ``out_dir``, stage ``scenario.yaml``; return the stage and the scenario hash.

    The record is written into the stage and put in place by :func:`_write_record`
    once complete: an earlier record in ``out_dir`` survives a run that fails to
    write its own (a full disk, a read-only file system).
    """
    from fedstrata.analysis.records import atomic_write

    effective_seed = sc.seed if seed is None else seed
    text = resolved_scenario(sc, seed)
    digest = hashlib.sha256(text.encode()).hexdigest()
    out = prepare_run_dir(
        out_dir, scenario_hash=digest, seed=effective_seed, overwrite=overwrite, keep_old=True
    )
    stage = RecordStage(out)
    try:
        with atomic_write(stage.dir / "scenario.yaml") as fh:
            fh.write(text)
    except BaseException:
        stage.abort()
        raise
    return stage, digest


def _write_record(
    fed: Federation,
    summary: dict[str, Any],
    rows: list[dict[str, Any]],
    stage: RecordStage,
    *,
    digest: str,
    command: list[str] | None,
    events: bool,
    plots: bool,
    elapsed_key: str,
) -> dict[str, Any]:
    """Write rounds.csv, labels.csv, model.npz, plots, events and summary.json (last).

    Into ``stage``, then put in place (:meth:`RecordStage.commit`).

    ``elapsed_key`` names the summary field plotted as the run's end time
    (``virtual_time_s`` in the simulator, ``wall_time_s`` over MQTT).
    """
    sc = fed.scenario
    out = stage.dir
    summary.update(
        fedstrata_version=__version__,
        command=shlex.join(command if command is not None else sys.argv),
        scenario_hash=digest,
        files=[],
    )
    write_rounds(rows, out / "rounds.csv")
    clients = list(fed.client_indices)
    write_labels(
        clients, [fed.client_indices[c] for c in clients], fed.final_labels, out / "labels.csv"
    )
    files = ["scenario.yaml", "rounds.csv", "labels.csv"]
    if fed.client_rows:
        write_table(fed.client_rows, CLIENT_COLUMNS, out / "clients.csv")
        files.append("clients.csv")
    if fed.final_state is not None:
        write_model(_model_arrays(fed, fed.final_state, summary["rounds"]), out / "model.npz")
        files.append("model.npz")
    if events:
        fed.sim.write_events(out / "events.jsonl")
        files.append("events.jsonl")
    if plots and summary["status"] == RunStatus.INTERRUPTED.value:
        # drawing takes about a second (matplotlib): Ctrl-C is answered without it
        summary["warnings"].append(
            "rounds.png not drawn: the run was interrupted (fedstrata report draws its rounds)"
        )
    elif plots:
        plot_rounds(
            rows,
            out / "rounds.png",
            title=f"{sc.name}: {summary['status']}",
            final=(summary[elapsed_key], summary["bytes_total"]),
        )
        files.append("rounds.png")
    summary["files"] = [*files, "summary.json"]
    write_summary(summary, out / "summary.json")
    stage.commit(summary["files"])
    return summary


@contextlib.contextmanager
def _rounds_bar(sc: Scenario) -> Iterator[Callable[[int, str], None]]:
    """A transient bar of the root's rounds on stderr; yields ``update(rounds, info)``."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        # against the round limit: a run that converges early ends before its ETA
        TextColumn("eta"),
        TimeRemainingColumn(),
        transient=True,
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task(sc.name, total=sc.protocol.rounds, info="")
        yield lambda rounds, info: bar.update(task, completed=rounds, info=info)


def _simulate_with_bar(
    sc: Scenario, seed: int | None, events: bool, batch: bool = True
) -> tuple[Federation, dict[str, Any], list[dict[str, Any]]]:
    with _rounds_bar(sc) as update:
        seen = {"records": 0, "rounds": 0, "wall": 0.0}

        def tick(fed: Federation, t: float) -> None:
            now = time.monotonic()
            if now - seen["wall"] < 0.1:  # a redraw costs more than many virtual seconds
                return
            seen["wall"] = now
            records = fed.sim.records
            new = records[seen["records"] :]
            seen["records"] = len(records)
            seen["rounds"] += sum(1 for r in new if r["kind"] in ("round", "setup_failed"))
            done, sent = seen["rounds"], fed.sim.engine.publishes
            update(done, f"round {done}  t={t:,.6g}s  publishes={sent:,}")

        return simulate(sc, seed=seed, events=events, progress=tick, batch=batch)
