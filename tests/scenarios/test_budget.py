"""The round time budget: the estimate is a lower bound of the simulator's rounds, and a
deadline no round can meet is refused before the run (with the field to change)."""

from __future__ import annotations

import copy
import itertools
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fedstrata.plugins.spec import plugin_for
from fedstrata.scenarios.budget import client_hops, round_overruns
from fedstrata.scenarios.build import model_of
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate
from fedstrata.scenarios.wiring import prepare_data, wire_topology
from tests.extras import require

EXE = shutil.which("fedstrata") or "fedstrata"

FLAT = {
    "name": "budget",
    "seed": 0,
    "data": {"dataset": "heat-kernel-synthetic", "partition": {"kind": "iid"}},
    "topology": {
        "clients": {
            "count": 4,
            "link": {"latency": {"dist": "constant", "value": 0.05}, "bandwidth_mbps": 0.2},
            "speed_gflops": 0.001,
        }
    },
    "algorithm": {"name": "hk-mvfc", "n_clusters": 4},
    "protocol": {"rule": "sum", "rounds": 4, "tol": 0.0, "deadline_s": 600},
    "output": {"plots": False},
}


def _scenario(**protocol: object) -> object:
    doc = copy.deepcopy(FLAT)
    doc["protocol"].update(protocol)
    return parse_scenario(yaml.safe_dump(doc))


def _estimate(sc: object) -> tuple[float, float]:
    """The slowest client's answer time at the typical latency and at zero latency."""
    data = prepare_data(sc)
    model = model_of(sc, [X.shape[1] for X in data.dataset.views], data.dataset.n_samples)
    cost = plugin_for(sc.algorithm.name).round_cost
    hops, _ = client_hops(sc, data, wire_topology(sc), model, cost)
    return max(h.total for h in hops.values()), max(h.floor for h in hops.values())


@pytest.mark.parametrize(
    ("latency", "bandwidth", "speed"),
    [(0.05, 0.2, 0.001), (0.2, 0.05, 0.01), (0.0, 1.0, 0.0005)],
    ids=["compute-bound", "link-bound", "no-latency"],
)
def test_the_estimate_is_a_close_lower_bound_of_simulated_rounds(latency, bandwidth, speed):
    doc = copy.deepcopy(FLAT)
    doc["topology"]["clients"]["link"] = {
        "latency": {"dist": "constant", "value": latency},
        "bandwidth_mbps": bandwidth,
    }
    doc["topology"]["clients"]["speed_gflops"] = speed
    sc = parse_scenario(yaml.safe_dump(doc))
    estimate, _ = _estimate(sc)
    _, _, rows = simulate(sc)
    times = [
        float(r["virtual_time_s"]) for r in rows if r["tier"] == "cloud" and r["phase"] == "iter"
    ]
    rounds = [b - a for a, b in itertools.pairwise(times)]
    assert len(rounds) >= 2
    # a lower bound, and a close one: headers, the aggregator's own work and the
    # statistics' extra fields are all that the estimate leaves out
    assert all(estimate <= r <= 1.2 * estimate for r in rounds), (estimate, rounds)


def test_a_deadline_below_the_floor_is_an_overrun_that_never_fits():
    estimate, floor = _estimate(_scenario())
    assert floor < estimate  # the typical latency is part of the estimate only
    never = _scenario(deadline_s=floor * 0.9)
    tails = _scenario(deadline_s=(floor + estimate) / 2)
    fits = _scenario(deadline_s=estimate * 1.1)
    for sc, want in ((never, [True]), (tails, [False]), (fits, [])):
        data = prepare_data(sc)
        model = model_of(sc, [X.shape[1] for X in data.dataset.views], data.dataset.n_samples)
        assert [o.never for o in round_overruns(sc, data, model)] == want


def _validate(tmp_path: Path, doc: dict) -> subprocess.CompletedProcess[str]:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run(
        [EXE, "validate", "s.yaml"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )


def test_validate_refuses_a_deadline_no_round_can_meet(tmp_path):
    _, floor = _estimate(_scenario())
    doc = copy.deepcopy(FLAT)
    doc["protocol"]["deadline_s"] = round(floor * 0.8, 3)
    res = _validate(tmp_path, doc)
    assert res.returncode == 1
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("s.yaml:") and ": protocol.deadline_s: rounds of cloud (cloud)" in line
    assert "even with no latency (transfer" in line and "raise the deadline above" in line


def test_the_default_deep_scenario_is_refused_before_it_stalls(tmp_path):
    """FMCSC on the multiple features with every default: 60 s deadlines, 1 GFLOP/s clients.

    Its pre-training rounds need over a minute of client compute each; before this check
    the run spent minutes of wall time on rounds that all failed, then stalled.
    """
    require("torch")
    doc = {
        "name": "deep-default",
        "data": {"dataset": "multiple-features"},
        "topology": {"clients": {"count": 10}},
        "algorithm": {"name": "fmcsc", "n_clusters": 10},
    }
    res = _validate(tmp_path, doc)
    assert res.returncode == 1, res.stderr
    assert "protocol.deadline_s: rounds of cloud (cloud) cannot close within its 60 s" in (
        res.stderr
    )
    assert "(compute " in res.stderr
    doc["protocol"] = {"deadline_s": 300}
    assert _validate(tmp_path, doc).returncode == 0
