"""A node whose ``handle`` raises is a crash of that node, never the end of the run.

The failing node is a test double wrapping the real node: it raises on its Nth
delivered message and otherwise behaves as the node does.
"""

from __future__ import annotations

from typing import Any

from fedstrata.scenarios import run as run_module
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate
from tests.raising import raise_in_run

SCENARIO = """
name: failing
seed: 1
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 60}, partition: {kind: iid}}
topology:
  tiers: [{name: fog, count: 2, link: {latency: 0.01}}]
  clients: {count: 6, link: {latency: 0.02}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 6, tol: 0.0, deadline_s: 5, quorum: 0.5}
"""


def test_a_client_that_raises_is_crashed_and_the_run_finishes(monkeypatch):
    sc = parse_scenario(SCENARIO)
    fed0, clean, clean_rows = simulate(sc)
    client = sorted(fed0.client_indices)[1]
    raise_in_run(monkeypatch, run_module, client, 2, TypeError("unhashable type: 'list'"))
    fed, summary, rows = simulate(sc, events=True)
    assert summary["status"] in ("converged", "round_limit")
    assert summary["rounds"] == clean["rounds"]
    assert summary["crashed"] == [
        {
            "node": client,
            "t": summary["crashed"][0]["t"],
            "reason": "TypeError: unhashable type: 'list'",
            "restarts": False,
        }
    ]
    assert summary["crashed"][0]["t"] > 0
    crash = [e for e in fed.sim.events if e["ev"] == "crash"]
    assert [(e["src"], e["reason"]) for e in crash] == [
        (client, "TypeError: unhashable type: 'list'")
    ]
    recs = [r for r in fed.sim.records if r["kind"] == "node_crashed"]
    assert [r["fields"]["error"] for r in recs] == ["TypeError"]
    assert client not in fed.sim.results  # it never finished

    # its fog closed the last round without it: one participant fewer than without the fault
    def last_fog(rows: list[dict[str, Any]]) -> int:
        return [r for r in rows if r["tier"] == "fog" and r["phase"] == "iter"][-1]["participants"]

    assert last_fog(rows) == last_fog(clean_rows) - 1


def test_a_root_that_raises_ends_the_run_stalled_with_the_reason(monkeypatch):
    raise_in_run(monkeypatch, run_module, "cloud", 3, ValueError("phase must be a string"))
    _, summary, _ = simulate(parse_scenario(SCENARIO))
    assert summary["status"] == "stalled"
    assert "ValueError: phase must be a string" in summary["reason"]
    assert [c["node"] for c in summary["crashed"]] == ["cloud"]


def test_a_crash_fault_is_listed_with_its_reason():
    sc = parse_scenario(SCENARIO + "faults: {crashes: [{node: fog-1, at: 0.05}]}\n")
    _, summary, _ = simulate(sc)
    assert summary["crashed"] == [
        {"node": "fog-1", "t": 0.05, "reason": "crash fault", "restarts": False}
    ]


def test_the_run_command_prints_the_crashed_nodes(tmp_path):
    import shutil
    import subprocess

    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO + "faults: {crashes: [{node: fog-1, at: 0.05}]}\n")
    res = subprocess.run(
        [shutil.which("fedstrata"), "run", str(path), "--out", str(tmp_path / "o"), "--no-plots"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "crashed: fog-1 at 0.05 s: crash fault" in res.stdout
