"""Deep scenarios run in the simulator: deterministic, and finished under faults."""

import math

import numpy as np
import pytest

from tests.extras import require

require("torch")

from fedstrata.scenarios.loader import parse_scenario  # noqa: E402  (after the extra check)
from fedstrata.scenarios.run import simulate  # noqa: E402  (after the extra check)

SMALL = """
name: deep-small
seed: {seed}
data:
  views: {{all: 0.5, single: 0.5}}
  params: {{n_per_cluster: 60}}
topology:
  clients: {{count: 6}}
{tiers}
algorithm:
  name: {name}
  n_clusters: 4
  hidden: [24]
  latent: 8
  head: 16
  pretrain_rounds: 1
  train_rounds: 2
  pretrain_epochs: 10
  local_epochs: 2
  kmeans_rounds: 5
protocol:
  rounds: 12
{faults}
"""


def _run(name, seed=0, tiers="", faults=""):
    text = SMALL.format(name=name, seed=seed, tiers=tiers, faults=faults)
    fed, summary, rows = simulate(parse_scenario(text))
    return summary, rows, np.asarray(fed.final_labels)


@pytest.mark.parametrize("name", ["fmcsc", "efd-mvc"])
def test_same_seed_same_run(name):
    a, rows_a, labels_a = _run(name)
    b, rows_b, labels_b = _run(name)
    assert a["status"] in {"converged", "round_limit"}, a["reason"]
    for key in ("rounds", "bytes_total", "bytes_per_round", "status"):
        assert a[key] == b[key]
    assert a["metrics"] == b["metrics"]
    assert np.array_equal(labels_a, labels_b) and (labels_a >= 0).all()
    assert rows_a == rows_b
    c, _, _ = _run(name, seed=1)
    assert (c["bytes_total"], c["metrics"]) != (a["bytes_total"], a["metrics"])


@pytest.mark.parametrize("name", ["fmcsc", "efd-mvc"])
def test_faults_leave_a_finished_run(name):
    faults = """faults:
  dropout: 0.3
  crashes:
    - {node: client-1, at: 2s, restart_after: 20s}
    - {node: fog-0, at: 30s, restart_after: 10s}
"""
    summary, _, _ = _run(name, seed=5, tiers="  tiers: [{name: fog, count: 2}]", faults=faults)
    assert summary["status"] in {"converged", "round_limit"}, summary["reason"]
    assert all(math.isfinite(summary["metrics"][k]) for k in ("ari", "nmi", "acc"))
    assert summary["messages_dropped"] > 0
