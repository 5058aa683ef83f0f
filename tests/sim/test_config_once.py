"""The pooled heat-kernel references travel once per group, in virtual time.

* each aggregator publishes the run's configuration exactly once (retained) and every
  client receives it once; no model message carries the references;
* a client that crashes and restarts gets the retained configuration on subscribing
  and answers every later round;
* the results are those of the code before the change (commit e128cad, when every
  model message carried the references): the clients' labels bit for bit and every
  round's objective (to 1e-12), for two of the repository's scenarios
  (``data/labels_e128cad.json``, written by running them at that commit).
"""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from fedstrata import wire
from fedstrata.nodes.events import Publish
from fedstrata.scenarios.build import build_federation
from fedstrata.scenarios.loader import load_scenario, parse_scenario
from fedstrata.scenarios.run import simulate

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = Path(__file__).parent / "data" / "labels_e128cad.json"

TREE = """
name: cfg
seed: 1
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 30}}, partition: {{kind: iid}}}}
topology:
  tiers: [{{name: fog, count: 3, link: {{latency: 0.05, bandwidth_mbps: 10}}}}]
  clients: {{count: 12, link: {{latency: 0.1, bandwidth_mbps: 10}}}}
algorithm: {{name: hk-mvfc, n_clusters: 4, center_update: exact}}
protocol: {{rule: sum, rounds: 8, tol: 0.0, deadline_s: 30}}
faults: {faults}
"""


def _tree(faults="{}"):
    return parse_scenario(TREE.format(faults=faults))


def test_each_group_gets_the_configuration_once_and_models_never_carry_references():
    fed = build_federation(_tree(), record_events=True)
    published: list[tuple[str, Publish]] = []
    for name in [*fed.parents, "cloud"]:
        node = fed.sim.node(name)
        original = node.handle

        def handle(event, _name=name, _original=original):
            effects = _original(event)
            published.extend((_name, e) for e in effects if isinstance(e, Publish))
            return effects

        node.handle = handle
    fed.sim.run()
    aggregators = ["cloud", "fog-0", "fog-1", "fog-2"]
    configs = [(who, p) for who, p in published if p.topic.endswith("/config")]
    assert sorted(who for who, _ in configs) == aggregators  # one PUBLISH per group
    assert all(p.retain for _, p in configs)
    cid = fed.sim.node("cloud").config_id
    assert cid is not None
    assert {wire.decode(p.payload).body["config"] for _, p in configs} == {cid}
    models = [wire.decode(p.payload).body for _, p in published if p.topic.endswith("/down")]
    assert models and all("refs" not in body for body in models)
    assert all(b["config"] == cid for b in models if b["phase"] != "setup")
    # the broker side: every client received its fog's configuration exactly once
    got = [
        e["dst"]
        for e in fed.sim.events
        if e["ev"] == "deliver" and e["topic"].endswith("/config") and e["dst"].startswith("c")
    ]
    clients = sorted(fed.client_indices)
    assert sorted(got) == clients
    assert all(fed.sim.node(c).config_id == cid for c in clients)
    assert set(fed.sim.results) >= set(clients)


def test_a_restarted_client_gets_the_retained_configuration_and_answers_again():
    faults = "{crashes: [{node: client-5, at: 0.9, restart_after: 0.5}]}"
    fed, summary, rows = simulate(_tree(faults), events=True)
    config_sent = min(
        e["t"] for e in fed.sim.events if e["ev"] == "send" and e["topic"].endswith("/config")
    )
    assert config_sent < 0.9  # the crash comes after the configuration went out
    restarted = fed.sim.node("client-5")
    assert restarted.config_id == fed.sim.node("cloud").config_id
    retained = [
        e
        for e in fed.sim.events
        if e["ev"] == "deliver" and e["dst"] == "client-5" and e["topic"].endswith("/config")
    ]
    assert [(e["t"] > 1.4, e["retain"]) for e in retained] == [(False, False), (True, True)]
    fog = [r for r in rows if r["tier"] == "fog" and r["phase"] == "iter"]
    after = [r for r in fog if r["virtual_time_s"] > 1.5]
    assert after and sum(r["participants"] for r in after) == sum(r["expected"] for r in after)
    assert "client-5" in fed.sim.results
    assert summary["status"] == "round_limit"


@pytest.mark.parametrize("name", ["paper-flat-sum", "edge-fog-cloud"])
def test_results_equal_those_of_commit_e128cad(name, monkeypatch):
    # e128cad reduced the clients' seeding candidates with one k-means++ seeding; the
    # best of 10 came later and changes the start on purpose: hold it at one here
    import functools

    import fedstrata.plugins._setup as setup

    one = functools.partial(setup.reduce_candidates, n_restarts=1)
    monkeypatch.setattr(setup, "reduce_candidates", one)
    want = json.loads(REFERENCE.read_text())[name]
    fed, summary, rows = simulate(load_scenario(ROOT / "scenarios" / f"{name}.yaml"))
    labels = np.full(fed.dataset.n_samples, -1, dtype=np.int64)
    for c, idx in fed.client_indices.items():
        if c in fed.sim.results:  # a client that missed the final model has no labels
            labels[idx] = fed.sim.results[c]["labels"]
    assert hashlib.sha256(labels.tobytes()).hexdigest() == want["client_labels_sha256"]
    final = np.asarray(fed.final_labels, dtype=np.int64)
    assert hashlib.sha256(final.tobytes()).hexdigest() == want["final_labels_sha256"]
    got = [None if r.get("objective") in (None, "") else float(r["objective"]) for r in rows]
    ref = [None if h is None else float.fromhex(h) for h in want["objectives"]]
    assert [g is None for g in got] == [r is None for r in ref]
    # to 1e-12, not bit for bit: the BLAS build (numpy 2.4's wheels here) sums in another
    # order than the one the reference was written with, a few ulps apart
    np.testing.assert_allclose(
        [g for g in got if g is not None], [r for r in ref if r is not None], rtol=1e-12
    )
    assert (summary["status"], summary["rounds"]) == (want["status"], want["rounds"])
