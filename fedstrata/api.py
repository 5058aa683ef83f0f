"""The Python API: run scenarios, sweeps and studies from a notebook and get tables back.

Four functions, re-exported by :mod:`fedstrata` (``fedstrata.run`` and so on)::

    import fedstrata

    run = fedstrata.run("scenarios/paper-flat.yaml", seed=3, faults={"dropout": 0.1})
    run.summary["metrics"]["ari"], run.rounds.tail(), run.labels.head(), run.model["centers_0"]

    again = fedstrata.load(run.folder)          # any record folder, read back
    grid = fedstrata.sweep("scenarios/edge-fog-cloud.yaml",
                           {"faults.dropout": [0, 0.3], "protocol.kind": ["sync", "async"]},
                           repeats=3)
    grid.summary                                 # a row per cell: mean ARI and its 95 % CI
    study = fedstrata.study("scenarios/studies/faults-mfeat.yaml")
    study.table                                  # a row per variant

Each is a thin layer over what the command line runs
(:func:`fedstrata.scenarios.run.run_scenario`,
:func:`fedstrata.scenarios.run_mqtt.run_scenario_mqtt`,
:func:`fedstrata.scenarios.sweep.run_sweep`, :func:`fedstrata.scenarios.study.run_study`),
so a run from Python writes the record ``fedstrata run`` writes, and ``fedstrata report``
or ``fedstrata compare`` read it.

Where records go: with ``out=None`` they are written into a temporary folder owned by
the returned object and deleted when that object is garbage-collected (or at
interpreter exit); :meth:`Run.save` copies such a record somewhere lasting. With
``out=PATH`` the record stays in ``PATH`` (``overwrite=True`` to replace another
run's record there, as ``--overwrite``).

This module imports pandas, and the orchestration modules import SimPy, only when one
of these functions is called: ``import fedstrata`` stays light.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from fedstrata.errors import ValidationError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from fedstrata.scenarios.schema import Scenario

__all__ = [
    "NotARecordError",
    "Run",
    "StudyResult",
    "SweepResult",
    "load",
    "run",
    "study",
    "sweep",
]

Transport = Literal["sim", "mqtt"]
T = TypeVar("T")


class NotARecordError(ValidationError):
    """A folder given to :func:`load` holds no fedstrata record (or a damaged one)."""


# ------------------------------------------------------------------------------ helpers


class _Owned:
    """A temporary folder deleted when its owner is garbage-collected (or at exit)."""

    def __init__(self, owner: object, prefix: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix))
        # a finalizer, not __del__: it also runs at interpreter exit, and never twice
        self._finalizer = weakref.finalize(owner, shutil.rmtree, str(self.path), True)


def _pandas() -> Any:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency
        raise ValidationError("the Python API needs pandas: pip install 'pandas>=2.2,<3'") from None
    return pd


def _read_csv(path: Path) -> pd.DataFrame:
    """A record table as a DataFrame (an empty one, with no columns, if the file is absent)."""
    pd = _pandas()
    if not path.is_file():
        return pd.DataFrame()
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"metrics": {"ari": 1}}`` as ``{"metrics.ari": 1}`` (lists kept as they are)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _check_overrides(
    keyword: Mapping[str, Any], dotted: Mapping[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    if dotted is not None and not isinstance(dotted, Mapping):
        raise ValidationError(
            "overrides= must be a mapping of dotted keys to values, such as {'faults.dropout': 0.1}"
        )
    for key in dotted or {}:
        if not isinstance(key, str):
            raise ValidationError(f"overrides=: the key {key!r} is not a string")
    return dict(keyword), dict(dotted or {})


def _apply_overrides(
    data: dict[str, Any], keyword: Mapping[str, Any], dotted: Mapping[str, Any]
) -> dict[str, Any]:
    """``data`` with the keyword overrides merged deeply, then the dotted ones set.

    Deep merging is the study files' (mappings merge, a list or a value replaces);
    a dotted key is set as ``fedstrata sweep --grid`` sets it.
    """
    from fedstrata.scenarios.loader import merge_documents as _merge
    from fedstrata.scenarios.sweep import GridError, _override

    merged = _merge(data, dict(keyword)) if keyword else copy.deepcopy(data)
    for key, value in dotted.items():
        try:
            _override(merged, key, value)
        except GridError as exc:
            raise ValidationError(str(exc).replace("--grid ", "overrides: ", 1)) from None
    return merged


@dataclass
class _Source:
    """A scenario read into a mapping, with where its relative paths are read from."""

    data: dict[str, Any]
    file: str
    base_dir: Path | None
    path: Path | None = None  # the file, when given as one and left unchanged


def _source(scenario: Any, what: str = "scenario") -> _Source:
    """Read ``scenario`` (a path, a mapping or a Scenario) into a mapping."""
    import yaml

    from fedstrata.scenarios.schema import Scenario

    if isinstance(scenario, str | Path):
        from fedstrata.scenarios.loader import _Loader, load_scenario

        p = Path(scenario)
        if what == "scenario":
            load_scenario(p, preflight=False)  # the file's own problems, located in it
        elif not p.is_file():
            raise ValidationError(f"{what} file {str(p)!r} does not exist")
        try:
            data = yaml.load(p.read_text(encoding="utf-8"), Loader=_Loader)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ValidationError(f"cannot read {what} file {str(p)!r}: {exc}") from None
        if not isinstance(data, dict):
            raise ValidationError(f"{what} file {str(p)!r} is not a mapping of keys")
        return _Source(data, str(p), p.absolute().parent, p)
    if isinstance(scenario, Scenario):
        data = yaml.safe_load(scenario.resolved_yaml())
        return _Source(data, f"<Scenario {scenario.name}>", None)
    if isinstance(scenario, Mapping):
        return _Source(copy.deepcopy(dict(scenario)), f"<{what} dict>", None)
    raise ValidationError(
        f"{what} must be a file path, a dict or a Scenario, not {type(scenario).__name__}"
    )


def _scenario(scenario: Any, keyword: Mapping[str, Any], dotted: Mapping[str, Any]) -> Scenario:
    """The validated, pre-flight checked scenario with the overrides applied."""
    import yaml

    from fedstrata.errors import ScenarioError
    from fedstrata.scenarios.loader import load_scenario, parse_scenario
    from fedstrata.scenarios.preflight import preflight
    from fedstrata.scenarios.schema import Scenario, ScenarioErrors

    if isinstance(scenario, Scenario) and not keyword and not dotted:
        sc = scenario
    elif isinstance(scenario, str | Path) and not keyword and not dotted:
        return load_scenario(scenario)  # errors located in the file
    else:
        src = _source(scenario)
        data = _apply_overrides(src.data, keyword, dotted)
        file = src.file if not (keyword or dotted) else f"{src.file} (with overrides)"
        try:
            sc = parse_scenario(
                yaml.safe_dump(data, sort_keys=False), file=file, base_dir=src.base_dir
            )
        except ScenarioErrors as exc:  # lines of the text parsed here mean nothing to a user
            raise ScenarioErrors(
                [ScenarioError(e.reason, file=e.file, path=e.path) for e in exc.errors]
            ) from None
    preflight(sc)  # what only a run would find (no clients' samples, missing files, ...)
    return sc


def _outside_event_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, in a worker thread if this thread runs an event loop.

    The MQTT transport calls :func:`asyncio.run`, which refuses to start inside a
    running loop, and Jupyter's kernel runs one in its main thread.
    """
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args, **kwargs)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="fedstrata-mqtt") as pool:
        return pool.submit(fn, *args, **kwargs).result()


def _out_folder(
    owner: object, out: str | Path | None, prefix: str, name: str
) -> tuple[Path, _Owned | None]:
    """``out``, or ``name`` in a temporary folder owned by ``owner`` (the tracker's run name)."""
    if out is None:
        owned = _Owned(owner, prefix)
        return owned.path / name, owned
    return Path(out), None


class _Trackers:
    """The ``track=`` trackers of one call: made before anything runs, fed finished records.

    Trackers read records already on disk (:mod:`fedstrata.tracking`), so one that fails
    never costs the run: it is a warning, and the record is returned all the same.
    """

    def __init__(self, specs: Sequence[Any] | None) -> None:
        self.trackers: list[Any] = []
        self.failed: set[str] = set()
        if specs is None:
            return
        if isinstance(specs, str) or not isinstance(specs, Sequence):
            raise ValidationError(
                "track= must be a list of 'tensorboard:DIR' or 'mlflow:URI' specs (or trackers)"
            )
        from fedstrata.tracking import trackers_from_specs

        self.trackers = trackers_from_specs(list(specs))

    def _each(self, action: Callable[[Any], None]) -> None:
        import warnings

        for t in self.trackers:
            spec = str(getattr(t, "spec", t))
            if spec in self.failed:
                continue
            try:
                action(t)
            except Exception as exc:  # a store that refuses, a full disk: said, not raised
                self.failed.add(spec)
                warnings.warn(
                    f"track {spec}: {type(exc).__name__}: {str(exc)[:300]} "
                    "(the record itself is complete)",
                    stacklevel=4,
                )

    def log(self, folder: Path, collection: Path | None = None) -> None:
        self._each(lambda t: t.log_record(folder, collection=collection))

    def finish(self, collection: Path | None = None) -> None:
        if collection is not None:
            self._each(lambda t: t.log_collection(collection))
        self._each(lambda t: t.close())


# ------------------------------------------------------------------------------ Run


class Run:
    """One run's record: its summary, tables and model, read from its folder.

    Returned by :func:`run` and :func:`load`. The tables are read when first used
    and kept.

    Attributes
    ----------
    folder : pathlib.Path
        The record folder. A temporary one (``run(..., out=None)``) is deleted with
        this object; :meth:`save` copies it.
    kind : {"run", "node"}
        ``"run"``: a whole run's record (``summary.json``: simulated or over MQTT);
        ``"node"``: one device's record of ``fedstrata node`` (``node.json``).
    summary : dict
        ``summary.json`` (``node.json`` for a device), as a dict.
    """

    def __init__(self, folder: str | Path, *, _owned: _Owned | None = None) -> None:
        self.folder = Path(folder)
        self._owned = _owned  # keeps the temporary folder alive as long as this object
        node = self.folder / "node.json"
        summary = self.folder / "summary.json"
        if summary.is_file():
            self.kind: Literal["run", "node"] = "run"
            path = summary
        elif node.is_file():
            self.kind = "node"
            path = node
        else:
            raise NotARecordError(
                f"{self.folder} holds no fedstrata record (no summary.json of a run, "
                "no node.json of a device)"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise NotARecordError(f"{path}: cannot read it ({exc})") from None
        if not isinstance(data, dict):
            raise NotARecordError(f"{path}: not a JSON object")
        self.summary: dict[str, Any] = data

    # --- the record's parts

    @property
    def status(self) -> str:
        """How the run ended (``converged``, ``round_limit``, ...); a device's own status."""
        return str(self.summary.get("status"))

    @property
    def transport(self) -> str:
        """``sim``, ``mqtt`` or, for a device record, ``node``."""
        return "node" if self.kind == "node" else str(self.summary.get("transport", "sim"))

    @property
    def metrics(self) -> dict[str, float | None]:
        """ACC, NMI, ARI, RI and purity of the final labels (empty for a device record)."""
        return dict(self.summary.get("metrics") or {})

    @cached_property
    def rounds(self) -> pd.DataFrame:
        """``rounds.csv``: a row per round (and sub-round) and tier; empty if absent.

        A device writes it on the root and the middle-tier aggregators only.
        """
        return _read_csv(self.folder / "rounds.csv")

    @cached_property
    def labels(self) -> pd.DataFrame:
        """``labels.csv``: ``client``, ``index``, ``label`` per sample; empty if absent.

        On a device ``index`` is the row of the device's data files; only clients
        write labels.
        """
        return _read_csv(self.folder / "labels.csv")

    @cached_property
    def clients(self) -> pd.DataFrame:
        """``clients.csv`` (per-client metrics with personalization on); empty if absent."""
        return _read_csv(self.folder / "clients.csv")

    @cached_property
    def model(self) -> dict[str, np.ndarray]:
        """The arrays of ``model.npz`` (empty when the run reached no model)."""
        import numpy as np

        path = self.folder / "model.npz"
        if not path.is_file():
            return {}
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}

    @cached_property
    def scenario(self) -> Scenario | None:
        """The resolved scenario of ``scenario.yaml`` (None for a device record)."""
        from fedstrata.scenarios.loader import load_scenario

        path = self.folder / "scenario.yaml"
        return load_scenario(path, preflight=False) if path.is_file() else None

    def summary_frame(self) -> pd.DataFrame:
        """The summary as a one-row DataFrame, nested fields as dotted columns.

        ``metrics.ari``, ``per_tier.edge.bytes_up``, ...; the rows of several runs
        concatenate into a comparison table (``pd.concat([a.summary_frame(), ...])``).
        """
        pd = _pandas()
        row = {"folder": str(self.folder), **_flatten(self.summary)}
        return pd.DataFrame([{k: _cell(v) for k, v in row.items()}])

    def save(self, folder: str | Path, *, overwrite: bool = False) -> Run:
        """Copy the record into ``folder`` (to keep a temporary one); return it loaded.

        Raises
        ------
        ValidationError
            If ``folder`` exists and is not empty, unless ``overwrite`` (then its
            files are replaced).
        """
        dest = Path(folder)
        if dest.resolve() == self.folder.resolve():
            return self
        if dest.exists() and any(dest.iterdir()) and not overwrite:
            raise ValidationError(f"{dest} is not empty; pass overwrite=True or choose another")
        dest.mkdir(parents=True, exist_ok=True)
        for p in self.folder.iterdir():
            if p.is_file() and not p.name.startswith("."):
                shutil.copy2(p, dest / p.name)
        return Run(dest)

    def __repr__(self) -> str:
        if self.kind == "node":
            return (
                f"<fedstrata Run: node {self.summary.get('node')!r} "
                f"({self.summary.get('role')}) {self.status}, {self.folder}>"
            )
        ari = self.metrics.get("ari")
        shown = "n/a" if ari is None else f"{ari:.3f}"
        return (
            f"<fedstrata Run: {self.summary.get('scenario')} ({self.transport}) {self.status} "
            f"after {self.summary.get('rounds')} rounds, ARI {shown}, "
            f"{self.summary.get('bytes_total'):,} bytes, {self.folder}>"
        )


def _cell(value: Any) -> Any:
    """A value fit for a DataFrame cell: lists and empty mappings as JSON text."""
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, default=str)
    return value


def run(
    scenario: str | Path | Mapping[str, Any] | Scenario,
    *,
    transport: Transport = "sim",
    out: str | Path | None = None,
    overwrite: bool = False,
    overrides: Mapping[str, Any] | None = None,
    events: bool = False,
    plots: bool = False,
    batch: bool = True,
    broker: str | None = None,
    insecure: bool = False,
    run_id: str | None = None,
    emulate_links: bool = False,
    timeout_s: float | None = None,
    track: Sequence[Any] | None = None,
    **keys: Any,
) -> Run:
    """Run a scenario, simulated or over a real MQTT broker, and return its record.

    Parameters
    ----------
    scenario
        A scenario file (``extends:`` and relative paths are read from its folder), a
        dict of the same keys, or a :class:`~fedstrata.scenarios.schema.Scenario`.
    transport
        ``"sim"`` (virtual time, as ``fedstrata run``) or ``"mqtt"`` (real MQTT, as
        ``fedstrata run --transport mqtt``: a private Mosquitto on 127.0.0.1 unless
        ``broker`` is given).
    out
        The record folder. None: a temporary folder that lives as long as the
        returned :class:`Run` (use :meth:`Run.save` to keep it).
    overwrite
        Replace another run's record in ``out`` (``--overwrite``).
    overrides
        Dotted keys set as ``fedstrata sweep --grid`` sets them:
        ``{"faults.dropout": 0.1, "protocol.kind": "async"}``. Applied after ``keys``.
    events
        Also write ``events.jsonl`` (simulator only).
    plots
        Also write ``rounds.png`` (off by default: a notebook draws its own).
    batch
        As ``fedstrata run --no-batch`` when False: every simulated client computes
        its own step instead of its parent's cohort computing them in one batched
        call (the reference path; the record is the same). Simulator only.
    broker
        ``mqtt://HOST:PORT`` or ``mqtts://HOST:PORT`` (``transport="mqtt"`` only).
    insecure, run_id, emulate_links, timeout_s
        As ``--insecure``, ``--run-id``, ``--emulate-links`` and ``--timeout`` of
        ``fedstrata run --transport mqtt`` (``transport="mqtt"`` only).
    track
        Where to send the finished record, as ``--track``: ``["tensorboard:runs/tb",
        "mlflow:runs/mlruns"]`` (the ``[tracking]`` extra), or tracker objects
        (:mod:`fedstrata.tracking`). A tracker that fails is a warning.
    **keys
        Top-level scenario keys, merged deeply into the scenario: ``seed=3``,
        ``faults={"dropout": 0.1}`` (mappings merge, a list or a value replaces).

    Returns
    -------
    Run
        The record: :attr:`Run.summary`, :attr:`Run.rounds`, :attr:`Run.labels`,
        :attr:`Run.model`, :attr:`Run.folder`.

    Raises
    ------
    ScenarioErrors
        If the scenario (with its overrides) is invalid: every problem, located.
    ValidationError
        A usage error: an unknown ``transport``, an MQTT option with
        ``transport="sim"``, a dotted key inside a value, a bad ``broker`` URL.
    OutputError
        If ``out`` holds another run and not ``overwrite``, or cannot be written.
    TransportError
        If the broker cannot be reached or Mosquitto cannot be started.

    Examples
    --------
    >>> import fedstrata
    >>> r = fedstrata.run("scenarios/paper-flat.yaml", seed=3)       # doctest: +SKIP
    >>> r.summary["status"], r.metrics["ari"]                         # doctest: +SKIP
    ('converged', 0.9993...)
    """
    if transport not in ("sim", "mqtt"):
        raise ValidationError(f"transport must be 'sim' or 'mqtt', not {transport!r}")
    mqtt_only = {
        "broker": broker is not None,
        "insecure": insecure,
        "run_id": run_id is not None,
        "emulate_links": emulate_links,
        "timeout_s": timeout_s is not None,
    }
    if transport == "sim":
        given = [name for name, on in mqtt_only.items() if on]
        if given:
            raise ValidationError(f"{given[0]}= needs transport='mqtt'")
    elif events:
        raise ValidationError("events=True is for the simulator only (transport='sim')")
    elif not batch:
        raise ValidationError("batch=False is for the simulator only (transport='sim')")
    keyword, dotted = _check_overrides(keys, overrides)
    sc = _scenario(scenario, keyword, dotted)
    trackers = _Trackers(track)  # a bad spec or a missing extra fails before the run
    result = Run.__new__(Run)  # its temporary folder must exist before the run writes
    folder, owned = _out_folder(result, out, "fedstrata-run-", sc.name)
    command = ["fedstrata.run", str(scenario) if isinstance(scenario, str | Path) else "<dict>"]
    if transport == "sim":
        from fedstrata.scenarios.run import run_scenario

        run_scenario(
            sc,
            folder,
            events=events or sc.output.events,
            plots=plots,
            progress=False,
            overwrite=overwrite,
            command=command,
            batch=batch,
        )
    else:
        from fedstrata.scenarios.run_mqtt import DEFAULT_TIMEOUT_S, run_scenario_mqtt

        _outside_event_loop(
            run_scenario_mqtt,
            sc,
            folder,
            broker=broker,
            overwrite=overwrite,
            command=command,
            timeout_s=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s,
            plots=plots,
            run_id=run_id,
            emulate_links=emulate_links,
            insecure=insecure,
        )
    Run.__init__(result, folder, _owned=owned)
    trackers.log(folder)
    trackers.finish()
    return result


# ------------------------------------------------------------------------------ sweeps


@dataclass(eq=False)
class SweepResult:
    """A sweep's tables, read from its folder.

    Attributes
    ----------
    folder : pathlib.Path
        The sweep folder (``runs/<cell>/rep-<r>/`` records, ``results.csv``,
        ``summary.csv``).
    results : pandas.DataFrame
        ``results.csv``: a row per run (cell, grid keys, repeat, seed, status,
        rounds, bytes, times, ARI, NMI, ACC).
    summary : pandas.DataFrame
        ``summary.csv``: a row per cell, with ``n`` and the mean and 95 % Student-t
        interval (``*_mean``, ``*_ci_low``, ``*_ci_high``) of ARI, rounds, bytes and
        virtual time.
    errors : list of str
        Runs that failed, one line each (empty after :func:`load`).
    """

    folder: Path
    results: pd.DataFrame
    summary: pd.DataFrame
    errors: list[str] = field(default_factory=list)
    _owned: _Owned | None = field(default=None, repr=False)

    @classmethod
    def read(cls, folder: str | Path, **kw: Any) -> SweepResult:
        """Read a sweep folder's ``results.csv`` and ``summary.csv``."""
        folder = Path(folder)
        return cls(
            folder, _read_csv(folder / "results.csv"), _read_csv(folder / "summary.csv"), **kw
        )

    def run(self, cell: str, repeat: int = 0) -> Run:
        """The record of one run of the sweep (``cell`` as in the ``cell`` column)."""
        return Run(self.folder / "runs" / cell / f"rep-{repeat}")

    def __repr__(self) -> str:
        return (
            f"<fedstrata SweepResult: {len(self.results)} runs in {len(self.summary)} cells, "
            f"{len(self.errors)} errors, {self.folder}>"
        )


def sweep(
    scenario: str | Path | Mapping[str, Any] | Scenario,
    grid: Mapping[str, Sequence[Any]],
    *,
    repeats: int = 1,
    jobs: int = 1,
    out: str | Path | None = None,
    overwrite: bool = False,
    overrides: Mapping[str, Any] | None = None,
    track: Sequence[Any] | None = None,
    **keys: Any,
) -> SweepResult:
    """Run a parameter grid, each cell ``repeats`` times, as ``fedstrata sweep``.

    Parameters
    ----------
    scenario
        A scenario file, a dict or a Scenario (as :func:`run`).
    grid
        Dotted keys to their values, as ``--grid``: ``{"faults.dropout": [0, 0.1],
        "protocol.kind": ["sync", "async"]}``; the cells are their cartesian
        product, first key slowest.
    repeats
        Runs per cell; repeat ``r`` uses the cell's seed + ``r``.
    jobs
        Worker processes (1: in this process).
    out
        The sweep folder (None: a temporary one living as long as the result). Runs
        already finished there are not run again, as on the command line.
    overwrite
        Replace finished runs of another scenario in ``out``.
    overrides, **keys
        Applied to the scenario before the grid, as in :func:`run`.
    track
        Trackers (as in :func:`run`): each finished run, then the sweep's tables.

    Returns
    -------
    SweepResult
        ``results`` (a row per run) and ``summary`` (a row per cell) as DataFrames.

    Raises
    ------
    ValidationError
        A bad grid (not a mapping of dotted keys to non-empty lists of values, a
        value repeated) or ``repeats`` < 1.
    GridError
        A grid key the scenario does not have (with the keys known there), or a key
        inside a value; as ``--grid`` reports it.
    ScenarioErrors
        If a cell is invalid (prefixed by its cell id).
    """
    from fedstrata.scenarios.sweep import run_sweep, sweep_from_data

    if not isinstance(grid, Mapping) or not grid:
        raise ValidationError(
            "grid must be a non-empty mapping of dotted keys to lists of values, such as "
            "{'faults.dropout': [0, 0.1]}"
        )
    parsed: dict[str, tuple[Any, ...]] = {}
    for key, values in grid.items():
        if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            raise ValidationError(
                f"grid[{key!r}] must be a non-empty list of values, not {values!r}"
            )
        parsed[str(key)] = tuple(values)
        seen: list[Any] = []
        for v in values:
            if any(type(s) is type(v) and s == v for s in seen):
                raise ValidationError(f"grid[{key!r}]: the value {v!r} is repeated")
            seen.append(v)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValidationError(f"repeats must be an integer >= 1, not {repeats!r}")
    keyword, dotted = _check_overrides(keys, overrides)
    src = _source(scenario)
    data = _apply_overrides(src.data, keyword, dotted)
    sw = sweep_from_data(data, parsed, repeats, file=src.file, base_dir=src.base_dir)
    trackers = _Trackers(track)
    result = SweepResult.__new__(SweepResult)
    name = f"sweep-{sw.cells[0].scenario.name}"
    folder, owned = _out_folder(result, out, "fedstrata-sweep-", name)
    done = run_sweep(sw, folder, jobs=jobs, overwrite=overwrite)
    for row in done.rows:
        run_folder = folder / "runs" / row["cell"] / f"rep-{row['repeat']}"
        if (run_folder / "summary.json").is_file():
            trackers.log(run_folder, folder)
    trackers.finish(folder)
    SweepResult.__init__(
        result,
        folder,
        _read_csv(folder / "results.csv"),
        _read_csv(folder / "summary.csv"),
        list(done.errors),
        owned,
    )
    return result


# ------------------------------------------------------------------------------ studies


@dataclass(eq=False)
class StudyResult:
    """A study's tables, read from its folder.

    Attributes
    ----------
    folder : pathlib.Path
        The study folder (``<variant>/seed-<seed>/`` records, ``study.csv``,
        ``study.json``).
    table : pandas.DataFrame
        ``study.csv``: a row per variant, means over its seeds (ARI, its minimum,
        rounds, bytes, time, time and bytes to the target ARI).
    runs : pandas.DataFrame
        A row per run (variant, seed, status, rounds, ARI, bytes, time, whether and
        when it reached the target).
    target_ari : float
        The study's target ARI.
    """

    folder: Path
    table: pd.DataFrame
    runs: pd.DataFrame
    target_ari: float
    _owned: _Owned | None = field(default=None, repr=False)

    @classmethod
    def read(cls, folder: str | Path, **kw: Any) -> StudyResult:
        """Read a study folder's ``study.json`` (and ``study.csv``)."""
        folder = Path(folder)
        try:
            data = json.loads((folder / "study.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise NotARecordError(f"{folder}: cannot read study.json ({exc})") from None
        pd = _pandas()
        runs = []
        for r in data.get("runs", []):
            target = r.get("target") or {}
            runs.append(
                {
                    **{k: v for k, v in r.items() if k != "target"},
                    "target_reached": target.get("reached"),
                    "time_to_target_s": target.get("time_s"),
                    "bytes_to_target": target.get("bytes"),
                }
            )
        return cls(
            folder,
            _read_csv(folder / "study.csv"),
            pd.DataFrame(runs),
            float(data.get("target_ari", float("nan"))),
            **kw,
        )

    def run(self, variant: str, seed: int) -> Run:
        """The record of one run of the study."""
        return Run(self.folder / variant / f"seed-{seed}")

    def __repr__(self) -> str:
        return (
            f"<fedstrata StudyResult: {len(self.table)} variants, {len(self.runs)} runs, "
            f"target ARI {self.target_ari}, {self.folder}>"
        )


def study(
    study_file: str | Path | Mapping[str, Any],
    *,
    out: str | Path | None = None,
    overwrite: bool = False,
    seeds: Sequence[int] | None = None,
    variants: Sequence[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    track: Sequence[Any] | None = None,
    **keys: Any,
) -> StudyResult:
    """Run a study (variants × seeds, simulated), as ``fedstrata study``.

    Parameters
    ----------
    study_file
        A study file, or a dict of the same keys (a scenario with a ``study``
        section: ``variants``, ``seeds``, ``target_ari``).
    out
        The study folder (None: a temporary one living as long as the result).
    overwrite
        Replace records of other runs in ``out``.
    seeds
        Replaces ``study.seeds`` (e.g. fewer seeds for a quick look).
    variants
        Runs only these variants, in this order.
    overrides, **keys
        Applied to the shared scenario before the variants, as in :func:`run`
        (``protocol={"rounds": 10}``, ``overrides={"data.partition.alpha": 1.0}``).
    track
        Trackers (as in :func:`run`): each run, then the study's tables.

    Returns
    -------
    StudyResult
        ``table`` (a row per variant) and ``runs`` (a row per run) as DataFrames.

    Raises
    ------
    ScenarioErrors
        If the study or a variant is invalid (a variant's problems prefixed by
        ``variant <name>``).
    ValidationError
        An unknown variant name in ``variants``, bad ``seeds``.
    """
    from fedstrata.scenarios.study import run_study, study_from_data

    keyword, dotted = _check_overrides(keys, overrides)
    src = _source(study_file, "study")
    data = dict(src.data)
    section = data.pop("study", None)
    if not isinstance(section, dict):
        raise ValidationError(f"{src.file}: a study needs a top-level study section (a mapping)")
    section = dict(section)
    if seeds is not None:
        section["seeds"] = list(seeds)
    if variants is not None:
        known = section.get("variants") or {}
        unknown = [v for v in variants if v not in known]
        if unknown:
            raise ValidationError(
                f"variants: {unknown[0]!r} is not a variant of the study "
                f"(it has {', '.join(map(str, known))})"
            )
        section["variants"] = {v: known[v] for v in variants}
    data = _apply_overrides(data, keyword, dotted)
    data["study"] = section
    st = study_from_data(data, file=src.file, base_dir=src.base_dir)
    trackers = _Trackers(track)
    result = StudyResult.__new__(StudyResult)
    name = str(data.get("name") or "study")
    folder, owned = _out_folder(result, out, "fedstrata-study-", name)
    done = run_study(st, folder, overwrite=overwrite)
    for r in done["runs"]:
        trackers.log(Path(r["path"]), folder)
    trackers.finish(folder)
    loaded = StudyResult.read(folder, _owned=owned)
    StudyResult.__init__(result, loaded.folder, loaded.table, loaded.runs, loaded.target_ari, owned)
    return result


# ------------------------------------------------------------------------------ load


def load(folder: str | Path) -> Run | SweepResult | StudyResult:
    """Read any record folder: a run's, a device's, a sweep's or a study's.

    Parameters
    ----------
    folder
        A run record (``summary.json``: ``fedstrata run``, simulated or
        ``--transport mqtt``, or :func:`run`), a device record (``node.json`` of
        ``fedstrata node``), a sweep folder (``results.csv`` and ``summary.csv``) or
        a study folder (``study.json``).

    Returns
    -------
    Run or SweepResult or StudyResult
        By what the folder holds, in that order of precedence.

    Raises
    ------
    NotARecordError
        If the folder does not exist or holds none of these.
    """
    p = Path(folder)
    if not p.is_dir():
        raise NotARecordError(f"{p} is not a folder")
    if (p / "summary.json").is_file() or (p / "node.json").is_file():
        return Run(p)
    if (p / "study.json").is_file():
        return StudyResult.read(p)
    if (p / "results.csv").is_file() and (p / "summary.csv").is_file():
        return SweepResult.read(p)
    raise NotARecordError(
        f"{p} holds no fedstrata record: no summary.json (a run), node.json (a device), "
        "study.json (a study) or results.csv and summary.csv (a sweep)"
    )
