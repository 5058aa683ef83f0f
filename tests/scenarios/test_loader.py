"""Scenario validation: every problem is located (file, line, field path) and explained."""

import copy
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedstrata.errors import ScenarioError
from fedstrata.scenarios.build import build_federation
from fedstrata.scenarios.datasets import DATASETS, dataset_size, load_dataset
from fedstrata.scenarios.loader import MAX_ERRORS, ScenarioErrors, load_scenario, parse_scenario
from fedstrata.scenarios.wiring import prepare_data

ROOT = Path(__file__).resolve().parents[2]

BAD = [
    (
        "unknown key",
        "algorithm:\n  name: hk-mvfc\n  colour: red\n",
        3,
        "algorithm.colour",
        "unknown key",
    ),
    ("wrong type", "protocol:\n  rounds: many\n", 2, "protocol.rounds", "integer"),
    (
        "negative latency",
        "topology:\n  clients:\n    link: {latency: -0.5}\n",
        3,
        "topology.clients.link.latency",
        ">= 0",
    ),
    ("probability", "faults:\n  dropout: 1.5\n", 2, "faults.dropout", "must be <= 1, got 1.5"),
    (
        "loss probability",
        "topology:\n  clients:\n    link:\n      loss: -0.1\n",
        4,
        "topology.clients.link.loss",
        "must be >= 0, got -0.1",
    ),
    (
        "missing fog",
        "topology:\n  tiers: [{name: fog, count: 2}]\n  clients:\n    count: 4\n    attach: {client-1: fog-9}\n",
        5,
        "topology.clients.attach.client-1",
        "does not exist",
    ),
    (
        "secure aggregation with an asynchronous kind",
        "protocol: {rule: sum,\n  kind: async}\nprivacy: {secure_aggregation: true}\n",
        2,
        "protocol.kind",
        "needs each child's own partial",
    ),
    (
        "median with fog period",
        "topology:\n  tiers: [{name: fog, count: 1, period: 3}]\nprotocol: {rule: median}\n",
        3,
        "protocol.rule",
        "not a sum",
    ),
    (
        "sum with local iterations",
        "protocol:\n  rule: sum\n  local_iters: 5\n",
        3,
        "protocol.local_iters",
        "must be 1",
    ),
    (
        "lognormal without sigma",
        "topology:\n  clients:\n    link:\n      latency: {dist: lognormal, median: 0.1}\n",
        4,
        "topology.clients.link.latency",
        "needs sigma",
    ),
    (
        "partition window",
        "faults:\n  partitions:\n    - {nodes: [client-0], start: 5, end: 1}\n",
        3,
        "faults.partitions.0",
        "after start",
    ),
    (
        "fault on unknown node",
        "faults:\n  crashes: [{node: fog-7, at: 3}]\n",
        2,
        "faults.crashes.0.node",
        "no node",
    ),
    ("not yaml", "protocol: [1, 2\n", 2, "", "not valid YAML"),
    ("not a mapping", "- 1\n- 2\n", 1, "", "mapping"),
]


@pytest.mark.parametrize(("case", "text", "line", "path", "reason"), BAD, ids=[b[0] for b in BAD])
def test_errors_are_located(case, text, line, path, reason):
    with pytest.raises(ScenarioErrors) as info:
        parse_scenario(text, file="s.yaml")
    errors = info.value.errors
    assert any(
        e.line == line and e.path == path and reason in e.reason and e.file == "s.yaml"
        for e in errors
    ), [e.located() for e in errors]
    assert isinstance(info.value, ScenarioError)


def test_all_errors_reported_at_once():
    text = "faults:\n  dropout: 2\nprotocol:\n  quorum: -1\n  colour: x\n"
    with pytest.raises(ScenarioErrors) as info:
        parse_scenario(text)
    assert {e.path for e in info.value.errors} == {
        "faults.dropout",
        "protocol.quorum",
        "protocol.colour",
    }


def test_example_scenarios_are_valid():
    files = sorted((ROOT / "scenarios").glob("*.yaml"))
    assert len(files) >= 3
    for f in files:
        load_scenario(f)


def test_missing_file():
    with pytest.raises(ScenarioErrors, match="cannot read file"):
        load_scenario("/nonexistent/s.yaml")


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-c", "from fedstrata.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_validate_cli_prints_one_line_per_error_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("faults:\n  dropout: 2\nprotocol:\n  colour: x\n")
    good = ROOT / "scenarios" / "paper-flat.yaml"
    res = _cli("validate", str(good), str(bad))
    assert res.returncode != 0
    assert "Traceback" not in res.stderr + res.stdout
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2 and all(ln.startswith(f"{bad}:") for ln in lines), lines
    assert "paper-flat.yaml: ok" in res.stdout


def test_run_cli_reports_bad_scenario_in_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("topology:\n  clients: {count: 3, attach: {client-0: fog-1}}\n")
    res = _cli("run", str(bad), "--out", str(tmp_path / "o"), "--quiet")
    assert res.returncode == 1  # an invalid scenario: 1 from run and validate alike
    assert "Traceback" not in res.stderr
    assert "client-0 attached to 'fog-1', which does not exist" in res.stderr


# ------------------------------------------------------------------ hardened loading


BASE = {
    "name": "fuzz",
    "seed": 1,
    "data": {
        "dataset": "heat-kernel-synthetic",
        "params": {"n_per_cluster": 20},
        "partition": {"kind": "iid"},
    },
    "topology": {
        "tiers": [{"name": "fog", "count": 2, "link": {"latency": 0.01}}],
        "clients": {
            "count": 4,
            "link": {"latency": {"dist": "lognormal", "median": 0.05, "sigma": 0.5}},
        },
    },
    "algorithm": {"name": "hk-mvfc", "n_clusters": 4},
    "protocol": {"rule": "sum", "rounds": 3, "deadline_s": 5},
    "faults": {"dropout": 0.1, "crashes": [{"node": "fog-1", "at": 1}]},
    "privacy": {"secure_aggregation": False},
    "output": {"plots": False},
}

FIELDS = [
    ("name",),
    ("seed",),
    ("data",),
    ("data", "dataset"),
    ("data", "params"),
    ("data", "params", "n_per_cluster"),
    ("data", "params", "variant"),
    ("data", "params", "random_state"),
    ("data", "partition", "kind"),
    ("data", "partition", "alpha"),
    ("data", "partition", "fractions"),
    ("data", "views"),
    ("data", "views", "all"),
    ("data", "views", "single"),
    ("topology", "cloud_id"),
    ("topology", "tiers"),
    ("topology", "tiers", 0, "name"),
    ("topology", "tiers", 0, "count"),
    ("topology", "tiers", 0, "period"),
    ("topology", "tiers", 0, "link", "latency"),
    ("topology", "clients"),
    ("topology", "clients", "count"),
    ("topology", "clients", "attach"),
    ("topology", "clients", "attach", "client-1"),
    ("topology", "clients", "link", "latency", "median"),
    ("topology", "clients", "link", "latency", "dist"),
    ("topology", "clients", "link", "jitter"),
    ("topology", "clients", "link", "bandwidth_mbps"),
    ("topology", "clients", "link", "loss"),
    ("algorithm", "name"),
    ("algorithm", "n_clusters"),
    ("algorithm", "m"),
    ("algorithm", "kernel"),
    ("protocol", "rule"),
    ("protocol", "rounds"),
    ("protocol", "local_iters"),
    ("protocol", "qos"),
    ("protocol", "tol"),
    ("faults", "crashes", 0, "node"),
    ("faults", "crashes", 0, "restart_after"),
    ("faults", "partitions"),
    ("faults", "availability"),
    ("faults", "availability", "step_s"),
    ("privacy", "secure_aggregation"),
    ("output", "events"),
    ("colour",),
    ("protocol", "colour"),
]

WORDS = st.sampled_from(
    [
        "fog-0",
        "fog-1",
        "client-1",
        "client-9",
        "cloud",
        "dirichlet",
        "stratified",
        "quantity",
        "paper",
        "empirical",
        "trace",
        "weighted",
        "median",
        "mvfcm",
        "mvkm-ed",
        "multiple-features",
        "a/b",
        "",
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    WORDS,
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=4),
    st.dictionaries(st.one_of(WORDS, st.text(max_size=6)), SCALARS, max_size=3),
)


def _put(doc, path, value):
    node = doc
    for key in path[:-1]:
        nxt = node[key] if isinstance(node, dict) and key in node else None
        if isinstance(node, list) and isinstance(key, int) and key < len(node):
            nxt = node[key]
        if not isinstance(nxt, dict | list):
            nxt = {}
            if isinstance(node, dict) or (
                isinstance(node, list) and isinstance(key, int) and key < len(node)
            ):
                node[key] = nxt
            else:
                return
        node = nxt
    if isinstance(node, dict) or (
        isinstance(node, list) and isinstance(path[-1], int) and path[-1] < len(node)
    ):
        node[path[-1]] = value


def _check_only_scenario_errors(path):
    try:
        load_scenario(path)
    except ScenarioErrors as exc:
        errors = exc.errors
    else:
        return
    assert errors
    for e in errors:
        assert e.file == str(path)
        assert e.line is not None and e.line >= 1
        text = e.located()
        assert "\n" not in text and len(text) < 600, text


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.lists(st.tuples(st.sampled_from(FIELDS), VALUES), min_size=1, max_size=3))
def test_random_values_in_random_fields_give_only_scenario_errors(changes):
    doc = copy.deepcopy(BASE)
    for path, value in changes:
        _put(doc, path, value)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "s.yaml"
        f.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
        _check_only_scenario_errors(f)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(["insert", "delete", "duplicate", "bytes"]),
            st.floats(min_value=0, max_value=1),
            st.binary(min_size=1, max_size=12),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_random_text_mutations_give_only_scenario_errors(edits):
    raw = yaml.safe_dump(BASE, default_flow_style=False).encode()
    for op, where, blob in edits:
        i = int(where * len(raw))
        if op == "insert":
            raw = raw[:i] + blob.decode("latin-1").encode() + raw[i:]
        elif op == "delete":
            raw = raw[:i] + raw[i + len(blob) :]
        elif op == "duplicate":
            lines = raw.splitlines(keepends=True)
            k = min(int(where * len(lines)), len(lines) - 1)
            raw = b"".join([*lines[: k + 1], lines[k], *lines[k + 1 :]])
        else:
            raw = raw[:i] + blob + raw[i:]
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "s.yaml"
        f.write_bytes(raw)
        _check_only_scenario_errors(f)


def test_relative_trace_resolved_against_the_scenario_folder(tmp_path, monkeypatch):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "lat.csv").write_text("0.01\n0.02\n")
    f = tmp_path / "s.yaml"
    f.write_text(
        "data: {params: {n_per_cluster: 10}}\n"
        "topology: {clients: {link: {latency: {dist: empirical, file: traces/lat.csv}}}}\n"
    )
    monkeypatch.chdir("/")
    sc = load_scenario(f)
    assert sc.topology.clients.link.latency.file == str(tmp_path / "traces" / "lat.csv")
    build_federation(sc)  # the run reads the same, resolved file
    monkeypatch.chdir(tmp_path / "traces")  # a relative trace next to the cwd is not used
    with pytest.raises(ScenarioErrors, match="does not exist"):
        parse_scenario(f.read_text(), file="s.yaml", base_dir=tmp_path / "elsewhere")


def test_build_federation_uses_the_preflight_data():
    sc = parse_scenario(
        "data: {params: {n_per_cluster: 30}, partition: {kind: dirichlet, alpha: 1.0},"
        " views: {all: 0.5, single: 0.5}}\n"
        "topology: {tiers: [{name: fog, count: 2}], clients: {count: 6}}\n"
    )
    data = prepare_data(sc, seed=7)
    fed = build_federation(sc, seed=7)
    assert list(fed.client_indices) == [f"client-{i}" for i in range(6)]
    for i, idx in enumerate(data.indices):
        np.testing.assert_array_equal(fed.client_indices[f"client-{i}"], idx)
        assert fed.client_views[f"client-{i}"] == tuple(data.held[i])
    np.testing.assert_array_equal(fed.dataset.views[0], data.dataset.views[0])


def test_preflight_can_be_skipped(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("data: {params: {n_per_cluster: 2}}\ntopology: {clients: {count: 9}}\n")
    assert load_scenario(f, preflight=False).topology.clients.count == 9
    with pytest.raises(ScenarioErrors) as info:
        load_scenario(f)
    (e,) = info.value.errors
    assert (e.line, e.path) == (2, "topology.clients.count")


def test_seed_override_is_checked():
    sc = parse_scenario("data: {params: {n_per_cluster: 5}}\n")
    with pytest.raises(ScenarioError) as info:
        prepare_data(sc, seed=-1)
    assert info.value.path == "seed"


def test_a_billion_clients_allocate_nothing():
    text = "topology:\n  clients: {count: 1000000000}\n"
    tracemalloc.start()
    try:
        with pytest.raises(ScenarioErrors, match="must be <= 100000"):
            parse_scenario(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20


def test_many_problems_are_capped():
    text = "data:\n  partition:\n    kind: stratified\n    fractions:\n"
    text += "".join(f"      - x{i}\n" for i in range(50))
    with pytest.raises(ScenarioErrors) as info:
        parse_scenario(text, file="s.yaml")
    errors = info.value.errors
    assert len(errors) == MAX_ERRORS + 1
    assert (
        errors[-1].reason == f"{50 - MAX_ERRORS} more problems not shown; fix the ones above first"
    )
    assert [e.line for e in errors[:3]] == [5, 6, 7]


def test_yaml12_floats_and_ints_for_floats():
    sc = parse_scenario(
        "protocol: {tol: 1e-6, deadline_s: 10}\ntopology: {clients: {link: {loss: 1}}}\n"
    )
    assert sc.protocol.tol == 1e-6 and isinstance(sc.protocol.deadline_s, float)
    assert sc.topology.clients.link.loss == 1.0


def test_dataset_size_is_the_loaded_size():
    assert dataset_size("heat-kernel-synthetic", n_per_cluster=7) == 28
    assert dataset_size("heat-kernel-synthetic") == 10_000
    assert dataset_size("no-such-dataset") is None
    assert load_dataset("heat-kernel-synthetic", n_per_cluster=7).n_samples == 28
    assert set(DATASETS) == {
        "heat-kernel-synthetic",
        "multiple-features",
        "breast-cancer",
        "digits",
        "iris",
        "nutrimouse",
        "fed-mvkm-dha-like",
    }
