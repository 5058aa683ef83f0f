"""Every run of a valid scenario ends with a complete, strict record, whatever the faults."""

import csv
import json

import numpy as np
import pytest

from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import run_scenario, simulate

BASE = """
name: outcome
seed: 0
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 30}}, partition: {{kind: iid}}{views}}}
topology:
  tiers: [{{name: fog, count: 2}}]
  clients: {{count: 6, link: {{latency: 0.01{link}}}{speed}}}
algorithm: {{name: hk-mvfc, n_clusters: 4, center_update: exact}}
protocol: {{rule: sum, rounds: {rounds}, deadline_s: {deadline}, quorum: 0.5, tol: {tol}}}
faults: {faults}
"""


def scenario(faults="{}", rounds=8, deadline=5, link="", speed="", views="", tol="1.0e-6"):
    return parse_scenario(
        BASE.format(
            faults=faults,
            rounds=rounds,
            deadline=deadline,
            link=link,
            speed=speed,
            views=views,
            tol=tol,
        )
    )


def strict_json(path):
    def refuse(token):
        raise AssertionError(f"non-strict JSON constant {token} in {path}")

    return json.loads(path.read_text(), parse_constant=refuse)


def check_invariants(summary):
    assert summary["bytes_up"] + summary["bytes_down"] == summary["bytes_total"]
    for key in ("bytes_up", "bytes_down", "bytes_total"):
        assert sum(t[key] for t in summary["per_tier"].values()) == summary[key]
    assert summary["messages_dropped"] <= summary["messages"]
    assert sum(summary["dropped_by_reason"].values()) == summary["messages_dropped"]
    assert summary["status"] in ("converged", "round_limit", "stalled", "diverged", "interrupted")
    assert summary["converged"] == (summary["status"] == "converged")
    assert summary["reason"]
    if any(v is None for v in summary["metrics"].values()):
        assert summary["metrics_reason"]


EXTREME = {
    # name: (faults, extra scenario settings, expected status, reason fragment)
    "dropout 0.99": ("{dropout: 0.99}", {}, "stalled", "consecutive setup rounds below quorum"),
    "loss 1.0": ("{}", {"link": ", loss: 1.0"}, "stalled", "below quorum"),
    "all fogs partitioned": (
        "{partitions: [{nodes: [fog-0, fog-1], start: 0, end: 1.0e9}]}",
        {},
        "stalled",
        "heard from 0 of 2 children",
    ),
    "availability always off": (
        "{availability: {p_off: 1.0, p_on: 0.0, step_s: 0.001}}",
        {},
        "stalled",
        "below quorum",
    ),
    "latency 1e6 s, deadline 10 s": (
        "{}",
        {"link": "", "deadline": 10, "rounds": 3},
        "stalled",
        "below quorum",
    ),
    "client CPU 1e-12 GFLOPS": ("{}", {"speed": ", speed_gflops: 1.0e-12"}, "stalled", "quorum"),
    "1 ms deadline": ("{}", {"deadline": 0.001, "rounds": 5000}, "stalled", "below quorum"),
}


@pytest.mark.parametrize("name", list(EXTREME))
def test_extreme_faults_end_with_a_status_and_a_strict_record(name, tmp_path):
    faults, extra, status, fragment = EXTREME[name]
    if name.startswith("latency"):
        extra = {**extra, "link": ""}
        sc = parse_scenario(
            BASE.format(
                faults=faults, rounds=3, deadline=10, link="", speed="", views="", tol="1.0e-6"
            ).replace("latency: 0.01", "latency: 1.0e6")
        )
    else:
        sc = scenario(faults=faults, **extra)
    summary = run_scenario(sc, tmp_path, progress=False, plots=False)
    on_disk = strict_json(tmp_path / "summary.json")
    assert on_disk["status"] == summary["status"] == status, summary["reason"]
    assert fragment in summary["reason"]
    check_invariants(on_disk)
    assert on_disk["metrics"] == dict.fromkeys(("acc", "nmi", "ari", "ri", "purity"))
    assert on_disk["metrics_reason"] == "no model: the setup round never completed"
    assert not (tmp_path / "model.npz").exists()
    with (tmp_path / "labels.csv").open() as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["client", "index", "label"]
    assert len(rows) == 1 + 120 and all(r[2] == "" for r in rows[1:])


def test_cloud_crash_without_restart_is_stalled_with_the_last_model(tmp_path):
    sc = scenario(faults="{crashes: [{node: cloud, at: 0.1}]}", rounds=50, tol="0.0")
    summary = run_scenario(sc, tmp_path, progress=False, plots=False)
    assert summary["status"] == "stalled"
    assert summary["reason"] == "the root 'cloud' crashed and did not come back; no round can close"
    assert 0 < summary["rounds"] < 50
    assert summary["metrics"]["ari"] is not None
    assert summary["metrics_reason"] == "metrics of the last global model the root reached"
    assert (tmp_path / "model.npz").exists()
    check_invariants(strict_json(tmp_path / "summary.json"))


def test_restarted_hybrid_view_client_rejoins_with_its_views():
    views = ", views: {all: 0.5, single: 0.5}"
    sc = scenario(
        faults="{crashes: [{node: client-5, at: 0.05, restart_after: 0.2}]}",
        rounds=30,
        tol="0.0",
        views=views,
    )
    fed, summary, rows = simulate(sc)
    assert fed.client_views["client-5"] != (0, 1)  # a single-view client
    fog = [r for r in rows if r["tier"] == "fog" and r["phase"] == "iter"]
    late = [r for r in fog if r["virtual_time_s"] > 0.5]
    assert late and all(r["participants"] == r["expected"] == 6 for r in late)
    assert "client-5" in fed.sim.results  # it finished with the final model
    assert summary["status"] == "round_limit"


def test_labels_and_model_are_the_final_state(tmp_path):
    sc = scenario(rounds=40)
    summary = run_scenario(sc, tmp_path, progress=False, plots=True)
    assert summary["status"] in ("converged", "round_limit")
    model = np.load(tmp_path / "model.npz")
    assert str(model["algorithm"]) == "hk-mvfc" and int(model["rounds"]) == summary["rounds"]
    fed, _, _ = simulate(sc)
    for h, c in enumerate(fed.final_state.centers):
        np.testing.assert_array_equal(model[f"centers_{h}"], c)
    np.testing.assert_array_equal(model["view_weights"], fed.final_state.view_weights)
    with (tmp_path / "labels.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == fed.dataset.n_samples
    assert sorted(int(r["index"]) for r in rows) == list(range(fed.dataset.n_samples))
    # each client's labels equal what the client itself computed from the final broadcast
    for client, res in fed.sim.results.items():
        if not client.startswith("client-"):
            continue
        mine = [r for r in rows if r["client"] == client]
        order = np.argsort(fed.client_indices[client])
        assert [int(r["label"]) for r in mine] == res["labels"][order].tolist()
    assert (tmp_path / "rounds.png").stat().st_size > 0
    assert summary["files"][-1] == "summary.json"


def test_degenerate_model_is_not_called_converged(tmp_path, monkeypatch):
    # No documented setting collapses a model any more (alpha = 1000 used to, through
    # v^alpha underflowing to 0; see the next test), so the final labels are forced into
    # one cluster: the run, its |dJ| test and the status mapping are the real ones
    import fedstrata.scenarios.summary as summary_module

    real = summary_module._final_labels

    def one_cluster(fed, state):
        return np.zeros_like(real(fed, state))

    monkeypatch.setattr(summary_module, "_final_labels", one_cluster)
    text = BASE.format(
        faults="{}", rounds=20, deadline=5, link="", speed="", views="", tol="1.0e-3"
    )
    summary = run_scenario(parse_scenario(text), tmp_path, progress=False, plots=False)
    labels = {r["label"] for r in csv.DictReader((tmp_path / "labels.csv").open())}
    assert len(labels) == 1
    assert (summary["status"], summary["converged"]) == ("diverged", False)
    assert summary["reason"] == "degenerate model: every sample falls in one cluster of 4"
    assert summary["metrics"]["ari"] == 0.0


def test_a_huge_view_exponent_no_longer_collapses_the_model(tmp_path):
    # alpha = 1000 with 2 views: v^alpha underflowed to 0 and every membership was
    # uniform (a one-cluster model); view_powers now rescales it in log space
    text = BASE.format(
        faults="{}", rounds=20, deadline=5, link="", speed="", views="", tol="1.0e-6"
    ).replace("center_update: exact}", "center_update: exact, alpha: 1000}")
    summary = run_scenario(parse_scenario(text), tmp_path, progress=False, plots=False)
    labels = {r["label"] for r in csv.DictReader((tmp_path / "labels.csv").open())}
    assert len(labels) == 4
    assert summary["metrics"]["ari"] == 1.0
