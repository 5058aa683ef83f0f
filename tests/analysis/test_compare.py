"""Two run records side by side (`compare_runs`), and `fedstrata compare` of a sim and an MQTT run.

The N-record comparison behind `fedstrata compare DIR...` is tested in
test_compare_many.py.
"""

import json
import shutil
import subprocess

import pytest

from fedstrata.analysis.compare import NotARunFolderError, RecordError, compare_runs

EXE = shutil.which("fedstrata")


def summary(**over):
    s = {
        "scenario": "s",
        "scenario_hash": "abc",
        "seed": 1,
        "transport": "sim",
        "status": "converged",
        "reason": "done",
        "rounds": 7,
        "failed_rounds": 0,
        "bytes_up": 1000,
        "bytes_down": 2000,
        "bytes_total": 3000,
        "messages": 20,
        "messages_dropped": 0,
        "per_tier": {
            "cloud": {"bytes_up": 0, "bytes_down": 0, "bytes_total": 0},
            "edge": {"bytes_up": 1000, "bytes_down": 2000, "bytes_total": 3000},
        },
        "virtual_time_s": 1.5,
        "wall_time_s": 0.2,
        "metrics": {"acc": 0.9, "nmi": 0.8, "ari": 0.7},
    }
    s.update(over)
    return s


def write_run(folder, summ, labels=((0, 1), (1, 2), (2, 0))):
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(summ))
    rows = ["client,index,label"] + [f"client-0,{i},{lab}" for i, lab in labels]
    (folder / "labels.csv").write_text("\n".join(rows) + "\n")
    return folder


def by_field(cmp):
    return {r["field"]: r for r in cmp["rows"]}


def test_identical_runs(tmp_path):
    a = write_run(tmp_path / "a", summary())
    b = write_run(tmp_path / "b", summary())
    cmp = compare_runs(a, b)
    assert all(r["same"] for r in cmp["rows"])
    assert cmp["labels"] == {
        "identical": True,
        "differing_rows": 0,
        "raw_differing_rows": 0,
        "rows_a": 3,
        "rows_b": 3,
    }
    rows = by_field(cmp)
    assert rows["per_tier.edge.bytes_total"]["a"] == 3000
    assert rows["acc"]["a"] == 0.9 and "payload_bytes.total" in rows


def test_sim_against_mqtt_fields_and_labels(tmp_path):
    a = write_run(tmp_path / "a", summary())
    mq = summary(
        transport="mqtt",
        bytes_up=1100,
        payload_bytes={"up": 900, "down": 1800, "total": 2700},
        virtual_time_s=None,
        per_tier={"cloud": {"bytes_up": 5, "bytes_down": 6, "bytes_total": 11}},
        broker_sys={"bytes_received": 1500, "bytes_sent": 2500},
    )
    b = write_run(tmp_path / "b", mq, labels=((0, 1), (1, 3), (3, 0)))
    cmp = compare_runs(a, b)
    rows = by_field(cmp)
    assert not rows["transport"]["same"] and rows["transport"]["b"] == "mqtt"
    assert rows["bytes_up"]["a"] == 1000 and rows["bytes_up"]["b"] == 1100
    assert rows["bytes_down"]["same"]
    assert rows["payload_bytes.total"] == {
        "field": "payload_bytes.total",
        "a": None,
        "b": 2700,
        "same": False,
    }
    assert rows["per_tier.edge.bytes_up"]["b"] is None
    assert rows["broker_sys.bytes_received"]["a"] is None
    assert rows["virtual_time_s"]["b"] is None
    # index 1 relabelled (3 for 2: a renaming), index 2 only in a, index 3 only in b
    assert cmp["labels"]["identical"] is False and cmp["labels"]["raw_differing_rows"] == 3
    assert cmp["labels"]["differing_rows"] == 2


def test_not_a_run_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    a = write_run(tmp_path / "a", summary())
    with pytest.raises(NotARunFolderError, match="not a run folder"):
        compare_runs(a, tmp_path / "empty")
    with pytest.raises(NotARunFolderError, match="not a folder"):
        compare_runs(tmp_path / "nowhere", a)


def test_missing_and_malformed_records(tmp_path):
    a = write_run(tmp_path / "a", summary())
    part = tmp_path / "partial"
    part.mkdir()
    (part / "scenario.yaml").write_text("name: x\n")
    with pytest.raises(RecordError, match=r"no summary\.json"):
        compare_runs(a, part)
    bad = write_run(tmp_path / "bad", summary())
    (bad / "summary.json").write_text("{not json")
    with pytest.raises(RecordError, match="not valid JSON"):
        compare_runs(a, bad)
    nolab = write_run(tmp_path / "nolab", summary())
    (nolab / "labels.csv").unlink()
    with pytest.raises(RecordError, match=r"no labels\.csv"):
        compare_runs(a, nolab)
    badlab = write_run(tmp_path / "badlab", summary())
    (badlab / "labels.csv").write_text("client,index,label\nclient-0,x,1\n")
    with pytest.raises(RecordError, match="not an integer"):
        compare_runs(a, badlab)


def cli(*args):
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_cli_exit_codes(tmp_path):
    a = write_run(tmp_path / "a", summary())
    (tmp_path / "empty").mkdir()
    res = cli("compare", a, tmp_path / "empty")
    assert res.returncode == 2 and "not a run folder" in res.stderr
    bad = write_run(tmp_path / "bad", summary())
    (bad / "summary.json").write_text("[]")
    res = cli("compare", a, bad)
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.stderr


TINY = """\
name: tiny-cmp
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}, partition: {kind: iid}}
topology: {clients: {count: 3}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 5, deadline_s: 10}
"""


@pytest.mark.slow
@pytest.mark.broker
def test_installed_compare_sim_against_mqtt(tmp_path):
    from typer.testing import CliRunner

    from fedstrata.cli import app
    from tests.broker.conftest import _need_mosquitto

    def invoke(*args):
        return CliRunner().invoke(app, [str(a) for a in args])

    _need_mosquitto()
    sc = tmp_path / "tiny.yaml"
    sc.write_text(TINY)
    jobs = []
    for transport in ("sim", "mqtt"):
        out = tmp_path / transport
        cmd = [EXE, "run", sc, "--transport", transport, "--out", out, "--quiet", "--no-plots"]
        jobs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for job in jobs:
        _, stderr = job.communicate(timeout=300)
        assert job.returncode == 0, stderr.decode()
    res = invoke("compare", tmp_path / "sim", tmp_path / "mqtt", "--json")
    assert res.exit_code == 0, res.output
    cmp = json.loads(res.stdout)
    rows = {r["field"]: r for r in cmp["rows"]}
    assert rows["transport"]["values"] == ["sim", "mqtt"]
    assert rows["status"]["same"] and rows["rounds"]["same"] and rows["ari"]["same"]
    assert rows["clock"]["values"] == ["virtual", "wall"]
    received = rows["broker_sys.bytes_received"]["values"][1]
    assert received >= rows["bytes_up"]["values"][1]
    sim, mqtt = cmp["runs"]
    assert sim["target"]["reached"] and mqtt["target"]["reached"]
    assert sim["target"]["round"] == mqtt["target"]["round"]
    assert cmp["labels"]["runs"][1]["identical"] is True
    res = invoke("compare", tmp_path / "sim", tmp_path / "mqtt")
    assert res.exit_code == 0 and "labels.csv" in res.stdout and "identical" in res.stdout
