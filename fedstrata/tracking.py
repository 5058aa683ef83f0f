"""Experiment tracking: send finished run records to TensorBoard and MLflow.

Opt-in, with the ``[tracking]`` extra (``pip install -e ".[tracking]"``: tensorboardX
and mlflow-skinny). A tracker reads a record that a run has already written
(``scenario.yaml``, ``rounds.csv``, ``summary.json``) and logs:

- the scenario as parameters: the resolved ``scenario.yaml`` flattened to dotted keys
  (``topology.fogs``, ``faults.0.kind``); strings as they are, every other value as
  JSON (``true``, ``0.05``, ``[1, 2]``, ``null``);
- each row of ``rounds.csv`` as scalars at step ``round``: the numeric cells of the
  root tier (``cloud``) under their column name (``ari``, ``objective``, ``bytes``),
  those of another tier as ``<tier>/<column>``, a fog sub-round ``k > 0`` (HierFAVG) as
  ``<tier>/sub<k>/<column>``; ``ok`` is 1 or 0, empty and text cells are left out;
- the summary: every number of ``summary.json`` (nested keys dotted) as
  ``summary/<key>`` at the run's last round, its ``status`` and ``reason`` as text
  (MLflow: tags ``fedstrata.status``, ``fedstrata.reason``);
- the record folder itself as an MLflow artifact (``record/``).

Reading the record after it is written, rather than hooking into a running
federation, logs the same thing for a simulated run and a run over MQTT.
``fedstrata sweep`` logs each run as it finishes; ``run`` and ``study`` when
the record is complete.

The command line takes ``--track tensorboard:DIR`` and ``--track mlflow:URI``
(repeatable); from Python::

    from fedstrata.tracking import trackers_from_specs

    trackers = trackers_from_specs(["tensorboard:runs/tb", "mlflow:file:./mlruns"])
    for t in trackers:
        t.log_record("runs/paper-flat")
        t.close()

MLflow needs no server: ``mlflow:DIR`` or ``mlflow:file:///abs/dir`` is a local file
store (MLflow 3 keeps it in maintenance mode and refuses it unless
``MLFLOW_ALLOW_FILE_STORE`` is set; a tracker given a file store sets it, since that
is what was asked for), ``mlflow:http://HOST:PORT`` a tracking server.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import yaml

from fedstrata.errors import FedstrataError

__all__ = [
    "KINDS",
    "MLflowTracker",
    "TensorBoardTracker",
    "Tracker",
    "TrackingError",
    "collection_records",
    "round_scalars",
    "scenario_params",
    "summary_scalars",
    "trackers_from_specs",
]

#: The tracker kinds ``--track KIND:TARGET`` accepts.
KINDS = ("tensorboard", "mlflow")

_EXTRA = 'the [tracking] extra (pip install -e ".[tracking]")'
# columns of rounds.csv that say where a row belongs rather than measure anything
_KEY_COLUMNS = frozenset({"round", "tier", "phase", "sub"})
_ROOT_TIER = "cloud"  # rounds.csv names the root tier cloud, whatever topology.cloud_id
# MLflow accepts these characters in metric names; a tier name could hold others
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. /:]")


class TrackingError(FedstrataError, ValueError):
    """A ``--track`` spec that cannot be used: bad form, unknown kind, missing extra."""


@runtime_checkable
class Tracker(Protocol):
    """Where run records are sent: :class:`TensorBoardTracker`, :class:`MLflowTracker`."""

    spec: str
    """The ``KIND:TARGET`` it was made from."""

    def log_record(self, folder: str | Path, *, collection: str | Path | None = None) -> None:
        """Log one finished run record (scenario, rounds, summary, the folder).

        ``collection`` is the sweep or study folder holding the record, if any: the
        record is then logged beside the collection's other runs.
        """
        ...

    def log_collection(self, folder: str | Path) -> None:
        """Log a finished sweep or study folder's own tables, after its runs."""
        ...

    def close(self) -> None:
        """Flush and release what the tracker holds open."""
        ...


# ---------------------------------------------------------------------------------
# reading a record


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        for i, v in enumerate(value):  # faults, fog groups: one key per item field
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), out)
    else:
        out[prefix] = value


def _param_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def scenario_params(folder: str | Path) -> dict[str, str]:
    """The record's resolved ``scenario.yaml`` as flat dotted parameters (text values).

    An empty dict when the record has no ``scenario.yaml``.
    """
    path = Path(folder) / "scenario.yaml"
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    flat: dict[str, Any] = {}
    _flatten(data, "", flat)
    return {k: _param_text(v) for k, v in flat.items()}


def _number(cell: str) -> float | None:
    if cell in ("", None):
        return None
    if cell in ("True", "False"):
        return 1.0 if cell == "True" else 0.0
    try:
        x = float(cell)
    except ValueError:  # a text column (secure_failure, plan_compression)
        return None
    return x if math.isfinite(x) else None


def round_scalars(folder: str | Path) -> list[tuple[int, dict[str, float]]]:
    """Each row of the record's ``rounds.csv`` as ``(round, {tag: value})``, in file order.

    Tags as the module says: the column for the root tier, ``<tier>/<column>`` for
    another, ``<tier>/sub<k>/<column>`` for a fog sub-round ``k > 0``.
    """
    path = Path(folder) / "rounds.csv"
    if not path.is_file():
        return []
    rows: list[tuple[int, dict[str, float]]] = []
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            tier = _UNSAFE.sub("_", row.get("tier") or _ROOT_TIER)
            sub = int(row.get("sub") or 0)
            prefix = "" if tier == _ROOT_TIER else f"{tier}/"
            if sub:
                prefix += f"{tier}/sub{sub}/" if tier == _ROOT_TIER else f"sub{sub}/"
            values = {}
            for col, cell in row.items():
                if col in _KEY_COLUMNS or col is None:
                    continue
                x = _number(cell)
                if x is not None:
                    values[prefix + col] = x
            rows.append((int(row["round"]), values))
    return rows


def _summary(folder: Path) -> dict[str, Any]:
    path = folder / "summary.json"
    if not path.is_file():
        raise TrackingError(f"{folder}: not a run record (no summary.json)")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise TrackingError(f"{path}: not a JSON object")
    return data


def summary_scalars(summary: Mapping[str, Any]) -> dict[str, float]:
    """Every number of a ``summary.json`` (nested keys dotted) as ``summary/<key>``.

    Booleans count as 1 or 0; text, lists and nulls are left out.
    """
    flat: dict[str, Any] = {}
    _flatten(summary, "", flat)
    out = {}
    for key, value in flat.items():
        if isinstance(value, bool):
            value = float(value)
        if isinstance(value, int | float) and math.isfinite(value):
            out[f"summary/{_UNSAFE.sub('_', key)}"] = float(value)
    return out


def collection_records(folder: str | Path) -> list[Path]:
    """The run records inside a sweep or study folder (each holding a summary.json)."""
    root = Path(folder)
    return sorted(p.parent for p in root.rglob("summary.json") if p.parent != root)


def _run_name(folder: Path, collection: Path | None) -> str:
    """A record's name in a tracker: its folder, or its path from the collection's parent."""
    folder = folder.resolve()
    if collection is not None:
        try:
            return folder.relative_to(collection.resolve().parent).as_posix()
        except ValueError:
            pass
    return folder.name


# ---------------------------------------------------------------------------------
# TensorBoard


class TensorBoardTracker:
    """Write TensorBoard event files: one subfolder of ``logdir`` per run record.

    A run ``runs/paper-flat`` goes to ``<logdir>/paper-flat``; a sweep's or study's run
    to ``<logdir>/<sweep folder>/<cell>/rep-<r>`` (``<study>/<variant>/seed-<s>``), so
    ``tensorboard --logdir <logdir>`` shows them side by side.
    """

    def __init__(self, logdir: str | Path, spec: str | None = None) -> None:
        try:
            import tensorboardX
        except ImportError:
            raise TrackingError(f"tensorboard tracking needs {_EXTRA}") from None
        self._tbx = tensorboardX
        self.logdir = Path(logdir)
        self.spec = spec or f"tensorboard:{logdir}"

    def log_record(self, folder: str | Path, *, collection: str | Path | None = None) -> None:
        """Write the record's scenario, rounds and summary into its own event file."""
        from tensorboardX.summary import hparams

        folder = Path(folder)
        summary = _summary(folder)
        name = _run_name(folder, None if collection is None else Path(collection))
        writer = self._tbx.SummaryWriter(logdir=str(self.logdir / name))
        try:
            params = scenario_params(folder)
            scenario = folder / "scenario.yaml"
            if scenario.is_file():
                text = scenario.read_text(encoding="utf-8")
                writer.add_text("scenario", "```yaml\n" + text + "\n```", 0)
            for step, values in round_scalars(folder):
                for tag, value in values.items():
                    writer.add_scalar(tag, value, step)
            last = int(summary.get("rounds") or 0)
            finals = summary_scalars(summary)
            for tag, value in finals.items():
                writer.add_scalar(tag, value, last)
            writer.add_text(
                "status", f"{summary.get('status')}: {summary.get('reason') or ''}", last
            )
            if params:
                # the HParams dashboard: the scenario against the final quality and cost
                shown = {k: v for k, v in finals.items() if k.startswith("summary/metrics.")}
                for key in ("summary/rounds", "summary/bytes_total", "summary/virtual_time_s"):
                    if key in finals:
                        shown[key] = finals[key]
                exp, ssi, sei = hparams(params, shown)
                fw = writer._get_file_writer()
                for s in (exp, ssi, sei):
                    fw.add_summary(s)
        finally:
            writer.close()

    def log_collection(self, folder: str | Path) -> None:
        """Write the sweep's or study's tables as text beside its runs."""
        folder = Path(folder)
        writer = self._tbx.SummaryWriter(logdir=str(self.logdir / folder.resolve().name))
        try:
            for name in ("summary.csv", "study.csv"):
                path = folder / name
                if path.is_file():
                    writer.add_text(name, _markdown_table(path), 0)
        finally:
            writer.close()

    def close(self) -> None:
        """Nothing stays open: each record's writer is closed when it is logged."""


def _markdown_table(path: Path) -> str:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return ""
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------
# MLflow


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class MLflowTracker:
    """Log each run record as an MLflow run (no server needed with a file store).

    A ``fedstrata run`` goes to the experiment named after the scenario; a sweep or
    study to the experiment named after its folder, under one parent run per sweep or
    study (its tables as artifacts) with a nested run per record.
    """

    # MLflow's own limits: a batch holds at most 100 params and 1000 metrics; a param
    # value at most 6000 characters
    _PARAMS_PER_BATCH = 100
    _METRICS_PER_BATCH = 1000
    _PARAM_VALUE_MAX = 6000

    def __init__(self, uri: str, spec: str | None = None) -> None:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise TrackingError(f"mlflow tracking needs {_EXTRA}") from None
        self.uri = _tracking_uri(uri)
        if self.uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.spec = spec or f"mlflow:{uri}"
        try:  # open the store now: one that cannot be used is refused before any run
            self._client = MlflowClient(tracking_uri=self.uri)
            self._client.search_experiments(max_results=1)
        except Exception as exc:  # OSError, MlflowException, a server that does not answer
            raise TrackingError(f"{self.spec!r}: cannot use the MLflow store: {exc}") from None
        self._parents: dict[Path, str] = {}

    def _experiment(self, name: str) -> str:
        exp = self._client.get_experiment_by_name(name)
        return exp.experiment_id if exp is not None else self._client.create_experiment(name)

    def _parent(self, collection: Path) -> str:
        key = collection.resolve()
        if key not in self._parents:
            run = self._client.create_run(
                self._experiment(key.name), run_name=key.name, tags={"fedstrata.kind": "group"}
            )
            self._parents[key] = run.info.run_id
        return self._parents[key]

    def log_record(self, folder: str | Path, *, collection: str | Path | None = None) -> None:
        """Create an MLflow run for the record: params, metrics per round, the folder."""
        from mlflow.entities import Metric, Param, RunTag

        folder = Path(folder)
        summary = _summary(folder)
        tags = {
            "fedstrata.status": str(summary.get("status")),
            "fedstrata.reason": str(summary.get("reason") or "")[:5000],
            "fedstrata.transport": str(summary.get("transport") or ""),
            "fedstrata.record": str(folder.resolve()),
        }
        if collection is not None:
            coll = Path(collection)
            tags["mlflow.parentRunId"] = self._parent(coll)
            experiment = self._experiment(coll.resolve().name)
        else:
            experiment = self._experiment(str(summary.get("scenario") or folder.name))
        run = self._client.create_run(
            experiment,
            run_name=_run_name(folder, None if collection is None else Path(collection)),
            tags=tags,
        )
        run_id = run.info.run_id
        try:
            params = [
                Param(k, v if len(v) <= self._PARAM_VALUE_MAX else v[: self._PARAM_VALUE_MAX])
                for k, v in scenario_params(folder).items()
            ]
            for chunk in _chunks(params, self._PARAMS_PER_BATCH):
                self._client.log_batch(run_id, params=list(chunk))
            now = int(time.time() * 1000)
            metrics = [
                Metric(tag, value, now, step)
                for step, values in round_scalars(folder)
                for tag, value in values.items()
            ]
            last = int(summary.get("rounds") or 0)
            metrics += [
                Metric(tag, value, now, last) for tag, value in summary_scalars(summary).items()
            ]
            for chunk in _chunks(metrics, self._METRICS_PER_BATCH):
                self._client.log_batch(run_id, metrics=list(chunk))
            self._client.log_artifacts(run_id, str(folder), artifact_path="record")
            self._client.log_batch(run_id, tags=[RunTag("fedstrata.logged", "complete")])
        except BaseException:
            self._client.set_terminated(run_id, status="FAILED")
            raise
        self._client.set_terminated(run_id, status="FINISHED")

    def log_collection(self, folder: str | Path) -> None:
        """Attach the sweep's or study's own files (tables, plots) to its parent run."""
        folder = Path(folder)
        parent = self._parent(folder)
        for path in sorted(folder.iterdir()):
            if path.is_file():  # the tables and plots; the runs are logged one by one
                self._client.log_artifact(parent, str(path), artifact_path="collection")
        self._client.set_terminated(parent, status="FINISHED")
        del self._parents[folder.resolve()]

    def close(self) -> None:
        """End the parent runs of collections that were never finished (interrupted)."""
        for run_id in self._parents.values():
            self._client.set_terminated(run_id, status="KILLED")
        self._parents.clear()


def _tracking_uri(target: str) -> str:
    """A URI MLflow takes: a scheme-less target is a local folder (a file store)."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) and not re.match(r"^[A-Za-z]:\\", target):
        if target.startswith("file:") and not target.startswith("file://"):
            return Path(target[len("file:") :]).resolve().as_uri()  # file:./mlruns
        return target
    return Path(target).resolve().as_uri()


# ---------------------------------------------------------------------------------
# specs


def trackers_from_specs(specs: Iterable[str | Tracker]) -> list[Tracker]:
    """Make a tracker for each ``KIND:TARGET`` spec (``tensorboard:DIR``, ``mlflow:URI``).

    An item that is already a :class:`Tracker` (an object of one's own with ``spec``,
    ``log_record``, ``log_collection`` and ``close``) is kept as it is, so that a
    caller such as the Python API can take both.

    Raises
    ------
    TrackingError
        A spec without ``:`` or a target, an unknown kind, or the ``[tracking]`` extra
        not installed (the message names it).
    """
    trackers: list[Tracker] = []
    for spec in specs:
        if not isinstance(spec, str):
            if not isinstance(spec, Tracker):
                raise TrackingError(f"{spec!r}: not a KIND:TARGET string nor a Tracker")
            trackers.append(spec)
            continue
        kind, sep, target = spec.partition(":")
        if not sep or not target:
            raise TrackingError(
                f"{spec!r}: expected KIND:TARGET, e.g. tensorboard:runs/tb or mlflow:runs/mlruns"
            )
        if kind == "tensorboard":
            trackers.append(TensorBoardTracker(target, spec))
        elif kind == "mlflow":
            trackers.append(MLflowTracker(target, spec))
        else:
            raise TrackingError(f"{spec!r}: unknown tracker {kind!r} (one of {', '.join(KINDS)})")
    return trackers
