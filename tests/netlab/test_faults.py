"""The lab's fault schedule and driver, and the round-by-round comparison (no namespaces)."""

from types import SimpleNamespace

import pytest
import yaml

from fedstrata.errors import ValidationError
from fedstrata.netlab.compare import RoundRow, per_round
from fedstrata.netlab.faultcompare import differences, round_table, waiting_round, with_faults
from fedstrata.netlab.faults import FaultDriver, LabFault, lab_faults, log_started
from fedstrata.netlab.lab import Lab
from fedstrata.netlab.measure import fault_actor
from fedstrata.scenarios.loader import load_scenario
from tests.netlab.fakes import FakeRunner

SCENARIO = """\
name: f
seed: 1
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 10}}
topology: {clients: {count: 3}}
algorithm: {name: hk-mvfc, n_clusters: 4}
faults:
  partitions: [{nodes: [client-1, client-2], start: 2.5, end: 4}, {nodes: [client-0], start: 1, end: 2}]
"""


def _scenario(tmp_path, text=SCENARIO):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return load_scenario(path, preflight=False)


def test_partitions_become_a_cut_and_a_heal_per_node_and_kills_are_added_in_time_order(tmp_path):
    faults = lab_faults(_scenario(tmp_path), {"client-2": 3.0})
    assert faults == [
        LabFault(1.0, "client-0", "cut"),
        LabFault(2.0, "client-0", "heal"),
        LabFault(2.5, "client-1", "cut"),
        LabFault(2.5, "client-2", "cut"),
        LabFault(3.0, "client-2", "kill"),
        LabFault(4.0, "client-1", "heal"),
        LabFault(4.0, "client-2", "heal"),
    ]


def test_a_kill_needs_a_time(tmp_path):
    with pytest.raises(ValidationError, match="at must be >= 0"):
        lab_faults(_scenario(tmp_path), {"client-0": -1.0})


def test_a_node_has_started_its_clock_once_its_log_says_connected(tmp_path):
    log = tmp_path / "client-0.txt"
    assert not log_started(log)
    log.write_text("warning: link faults act on the network\n")
    assert not log_started(log)
    log.write_text("client-0 (client, run id r): connected to mqtt://10.203.0.1:1883\n")
    assert log_started(log)


class _Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_each_fault_waits_for_its_own_node_clock(tmp_path):
    logs = {n: tmp_path / f"{n}.txt" for n in ("cloud", "client-0", "client-1")}
    done = []
    clock = _Clock()
    faults = [LabFault(0.5, "client-1", "heal"), LabFault(0.2, "client-1", "cut")]
    faults.append(LabFault(0.3, "client-0", "kill"))
    driver = FaultDriver(faults, done.append, logs, "cloud", clock=clock)
    assert [f.action for f in driver.faults] == ["cut", "kill", "heal"]  # sorted by time
    logs["client-1"].write_text("client-1 (client, run id r): connected to x\n")
    assert driver.step()
    clock.t = 100.25
    logs["cloud"].write_text("cloud (root, run id r): connected to x\n")
    assert driver.step()
    assert done == [LabFault(0.2, "client-1", "cut")]  # client-0 has no clock yet
    clock.t = 100.6  # client-1's heal due; client-0 starts now
    logs["client-0"].write_text("client-0 (client, run id r): connected to x\n")
    assert driver.step()
    assert done[1:] == [LabFault(0.5, "client-1", "heal")]
    clock.t = 100.9
    assert not driver.step()  # everything applied, every clock known
    assert done[2:] == [LabFault(0.3, "client-0", "kill")]
    rep = driver.report()
    assert [(r["action"], r["node_s"]) for r in rep] == [
        ("cut", 0.25),
        ("heal", 0.6),
        ("kill", pytest.approx(0.3)),
    ]
    # the root's clock started in the same poll as the cut
    assert [r["root_s"] for r in rep] == [0.0, 0.35, 0.65]
    assert driver.offsets() == {"client-0": 0.35, "client-1": -0.25, "cloud": 0.0}


def test_a_failed_action_is_reported_and_the_others_still_run(tmp_path):
    logs = {"c": tmp_path / "c.txt"}
    logs["c"].write_text("c (client, run id r): connected to x\n")

    def act(f):
        if f.action == "cut":
            raise RuntimeError("nft refused")

    driver = FaultDriver([LabFault(0, "c", "cut"), LabFault(0, "c", "heal")], act, logs, "c")
    assert not driver.step()
    assert len(driver.errors) == 1 and "nft refused" in driver.errors[0]
    assert len(driver.applied) == 2


def test_the_actor_cuts_both_ends_and_restores_the_shaped_loss():
    run = FakeRunner()
    lab = Lab(runner=run, prefix="fsl-42-")
    link = lab.link(lab.namespace("cloud"), lab.namespace("client-0"))
    lab.shape(link, 10, 0.05)

    dep = SimpleNamespace(lab=lab, uplink={"client-0": link}, nodes={})
    act = fault_actor(dep)
    run.calls.clear()
    act(LabFault(1.0, "client-0", "cut"))
    cut = [i for a, i in run.calls]
    assert len(cut) == 2 and all("counter name" in i and "numgen" not in i for i in cut)
    assert {a[3] for a, _ in run.calls} == {"fsl-42-cloud", "fsl-42-client-0"}
    run.calls.clear()
    act(LabFault(2.0, "client-0", "heal"))
    assert all("numgen random mod 1000000 < 50000" in i for _, i in run.calls)


def _rows(*rounds):
    return [
        {
            "round": str(k),
            "tier": "cloud",
            "participants": str(p),
            "expected": "4",
            "ok": ok,
            "virtual_time_s": str(t),
        }
        for k, p, ok, t in rounds
    ]


def test_rounds_side_by_side_and_where_they_differ():
    sim = per_round(_rows((0, 4, "True", 1.0), (1, 4, "True", 2.0), (2, 3, "True", 6.0)))
    real = per_round(_rows((0, 4, "True", 1.1), (1, 3, "False", 2.5), (2, 3, "True", 6.2)))
    assert sim[2] == RoundRow(2, 3, 4, True, 6.0, 4.0)
    table = round_table(sim, real)
    assert "| 1 | 4 / 4, ok | 3 / 4, failed | 2.000 | 2.500 | 1.000 | 1.400 | +0.400 |" in table
    diffs = differences(sim, real, tol_s=0.3)
    assert diffs == [
        "round 1: sim 4 / 4, ok, real 3 / 4, failed",
        "round 1: took 1.400 s real against 1.000 s simulated (+0.400 s)",
    ]
    assert differences(sim, real[:2], tol_s=1.0)[-1] == "round 2: only the simulator has it"


def test_the_waiting_round_is_the_first_to_close_after_the_heal():
    rounds = per_round(_rows((0, 4, "True", 1.0), (1, 4, "True", 2.0), (2, 4, "True", 6.0)))
    w = waiting_round(rounds, 4.5)
    assert (w.round, w.end_s, w.after_s, w.participants) == (2, 6.0, 1.5, 4)
    with pytest.raises(ValidationError, match="no round closed"):
        waiting_round(rounds, 7.0)


def test_with_faults_replaces_or_removes_the_fault_keys():
    part = [{"nodes": ["client-1"], "start": 4.0, "end": 6.5}]
    text = with_faults(SCENARIO, crashes=[{"node": "client-2", "at": 4.0}])
    doc = yaml.safe_load(text)
    assert doc["faults"] == {"crashes": [{"node": "client-2", "at": 4.0}]}
    assert yaml.safe_load(with_faults(text, partitions=part))["faults"] == {"partitions": part}
    assert "faults" not in yaml.safe_load(with_faults(text))
