"""`fedstrata compare DIR...`: N run records, time and bytes to a target ARI, energy proxy, plots.

The records are written by hand, so every expected value below is worked out
from the numbers in this file, not by the code under test.
"""

import json
import shutil
import subprocess

import pytest

from fedstrata.analysis.compare import (
    NotARunFolderError,
    RecordError,
    compare_many,
    parse_link_cost,
    plot_comparison,
)
from fedstrata.errors import ValidationError

EXE = shutil.which("fedstrata")
PNG = b"\x89PNG\r\n\x1a\n"
HEADER = (
    "round,iteration,tier,phase,sub,aggregators,participants,expected,ok,bytes,"
    "bytes_round,virtual_time_s,objective,ari,nmi,acc"
)


def summary(**over):
    s = {
        "scenario": "s",
        "scenario_hash": "abc",
        "seed": 1,
        "transport": "sim",
        "status": "converged",
        "reason": "done",
        "rounds": 3,
        "failed_rounds": 0,
        "bytes_up": 1500,
        "bytes_down": 1500,
        "bytes_total": 3000,
        "payload_bytes": {"up": 1000, "down": 1200, "total": 2200},
        "messages": 20,
        "messages_dropped": 0,
        "per_tier": {
            "cloud": {"bytes_up": 0, "bytes_down": 0, "bytes_total": 0},
            "edge": {"bytes_up": 1500, "bytes_down": 1500, "bytes_total": 3000},
        },
        "virtual_time_s": 0.8,
        "wall_time_s": 0.2,
        "metrics": {"acc": 1.0, "nmi": 1.0, "ari": 1.0},
        "metrics_reason": None,
    }
    s.update(over)
    return s


def row(rnd, tier, nbytes, t, ari="", objective="", phase="iter"):
    # round,iteration,tier,phase,sub,aggregators,participants,expected,ok,bytes,
    # bytes_round,virtual_time_s,objective,ari,nmi,acc
    it = "" if ari == "" else rnd
    return f"{rnd},{it},{tier},{phase},0,1,3,3,True,{nbytes},0,{t},{objective},{ari},{ari},{ari}"


def write_run(folder, summ, rounds, labels=((0, 1), (1, 2), (2, 0)), header=HEADER):
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(summ))
    (folder / "rounds.csv").write_text("\n".join([header, *rounds]) + "\n")
    lines = ["client,index,label"] + [f"client-0,{i},{lab}" for i, lab in labels]
    (folder / "labels.csv").write_text("\n".join(lines) + "\n")
    return folder


# Run "fast": simulated; the root first reaches ARI >= 0.99 in round 2, at virtual
# 0.5 s and 1,900 cumulative bytes. The fog row with ARI 1.0 before it is not the root's.
FAST = [
    row(0, "cloud", 500, 0.1, phase="setup"),
    row(1, "fog", 800, 0.2, ari="1.0"),
    row(1, "cloud", 1200, 0.3, ari="0.5", objective="2.5"),
    row(2, "cloud", 1900, 0.5, ari="0.995", objective="2.0"),
    row(3, "cloud", 2600, 0.7, ari="1.0", objective="nan"),
]
# Run "slow": over MQTT (wall clock); best ARI 0.9, never 0.99.
SLOW = [
    row(0, "cloud", 700, 0.05, phase="setup"),
    row(1, "cloud", 1400, 1.25, ari="0.6"),
    row(2, "cloud", 2100, 2.5, ari="0.9"),
    row(3, "cloud", 2800, 3.75, ari="0.85"),
]
SLOW_SUMMARY = summary(
    transport="mqtt",
    status="round_limit",
    virtual_time_s=None,
    wall_time_s=4.0,
    bytes_total=3500,
    per_tier={
        "cloud": {"bytes_up": 500, "bytes_down": 500, "bytes_total": 1000},
        "edge": {"bytes_up": 1000, "bytes_down": 1000, "bytes_total": 2000},
        "fog": {"bytes_up": 250, "bytes_down": 250, "bytes_total": 500},
    },
    metrics={"acc": 0.9, "nmi": 0.8, "ari": 0.85},
)


@pytest.fixture
def two(tmp_path):
    fast = write_run(tmp_path / "fast", summary(), FAST)
    slow = write_run(tmp_path / "slow", SLOW_SUMMARY, SLOW, labels=((0, 1), (1, 0), (2, 0)))
    return fast, slow


def by_field(cmp):
    return {r["field"]: r for r in cmp["rows"]}


def test_time_and_bytes_to_target_and_energy(two):
    cmp = compare_many(two, link_cost={"edge": 1.0, "fog": 0.3, "cloud": 0.1})
    fast, slow = cmp["runs"]
    assert (fast["name"], slow["name"]) == ("fast", "slow")
    assert (fast["clock"], slow["clock"]) == ("virtual", "wall")
    assert fast["target"] == {
        "reached": True,
        "round": 2,
        "time_s": 0.5,
        "bytes": 1900,
        "reason": None,
    }
    assert slow["target"] == {
        "reached": False,
        "round": None,
        "time_s": None,
        "bytes": None,
        "reason": "never reached (best ARI 0.9)",
    }
    # fast: 0 x 0.1 + 3000 x 1.0; slow: 1000 x 0.1 + 2000 x 1.0 + 500 x 0.3
    assert fast["energy_proxy"]["total"] == pytest.approx(3000.0)
    assert slow["energy_proxy"]["total"] == pytest.approx(2250.0)
    assert slow["energy_proxy"]["per_tier"] == pytest.approx(
        {"cloud": 100.0, "edge": 2000.0, "fog": 150.0}
    )
    assert cmp["link_cost"] == {
        "unit": "relative cost per byte",
        "default": 1.0,
        "tiers": {"edge": 1.0, "fog": 0.3, "cloud": 0.1},
    }
    rows = by_field(cmp)
    assert rows["target"]["values"] == ["reached", "never reached (best ARI 0.9)"]
    assert rows["target.time_s"]["values"] == [0.5, None]
    assert rows["target.bytes"]["values"] == [1900, None]
    assert rows["energy_proxy"]["values"] == pytest.approx([3000.0, 2250.0])
    assert rows["ari"]["values"] == [1.0, 0.85] and not rows["ari"]["same"]
    assert rows["per_tier.fog.bytes_total"]["values"] == [None, 500]
    assert rows["payload_bytes.total"]["same"] and rows["seed"]["same"]
    assert rows["clock"]["values"] == ["virtual", "wall"]
    # labels against the first run's: index 1 relabelled 2 -> 0
    assert cmp["labels"] == {
        "reference": "fast",
        "runs": [
            {"rows": 3, "identical": True, "differing_rows": 0, "raw_differing_rows": 0},
            {"rows": 3, "identical": False, "differing_rows": 1, "raw_differing_rows": 1},
        ],
    }


def test_default_costs_give_the_bytes_and_a_lower_target(two):
    cmp = compare_many(two, target_ari=0.5)
    fast, slow = cmp["runs"]
    assert fast["energy_proxy"]["total"] == 3000  # every tier at 1.0: bytes_total
    assert slow["energy_proxy"]["total"] == 3500
    assert (fast["target"]["round"], fast["target"]["time_s"], fast["target"]["bytes"]) == (
        1,
        0.3,
        1200,
    )
    assert (slow["target"]["round"], slow["target"]["time_s"], slow["target"]["bytes"]) == (
        1,
        1.25,
        1400,
    )
    assert cmp["target_ari"] == 0.5 and cmp["link_cost"]["tiers"] == {}


def test_no_ari_column_and_no_model(tmp_path, two):
    bare_header = "round,tier,phase,bytes,virtual_time_s,objective"
    bare = write_run(
        tmp_path / "bare",
        summary(),
        ["0,cloud,setup,500,0.1,", "1,cloud,iter,900,0.2,1.5"],
        header=bare_header,
    )
    why = "no model: the setup round never completed"
    none = write_run(
        tmp_path / "none",
        summary(
            status="stalled",
            metrics={"acc": None, "nmi": None, "ari": None},
            metrics_reason=why,
            per_tier=None,
        ),
        [row(0, "cloud", 300, 5.0, phase="setup")],
        labels=((0, ""), (1, ""), (2, "")),
    )
    cmp = compare_many([two[0], bare, none])
    reasons = [r["target"]["reason"] for r in cmp["runs"]]
    assert reasons == [None, "no ari column in rounds.csv", why]
    assert by_field(cmp)["target"]["values"] == ["reached", "no ari column in rounds.csv", why]
    assert cmp["runs"][2]["energy_proxy"] == {
        "total": None,
        "per_tier": None,
        "reason": "no per_tier in summary.json",
    }
    other = write_run(tmp_path / "other", summary(metrics_reason=None), [row(0, "cloud", 300, 5.0)])
    cmp = compare_many([two[0], other])
    assert cmp["runs"][1]["target"]["reason"].startswith("no model")


def test_json_is_strict(two):
    cmp = compare_many(two)
    text = json.dumps(cmp, allow_nan=False)  # the NaN objective never leaks out
    assert json.loads(text) == cmp


def test_names_clash_and_many_runs(tmp_path):
    a = write_run(tmp_path / "x" / "run", summary(), FAST)
    b = write_run(tmp_path / "y" / "run", summary(), FAST)
    c = write_run(tmp_path / "c", summary(), FAST)
    cmp = compare_many([a, b, c, a])
    assert [r["name"] for r in cmp["runs"]] == [str(a), str(b), "c", f"{a} (2)"]
    assert all(r["same"] for r in cmp["rows"])
    assert all(lab["identical"] for lab in cmp["labels"]["runs"])


def test_parse_link_cost():
    assert parse_link_cost(None) == {} and parse_link_cost(" ") == {}
    assert parse_link_cost("edge=1.0, fog = 0.3,cloud=0.1") == {
        "edge": 1.0,
        "fog": 0.3,
        "cloud": 0.1,
    }
    for bad, msg in [
        ("edge", "not TIER=COST"),
        ("=1", "not TIER=COST"),
        ("edge=x", "not a number"),
        ("edge=-1", ">= 0"),
        ("edge=inf", ">= 0"),
        ("edge=nan", ">= 0"),
        ("edge=1,edge=2", "twice"),
    ]:
        with pytest.raises(ValidationError, match=msg):
            parse_link_cost(bad)


def test_bad_records(tmp_path, two):
    with pytest.raises(ValidationError, match="'egde' is in none of the records"):
        compare_many(two, link_cost={"egde": 1.0})
    norounds = write_run(tmp_path / "norounds", summary(), FAST)
    (norounds / "rounds.csv").unlink()
    with pytest.raises(RecordError, match=r"no rounds\.csv"):
        compare_many([two[0], norounds])
    nobytes = write_run(tmp_path / "nobytes", summary(), ["0,cloud,0.1"], header="round,tier,t")
    with pytest.raises(RecordError, match="no 'bytes' column"):
        compare_many([two[0], nobytes])
    badnum = write_run(tmp_path / "badnum", summary(), [row(1, "cloud", "lots", 0.1)])
    with pytest.raises(RecordError, match=r"rounds\.csv:2: bytes 'lots' is not an integer"):
        compare_many([two[0], badnum])
    short = write_run(tmp_path / "short", summary(), ["1,,cloud"])
    with pytest.raises(RecordError, match=r"rounds\.csv:2: expected 16 columns, got 3"):
        compare_many([two[0], short])
    # a folder that is no run folder is reported before a damaged record
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotARunFolderError, match="not a run folder"):
        compare_many([norounds, tmp_path / "empty"])


def test_plot_is_a_png(tmp_path, two):
    cmp = compare_many(two)
    for metric in ("ari", "objective"):
        out = tmp_path / f"{metric}.png"
        plot_comparison(cmp, out, metric=metric)
        assert out.read_bytes().startswith(PNG)
    with pytest.raises(ValidationError, match="metric"):
        plot_comparison(cmp, tmp_path / "x.png", metric="purity")


def cli(*args):
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, timeout=300)


def invoke(*args):
    """The command in this process (fast); exit codes as the installed command's."""
    from typer.testing import CliRunner

    from fedstrata.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def test_cli_table_json_and_errors(tmp_path, two):
    res = invoke("compare", *two, "--link-cost", "edge=1.0,fog=0.3,cloud=0.1", "--json")
    assert res.exit_code == 0, res.output
    cmp = json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert [r["energy_proxy"]["total"] for r in cmp["runs"]] == pytest.approx([3000, 2250])
    res = invoke("compare", *two, "--link-cost", "edge=1.0,fog=0.3,cloud=0.1")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("field"))
    assert "fast" in header and "slow" in header
    energy = next(line for line in lines if line.lstrip().startswith("energy_proxy"))
    assert "3,000" in energy and "2,250" in energy
    target = next(line for line in lines if line.lstrip().startswith("target (ari>=0.99)"))
    assert "reached" in target and "never reached" in target
    bytes_row = next(line for line in lines if line.lstrip().startswith("target.bytes"))
    assert "1,900" in bytes_row
    assert "edge=1, fog=0.3, cloud=0.1, 1 for other tiers" in res.stdout
    # usage errors: exit 2, one "Error:" line
    for args in (
        ["--link-cost", "edge=cheap"],
        ["--link-cost", "egde=1"],
        ["--metric", "purity"],
        ["--plot", tmp_path / "p.pdf"],
        ["--target-ari", "1.5"],
    ):
        res = invoke("compare", *two, *args)
        assert res.exit_code == 2, (args, res.output)
        assert sum(line.startswith("Error:") for line in res.stderr.splitlines()) == 1
    res = invoke("compare", two[0])
    assert res.exit_code == 2 and "at least two" in res.stderr
    (tmp_path / "empty").mkdir()
    res = invoke("compare", *two, tmp_path / "empty")
    assert res.exit_code == 2 and "not a run folder" in res.stderr
    res = invoke("compare", *two, "--plot", tmp_path / "nowhere" / "p.png")
    assert res.exit_code == 2 and "cannot write" in res.stderr
    (two[1] / "rounds.csv").unlink()
    res = invoke("compare", *two)
    assert res.exit_code == 1 and len(res.stderr.strip().splitlines()) == 1
    assert "no rounds.csv" in res.stderr


TINY = """\
name: {name}
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 40}}, partition: {{kind: iid}}}}
topology: {{clients: {{count: 3}}}}
algorithm: {{name: hk-mvfc, n_clusters: {c}, center_update: exact}}
protocol: {{rule: sum, rounds: 5, deadline_s: 10}}
"""


@pytest.mark.slow
def test_installed_compare_of_real_runs(tmp_path):
    """Two small simulated runs; 3 clusters on 4 classes never reach ARI 0.99."""
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    jobs = []
    for name, c in (("four", 4), ("three", 3)):
        sc = tmp_path / f"{name}.yaml"
        sc.write_text(TINY.format(name=name, c=c))
        cmd = [EXE, "run", sc, "--out", tmp_path / name, "--quiet", "--no-plots"]
        jobs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for job in jobs:
        _, stderr = job.communicate(timeout=120)
        assert job.returncode == 0, stderr.decode()
    runs = [tmp_path / "four", tmp_path / "three"]
    png = tmp_path / "cmp.png"
    res = cli("compare", *runs, "--plot", png, "--link-cost", "edge=0.5")
    assert res.returncode == 0, res.stderr
    header = next(line for line in res.stdout.splitlines() if line.lstrip().startswith("field"))
    assert "four" in header and "three" in header
    assert "never reached" in res.stdout
    assert png.read_bytes().startswith(PNG)
    cmp = compare_many(runs, link_cost={"edge": 0.5})
    four, three = cmp["runs"]
    assert four["target"]["reached"] and four["target"]["round"] >= 1
    assert 0 < four["target"]["bytes"] < by_field(cmp)["bytes_total"]["values"][0]
    assert three["target"]["reason"].startswith("never reached")
    # flat simulated runs: the edge tier carries every byte, the cloud's local hop none
    totals = by_field(cmp)["bytes_total"]["values"]
    assert [r["energy_proxy"]["total"] for r in cmp["runs"]] == pytest.approx(
        [0.5 * t for t in totals]
    )
