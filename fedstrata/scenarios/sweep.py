"""Sweeps: a grid of scenario overrides, each cell repeated with several seeds.

``fedstrata sweep SCENARIO --grid faults.dropout=0,0.1 --grid protocol.kind=sync,async
--repeats 3 --jobs 4 --out DIR`` runs the cartesian product of the grid's values (the
*cells*), each ``repeats`` times (repeat ``r`` uses the cell's seed + ``r``), in parallel
processes. Every cell is validated and pre-flight checked before anything runs.

Each run writes its ordinary record into ``DIR/runs/<cell-id>/rep-<r>/``; a run whose
``summary.json`` holds a final status (of the same scenario and seed) is not run again,
so an interrupted sweep resumes where it stopped. The tables are rebuilt from the
records every time: ``DIR/results.csv`` (a row per run, :func:`run_columns`),
``DIR/results.parquet`` (when pyarrow is importable), ``DIR/summary.csv`` (a row per
cell: mean and 95 % Student-t confidence interval of :data:`SUMMARY_METRICS`) and
``DIR/sweep.png``. With ``--ray ADDRESS`` the runs are Ray tasks on an existing
cluster instead of local processes (each returns its record to be written here).
See ``docs/sweeps.md``.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import re
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedstrata.errors import FedstrataError, ScenarioError
from fedstrata.scenarios.schema import Scenario, ScenarioErrors

__all__ = [
    "FINAL_STATUSES",
    "RUN_FIELDS",
    "SUMMARY_METRICS",
    "Cell",
    "GridError",
    "Sweep",
    "SweepResult",
    "cell_id",
    "confidence_interval",
    "expand_grid",
    "load_sweep",
    "parquet_rows",
    "parse_grid",
    "parse_grid_value",
    "plot_sweep",
    "run_columns",
    "run_sweep",
    "summarize",
    "summary_columns",
    "sweep_from_data",
]

#: Statuses of a run that ended on its own; a run with one of them is not run again.
FINAL_STATUSES = frozenset({"converged", "round_limit", "stalled", "diverged"})
#: Columns of ``results.csv`` after ``cell`` and the grid keys.
RUN_FIELDS = (
    "repeat",
    "seed",
    "status",
    "rounds",
    "bytes_total",
    "virtual_time_s",
    "wall_time_s",
    "ari",
    "nmi",
    "acc",
)
#: The run fields aggregated per cell in ``summary.csv``.
SUMMARY_METRICS = ("ari", "rounds", "bytes_total", "virtual_time_s")

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_Scalar = str | int | float | bool | None


class GridError(FedstrataError, ValueError):
    """A ``--grid`` or ``--repeats`` option is unusable (a usage error, exit 2)."""


@dataclass(frozen=True)
class Cell:
    """One point of the grid: its id (a folder name), its values and its scenario."""

    id: str
    values: dict[str, Any]
    scenario: Scenario


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: the scenario file, the grid, its cells and the repeats."""

    file: str
    grid: dict[str, tuple[Any, ...]]
    cells: tuple[Cell, ...]
    repeats: int


@dataclass
class SweepResult:
    """What :func:`run_sweep` did: rows of the tables, counts, and how it ended."""

    rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    ran: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)
    interrupted: bool = False
    files: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------ the grid


def parse_grid_value(text: str) -> _Scalar:
    """Parse one grid value as a YAML scalar, as the scenario loader would.

    ``0.1`` and ``1e-6`` are floats, ``3`` an int, ``true`` a bool, ``null`` None and
    anything else a string.

    Raises
    ------
    GridError
        If the value is empty, not a scalar (a list or mapping) or not YAML.

    """
    from fedstrata.scenarios.loader import _Loader

    token = text.strip()
    if not token:
        raise GridError("an empty value")
    try:
        value = yaml.load(token, Loader=_Loader)
    except yaml.YAMLError:
        value = []
    if isinstance(value, dict | list):
        raise GridError(f"{token!r} is not a single value (a number, word, true/false)")
    if not isinstance(value, str | int | float | bool) and value is not None:
        return token  # dates and other YAML types stay text
    return value


def parse_grid(specs: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """Parse ``--grid KEY=V1,V2,...`` options into ``{dotted key: values}`` (in order).

    Raises
    ------
    GridError
        On a malformed option, a key given twice or a value repeated within a key.

    """
    grid: dict[str, tuple[Any, ...]] = {}
    for spec in specs:
        key, sep, rest = spec.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            raise GridError(
                f"--grid {spec!r}: expected KEY=V1,V2,... with a dotted scenario key "
                "such as faults.dropout=0,0.1"
            )
        if key in grid:
            raise GridError(f"--grid {key}: given twice; list all its values in one --grid")
        values: list[Any] = []
        for token in rest.split(","):
            try:
                value = parse_grid_value(token)
            except GridError as exc:
                raise GridError(f"--grid {key}: {exc}") from None
            if any(type(v) is type(value) and v == value for v in values):
                raise GridError(f"--grid {key}: the value {token.strip()!r} is repeated")
            values.append(value)
        grid[key] = tuple(values)
    return grid


def expand_grid(grid: dict[str, tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The cartesian product of the grid: one ``{key: value}`` per cell, first key slowest.

    An empty grid has one cell, the scenario as it is.
    """
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())]


def _token(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def cell_id(values: dict[str, Any]) -> str:
    """A cell's folder name: ``key=value`` pairs joined by ``__`` (``base`` for no keys).

    Characters other than letters, digits, ``.``, ``_``, ``-`` and ``=`` become ``-``;
    a name longer than 120 characters is cut and given a hash of the values.
    """
    if not values:
        return "base"
    text = "__".join(f"{k}={_token(v)}" for k, v in values.items())
    safe = re.sub(r"[^A-Za-z0-9._=-]", "-", text)
    if len(safe) > 120 or safe != text:
        digest = hashlib.sha256(json.dumps(values, default=str).encode()).hexdigest()[:8]
        safe = f"{safe[:110]}-{digest}"
    return safe


def _override(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``data[a][b]... = value`` for ``key = 'a.b...'``, creating missing sections."""
    parts = key.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise GridError(
                f"--grid {key}: {'.'.join(parts[: i + 1])} is a value in the scenario, "
                "not a section with keys"
            )
        node = child
    node[parts[-1]] = value


# ------------------------------------------------------------------------------ loading


def load_sweep(
    path: str | Path,
    grid: dict[str, tuple[Any, ...]],
    repeats: int = 1,
    *,
    preflight: bool = True,
) -> Sweep:
    """Read the scenario and validate every cell of ``grid`` (with every seed it will use).

    Raises
    ------
    GridError
        A usage problem: an unknown key (with the keys known there), a key inside a
        value, ``repeats`` < 1 or seeds beyond ``2**32``.
    ScenarioErrors
        The base scenario's problems (located in its file), or each invalid cell's,
        prefixed by ``cell <id>``.

    """
    from fedstrata.scenarios.loader import _Loader, load_scenario

    if repeats < 1:
        raise GridError("--repeats must be at least 1")
    p = Path(path)
    load_scenario(p, preflight=False)  # the file's own problems, located in it
    data = yaml.load(p.read_text(encoding="utf-8"), Loader=_Loader)
    return sweep_from_data(
        data, grid, repeats, file=str(path), base_dir=p.absolute().parent, preflight=preflight
    )


def sweep_from_data(
    data: dict[str, Any],
    grid: dict[str, tuple[Any, ...]],
    repeats: int = 1,
    *,
    file: str,
    base_dir: str | Path | None = None,
    preflight: bool = True,
) -> Sweep:
    """:func:`load_sweep` on a scenario already read into a mapping (``fedstrata.sweep``).

    ``file`` names the scenario in messages; relative paths in ``data`` are read
    from ``base_dir``. Raises as :func:`load_sweep`.
    """
    import copy

    from fedstrata.scenarios.loader import parse_scenario

    if repeats < 1:
        raise GridError("--repeats must be at least 1")
    combos = expand_grid(grid)
    for key, values in grid.items():  # unknown keys are usage errors, found first
        trial = copy.deepcopy(data)
        _override(trial, key, values[0])
        try:
            parse_scenario(yaml.safe_dump(trial, sort_keys=False), file=file, base_dir=base_dir)
        except ScenarioErrors as exc:
            for e in exc.errors:
                if e.reason.startswith("unknown key") and (
                    e.path == key or key.startswith(e.path + ".")
                ):
                    where = "" if e.path == key else f"{e.path}: "
                    raise GridError(f"--grid {key}: {where}{e.reason}") from None
    cells: list[Cell] = []
    errors: list[ScenarioError] = []
    ids: set[str] = set()
    for values in combos:
        cid = cell_id(values)
        if cid in ids:  # values differing only in characters a folder name cannot hold
            digest = hashlib.sha256(repr(sorted(values.items())).encode()).hexdigest()[:8]
            cid = f"{cid}-{digest}"
        ids.add(cid)
        merged = copy.deepcopy(data)
        for key, value in values.items():
            _override(merged, key, value)
        try:
            sc = parse_scenario(
                yaml.safe_dump(merged, sort_keys=False), file=file, base_dir=base_dir
            )
            if sc.seed + repeats - 1 >= 2**32:
                raise GridError(f"cell {cid}: seeds {sc.seed}..{sc.seed + repeats - 1} pass 2**32")
            if preflight:
                from fedstrata.scenarios.preflight import preflight as check

                for r in range(repeats):
                    check(sc, seed=sc.seed + r)
        except ScenarioError as exc:
            found = exc.errors if isinstance(exc, ScenarioErrors) else [exc]
            errors += [
                ScenarioError(f"cell {cid}: {e.path or 'scenario'}: {e.reason}", file=file)
                for e in found
            ]
            continue
        cells.append(Cell(cid, values, sc))
    if errors:
        raise ScenarioErrors(errors)
    return Sweep(file, dict(grid), tuple(cells), repeats)


# ------------------------------------------------------------------------------ running


def _run_one(sc: Scenario, folder: str, seed: int, label: str | None = None) -> dict[str, Any]:
    """Run one repeat into ``folder`` (in a worker process); never raises but Ctrl-C."""
    from fedstrata.scenarios.run import run_scenario

    try:
        summary = run_scenario(
            sc,
            folder,
            seed=seed,
            progress=False,
            plots=False,
            command=["fedstrata", "sweep", f"(run {label or folder})"],
        )
    except Exception as exc:  # reported per run; the others go on
        return {"status": "error", "reason": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return {"status": summary["status"], "reason": summary.get("reason")}


def _run_remote(sc: Scenario, seed: int, label: str) -> dict[str, Any]:
    """Run one repeat on a Ray worker into a temporary folder; return outcome and files.

    The record travels back as bytes, so the worker needs no shared file system.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="fedstrata-sweep-") as tmp:
        folder = Path(tmp) / "run"
        outcome = _run_one(sc, str(folder), seed, label)
        files = {}
        if folder.is_dir():
            files = {
                p.name: p.read_bytes()
                for p in folder.iterdir()
                if p.is_file() and not p.name.startswith(".")
            }
    return {"outcome": outcome, "files": files}


def _store_remote(folder: Path, files: dict[str, bytes]) -> None:
    """Write a record returned by :func:`_run_remote` into ``folder``, summary.json last."""
    from fedstrata.analysis.records import atomic_write

    for name in sorted(files, key=lambda n: n == "summary.json"):
        with atomic_write(folder / Path(name).name, "wb") as fh:
            fh.write(files[name])


def _reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast on a ``HOST:PORT`` (or ``ray://HOST:PORT``) nobody listens on.

    Ray itself retries an unreachable address for minutes.
    """
    import socket

    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", "local": Ray finds the cluster itself
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise GridError(
            f"--ray {address}: cannot connect ({exc.strerror or type(exc).__name__})"
        ) from None


def _connect_ray(address: str) -> bool:
    """Connect to the Ray cluster at ``address`` (unless connected); True if we did.

    Raises
    ------
    GridError
        If Ray is not installed or the cluster cannot be reached.

    """
    try:
        import ray
    except ImportError:
        raise GridError("--ray needs Ray on this machine: pip install 'fedstrata[ray]'") from None
    if ray.is_initialized():
        return False
    _reachable(address)
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except Exception as exc:  # ConnectionError, ValueError, RuntimeError, ...
        raise GridError(f"--ray {address}: cannot connect ({type(exc).__name__}: {exc})") from None
    return True


def _finished(folder: Path, digest: str, seed: int) -> dict[str, Any] | None:
    """The run's summary if it ended with a final status for this scenario and seed."""
    try:
        data = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("status") not in FINAL_STATUSES:
        return None
    if (data.get("scenario_hash"), data.get("seed")) != (digest, seed):
        return None
    return data


def _row(cell: Cell, repeat: int, seed: int, folder: Path, error: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {"cell": cell.id, **cell.values, "repeat": repeat, "seed": seed}
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        summary = None
    if error is not None or not isinstance(summary, dict):
        row["status"] = "error" if error is not None else "not_run"
        return row
    metrics = summary.get("metrics") or {}
    row.update(
        status=summary.get("status"),
        rounds=summary.get("rounds"),
        bytes_total=summary.get("bytes_total"),
        virtual_time_s=summary.get("virtual_time_s"),
        wall_time_s=summary.get("wall_time_s"),
        ari=metrics.get("ari"),
        nmi=metrics.get("nmi"),
        acc=metrics.get("acc"),
    )
    return row


def run_columns(keys: Sequence[str]) -> list[str]:
    """Columns of ``results.csv``: ``cell``, the grid keys, then :data:`RUN_FIELDS`."""
    return ["cell", *keys, *RUN_FIELDS]


def summary_columns(keys: Sequence[str]) -> list[str]:
    """Columns of ``summary.csv``: ``cell``, keys, ``n``, ``n_ari``, then mean/ci_low/ci_high.

    ``n`` counts the cell's runs that ended with a final status, ``n_ari`` those of them
    with an ARI (the ARI interval is over those).
    """
    cols = ["cell", *keys, "n", "n_ari"]
    for m in SUMMARY_METRICS:
        cols += [f"{m}_mean", f"{m}_ci_low", f"{m}_ci_high"]
    return cols


def run_sweep(
    sweep: Sweep,
    out_dir: str | Path,
    *,
    jobs: int = 1,
    overwrite: bool = False,
    on_start: Callable[[int, int], None] | None = None,
    on_done: Callable[[dict[str, Any]], None] | None = None,
    ray_address: str | None = None,
) -> SweepResult:
    """Run the sweep's unfinished runs (``jobs`` processes; 1: in this process), write tables.

    With ``ray_address``, the runs are Ray tasks on that cluster (one CPU each;
    ``jobs`` is ignored); a connection made in this process is reused, one made
    here is closed at the end. Each task returns its record, written here.

    ``on_start(to_run, skipped)`` is called once before the runs, ``on_done(row)``
    after each. Ctrl-C (or a run ending ``interrupted``) stops the sweep: pending
    runs are cancelled, the tables written from the records there are, and the
    result says ``interrupted``; the next call resumes.

    Raises
    ------
    OutputError
        If a run folder is unusable, or holds a finished run of a different scenario
        and not ``overwrite`` (checked before anything runs).
    GridError
        If ``ray_address`` is given and Ray is missing or unreachable.

    """
    from fedstrata.analysis.records import OutputError

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: is a file, not a folder")
    ours = _connect_ray(ray_address) if ray_address is not None else False
    try:
        return _run_sweep(sweep, out, jobs, overwrite, on_start, on_done, ray_address)
    finally:
        if ours:
            import ray

            ray.shutdown()


_STOP: Any = None  # in a pool worker: the sweep's stop event
_BUSY = False  # in a pool worker: a run is in progress


def _worker_init(stop: Any) -> None:
    """Set a pool worker up: the parent decides when runs stop (SIGUSR1), not Ctrl-C."""
    global _STOP
    _STOP = stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGUSR1, _worker_interrupt)


def _worker_interrupt(signum: int, frame: Any) -> None:
    if _BUSY:  # the run ends as after Ctrl-C: status interrupted, a complete record
        raise KeyboardInterrupt


def _pool_run(sc: Scenario, folder: str, seed: int) -> dict[str, Any]:
    """:func:`_run_one` in a pool worker, unless the sweep was stopped before it began."""
    global _BUSY
    if _STOP is not None and _STOP.is_set():
        return {"status": "cancelled", "reason": "the sweep was interrupted"}
    _BUSY = True
    try:
        return _run_one(sc, folder, seed)
    finally:
        _BUSY = False


def _run_in_pool(
    jobs: int,
    todo: list[tuple[int, tuple[Cell, int, int, Path]]],
    finish: Callable[[int, dict[str, Any]], None],
    result: SweepResult,
) -> None:
    """Run ``todo`` in ``jobs`` worker processes.

    On Ctrl-C or SIGTERM (a KeyboardInterrupt here) the runs in progress are told to
    stop (they end ``interrupted`` with a complete record), queued ones do not start.
    """
    ctx = multiprocessing.get_context()
    stop = ctx.Event()
    pool = ProcessPoolExecutor(
        max_workers=jobs, mp_context=ctx, initializer=_worker_init, initargs=(stop,)
    )
    pending: dict[Future[dict[str, Any]], int] = {}
    try:
        for i, (cell, _, seed, folder) in todo:
            pending[pool.submit(_pool_run, cell.scenario, str(folder), seed)] = i
        while pending and not result.interrupted:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                i = pending.pop(fut)
                try:
                    outcome = fut.result()
                except Exception as exc:  # a worker died (killed, out of memory)
                    outcome = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
                finish(i, outcome)
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        if pending:
            stop.set()
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                with contextlib.suppress(OSError):
                    os.kill(proc.pid, signal.SIGUSR1)
        pool.shutdown(wait=True, cancel_futures=True)


def _run_on_ray(
    address: str,
    todo: list[tuple[int, tuple[Cell, int, int, Path]]],
    finish: Callable[[int, dict[str, Any]], None],
    result: SweepResult,
) -> None:
    """Run ``todo`` as Ray tasks; store each record as it comes back."""
    import ray

    remote = ray.remote(num_cpus=1, max_retries=0)(_run_remote)
    pending = {
        remote.remote(cell.scenario, seed, str(folder)): (i, folder)
        for i, (cell, _, seed, folder) in todo
    }
    try:
        while pending and not result.interrupted:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i, folder = pending.pop(ref)
                try:
                    back = ray.get(ref)
                except Exception as exc:  # the task died (a worker lost, ...)
                    finish(i, {"status": "error", "reason": f"ray: {type(exc).__name__}: {exc}"})
                    continue
                _store_remote(folder, back["files"])
                finish(i, back["outcome"])
    finally:
        for ref in pending:
            ray.cancel(ref)


def _run_sweep(
    sweep: Sweep,
    out: Path,
    jobs: int,
    overwrite: bool,
    on_start: Callable[[int, int], None] | None,
    on_done: Callable[[dict[str, Any]], None] | None,
    ray_address: str | None,
) -> SweepResult:
    from fedstrata.analysis.records import prepare_run_dir
    from fedstrata.scenarios.run import scenario_hash

    tasks: list[tuple[Cell, int, int, Path]] = []
    todo: list[int] = []
    for cell in sweep.cells:
        for r in range(sweep.repeats):
            seed = cell.scenario.seed + r
            folder = out / "runs" / cell.id / f"rep-{r}"
            tasks.append((cell, r, seed, folder))
            digest = scenario_hash(cell.scenario, seed)
            if _finished(folder, digest, seed) is not None:
                continue
            try:
                old = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                old = None
            stale = isinstance(old, dict) and old.get("status") in FINAL_STATUSES
            # a run that never finished is ours to replace; a finished one of another
            # scenario only with overwrite
            prepare_run_dir(
                folder, scenario_hash=digest, seed=seed, overwrite=overwrite or not stale
            )
            todo.append(len(tasks) - 1)
    result = SweepResult(rows=[], summary=[], skipped=len(tasks) - len(todo))
    if on_start is not None:
        on_start(len(todo), result.skipped)
    errors: dict[int, str] = {}

    def finish(i: int, outcome: dict[str, Any]) -> None:
        cell, r, seed, folder = tasks[i]
        if outcome["status"] == "cancelled":  # never started: the sweep was stopped
            return
        result.ran += 1
        if outcome["status"] == "error":
            errors[i] = outcome["reason"]
            result.errors.append(f"{cell.id} rep {r}: {outcome['reason']}")
        if outcome["status"] == "interrupted":
            result.interrupted = True
        if on_done is not None:
            on_done(_row(cell, r, seed, folder, errors.get(i)))

    try:
        if ray_address is not None:
            _run_on_ray(ray_address, [(i, tasks[i]) for i in todo], finish, result)
        elif jobs <= 1:
            for i in todo:
                cell, _, seed, folder = tasks[i]
                finish(i, _run_one(cell.scenario, str(folder), seed))
                if result.interrupted:
                    break
        else:
            _run_in_pool(jobs, [(i, tasks[i]) for i in todo], finish, result)
    except KeyboardInterrupt:
        result.interrupted = True
    keys = list(sweep.grid)
    result.rows = [_row(c, r, s, f, errors.get(i)) for i, (c, r, s, f) in enumerate(tasks)]
    result.summary = summarize(result.rows, keys, [c.id for c in sweep.cells])
    result.files = _write_tables(result, keys, out)
    return result


# ------------------------------------------------------------------------------ tables


def confidence_interval(
    values: Sequence[float], level: float = 0.95
) -> tuple[float | None, float | None, float | None]:
    """Mean and Student-t confidence interval ``(mean, low, high)`` of ``values``.

    ``mean ± t((1 + level) / 2, n - 1) · s / √n``, ``s`` the sample standard deviation
    (``ddof=1``). With one value the interval is unknown (``None``); with none, all is.
    """
    from scipy import stats

    vals = [float(v) for v in values]
    n = len(vals)
    if n == 0:
        return None, None, None
    mean = math.fsum(vals) / n
    if n == 1:
        return mean, None, None
    s = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (n - 1))
    half = float(stats.t.ppf((1 + level) / 2, n - 1)) * s / math.sqrt(n)
    return mean, mean - half, mean + half


def _r6(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def summarize(
    rows: Sequence[dict[str, Any]], keys: Sequence[str], cells: Sequence[str]
) -> list[dict[str, Any]]:
    """A row per cell (in ``cells`` order) over its runs that ended with a final status.

    ``n`` counts those runs; each metric's mean and 95 % interval is over the runs
    where it is known (ARI is unknown when a run's metrics could not be computed).
    """
    out = []
    for cid in cells:
        mine = [r for r in rows if r["cell"] == cid]
        done = [r for r in mine if r.get("status") in FINAL_STATUSES]
        row: dict[str, Any] = {"cell": cid, **{k: mine[0].get(k) for k in keys}, "n": len(done)}
        row["n_ari"] = sum(r.get("ari") is not None for r in done)
        for m in SUMMARY_METRICS:
            mean, low, high = confidence_interval([r[m] for r in done if r.get(m) is not None])
            row.update({f"{m}_mean": _r6(mean), f"{m}_ci_low": _r6(low), f"{m}_ci_high": _r6(high)})
        out.append(row)
    return out


def parquet_rows(rows: list[dict[str, Any]], columns: list[str]) -> list[dict[str, Any]]:
    """``rows`` restricted to ``columns``, each column of one type (Parquet needs that).

    A grid key whose values mix types (``0`` and ``10%``, as written on the command
    line) becomes text in every row; numbers stay numbers otherwise.
    """
    out = [{c: r.get(c) for c in columns} for r in rows]
    for c in columns:
        kinds = {type(r[c]) for r in out if r[c] is not None}
        if len(kinds) > 1 and not kinds <= {int, float}:
            for r in out:
                r[c] = None if r[c] is None else str(r[c])
    return out


def _write_tables(result: SweepResult, keys: list[str], out: Path) -> list[str]:
    from fedstrata.analysis.records import write_table

    out.mkdir(parents=True, exist_ok=True)
    write_table(result.rows, run_columns(keys), out / "results.csv")
    write_table(result.summary, summary_columns(keys), out / "summary.csv")
    files = ["results.csv", "summary.csv"]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        pass
    else:
        table = pa.Table.from_pylist(parquet_rows(result.rows, run_columns(keys)))
        pq.write_table(table, out / "results.parquet")
        files.append("results.parquet")
    if result.summary and any(r["n"] for r in result.summary):
        plot_sweep(result.summary, keys, out / "sweep.png")
        files.append("sweep.png")
    return files


def _numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def plot_sweep(summary: Sequence[dict[str, Any]], keys: Sequence[str], path: str | Path) -> None:
    """Plot mean ARI, rounds and bytes per cell with 95 % interval error bars.

    x is the first numeric grid key (else the first key, as categories); one line per
    combination of the other keys' values.
    """
    # a Figure of its own, not pyplot: no global backend switch (a notebook calling
    # fedstrata.sweep keeps drawing inline) and no figure left open
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    xkey = next((k for k in keys if _numeric([r[k] for r in summary])), None)
    if xkey is None and keys:
        xkey = keys[0]
    others = [k for k in keys if k != xkey]
    categorical = xkey is None or not _numeric([r[xkey] for r in summary])
    xs_all: list[Any] = []
    for r in summary:
        x = r["cell"] if xkey is None else r[xkey]
        if x not in xs_all:
            xs_all.append(x)
    lines: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in summary:
        lines.setdefault(tuple(r[k] for k in others), []).append(r)
    panels = (("ari", "mean ARI"), ("rounds", "rounds"), ("bytes_total", "bytes"))
    fig = Figure(figsize=(4.4 * len(panels), 3.6))
    axes = fig.subplots(1, len(panels))
    for ax, (metric, label) in zip(axes, panels, strict=True):
        for combo, rows in lines.items():
            pts = [r for r in rows if r[f"{metric}_mean"] is not None]
            if not pts:
                continue
            xv = [r["cell"] if xkey is None else r[xkey] for r in pts]
            xp = [xs_all.index(x) for x in xv] if categorical else xv
            ys = [r[f"{metric}_mean"] for r in pts]
            # the interval drawn within what the metric can be (ARI <= 1, counts >= 0);
            # summary.csv keeps the t interval as computed
            lo_bound, hi_bound = (-1.0, 1.0) if metric == "ari" else (0.0, math.inf)
            err = [
                [0.0 if r[f"{metric}_ci_low"] is None
                 else y - max(r[f"{metric}_ci_low"], lo_bound)
                 for r, y in zip(pts, ys, strict=True)],
                [0.0 if r[f"{metric}_ci_high"] is None
                 else min(r[f"{metric}_ci_high"], hi_bound) - y
                 for r, y in zip(pts, ys, strict=True)],
            ]  # fmt: skip
            name = ", ".join(f"{k}={_token(v)}" for k, v in zip(others, combo, strict=True))
            ax.errorbar(xp, ys, yerr=err, marker="o", capsize=3, label=name or None)
        if categorical:
            ax.set_xticks(range(len(xs_all)), [_token(x) for x in xs_all])
        ax.set(xlabel=xkey or "cell", ylabel=label, title=f"{label} (95 % CI)")
        # plain numbers: no offset or ×1e6 multiplier to decode
        ax.yaxis.set_major_formatter(
            FuncFormatter(lambda v, _: f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.6g}")
        )
        if others and ax is axes[0]:
            ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
