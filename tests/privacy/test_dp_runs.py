"""DP on the clients' statistics in a run: noise, clipping, the ε the record reports."""

from __future__ import annotations

import numpy as np
import pytest

from fedstrata.algorithms.multiview import MultiViewModel
from fedstrata.errors import ScenarioError
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.plugins import multiview as mvp
from fedstrata.plugins.messages import Shape
from fedstrata.privacy.dp import Accountant
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import run_scenario

SCENARIO = """
name: dp
seed: 0
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 100}, partition: {kind: iid}}
topology: {clients: {count: 4}}
algorithm: {name: hk-mvfc, n_clusters: 4}
protocol: {rule: RULE, rounds: 6, tol: 0.0, local_iters: ITERS}
privacy:
  dp: {epsilon: EPS, delta: 1.0e-5, unit: client, clip: 50, bounds: [[0, 10], [-8, 8]]}
"""


def scenario(eps=4.0, rule="sum", iters=1):
    text = SCENARIO.replace("EPS", str(eps)).replace("RULE", rule).replace("ITERS", str(iters))
    return parse_scenario(text)


def test_the_record_reports_the_epsilon_the_accountant_gives(tmp_path):
    summary = run_scenario(scenario(), tmp_path, progress=False, plots=False)
    p = summary["privacy"]
    assert (p["mechanism"], p["epsilon"], p["delta"], p["clip"]) == ("gaussian", 4.0, 1e-5, 50.0)
    # one budget: the private setup's two stages and the six rounds
    assert summary["rounds"] == 6
    assert p["releases"] == 8
    assert p["phases"]["setup"]["releases"] == 2
    assert p["phases"]["rounds"]["releases"] == 6
    # dp-accounting itself, for the noise the run used: within the budget, and tight
    acc = Accountant(1e-5)
    acc.spend(p["noise_multiplier"], count=8)
    assert acc.epsilon() <= 4.0
    assert p["epsilon_spent"] == pytest.approx(acc.epsilon(), rel=1e-6)
    assert p["epsilon_spent"] > 0.99 * 4.0


def test_runs_with_dp_are_deterministic_and_differ_from_runs_without(tmp_path):
    a = run_scenario(scenario(), tmp_path / "a", progress=False, plots=False)
    b = run_scenario(scenario(), tmp_path / "b", progress=False, plots=False)
    assert (tmp_path / "a/labels.csv").read_bytes() == (tmp_path / "b/labels.csv").read_bytes()
    assert a["metrics"] == b["metrics"]
    text = SCENARIO.replace("EPS", "4").replace("RULE", "sum").replace("ITERS", "1")
    plain = parse_scenario(text[: text.index("privacy:")])
    c = run_scenario(plain, tmp_path / "c", progress=False, plots=False)
    assert "privacy" not in c
    assert (tmp_path / "a/labels.csv").read_bytes() != (tmp_path / "c/labels.csv").read_bytes()


def test_a_client_partial_is_clipped_noised_and_carries_no_objective():
    shape = Shape(4, (2, 2))
    model = MultiViewModel(4, center_update="exact")
    rng = np.random.default_rng(0)
    views = [rng.normal(size=(30, 2)) * 10, rng.normal(size=(30, 2)) * 10]
    body = {
        "phase": "iter",
        "centers": [rng.normal(size=(4, 2)), rng.normal(size=(4, 2))],
        "view_weights": np.array([0.5, 0.5]),
    }

    def partial(dp_clip, noise):
        proto = ProtocolConfig(
            run="t", rule="sum", kernel_scope="local", dp_clip=dp_clip, dp_noise=noise
        )
        algo = mvp.multiview_algorithm(model, proto, shape)
        learner = algo.learner(views, view_ids=(0, 1), rng=np.random.default_rng(1), node_id="c")
        return learner.update(body)[0]

    def flat(p):
        return np.concatenate([*(a.ravel() for a in p["num"] + p["den"]), p["costs"], p["mass"]])

    raw = partial(None, 0.0)
    assert np.linalg.norm(flat(raw)) > 5.0  # the clip below binds
    clipped = partial(5.0, 0.0)  # no noise: clipping alone, to norm 5
    assert np.linalg.norm(flat(clipped)) == pytest.approx(5.0)
    np.testing.assert_allclose(flat(clipped), flat(raw) * 5.0 / np.linalg.norm(flat(raw)))
    assert clipped["objective"] == 0.0 and raw["objective"] != 0.0
    assert clipped["n"] == raw["n"] and clipped["counts"].tolist() == raw["counts"].tolist()
    noisy = partial(5.0, 2.0)  # noise std 10 on a vector of norm 5
    assert np.linalg.norm(flat(noisy) - flat(clipped)) > 10.0


def test_dp_needs_summed_statistics():
    with pytest.raises(ScenarioError, match=r"privacy\.dp: noise is added to summed statistics"):
        scenario(rule="weighted", iters=2)


def _with(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


@pytest.mark.parametrize("schedule", ["eq93", "eq93-normalised"])
def test_the_adaptive_budget_noises_each_round_by_eq89_and_reports_the_composed_total(
    tmp_path, schedule
):
    from fedstrata.privacy.dp import adaptive_budget, gaussian_sigma

    text = SCENARIO.replace("EPS", "4").replace("RULE", "sum").replace("ITERS", "1")
    text = _with(text, "clip: 50,", f"clip: 50, schedule: {schedule},")
    summary = run_scenario(parse_scenario(text), tmp_path, progress=False, plots=False)
    p = summary["privacy"]
    # Eq. 93 by hand: eps_t = 4/sqrt(6)/sqrt(t+1); Eq. 89: z_t = sqrt(2 ln(1.25/delta))/eps_t
    eps = 4.0 / np.sqrt(6.0) / np.sqrt(np.arange(1, 7))
    z = np.sqrt(2 * np.log(1.25 / 1e-5)) / eps
    assert gaussian_sigma(1.0, 1e-5) == pytest.approx(z[0] * eps[0])
    if schedule == "eq93":
        assert p["noise_multiplier"] == pytest.approx([z[0], z[-1]], rel=1e-8)
    else:  # the same shape, scaled so that the whole run (setup included) spends 4
        first, last = p["noise_multiplier"]
        assert last / first == pytest.approx(z[-1] / z[0], rel=1e-8)
        scale = z[0] / first
        assert scale < adaptive_budget(4.0, 6, normalise="accountant", delta=1e-5)[0] / eps[0]
        z = z / scale
    rounds = Accountant(1e-5)
    for zt in z:
        rounds.spend(float(zt))
    assert p["phases"]["rounds"]["epsilon"] == pytest.approx(rounds.epsilon(), rel=1e-6)
    if schedule == "eq93-normalised":  # the run's ε, setup and rounds together
        assert p["epsilon_spent"] == pytest.approx(4.0, rel=1e-6)
    else:  # the literal schedule spends less than its target under RDP (see the docs)
        assert p["phases"]["rounds"]["epsilon"] < 4.0
        assert p["epsilon_spent"] <= 4.0  # validate refuses a literal schedule that would not
    # the whole run adds the private setup's two releases at the run's constant noise
    assert p["phases"]["setup"]["releases"] == 2
    assert p["epsilon_spent"] > p["phases"]["rounds"]["epsilon"]


def test_a_schedule_uses_growing_noise_round_after_round():
    cfg = ProtocolConfig(rule="sum", dp_clip=1.0, dp_noise=9.0, dp_schedule=(1.0, 2.0, 3.0))
    assert [cfg.noise_multiplier(t) for t in range(5)] == [1.0, 2.0, 3.0, 3.0, 3.0]
    assert ProtocolConfig(rule="sum", dp_clip=1.0, dp_noise=9.0).noise_multiplier(7) == 9.0


def test_per_block_clipping_bounds_each_block_and_scales_the_noise():
    """Each block within its own bound; noise std z·2·c_b (four blocks) on block b."""
    shape = Shape(2, (3,))
    cfg = ProtocolConfig(
        rule="sum", dp_clip=1.0, dp_noise=0.0, dp_block_clips=(10.0, 1.0, 2.0, 3.0)
    )
    model = MultiViewModel(2)
    algo = mvp.StatisticsAlgorithm(model, cfg, shape)
    rng = np.random.default_rng(0)
    learner = algo.learner([rng.normal(size=(20, 3))], view_ids=[0], rng=rng, node_id="c")
    partial = {
        "mode": "stats",
        "num": [np.full((2, 3), 100.0)],
        "den": [np.full((2, 3), 0.1)],
        "costs": np.array([50.0]),
        "mass": np.array([0.5, 0.5]),
        "counts": np.array([20]),
        "n": 20,
        "contributors": 1,
        "objective": 3.0,
    }
    out = learner._private(dict(partial))  # z = 0: clipping only
    assert np.linalg.norm(out["num"][0]) == pytest.approx(10.0)
    np.testing.assert_allclose(out["den"][0], 0.1)  # within its bound: untouched
    assert out["costs"] == pytest.approx([2.0])
    np.testing.assert_allclose(out["mass"], 0.5)
    noisy = ProtocolConfig(
        rule="sum", dp_clip=1.0, dp_noise=0.5, dp_block_clips=(10.0, 1.0, 2.0, 3.0)
    )
    algo = mvp.StatisticsAlgorithm(model, noisy, shape)
    learner = algo.learner([rng.normal(size=(20, 3))], view_ids=[0], rng=rng, node_id="c")
    draws = np.array([learner._private(dict(partial))["den"][0] - 0.1 for _ in range(400)])
    assert draws.std() == pytest.approx(0.5 * 2 * 1.0, rel=0.08)


def test_validate_refuses_a_literal_schedule_the_setup_pushes_past_its_budget(tmp_path):
    """Eq. 93 as printed takes the rounds' share; with one round it spends ε on it alone."""
    import subprocess

    text = SCENARIO.replace("EPS", "4").replace("RULE", "sum").replace("ITERS", "1")
    text = _with(text, "rounds: 6", "rounds: 1")
    text = _with(text, "clip: 50,", "clip: 50, schedule: eq93,")
    path = tmp_path / "eq93.yaml"
    path.write_text(text)
    res = subprocess.run(["fedstrata", "validate", str(path)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "privacy.dp.schedule" in res.stderr and "above its budget 4" in res.stderr
    path.write_text(text.replace("eq93,", "eq93-normalised,"))
    ok = subprocess.run(["fedstrata", "validate", str(path)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
