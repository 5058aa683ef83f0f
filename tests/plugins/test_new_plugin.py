"""A plug-in outside fedstrata (tests/plugins/spherical_kmeans.py), registered by the test
only, gets the scenario schema, validate's capability checks, the reference docs, both
transports and the records from its own declaration: no fedstrata module names it.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import yaml

import fedstrata
from fedstrata.analysis.metrics import evaluate
from fedstrata.plugins.spec import unregister_algorithm_plugin
from fedstrata.scenarios.datasets import load_dataset
from fedstrata.scenarios.loader import load_scenario, parse_scenario, scenario_json_schema
from fedstrata.scenarios.reference import scenario_reference
from fedstrata.scenarios.schema import ScenarioErrors
from tests.extras import require
from tests.plugins import spherical_kmeans
from tests.plugins.spherical_kmeans import SPHERICAL, SphericalSettings, embed

DOC = {
    "name": "spherical",
    "seed": 3,
    "topology": {"clients": {"count": 3}},
    "algorithm": {"name": "spherical-kmeans", "n_clusters": 4, "balance": "dimension"},
    "protocol": {"rounds": 30, "tol": 1e-9},
    "output": {"plots": False},
}


@pytest.fixture(scope="module", autouse=True)
def registered():
    """The plug-in, registered for this module's tests and removed after them."""
    spherical_kmeans.register()
    yield
    unregister_algorithm_plugin(SPHERICAL)


def _errors(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ScenarioErrors) as info:
        parse_scenario(textwrap.dedent(text))
    return [(e.path, e.reason) for e in info.value.errors]


def test_its_keys_validate_into_its_own_settings_model():
    sc = parse_scenario("algorithm: {name: spherical-kmeans, n_clusters: 3, balance: equal}\n")
    assert isinstance(sc.algorithm, SphericalSettings)
    assert (sc.algorithm.n_clusters, sc.algorithm.balance) == (3, "equal")
    # the resolved scenario holds its keys only, and reads back the same
    assert parse_scenario(sc.resolved_yaml()).algorithm == sc.algorithm
    written = yaml.safe_load(sc.resolved_yaml())["algorithm"]
    assert written == {"name": "spherical-kmeans", "n_clusters": 3, "balance": "equal"}


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (
            "m",
            "2",
            "m is for e-fkmvc, fedhk-mvc-person, fedhk-parafac2, fedhk-tucker, hk-mvfc and "
            "mvfcm only (name is 'spherical-kmeans'); remove it",
        ),
        (
            "kernel",
            "type1",
            "kernel is for hk-mvfc and mvfcm only (name is 'spherical-kmeans'); remove it",
        ),
        ("colour", "red", "unknown key; known keys: name, n_clusters, balance"),
        ("balance", "cosine", "must be 'equal' or 'dimension', got 'cosine'"),
    ],
)
def test_a_foreign_or_bad_key_is_refused_where_it_stands(key, value, reason):
    assert _errors(f"algorithm:\n  name: spherical-kmeans\n  {key}: {value}\n") == [
        (f"algorithm.{key}", reason)
    ]


def test_its_keys_are_refused_for_another_algorithm():
    assert _errors("algorithm: {name: mvfcm, balance: equal}\n") == [
        ("algorithm.balance", "balance is for spherical-kmeans only (name is 'mvfcm'); remove it")
    ]


@pytest.mark.parametrize(
    ("more", "path", "reason"),
    [
        (
            "privacy: {secure_aggregation: secagg}\n",
            "privacy.secure_aggregation",
            "spherical-kmeans cannot run with secure aggregation (it does not declare it); "
            "set secure_aggregation: none",
        ),
        (
            "protocol: {compression: {scheme: float16}}\n",
            "protocol.compression",
            "spherical-kmeans has no uplink compression 'float16' (it takes scheme 'none')",
        ),
        (
            "protocol: {kind: async}\n",
            "protocol.kind",
            "spherical-kmeans runs with kind 'sync' only, not 'async'",
        ),
        (
            "protocol: {rule: weighted}\n",
            "protocol.rule",
            "spherical-kmeans runs with rule 'sum' only, not 'weighted'",
        ),
        (
            "privacy: {dp: {epsilon: 1.0, bounds: [[0, 1]]}}\n",
            "privacy.dp",
            "spherical-kmeans does not support differential privacy",
        ),
        (
            "data: {views: {all: 0.5, single: 0.5}}\n",
            "data.views",
            "spherical-kmeans needs every client to hold every view (no hybrid views); "
            "remove data.views",
        ),
        (
            "topology: {tiers: [{name: fog, count: 1, period: 2}]}\n",
            "topology.tiers.0.period",
            "spherical-kmeans runs its middle tiers once per root round: tier periods must be 1",
        ),
    ],
)
def test_validate_refuses_what_it_does_not_declare(more, path, reason):
    assert (path, reason) in _errors("algorithm: {name: spherical-kmeans}\n" + more)


def test_a_refused_capability_is_located_in_the_file(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("algorithm:\n  name: spherical-kmeans\nprivacy:\n  secure_aggregation: secagg\n")
    with pytest.raises(ScenarioErrors) as info:
        load_scenario(f)
    (err,) = info.value.errors
    assert (err.path, err.line) == ("privacy.secure_aggregation", 4)
    assert "spherical-kmeans cannot run with secure aggregation" in err.located()


def test_the_json_schema_and_the_reference_show_its_keys():
    text = json.dumps(scenario_json_schema())
    assert '"const": "spherical-kmeans"' in text and '"balance"' in text
    ref = scenario_reference()
    assert "### name: `spherical-kmeans` (test)" in ref
    assert "| `balance` | `equal` \\| `dimension` | `equal` |" in ref


def _check_record(run: fedstrata.Run) -> np.ndarray:
    """The record of a run of DOC: its own model arrays, labels as centralised scoring."""
    summary = json.loads((run.folder / "summary.json").read_text())
    assert summary["status"] == "converged", summary.get("reason")
    with np.load(run.folder / "model.npz") as npz:
        assert sorted(npz.files) == ["algorithm", "balance", "centres", "n_clusters", "rounds"]
        assert str(npz["algorithm"]) == "spherical-kmeans" and str(npz["balance"]) == "dimension"
        centres = npz["centres"]
    labels = np.loadtxt(run.folder / "labels.csv", delimiter=",", skiprows=1, dtype=str)
    ds = load_dataset("heat-kernel-synthetic", random_state=3)
    assert labels.shape[0] == ds.n_samples
    X = embed(ds.views, [v.shape[1] for v in ds.views], "dimension")
    assert np.allclose(np.linalg.norm(centres, axis=1), 1.0)
    assert evaluate(ds.labels, (X @ centres.T).argmax(axis=1))["ari"] > 0.5
    return labels


def test_it_runs_on_the_simulator_and_writes_its_record(tmp_path):
    _check_record(fedstrata.run(DOC, out=tmp_path / "sim"))


def test_it_runs_over_a_real_mosquitto_with_the_simulators_labels(tmp_path):
    require("aiomqtt")
    from tests.broker.conftest import _need_mosquitto

    _need_mosquitto()
    sim = _check_record(fedstrata.run(DOC, out=tmp_path / "sim"))
    mqtt = _check_record(fedstrata.run(DOC, transport="mqtt", out=tmp_path / "mqtt"))
    assert np.array_equal(sim, mqtt)
