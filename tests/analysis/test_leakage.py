"""Issue 31, item 6: what one aggregator can reconstruct of its members, plain and private.

A small federation (six clients, two of them holding one sample per class, four
samples for four clusters) runs multi-view fuzzy c-means with rule ``sum`` in the
simulator, once without privacy and once with ``secure_aggregation: secagg``; the
root's messages are tapped and the attacks of :mod:`fedstrata.analysis.leakage` run on
its view. Without privacy they recover every client's local centres of every round
and the small clients' samples (so these tests can fail); with secure aggregation
they recover nothing the published model does not already say.

Ground truth comes from the clients' data only: the local centres of a round are
recomputed here from a client's samples and the model the root broadcast that round
(decoded with :func:`fedstrata.wire.decode`, not by the module under test), with the
fuzzy c-means formulas written out afresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedstrata import wire
from fedstrata.analysis import leakage
from fedstrata.scenarios.loader import load_scenario
from fedstrata.scenarios.orchestrate import Run
from fedstrata.scenarios.run import SimTransport

SCENARIO = """\
name: leakage-{tag}
seed: 3
data:
  dataset: heat-kernel-synthetic
  params: {{n_per_cluster: 30}}
  # one sample per class for clients 4 and 5: four samples, as many as clusters
  partition: {{kind: stratified, fractions: [0.3, 0.3, 0.2, 0.132, 0.034, 0.034]}}
topology:
  clients: {{count: 6}}
algorithm: {{name: mvfcm, n_clusters: 4, m: 2.0, alpha: 5.0}}
protocol: {{rule: sum, rounds: 5, tol: 0.0, deadline_s: 30}}
{privacy}
"""

RECOVERED = 1e-6  # absolute: the features are of order 1 to 10
HIDDEN = 1e-3  # in data spreads (7e-3 here): thousands of times RECOVERED
SETUP_NOT_PRIVATE = (
    "issue 31: the setup round still sends each client's candidates (its samples when "
    "it holds at most c) and feature extremes in the clear; drop this marker when the "
    "private setup round lands"
)


@dataclass
class Observed:
    """A tapped run: its federation, the root's view, the models broadcast by round."""

    fed: Any
    view: leakage.AggregatorView
    models: dict[int, dict[str, Any]]

    @property
    def rounds(self) -> list[int]:
        """The five model rounds (after the setup rounds; the last model is the final)."""
        return sorted(self.models)[:-1]

    def client_views(self, client: str) -> list[np.ndarray]:
        idx = self.fed.client_indices[client]
        return [X[idx] for X in self.fed.dataset.views]

    @property
    def spread(self) -> float:
        """RMS distance of the pooled samples to their mean (views concatenated)."""
        return float(
            np.sqrt(sum(((X - X.mean(0)) ** 2).sum(1).mean() for X in self.fed.dataset.views))
        )

    @property
    def small(self) -> list[str]:
        c = self.fed.model.n_clusters
        return [k for k, idx in self.fed.client_indices.items() if len(idx) <= c]


class _Tapping(SimTransport):
    """The simulator's transport, tapping the root once the federation is built."""

    def build(self, sc: Any) -> Any:
        fed = super().build(sc)
        self.messages = leakage.tap(fed.sim.node(sc.topology.cloud_id))
        return fed


def _run(tmp: Path, tag: str, privacy: str) -> Observed:
    path = tmp / f"{tag}.yaml"
    path.write_text(SCENARIO.format(tag=tag, privacy=privacy), encoding="utf-8")
    sc = load_scenario(path)
    transport = _Tapping()
    fed, summary, _ = Run(sc, transport).execute()
    assert summary["status"] == "round_limit" and summary["rounds"] == 5, summary["status"]
    root = sc.topology.cloud_id
    models = {}
    for msg in transport.messages:
        env = wire.decode(msg.payload)  # unsigned runs: the envelope itself
        if msg.direction == "out" and env.kind == "model" and "centers" in env.body:
            models[env.round] = env.body
    # five rounds and the final model, after one setup round (two when it is private)
    first = min(models)
    assert sorted(models) == list(range(first, first + 6))
    assert first == (2 if privacy else 1)
    return Observed(fed, leakage.aggregator_view(transport.messages, root), models)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Observed:
    return _run(tmp_path_factory.mktemp("leak"), "plain", "")


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Observed:
    return _run(tmp_path_factory.mktemp("leak"), "secagg", "privacy: {secure_aggregation: secagg}")


def true_local_centres(views: list[np.ndarray], model: dict[str, Any], m: float, alpha: float):
    """Per view (c, d): the client's fuzzy c-means centres, one step under ``model``."""
    centres = [np.asarray(a) for a in model["centers"]]
    v = np.asarray(model["view_weights"])
    D = np.zeros((views[0].shape[0], centres[0].shape[0]))  # (n, c)
    for h, (X, A) in enumerate(zip(views, centres, strict=True)):
        D += v[h] ** alpha * np.square(X[:, None, :] - A[None, :, :]).sum(-1)
    inv = D ** (-1.0 / (m - 1.0))
    weight = (inv / inv.sum(axis=1, keepdims=True)) ** m
    return [(weight.T @ X) / weight.sum(axis=0)[:, None] for X in views]


def centre_errors(obs: Observed, client: str, estimates, source: str) -> np.ndarray:
    """|estimate - truth| per (round, view, cluster): Euclidean over the view's features."""
    m, alpha = obs.fed.model.m, obs.fed.model.alpha
    out = []
    for t, found in sorted(estimates[client].items()):
        truth = true_local_centres(obs.client_views(client), obs.models[t], m, alpha)
        for e in found:
            if e.source == source:
                for est, tru in zip(e.values, truth, strict=True):
                    out.append(np.sqrt(np.square(est - tru).sum(axis=1)))
    assert out, f"no {source!r} estimate for {client}"
    return np.concatenate(out)


def sample_distances(samples: list[np.ndarray], guess: list[np.ndarray]) -> np.ndarray:
    """Per true sample, its distance to the nearest guessed row (views concatenated)."""
    S, G = np.hstack(samples), np.hstack(guess)
    G = np.where(np.isfinite(G), G, np.inf)
    return np.sqrt(np.square(S[:, None, :] - G[None, :, :]).sum(-1)).min(axis=1)


def sample_attack(obs: Observed) -> dict[str, list[leakage.Estimate]]:
    m = obs.fed.model
    return leakage.sample_estimates(
        obs.view, leakage.fcm_weights(m.m, m.alpha), obs.fed.algorithm.secure_layout()
    )


# ------------------------------------------------------------------ without privacy


def test_a_plain_run_gives_away_every_clients_local_centres(plain: Observed) -> None:
    est = leakage.local_centre_estimates(plain.view)
    assert sorted(est) == sorted(plain.fed.client_indices)
    for client in plain.fed.client_indices:
        assert sorted(est[client]) == [1, 2, 3, 4, 5]
        err = centre_errors(plain, client, est, "partial")
        assert err.max() <= RECOVERED, (client, err.max())


def test_a_plain_run_gives_away_small_clients_samples_from_the_rounds_alone(
    plain: Observed,
) -> None:
    found = sample_attack(plain)
    assert len(plain.small) == 2
    for client in plain.small:
        rounds = [e for e in found[client] if e.source == "partial"]
        assert rounds, client
        worst = sample_distances(plain.client_views(client), rounds[0].values).max()
        assert worst <= RECOVERED, (client, worst)


def test_a_plain_setup_round_gives_away_small_clients_samples_and_every_extreme(
    plain: Observed,
) -> None:
    found = sample_attack(plain)
    for client in plain.small:
        setup = [e for e in found[client] if e.source == "setup"]
        assert sample_distances(plain.client_views(client), setup[0].values).max() <= RECOVERED
    extremes = leakage.extreme_estimates(plain.view)
    for client in plain.fed.client_indices:
        for X, got in zip(plain.client_views(client), extremes[client][0].values, strict=True):
            assert np.abs(got - np.vstack([X.min(0), X.max(0)])).max() <= RECOVERED


# ------------------------------------------------------------------ secure aggregation


def test_secure_aggregation_leaves_no_plaintext_partial(private: Observed) -> None:
    assert private.view.updates == {}
    assert private.view.undecoded == 0
    for t in private.rounds:
        assert sorted(private.view.masked[t]) == sorted(private.fed.client_indices)


def test_secure_aggregation_hides_every_clients_local_centres(private: Observed) -> None:
    """The masked words say nothing; the sums say only what the published model says.

    No centre of any round comes within HIDDEN of the truth, and the masked words read
    as an encoding do no better, typically, than the pooled mean guessed for every
    centre (the median over rounds, views and clusters: garbage ratios are spread
    widely, so their luckiest entry says nothing). The masks are fresh randomness in
    every run, so that median scatters around the pooled mean's: in 60 runs it fell
    below it in 9, never under 0.93 of it. Hence the 0.8 margin; words that leaked the
    centres would sit near 0.
    """
    est = leakage.local_centre_estimates(private.view, private.fed.algorithm.secure_layout())
    spread = private.spread
    pooled = np.hstack([X.mean(0) for X in private.fed.dataset.views])
    m = private.fed.model
    for client in private.fed.client_indices:
        masked = centre_errors(private, client, est, "masked")
        public = centre_errors(private, client, est, "sum")  # the next broadcast
        views = private.client_views(client)
        guess = []
        for t in private.rounds:
            truth = true_local_centres(views, private.models[t], m.m, m.alpha)
            guess.append(np.sqrt(np.square(np.hstack(truth) - pooled).sum(1)))
        closest = min(masked.min(), public.min())
        assert closest >= HIDDEN * spread, (client, closest / spread)
        assert np.median(masked) >= 0.8 * np.median(np.concatenate(guess)), client


def test_secure_aggregation_hides_small_clients_samples(private: Observed) -> None:
    """No sample of a small client comes closer than the published model's centres do.

    The floor is the model, not the pooled mean: a client's samples lie near the
    cluster centres every member receives (0.06 to 0.11 spreads here, against 0.65
    for the pooled mean), and the attack may start from them. Half that distance
    leaves room for where a fit on noise happens to stop.
    """
    found = sample_attack(private)
    spread = private.spread
    published = [
        np.vstack([np.asarray(b["centers"][h]) for b in private.models.values()])
        for h in range(len(private.fed.dataset.views))
    ]
    for client in private.small:
        samples = private.client_views(client)
        sources = {e.source for e in found[client]}
        assert "masked" in sources, (client, sources)  # the rounds were attacked
        best = min(sample_distances(samples, e.values).min() for e in found[client])
        floor = sample_distances(samples, published).min()
        assert best >= max(HIDDEN * spread, floor / 2), (client, best / spread, floor / spread)


def test_secure_aggregation_hides_every_clients_feature_extremes(private: Observed) -> None:
    extremes = leakage.extreme_estimates(private.view)
    spread = private.spread
    for client, found in extremes.items():
        for X, got in zip(private.client_views(client), found[0].values, strict=True):
            err = np.abs(got - np.vstack([X.min(0), X.max(0)])).min()
            assert err >= HIDDEN * spread, (client, err / spread)
