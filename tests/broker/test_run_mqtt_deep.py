"""The deep hybrid-view family over a real Mosquitto: the simulator's model, bit for bit.

FMCSC and EFD-MVC on four clients of a small synthetic dataset, two holding every view
and two a single one, with a small network. The deep plug-in is built for this: a
client's training seed depends only on (run seed, node id, step), training runs on one
thread with PyTorch's deterministic algorithms, and aggregators combine their
children's partials sorted by id. So the same scenario over MQTT (nodes as asyncio
tasks, or spread over worker processes) computes the same float32 operations in the
same order as the simulator, and the final networks and centres are compared
*exactly* (``assert_array_equal``), not to a tolerance: any difference, even one ulp,
would mean that some sum ran in another order or a kernel on another thread count.
"""

import numpy as np
import pytest

from tests.extras import require

require("torch")

from fedstrata.scenarios.loader import parse_scenario  # noqa: E402  (after the extra check)
from fedstrata.scenarios.run import run_scenario, simulate  # noqa: E402  (after the extra check)
from fedstrata.scenarios.run_mqtt import mqtt_run, run_scenario_mqtt  # noqa: E402  (after the extra check)

pytestmark = pytest.mark.broker

DEEP = """
name: {method}-mqtt
seed: {seed}
data:
  dataset: heat-kernel-synthetic
  params: {{n_per_cluster: 40}}
  partition: {{kind: iid}}
  views: {{all: 0.5, single: 0.5}}
topology: {{clients: {{count: 4, link: {{latency: 0.01, bandwidth_mbps: 10}}}}}}
algorithm:
  name: {method}
  n_clusters: 4
  hidden: [32]
  latent: 8
  head: 16
  pretrain_rounds: 1
  train_rounds: 2
  pretrain_epochs: 5
  local_epochs: 2
  kmeans_rounds: 5{extra}
protocol: {{rule: sum, rounds: 20, deadline_s: 30}}
"""

METHODS = ["fmcsc", "efd-mvc"]


def deep(method, seed=4):
    extra = "\n  copy_epochs: 1\n  mi_bins: 8" if method == "fmcsc" else ""
    return parse_scenario(DEEP.format(method=method, seed=seed, extra=extra))


def _row(r):
    return (r["round"], r["tier"], r["phase"], r["participants"], r.get("objective"))


def _assert_same_state(got, want):
    assert got["step"] == want["step"]
    assert list(got["groups"]) == list(want["groups"])
    for g, params in want["groups"].items():
        assert got["groups"][g].dtype == params.dtype == np.float32, g
        np.testing.assert_array_equal(got["groups"][g], params, err_msg=g)
    assert want["centroids"] is not None  # the run reached the k-means phase
    np.testing.assert_array_equal(got["centroids"], want["centroids"])


def _hybrid(fed):
    """The clients' view counts: the scenario must really mix full- and single-view ones."""
    return sorted(len(views) for views in fed.client_views.values())


@pytest.mark.parametrize("method", METHODS)
def test_deep_run_over_mqtt_equals_the_simulator(mosquitto, method):
    sc = deep(method)
    fed_sim, s_sim, rows_sim = simulate(sc)
    assert _hybrid(fed_sim) == [1, 1, 2, 2]
    # unsigned, as the simulation (a real run signs by default: 64 bytes more a message)
    fed, s, rows = mqtt_run(
        sc, mosquitto.host, mosquitto.port, timeout_s=120, run_id=sc.name, insecure=True
    )
    assert s["transport"] == "mqtt"
    assert (s["status"], s["reason"], s["rounds"]) == (
        s_sim["status"],
        s_sim["reason"],
        s_sim["rounds"],
    )
    # pre-training, 2 training rounds, candidates and at least one Lloyd round
    assert s["rounds"] >= 5
    _assert_same_state(fed.final_state, fed_sim.final_state)
    np.testing.assert_array_equal(fed.final_labels, fed_sim.final_labels)
    assert s["metrics"] == s_sim["metrics"]
    assert [_row(r) for r in rows] == [_row(r) for r in rows_sim]
    # the same run id: every envelope is the same bytes on both transports
    assert s["payload_bytes"] == s_sim["payload_bytes"]


@pytest.mark.parametrize("method", METHODS)
def test_the_federation_is_hybrid(method):
    fed, _, _ = simulate(deep(method, seed=6))
    assert _hybrid(fed) == [1, 1, 2, 2]


@pytest.mark.parametrize("method", METHODS)
def test_deep_record_over_worker_processes_equals_the_simulators(mosquitto, method, tmp_path):
    """Clients trained in other processes: the same model.npz and labels.csv."""
    sc = deep(method, seed=6)
    a = run_scenario(sc, tmp_path / "sim", progress=False, plots=False)
    b = run_scenario_mqtt(
        sc,
        tmp_path / "mqtt",
        broker=mosquitto.url,
        plots=False,
        processes=2,
        run_id=sc.name,
        timeout_s=120,
    )
    assert b["transport"] == "mqtt" and b["processes"] == 2
    assert (a["status"], a["rounds"]) == (b["status"], b["rounds"])
    assert (tmp_path / "sim" / "labels.csv").read_bytes() == (
        tmp_path / "mqtt" / "labels.csv"
    ).read_bytes()
    with (
        np.load(tmp_path / "sim" / "model.npz") as want,
        np.load(tmp_path / "mqtt" / "model.npz") as got,
    ):
        assert sorted(got.files) == sorted(want.files)
        assert "centroids" in want.files
        for key in want.files:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert a["metrics"] == b["metrics"]
