"""``--track``: what a run, a sweep and a study send to TensorBoard and MLflow, read back.

The event files are read with a TFRecord reader written here (tensorboardX only
writes) and MLflow through ``MlflowClient`` on a local file store; every expectation
comes from the record the run wrote (rounds.csv, summary.json, scenario.yaml), never
from fedstrata.tracking.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

EXE = shutil.which("fedstrata")


def _require(module: str, extra: str = "tracking") -> None:
    """Skip without the extra, naming it; under CI that is a failure."""
    try:
        __import__(module)
    except ImportError as exc:
        reason = f'{module} is missing: pip install -e ".[{extra}]" ({exc})'
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {reason}", pytrace=False)
        pytest.skip(reason)


# two tiers, loss and a dropout: the rounds have fog rows and participation that moves
TINY = """\
name: track-tiny
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}, partition: {kind: iid}}
topology:
  tiers: [{name: fog, count: 2, link: {latency: 0.005, bandwidth_mbps: 50}}]
  clients: {count: 4, link: {latency: 0.01, loss: 0.05}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 5, deadline_s: 5, quorum: 0.5}
faults: {dropout: 0.1}
"""


def fedstrata(*args: object, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [EXE, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


# --- reading back -----------------------------------------------------------------


def read_events(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files under ``logdir``: tag -> [(step, value)], in order.

    TFRecord framing: u64 length, u32 masked CRC, the Event, u32 masked CRC.
    """
    from tensorboardX.proto import event_pb2

    scalars: dict[str, list[tuple[int, float]]] = {}
    files = sorted(logdir.glob("events.out.tfevents.*"))
    assert files, f"no event file in {logdir}"
    for path in files:
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack_from("<Q", data, pos)
            pos += 12
            event = event_pb2.Event.FromString(data[pos : pos + length])
            pos += length + 4
            for v in event.summary.value:
                if v.HasField("simple_value"):
                    scalars.setdefault(v.tag, []).append((event.step, v.simple_value))
    return scalars


def rounds_table(folder: Path) -> list[dict[str, str]]:
    with (folder / "rounds.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def expected_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """What the docs promise from rounds.csv: cloud columns bare, other tiers prefixed."""
    want: dict[str, list[tuple[int, float]]] = {}
    for row in rounds_table(folder):
        prefix = "" if row["tier"] == "cloud" else f"{row['tier']}/"
        if row["sub"] not in ("", "0"):
            prefix += f"sub{row['sub']}/"
        for col, cell in row.items():
            if col in ("round", "tier", "phase", "sub") or cell == "":
                continue
            if cell in ("True", "False"):
                value = float(cell == "True")
            else:
                try:
                    value = float(cell)
                except ValueError:
                    continue
            want.setdefault(prefix + col, []).append((int(row["round"]), value))
    return want


def flat_scenario(folder: Path) -> dict[str, str]:
    """scenario.yaml as dotted keys; text as is, anything else as JSON."""
    out: dict[str, str] = {}

    def walk(value: object, key: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, v in enumerate(value):
                walk(v, f"{key}.{i}")
        else:
            out[key] = value if isinstance(value, str) else json.dumps(value)

    walk(yaml.safe_load((folder / "scenario.yaml").read_text()), "")
    return out


def mlflow_client(store: Path):
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3: the file store opt-in
    return MlflowClient(tracking_uri=store.resolve().as_uri())


def runs_of(client, experiment: str) -> list:
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no MLflow experiment {experiment!r}"
    return client.search_runs([exp.experiment_id])


def assert_same_series(got: list[tuple[int, float]], want: list[tuple[int, float]], tag: str):
    assert [s for s, _ in got] == [s for s, _ in want], tag
    for (_, a), (_, b) in zip(got, want, strict=True):
        # event files hold float32
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6), (tag, a, b)


# --- fedstrata run ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _require("tensorboardX")
    _require("mlflow")
    work = tmp_path_factory.mktemp("track-run")
    (work / "tiny.yaml").write_text(TINY)
    res = fedstrata(
        "run", "tiny.yaml", "--out", "rec", "--quiet", "--no-plots",
        "--track", "tensorboard:tb", "--track", "mlflow:mlruns",
        cwd=work,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return work


@pytest.mark.slow
def test_run_scalars_in_tensorboard_equal_rounds_csv(tracked_run: Path) -> None:
    rec = tracked_run / "rec"
    got = read_events(tracked_run / "tb" / "rec")
    want = expected_scalars(rec)
    assert {"ari", "objective", "bytes", "fog/participants", "fog/bytes"} <= set(want)
    for tag, series in want.items():
        assert_same_series(got.get(tag, []), series, tag)
    summary = json.loads((rec / "summary.json").read_text())
    assert got["summary/metrics.ari"] == [
        (summary["rounds"], pytest.approx(summary["metrics"]["ari"]))
    ]
    assert got["summary/bytes_total"][0][1] == pytest.approx(summary["bytes_total"], rel=1e-6)


@pytest.mark.slow
def test_run_in_mlflow_params_metrics_and_record(tracked_run: Path) -> None:
    rec = tracked_run / "rec"
    client = mlflow_client(tracked_run / "mlruns")
    (run,) = runs_of(client, "track-tiny")
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "rec"
    assert run.data.params == flat_scenario(rec)
    assert run.data.params["topology.tiers.0.name"] == "fog"
    for tag, series in expected_scalars(rec).items():
        history = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, tag)]
        assert history == [(s, pytest.approx(v)) for s, v in series], tag
    summary = json.loads((rec / "summary.json").read_text())
    final = client.get_metric_history(run.info.run_id, "summary/metrics.ari")
    assert [(m.step, m.value) for m in final] == [(summary["rounds"], summary["metrics"]["ari"])]
    assert run.data.tags["fedstrata.status"] == summary["status"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "record")}
    assert {"record/summary.json", "record/rounds.csv", "record/scenario.yaml"} <= artifacts
    local = Path(client.download_artifacts(run.info.run_id, "record/summary.json"))
    assert json.loads(local.read_text()) == summary


MOSQUITTO = next(
    (p for p in (shutil.which("mosquitto"), "/usr/sbin/mosquitto") if p and Path(p).exists()),
    None,
)


@pytest.mark.slow
@pytest.mark.broker
def test_mqtt_run_is_tracked_from_its_record(tmp_path: Path) -> None:
    """--transport mqtt (a private Mosquitto): the same params and rounds as its record."""
    _require("mlflow")
    _require("aiomqtt", "mqtt")
    if MOSQUITTO is None:
        if os.environ.get("CI"):
            pytest.fail("mosquitto is missing on CI")
        pytest.skip("mosquitto is not installed")
    (tmp_path / "flat.yaml").write_text(
        "name: track-mqtt\n"
        "data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}}\n"
        "topology: {clients: {count: 3, link: {latency: 0.01}}}\n"
        "algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}\n"
        "protocol: {rule: sum, rounds: 4, deadline_s: 5, quorum: 1.0}\n"
    )
    res = fedstrata(
        "run", "flat.yaml", "--transport", "mqtt", "--out", "rec", "--quiet", "--no-plots",
        "--track", "mlflow:ml",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    rec = tmp_path / "rec"
    client = mlflow_client(tmp_path / "ml")
    (run,) = runs_of(client, "track-mqtt")
    assert run.data.tags["fedstrata.transport"] == "mqtt"
    assert run.data.params == flat_scenario(rec)
    for tag in ("ari", "bytes", "participants"):
        history = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, tag)]
        assert history == [(s, pytest.approx(v)) for s, v in expected_scalars(rec)[tag]], tag


# --- sweep and study --------------------------------------------------------------


@pytest.mark.slow
def test_sweep_logs_each_run_under_a_parent(tmp_path: Path) -> None:
    _require("tensorboardX")
    _require("mlflow")
    (tmp_path / "tiny.yaml").write_text(TINY)
    res = fedstrata(
        "sweep", "tiny.yaml", "--grid", "faults.dropout=0,0.2", "--out", "sw", "--quiet",
        "--track", "mlflow:mlruns", "--track", "tensorboard:tb",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    client = mlflow_client(tmp_path / "mlruns")
    runs = runs_of(client, "sw")
    (parent,) = [r for r in runs if r.info.run_name == "sw"]
    children = sorted(
        (r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id),
        key=lambda r: r.info.run_name,
    )
    names = [r.info.run_name for r in children]
    assert names == ["sw/runs/faults.dropout=0.2/rep-0", "sw/runs/faults.dropout=0/rep-0"]
    for child in children:
        rec = tmp_path / child.info.run_name
        assert child.data.params == flat_scenario(rec)
        ari = [(m.step, m.value) for m in client.get_metric_history(child.info.run_id, "ari")]
        assert ari == [(s, pytest.approx(v)) for s, v in expected_scalars(rec)["ari"]]
        got = read_events(tmp_path / "tb" / child.info.run_name)
        assert_same_series(got["ari"], expected_scalars(rec)["ari"], "ari")
    tables = {a.path for a in client.list_artifacts(parent.info.run_id, "collection")}
    assert {"collection/summary.csv", "collection/results.csv"} <= tables
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"


@pytest.mark.slow
def test_study_logs_every_variant_and_seed(tmp_path: Path) -> None:
    _require("mlflow")
    study = TINY.replace("name: track-tiny\n", "name: track-study\n") + (
        "study:\n  seeds: [0, 1]\n  variants:\n    sync: {}\n    drop: {faults: {dropout: 0.3}}\n"
    )
    (tmp_path / "st.yaml").write_text(study)
    res = fedstrata(
        "study", "st.yaml", "--out", "st", "--quiet", "--track", "mlflow:ml", cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    client = mlflow_client(tmp_path / "ml")
    runs = runs_of(client, "st")
    records = sorted(r.info.run_name for r in runs if "mlflow.parentRunId" in r.data.tags)
    assert records == ["st/drop/seed-0", "st/drop/seed-1", "st/sync/seed-0", "st/sync/seed-1"]
    for r in runs:
        if "mlflow.parentRunId" in r.data.tags:
            assert (
                r.data.params["faults.dropout"]
                == flat_scenario(tmp_path / r.info.run_name)["faults.dropout"]
            )
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"
    assert "collection/study.csv" in {
        a.path for a in client.list_artifacts(parent.info.run_id, "collection")
    }


# --- errors -----------------------------------------------------------------------


@pytest.mark.slow
def test_missing_extra_is_one_usage_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(TINY)
    # the extra "uninstalled": a None entry in sys.modules makes its import fail
    code = (
        "import sys; sys.modules['mlflow'] = None; sys.modules['mlflow.tracking'] = None\n"
        "from fedstrata.cli import main\n"
        "sys.argv = ['fedstrata', 'run', 'tiny.yaml', '--out', 'rec', '--track', 'mlflow:ml']\n"
        "main()\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert res.returncode == 2, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1
    assert "[tracking]" in errors[0] and "--track" in errors[0]
    assert not (tmp_path / "rec").exists()  # refused before the run


@pytest.mark.slow
def test_bad_spec_and_failing_store(tmp_path: Path) -> None:
    _require("mlflow")
    (tmp_path / "tiny.yaml").write_text(TINY)
    res = fedstrata("run", "tiny.yaml", "--track", "wandb:proj", cwd=tmp_path)
    assert res.returncode == 2
    assert "unknown tracker 'wandb'" in res.stderr
    # a store MLflow cannot use (a file where its folder goes): refused before the run
    (tmp_path / "blocked").write_text("not a folder")
    res = fedstrata("run", "tiny.yaml", "--out", "rec", "--track", "mlflow:blocked", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "'mlflow:blocked': cannot use the MLflow store" in res.stderr
    assert not (tmp_path / "rec").exists()


def test_sub_round_and_text_cells(tmp_path: Path) -> None:
    """HierFAVG fog sub-rounds get their own tags; text and empty cells are left out."""
    from fedstrata.tracking import round_scalars

    (tmp_path / "rounds.csv").write_text(
        "round,iteration,tier,phase,sub,ok,bytes,ari,secure_failure\n"
        "1,,fog,iter,0,True,10,,\n"
        "1,,fog,iter,1,False,20,,3 clients shared keys\n"
        "1,1,cloud,iter,0,True,30,0.5,\n"
    )
    assert round_scalars(tmp_path) == [
        (1, {"fog/ok": 1.0, "fog/bytes": 10.0}),
        (1, {"fog/sub1/ok": 0.0, "fog/sub1/bytes": 20.0}),
        (1, {"iteration": 1.0, "ok": 1.0, "bytes": 30.0, "ari": 0.5}),
    ]


@pytest.mark.slow
def test_a_tracker_failing_after_the_run_keeps_the_record(tmp_path: Path) -> None:
    _require("tensorboardX")
    (tmp_path / "tiny.yaml").write_text(TINY)
    (tmp_path / "tb").mkdir()
    (tmp_path / "tb" / "rec").write_text("a file where the run's event folder goes")
    res = fedstrata(
        "run", "tiny.yaml", "--out", "rec", "--quiet", "--no-plots", "--track", "tensorboard:tb",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 1, res.stderr
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith("error: --track tensorboard:tb: ")
    assert line.endswith("(the record itself is complete)")
    summary = json.loads((tmp_path / "rec" / "summary.json").read_text())
    assert summary["status"] in ("converged", "round_limit")


def test_specs_and_tracker_objects() -> None:
    from fedstrata.tracking import TrackingError, trackers_from_specs

    class Mine:
        spec = "mine"

        def log_record(self, folder, *, collection=None):
            pass

        def log_collection(self, folder):
            pass

        def close(self):
            pass

    mine = Mine()
    assert trackers_from_specs([mine]) == [mine]
    for bad in (["tensorboard"], ["mlflow:"], ["wandb:x"], [object()]):
        with pytest.raises(TrackingError):
            trackers_from_specs(bad)
