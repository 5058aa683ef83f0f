"""Batched cohorts change nothing a record shows: the same labels, rounds and bytes.

The simulator computes the children of each parent in one batched call by default
(:class:`fedstrata.nodes.cohort.Cohort`) and passes unsigned messages unpacked
(:class:`fedstrata.wire.Unpacked`); ``--no-batch`` is the per-client reference path,
every message packed. Every example scenario, every golden case through the reference path (its record
must equal the one captured before batching existed), and a randomized set of small
scenarios with faults, every protocol kind, secure aggregation, compression and every
algorithm family give
byte-identical ``labels.csv``, ``rounds.csv`` and bytes on both paths.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fedstrata.nodes.cohort import Cohort
from fedstrata.scenarios.loader import load_scenario, parse_scenario
from fedstrata.scenarios.run import run_scenario
from tests.scenarios.test_golden_records import ALL, _golden, run_case

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "scenarios").glob("*.yaml"))


def _record(folder: Path) -> dict[str, object]:
    summary = json.loads((folder / "summary.json").read_text())
    return {
        "labels": hashlib.sha256((folder / "labels.csv").read_bytes()).hexdigest(),
        "rounds": hashlib.sha256((folder / "rounds.csv").read_bytes()).hexdigest(),
        "bytes": (summary["payload_bytes"], summary["bytes_total"]),
        "status": (summary["status"], summary["rounds"]),
    }


def _both(sc, tmp_path: Path, counts: dict[str, int] | None = None):
    """The record of ``sc`` batched and on the per-client path."""
    out = {}
    for batch in (True, False):
        folder = tmp_path / f"batch-{batch}"
        run_scenario(sc, folder, plots=False, progress=False, overwrite=True, batch=batch)
        out[batch] = _record(folder)
    return out[True], out[False]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_gives_the_same_record_batched_and_per_client(path, tmp_path):
    batched, own = _both(load_scenario(path), tmp_path)
    assert batched == own


SUMMED = sorted(  # cases whose clients send rule-sum statistics: the batched ones
    name
    for name, doc in ALL.items()
    if not name.startswith("paper-deep") and doc.get("protocol", {}).get("rule", "sum") == "sum"
)


@pytest.mark.parametrize("name", SUMMED)
def test_the_per_client_path_still_gives_the_golden_record(name, tmp_path, monkeypatch):
    """The default (batched) path is held to these records by test_golden_records."""
    import fedstrata.scenarios.run as run

    original = run.simulate
    monkeypatch.setattr(run, "simulate", lambda *a, **k: original(*a, **{**k, "batch": False}))
    want = _golden()["sim"][name]
    got = run_case(ALL[name], tmp_path / "run", "sim")
    want.pop("rounds_timing_free", None)
    got.pop("rounds_timing_free", None)
    assert got == want


_KINDS = ["sync", "async", "buffered", "adaptive"]
_FAMILIES = ["hk-mvfc", "mvfcm", "mvkm-ed", "e-fkmvc"]


def _scenario(
    kind, family, fogs, dropout, loss, crash, sample, seed, update, secure="none", scheme="none"
) -> str:
    doc = {
        "name": "batched",
        "seed": seed,
        "data": {
            "dataset": "heat-kernel-synthetic",
            "params": {"n_per_cluster": 15},
            "partition": {"kind": "iid"},
        },
        "topology": {
            "tiers": [{"name": "fog", "count": fogs, "link": {"latency": 0.01}}],
            "clients": {
                "count": 12,
                "link": {
                    "latency": {"dist": "lognormal", "median": 0.02, "sigma": 0.5},
                    "loss": loss,
                },
            },
        },
        "algorithm": {"name": family, "n_clusters": 4},
        "protocol": {"kind": kind, "rounds": 4, "tol": 0.0, "deadline_s": 2.0},
        "faults": {"dropout": dropout},
        "output": {"plots": False},
    }
    if family == "hk-mvfc":
        doc["algorithm"]["center_update"] = update
    if secure != "none":  # unsigned: its messages travel unpacked on the batched path
        doc["privacy"] = {"secure_aggregation": secure}
    if scheme != "none":
        doc["protocol"]["compression"] = {"scheme": scheme}
    if kind == "buffered":
        doc["protocol"]["buffer_size"] = 3
    if sample:
        doc["protocol"]["sample"] = 0.5
    if crash:
        doc["faults"]["crashes"] = [{"node": "client-3", "at": 0.5, "restart_after": 0.7}]
    if fogs == 0:
        doc["topology"]["tiers"] = []
    return yaml.safe_dump(doc)


@settings(
    max_examples=16,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from(_KINDS),
    family=st.sampled_from(_FAMILIES),
    fogs=st.sampled_from([0, 1, 3]),
    dropout=st.sampled_from([0.0, 0.2]),
    loss=st.sampled_from([0.0, 0.05]),
    crash=st.booleans(),
    sample=st.booleans(),
    seed=st.integers(0, 1000),
    update=st.sampled_from(["paper", "exact"]),
    secure=st.sampled_from(["none", "none", "secagg", "secagg+"]),
    scheme=st.sampled_from(["none", "none", "float16", "qsgd"]),
)
def test_random_small_scenarios_give_the_same_record(
    tmp_path_factory, kind, family, fogs, dropout, loss, crash, sample, seed, update, secure, scheme
):
    text = _scenario(kind, family, fogs, dropout, loss, crash, sample, seed, update, secure, scheme)
    try:
        sc = parse_scenario(text)
    except Exception:  # a combination the schema refuses is not a case (not a skip: that
        assume(False)  # would end the whole test at the first refused example)
    batched, own = _both(sc, tmp_path_factory.mktemp("run"))
    assert batched == own


def test_a_cohort_batches_the_steps_it_is_given(monkeypatch, tmp_path):
    """Not a vacuous equality: in the batched run nearly every step comes from a batch."""
    made: list[Cohort] = []
    original = Cohort.__init__

    def init(self, *a, **k):
        original(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(Cohort, "__init__", init)
    sc = load_scenario(ROOT / "scenarios" / "edge-fog-cloud.yaml")
    run_scenario(sc, tmp_path / "run", plots=False, progress=False)
    batched = sum(c.batched for c in made)
    own = sum(c.own for c in made)
    assert made and batched > 10 * max(own, 1)


def test_no_batch_is_a_simulator_option_of_the_installed_command(tmp_path):
    path = str(ROOT / "scenarios" / "paper-flat-sum.yaml")
    bad = subprocess.run(
        ["fedstrata", "run", path, "--no-batch", "--transport", "mqtt"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "--no-batch is for the simulator" in bad.stderr
    outs = []
    for flags in ([], ["--no-batch"]):
        out = tmp_path / f"r{len(outs)}"
        done = subprocess.run(
            ["fedstrata", "run", path, "--quiet", "--no-plots", "--out", str(out), *flags],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        outs.append(_record(out))
    assert outs[0] == outs[1]


def test_batched_final_labels_are_each_clients_own(monkeypatch):
    """The clients' results (labels, memberships) are those of their own finish, bit for bit."""
    from fedstrata.plugins.multiview import StatisticsAlgorithm
    from fedstrata.scenarios.run import simulate

    given_out = []
    original = StatisticsAlgorithm.finish_batch

    def counted(self, learners, body):
        out = original(self, learners, body)
        given_out.append(sum(r is not None for r in out))
        return out

    monkeypatch.setattr(StatisticsAlgorithm, "finish_batch", counted)
    sc = load_scenario(ROOT / "scenarios" / "edge-fog-cloud.yaml")
    results = {}
    for batch in (True, False):
        fed, _, _ = simulate(sc, batch=batch)
        results[batch] = {
            node: r for node, r in fed.sim.results.items() if node.startswith("client")
        }
    assert sum(given_out) >= 0.9 * len(results[True])  # nearly all from a batch
    assert results[True].keys() == results[False].keys() and results[True]
    for node, got in results[True].items():
        want = results[False][node]
        for key in ("labels", "memberships"):
            assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape
            assert got[key].tobytes() == want[key].tobytes(), (node, key)
