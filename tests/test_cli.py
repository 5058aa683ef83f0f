"""The installed ``fedstrata`` command as a user meets it: usage errors, exit codes, records.

Every test runs the console script from ``PATH`` in a subprocess, so a broken entry
point, a dependency that resolves differently (typer bundling its own click) or a
traceback reaching the terminal fails here.
"""

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.broker.conftest import default_sigint

ROOT = Path(__file__).resolve().parents[1]
EXE = shutil.which("fedstrata")

TINY = """\
name: tiny
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}, partition: {kind: iid}}
topology: {clients: {count: 3, link: {latency: 0.01}}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 5, deadline_s: 5}
"""


def fedstrata(*args, timeout=120, cwd=None):
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    return subprocess.run(
        [EXE, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def no_traceback(res):
    assert "Traceback" not in res.stdout + res.stderr, res.stderr


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "Usage: fedstrata"),
        (("run",), "Missing argument 'SCENARIO'"),
        (("validate",), "Missing argument"),
        (("run", "x.yaml", "--seed", "abc"), "Invalid value for '--seed'"),
        (("run", "x.yaml", "--seed", "-3"), "Invalid value for '--seed'"),
        (("run", "x.yaml", "--bogus-flag"), "No such option: --bogus-flag"),
        (("frobnicate",), "No such command 'frobnicate'"),
        (("--bogus",), "No such option: --bogus"),
        (("cluster", "--n-init", "many"), "Invalid value for '--n-init'"),
        (("cluster", "--algorithm", "bogus"), "error: unknown algorithm 'bogus'"),
        (
            ("cluster", "--algorithm", "fmcsc"),
            "error: fmcsc runs only as a federation: write a scenario with algorithm.name: "
            "fmcsc and use fedstrata run",
        ),
        (("cluster", "--dataset", "bogus"), "error: unknown dataset 'bogus'"),
        (("cluster", "--m", "0.5"), "error: HKMVFC: parameter 'm' must be > 1.0, got 0.5"),
        (
            ("cluster", "--algorithm", "fedhk-tucker", "--kernel", "type2"),
            "error: fedhk-tucker does not take --kernel (it takes --alpha, --m, --preset)",
        ),
        (("cluster", "--algorithm", "mvfcm", "--rank", "2"), "mvfcm does not take --rank"),
        (
            ("cluster", "--algorithm", "fedhk-parafac2", "--rank", "3"),
            "rank 3 is larger than view 0's dimension d_0=2",
        ),
    ],
)
def test_usage_errors_are_one_short_message_and_exit_2(args, needle):
    res = fedstrata(*args)
    no_traceback(res)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert needle in res.stdout + res.stderr


def test_version():
    from fedstrata import __version__

    res = fedstrata("--version")
    assert res.returncode == 0
    assert res.stdout.strip() == f"fedstrata {__version__}"


def test_help_exits_0():
    res = fedstrata("run", "--help")
    assert res.returncode == 0
    assert "--overwrite" in res.stdout


def test_out_pointing_at_a_file_is_a_usage_error(tiny, tmp_path):
    target = tmp_path / "afile"
    target.write_text("x")
    res = fedstrata("run", tiny, "--out", target, "--quiet")
    no_traceback(res)
    assert res.returncode == 2
    assert res.stderr.strip() == f"error: --out {target}: is a file, not a folder"


def test_out_that_cannot_be_created_is_a_usage_error(tiny, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    res = fedstrata("run", tiny, "--out", blocker / "sub", "--quiet")
    no_traceback(res)
    assert res.returncode == 2
    assert res.stderr.startswith(f"error: --out {blocker / 'sub'}: cannot create the folder")
    assert len(res.stderr.strip().splitlines()) == 1


def test_missing_scenario_file_exits_1_with_one_line(tmp_path):
    missing = tmp_path / "nope.yaml"
    for cmd in ("validate", "run"):
        res = fedstrata(cmd, missing, *(["--out", tmp_path / "o"] if cmd == "run" else []))
        no_traceback(res)
        assert res.returncode == 1
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{missing}:"), lines


def test_run_writes_a_complete_record_with_provenance(tiny, tmp_path):
    out = tmp_path / "rec"
    res = fedstrata("run", tiny, "--out", out, "--quiet", "--seed", "7")
    no_traceback(res)
    assert res.returncode == 0, res.stderr
    names = {p.name for p in out.iterdir()}
    assert {"scenario.yaml", "summary.json", "rounds.csv", "labels.csv", "model.npz"} <= names
    summary = json.loads((out / "summary.json").read_text())
    from fedstrata import __version__

    assert summary["fedstrata_version"] == __version__
    assert summary["seed"] == 7
    assert summary["command"].startswith("fedstrata run ")
    assert "--seed 7" in summary["command"]
    assert len(summary["scenario_hash"]) == 64
    assert summary["status"] in ("converged", "round_limit")
    # the resolved scenario reproduces the run: same hash, same record
    again = tmp_path / "again"
    res2 = fedstrata("run", out / "scenario.yaml", "--out", again, "--quiet")
    assert res2.returncode == 0, res2.stderr
    s2 = json.loads((again / "summary.json").read_text())
    assert s2["scenario_hash"] == summary["scenario_hash"]
    assert (again / "labels.csv").read_text() == (out / "labels.csv").read_text()


def test_a_folder_holding_another_run_is_refused_unless_overwrite(tiny, tmp_path):
    out = tmp_path / "rec"
    assert fedstrata("run", tiny, "--out", out, "--quiet").returncode == 0
    # the same run again is fine (same scenario and seed: the same record)
    assert fedstrata("run", tiny, "--out", out, "--quiet").returncode == 0
    res = fedstrata("run", tiny, "--out", out, "--quiet", "--seed", "1")
    no_traceback(res)
    assert res.returncode == 2
    assert res.stderr.strip() == (
        f"error: --out {out}: the folder holds another run; pass --overwrite to replace it "
        "or choose another folder"
    )
    assert json.loads((out / "summary.json").read_text())["seed"] == 0  # untouched
    (out / "events.jsonl").write_text("stale\n")  # a file of the old run
    res = fedstrata("run", tiny, "--out", out, "--quiet", "--seed", "1", "--overwrite")
    assert res.returncode == 0, res.stderr
    assert json.loads((out / "summary.json").read_text())["seed"] == 1
    assert not (out / "events.jsonl").exists()  # old and new files never mix


def test_overwrite_never_deletes_files_that_are_not_records(tiny, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    res = fedstrata("run", tiny, "--out", out, "--quiet", "--overwrite")
    assert res.returncode == 2
    assert "not a fedstrata run (thesis.tex)" in res.stderr
    assert (out / "thesis.tex").read_text() == "precious"


def test_internal_error_is_one_line_exit_3_and_a_trace_file(tiny, tmp_path):
    code = (
        "import sys\n"
        "import fedstrata.scenarios.run as r\n"
        "def boom(*a, **k):\n"
        "    raise ZeroDivisionError('planted')\n"
        "r.run_scenario = boom\n"
        "from fedstrata.cli import main\n"
        f"sys.argv = ['fedstrata', 'run', {str(tiny)!r}, '--out', {str(tmp_path / 'o')!r}]\n"
        "main()\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    no_traceback(res)
    assert res.returncode == 3
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("internal error: ZeroDivisionError: planted -- this is a bug")
    trace = Path(lines[0].rsplit("full trace in ", 1)[1])
    assert "ZeroDivisionError: planted" in trace.read_text()
    trace.unlink()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_leaves_a_valid_interrupted_record(tmp_path, sig):
    sc = tmp_path / "long.yaml"
    sc.write_text(
        "name: long\n"
        "data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 200}}\n"
        "topology: {tiers: [{name: fog, count: 5}], clients: {count: 100}}\n"
        "algorithm: {center_update: exact}\n"
        "protocol: {rule: sum, rounds: 100000, tol: 0.0, deadline_s: 5}\n"
    )
    out = tmp_path / "o"
    proc = subprocess.Popen(
        [EXE, "run", str(sc), "--out", str(out), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    deadline = time.monotonic() + 60

    def staged() -> bool:  # the record is staged in a hidden folder until it is complete
        return any(out.glob(".fedstrata-stage-*/scenario.yaml"))

    while not staged() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert staged(), "the run never started its record"
    time.sleep(2.0)  # well inside the simulation
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert "Traceback" not in stderr
    assert proc.returncode == 130, stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert summary["reason"].startswith("interrupted at virtual time")
    assert 0 < summary["rounds"] < 100000
    assert "interrupted" in stdout


@pytest.mark.parametrize(
    "algorithm", ["e-fkmvc", "fedhk-parafac2", "fedhk-tucker", "fedhk-mvc-person"]
)
def test_cluster_runs_the_tensor_family(algorithm):
    res = fedstrata("cluster", "--algorithm", algorithm, "--seed", "1", "--json")
    no_traceback(res)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["algorithm"] == algorithm and out["n_samples"] == 10_000
    assert 0.0 <= out["ari"] <= 1.0 and len(out["view_weights"]) == 2


def test_cluster_preset_reaches_the_estimator():
    # the paper's PARAFAC2 rank is capped at a view's 2 features, below the 4 clusters;
    # the real-data preset's rank holds every cluster (the tensor paper's §6.1 shapes)
    argv = ("cluster", "--algorithm", "fedhk-parafac2", "--seed", "1", "--json")
    paper = fedstrata(*argv, "--preset", "paper")
    real = fedstrata(*argv, "--preset", "real-data")
    assert paper.returncode == 0 and real.returncode == 0, paper.stderr + real.stderr
    assert json.loads(paper.stdout)["ari"] < 0.9 < json.loads(real.stdout)["ari"]


def test_cluster_refuses_a_preset_it_cannot_take():
    res = fedstrata("cluster", "--algorithm", "mvkm-ed", "--preset", "real-data")
    no_traceback(res)
    assert res.returncode == 2 and "mvkm-ed does not take --preset" in res.stderr
    res = fedstrata("cluster", "--algorithm", "e-fkmvc", "--preset", "tuned")
    no_traceback(res)
    assert res.returncode == 2 and "'paper', 'real-data'" in res.stderr
