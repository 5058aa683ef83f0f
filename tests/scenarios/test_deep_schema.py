"""Scenario files of the deep hybrid-view family (fmcsc, efd-mvc): keys, refusals, model.

The expected models and messages are written by hand from the papers' settings and the
capabilities in :data:`fedstrata.plugins.deep_spec.DEEP`, not copied from runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap

import pytest

from fedstrata.algorithms import deep
from fedstrata.algorithms.deep.config import DeepModel
from fedstrata.errors import ScenarioError
from fedstrata.plugins.deep_spec import DEEP, EfdMvcSettings
from fedstrata.plugins.spec import BuildInput
from fedstrata.scenarios.build import model_of
from fedstrata.scenarios.loader import load_scenario, parse_scenario
from fedstrata.scenarios.schema import ScenarioErrors
from tests.extras import has, require

FMCSC = """
name: fmcsc-small
seed: 11
data:
  views: {all: 0.5, single: 0.5}
topology:
  clients: {count: 4}
algorithm:
  name: fmcsc
  n_clusters: 3
  hidden: [64, 32]
  latent: 12
  head: 48
  pretrain_rounds: 1
  train_rounds: 2
  pretrain_epochs: 7
  local_epochs: 3
  copy_epochs: 2
  batch_size: 64
  lr: 0.002
  temperature: 0.7
  kmeans_rounds: 9
  mi_bins: 6
protocol:
  rounds: 5
"""

EFD_MVC = """
seed: 4
algorithm:
  name: efd-mvc
  hidden: [500, 500, 2000]
  pretrain_epochs: 250
  local_epochs: 25
  lr: 0.0003
  contrast_weight: 0.25
  mu: 0.05
  noise: 0
protocol:
  kind: adaptive
  rounds: 11
"""


def _errors(text: str) -> list[tuple[str, str]]:
    """(path, reason) of every problem of a scenario text that must be refused."""
    with pytest.raises(ScenarioErrors) as info:
        parse_scenario(textwrap.dedent(text))
    return [(e.path, e.reason) for e in info.value.errors]


def _deep(name: str, more: str = "", algorithm: str = "") -> str:
    """A scenario of ``name`` with extra algorithm keys and extra sections."""
    return f"algorithm:\n  name: {name}\n{algorithm}{more}"


# ------------------------------------------------------------------------------ accepted


def test_fmcsc_keys_make_the_model_written_by_hand():
    require("torch")  # the deep plug-in validates these
    sc = parse_scenario(FMCSC)
    model = model_of(sc, [5, 7])
    assert model == DeepModel(
        method="fmcsc",
        n_clusters=3,
        dims=(5, 7),
        hidden=(64, 32),
        latent=12,
        head=48,
        pretrain_rounds=1,
        train_rounds=2,
        pretrain_epochs=7,
        local_epochs=3,
        copy_epochs=2,
        batch_size=64,
        lr=0.002,
        temperature=0.7,
        contrast_weight=0.5,  # unset: the default
        mu=0.01,
        noise=0.1,
        kmeans_rounds=9,
        mi_bins=6,
        seed=11,  # the scenario's seed
    )


def test_efd_mvc_with_the_papers_network_and_defaults_else():
    require("torch")  # the deep plug-in validates these
    sc = parse_scenario(EFD_MVC)
    model = model_of(sc, (3, 4, 2))
    assert isinstance(model, DeepModel)
    assert model.method == "efd-mvc"
    assert model.n_clusters == 4
    assert model.dims == (3, 4, 2)
    assert model.hidden == (500, 500, 2000)
    assert (model.pretrain_epochs, model.local_epochs, model.lr) == (250, 25, 0.0003)
    assert (model.contrast_weight, model.mu, model.noise) == (0.25, 0.05, 0.0)
    # unset keys: the CPU-friendly defaults
    assert (model.latent, model.head, model.train_rounds) == (20, 256, 5)
    assert model.pretrain_rounds == 4
    assert (model.batch_size, model.temperature, model.kmeans_rounds) == (256, 0.5, 20)
    assert (model.copy_epochs, model.mi_bins) == (5, 10)
    assert model.seed == 4


def test_nothing_set_is_the_default_model_with_the_scenarios_seed():
    require("torch")  # the deep plug-in validates these
    sc = parse_scenario("seed: 9\nalgorithm: {name: efd-mvc}\n")
    assert model_of(sc, [2, 2]) == DeepModel("efd-mvc", 4, (2, 2), seed=9)


def test_exactly_pretrain_rounds_plus_train_rounds_plus_two_rounds_is_enough():
    require("torch")  # the deep plug-in validates these
    parse_scenario(_deep("fmcsc", "protocol: {rounds: 11}\n"))  # 4 + 5 + 2
    parse_scenario(_deep("fmcsc", "protocol: {rounds: 6}\n", "  train_rounds: 0\n"))
    one = "  train_rounds: 1\n  pretrain_rounds: 1\n"
    parse_scenario(_deep("efd-mvc", "protocol: {kind: sync, rounds: 4}\n", one))


def test_a_shipped_style_file_validates_with_its_dataset(tmp_path):
    require("torch")  # the deep plug-in validates these
    f = tmp_path / "fmcsc.yaml"
    f.write_text(FMCSC, encoding="utf-8")
    sc = load_scenario(f)  # pre-flight builds the model with the dataset's dims
    model = model_of(sc, [2, 2])
    assert model.method == "fmcsc" and model.seed == 11


def test_model_of_needs_dims():
    require("torch")  # the deep plug-in validates these
    sc = parse_scenario(FMCSC)
    with pytest.raises(ScenarioError) as info:
        model_of(sc)
    assert info.value.path == "algorithm"
    assert info.value.reason == "fmcsc needs the views' feature counts to build its model"


def test_a_model_refusal_is_located():
    require("torch")  # the deep plug-in validates these
    sc = parse_scenario(FMCSC)
    with pytest.raises(ScenarioError) as info:
        model_of(sc, [5])
    assert info.value.path == "algorithm"
    assert info.value.reason == "fmcsc needs at least two views"
    # a value the schema would refuse first: the model's message names the key
    spec = EfdMvcSettings.model_construct(name="efd-mvc", n_clusters=4, latent=0)
    with pytest.raises(ScenarioError) as info:
        DEEP.build(BuildInput(spec, (3, 3), None, 0))
    assert info.value.path == "algorithm.latent"
    assert info.value.reason == "latent must be an int in 1 .. 4096, got 0"


# ------------------------------------------------------------------------------ refused

WHY_SECURE = (
    "masking fmcsc's float32 network weights is not implemented yet; set secure_aggregation: none"
)


@pytest.mark.parametrize(
    ("more", "path", "reason"),
    [
        (
            "protocol: {rule: weighted}\n",
            "protocol.rule",
            "fmcsc runs with rule 'sum' (the server weighs the clients' networks as the "
            "paper does), not 'weighted'",
        ),
        (
            "protocol: {kernel_scope: local}\n",
            "protocol.kernel_scope",
            "fmcsc min-max scales every client's views with the pooled ranges: "
            "kernel_scope must be global",
        ),
        (
            "protocol: {compression: {scheme: float16}}\n",
            "protocol.compression",
            "fmcsc's messages are network weights; compression is for the multi-view "
            "statistics only",
        ),
        (
            "privacy: {dp: {epsilon: 1.0, bounds: [[0, 1]]}}\n",
            "privacy.dp",
            "differential privacy is calibrated for the multi-view statistics; fmcsc's "
            "network weights have no clipping bound yet",
        ),
        ("privacy: {secure_aggregation: secagg}\n", "privacy.secure_aggregation", WHY_SECURE),
        ("privacy: {secure_aggregation: secagg+}\n", "privacy.secure_aggregation", WHY_SECURE),
        (
            "protocol: {personalization: {local_iters: 2}}\n",
            "protocol.personalization",
            "fmcsc has no personalised models; remove protocol.personalization",
        ),
        (
            "topology: {tiers: [{name: fog, count: 1, period: 2}]}\n",
            "topology.tiers.0.period",
            "fmcsc: every phase (pre-training, training, k-means) takes one root round, so "
            "tier periods must be 1",
        ),
        (
            "topology: {tiers: [{name: fog, count: 2, periods: {fog-1: 3}}], "
            "clients: {count: 4}}\n",
            "topology.tiers.0.period",
            "fmcsc: every phase (pre-training, training, k-means) takes one root round, so "
            "tier periods must be 1",
        ),
        (
            "protocol: {kind: async}\n",
            "protocol.kind",
            "fmcsc's pre-training, training and k-means phases need synchronous rounds: "
            "kind must be sync or adaptive, not 'async'",
        ),
        (
            "protocol: {kind: buffered}\n",
            "protocol.kind",
            "fmcsc's pre-training, training and k-means phases need synchronous rounds: "
            "kind must be sync or adaptive, not 'buffered'",
        ),
        (
            "protocol: {rounds: 10}\n",
            "protocol.rounds",
            "fmcsc needs at least pretrain_rounds + train_rounds + 2 = 11 rounds (4 of "
            "consensus pre-training, 5 of training, 1 of k-means candidates and at least 1 "
            "Lloyd round), got 10",
        ),
    ],
)
def test_each_protocol_refusal_is_located(more, path, reason):
    require("torch")  # the deep plug-in validates these
    errors = _errors(_deep("fmcsc", more))
    assert (path, reason) in errors, errors
    assert all(p != "algorithm.name" for p, _ in errors)  # PyTorch is installed here


def test_rounds_follow_train_rounds():
    require("torch")  # the deep plug-in validates these
    more = "  train_rounds: 10\n  pretrain_rounds: 2\n"
    errors = _errors(_deep("efd-mvc", "protocol: {rounds: 13}\n", more))
    assert errors == [
        (
            "protocol.rounds",
            "efd-mvc needs at least pretrain_rounds + train_rounds + 2 = 14 rounds (2 of "
            "consensus pre-training, 10 of training, 1 of k-means candidates and at least 1 "
            "Lloyd round), got 13",
        )
    ]


def test_several_refusals_are_reported_together():
    require("torch")  # the deep plug-in validates these
    errors = _errors(_deep("efd-mvc", "protocol: {kind: buffered, rule: mean, rounds: 2}\n"))
    assert sorted(p for p, _ in errors) == ["protocol.kind", "protocol.rounds", "protocol.rule"]


@pytest.mark.parametrize(
    ("name", "key", "value", "users"),
    [
        ("efd-mvc", "copy_epochs", "3", "fmcsc"),
        ("efd-mvc", "mi_bins", "8", "fmcsc"),
        ("fmcsc", "mu", "0.1", "efd-mvc"),
        ("fmcsc", "contrast_weight", "0.5", "efd-mvc"),
        ("fmcsc", "noise", "0.2", "efd-mvc"),
        ("hk-mvfc", "hidden", "[8]", "efd-mvc and fmcsc"),
        ("fedhk-tucker", "latent", "4", "efd-mvc and fmcsc"),
        ("mvfcm", "train_rounds", "4", "efd-mvc and fmcsc"),
        ("mvkm-ed", "lr", "0.1", "efd-mvc and fmcsc"),
        (
            "hk-mvfc",
            "local_epochs",
            "3",
            "e-fkmvc, efd-mvc, fedhk-mvc-person, fedhk-parafac2, fedhk-tucker and fmcsc",
        ),
        ("fmcsc", "rank", "2", "fedhk-mvc-person and fedhk-parafac2"),
        (
            "efd-mvc",
            "preset",
            "paper",
            "e-fkmvc, fedhk-mvc-person, fedhk-parafac2, fedhk-tucker and hk-mvfc",
        ),
    ],
)
def test_a_key_of_another_method_is_located(name, key, value, users):
    errors = _errors(_deep(name, algorithm=f"  {key}: {value}\n"))
    reason = f"{key} is for {users} only (name is {name!r}); remove it"
    assert errors == [(f"algorithm.{key}", reason)]


@pytest.mark.parametrize(
    ("key", "value"), [("m", "1.5"), ("alpha", "3"), ("kernel", "none"), ("center_update", "exact")]
)
@pytest.mark.parametrize("name", ["fmcsc", "efd-mvc"])
def test_the_fuzzy_keys_are_refused(name, key, value):
    errors = _errors(_deep(name, algorithm=f"  {key}: {value}\n"))
    assert errors == [
        (
            f"algorithm.{key}",
            f"{name} clusters its networks' embeddings with k-means (no fuzzifier, "
            f"view-weight exponent, heat kernel or centre update); remove {key}",
        )
    ]


@pytest.mark.parametrize(
    ("key", "value", "path", "reason"),
    [
        ("hidden", "[]", "algorithm.hidden", "must not be empty"),
        ("hidden", "[8, 8, 8, 8, 8, 8, 8]", "algorithm.hidden", "must have at most 6 entries"),
        ("hidden", "[8, 0]", "algorithm.hidden.1", "must be >= 1, got 0"),
        ("hidden", "[8193]", "algorithm.hidden.0", "must be <= 8192, got 8193"),
        ("latent", "0", "algorithm.latent", "must be >= 1, got 0"),
        ("head", "8193", "algorithm.head", "must be <= 8192, got 8193"),
        ("batch_size", "1", "algorithm.batch_size", "must be >= 2, got 1"),
        ("lr", "0", "algorithm.lr", "must be > 0, got 0"),
        ("temperature", "0.0", "algorithm.temperature", "must be > 0, got 0.0"),
        ("kmeans_rounds", "0", "algorithm.kmeans_rounds", "must be >= 1, got 0"),
        ("pretrain_epochs", "-1", "algorithm.pretrain_epochs", "must be >= 0, got -1"),
        ("mi_bins", "1", "algorithm.mi_bins", "must be >= 2, got 1"),
        ("train_rounds", "true", "algorithm.train_rounds", "must be an integer, got true"),
    ],
)
def test_bounds_match_the_model(key, value, path, reason):
    assert _errors(_deep("fmcsc", algorithm=f"  {key}: {value}\n")) == [(path, reason)]


# ------------------------------------------------------------------------------ no PyTorch

NO_TORCH_HOOK = '''
import sys


class _NoTorch:
    """Refuse torch as if it were not installed (later finders would find it)."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
'''


def test_torch_available_counts_a_refusing_import_hook_as_missing(monkeypatch):
    def refuse(name, package=None):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(deep.importlib.util, "find_spec", refuse)
    assert deep.torch_available() is False


def test_without_pytorch_the_algorithm_name_is_refused_in_process(monkeypatch):
    monkeypatch.setattr(deep, "torch_available", lambda: False)
    assert _errors(FMCSC) == [
        ("algorithm.name", 'fmcsc needs PyTorch, the [deep] extra: pip install "fedstrata[deep]"')
    ]


def test_validate_without_pytorch_names_the_extra(tmp_path):
    exe = shutil.which("fedstrata")
    if exe is None:
        pytest.fail("the fedstrata command is not on PATH: pip install -e '.[dev]'")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(NO_TORCH_HOOK, encoding="utf-8")
    scenario = tmp_path / "efd.yaml"
    scenario.write_text("# needs torch\nalgorithm:\n  name: efd-mvc\n", encoding="utf-8")
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "PYTHONIOENCODING": "utf-8", "NO_COLOR": "1"}
    res = subprocess.run(
        [exe, "validate", str(scenario)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert "Traceback" not in res.stderr + res.stdout
    assert res.returncode == 1, res.stderr
    assert res.stdout == ""
    assert res.stderr.splitlines() == [
        f"{scenario}:3: algorithm.name: efd-mvc needs PyTorch, the [deep] extra: pip install "
        '"fedstrata[deep]"'
    ]
    if not has("torch"):
        return  # the rest needs PyTorch: the same file validates where it is importable
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "NO_COLOR": "1"}
    # where PyTorch imports, the same file passes the extra check and meets the round
    # time budget instead: every default (60 s deadlines, 1 GFLOP/s clients) cannot fit
    # EFD-MVC's pre-training rounds, and a deadline that can is accepted
    budget = subprocess.run(
        [exe, "validate", str(scenario)], capture_output=True, text=True, timeout=120, env=env
    )
    assert budget.returncode == 1
    assert "protocol.deadline_s: rounds of cloud (cloud) cannot close" in budget.stderr
    scenario.write_text(
        "# needs torch\nalgorithm:\n  name: efd-mvc\nprotocol: {deadline_s: 2000}\n",
        encoding="utf-8",
    )
    ok = subprocess.run(
        [exe, "validate", str(scenario)], capture_output=True, text=True, timeout=120, env=env
    )
    assert ok.returncode == 0, ok.stderr


def test_a_network_too_big_for_one_message_is_refused_by_validate(tmp_path):
    require("torch")  # the deep plug-in validates these
    # the papers' Fc500-Fc500-Fc2000 encoders on the six digit views: FMCSC's model
    # body would carry 7 networks of 16,264,981 parameters, 434 MiB > the 64 MiB limit
    scenario = tmp_path / "big.yaml"
    scenario.write_text(
        "data: {dataset: multiple-features}\n"
        "topology: {clients: {count: 4}}\n"
        "algorithm: {name: fmcsc, n_clusters: 10, hidden: [500, 500, 2000]}\n",
        encoding="utf-8",
    )
    exe = shutil.which("fedstrata")
    assert exe is not None
    res = subprocess.run(
        [exe, "validate", str(scenario)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines() == [
        f"{scenario}:3: algorithm.hidden: fmcsc's model body would carry 7 network(s) of "
        "16,264,981 float32 parameters (434 MiB), over the wire limit of 64 MiB; choose "
        "smaller hidden widths"
    ]
