"""The deep plug-in driven through its node interface, without a transport."""

import numpy as np
import pytest

from tests.extras import require

require("torch")


from fedstrata.algorithms.deep import DeepModel  # noqa: E402  (after the extra check)
from fedstrata.algorithms.deep.rounds import train_round  # noqa: E402  (after the extra check)
from fedstrata.errors import WireError  # noqa: E402  (after the extra check)
from fedstrata.nodes.config import ProtocolConfig  # noqa: E402  (after the extra check)
from fedstrata.plugins.deep import DeepAlgorithm  # noqa: E402  (after the extra check)
from fedstrata.plugins.messages import Shape  # noqa: E402  (after the extra check)
from fedstrata.wire import VERSION, Envelope, decode, encode  # noqa: E402  (after the extra check)
from tests.algorithms.conftest import blobs  # noqa: E402  (after the extra check)

TINY = {
    "pretrain_rounds": 1,
    "hidden": (16,),
    "latent": 4,
    "head": 8,
    "pretrain_epochs": 30,
    "local_epochs": 5,
}


def _federation(method, view_sets, seed=0, **kw):
    views, y = blobs(n_per=60, seed=seed)
    dims = tuple(v.shape[1] for v in views)
    model = DeepModel(method, 4, dims, batch_size=32, seed=seed, **{**TINY, **kw})
    alg = DeepAlgorithm(model, ProtocolConfig(), Shape(4, dims))
    parts = np.array_split(np.random.default_rng(seed).permutation(len(y)), len(view_sets))
    learners = [
        alg.learner(
            [views[v][ix] for v in vids],
            view_ids=vids,
            rng=np.random.default_rng(i),
            node_id=f"client-{i}",
        )
        for i, (ix, vids) in enumerate(zip(parts, view_sets, strict=True))
    ]
    return alg, learners, parts, views, y


def _wire(body, sender="client-0"):
    env = Envelope(
        v=VERSION, kind="update", run="r", round=1, tier="edge", sender=sender, body=body
    )
    return encode(env)


def _run(alg, learners, max_rounds=40):
    """Setup, rounds through the wire codec, finish: (labels per client, update bytes)."""
    rng = np.random.default_rng(99)
    setup = [decode(_wire(lr.setup()[0])).body for lr in learners]
    for b in setup:
        alg.check_setup(b)
    state, extras, complete = alg.after_setup(alg.merge_setup(setup, rng), None)
    assert complete
    for lr in learners:
        lr.configure(extras)
    objective, sent = float("nan"), []
    for _ in range(max_rounds):
        body = decode(_wire(alg.model_body(state, extras))).body
        raw = [_wire(lr.update(body)[0], lr.node_id) for lr in learners]
        sent.append(raw)
        partials = [decode(r).body for r in raw]
        for p in partials:
            alg.check_partial(p)
        step = alg.next_state(alg.combine(partials), state, objective, tol=1e-6, relative=True)
        assert step.state is not None
        state, objective = step.state, step.objective
        if step.converged:
            break
    body = alg.model_body(state, extras)
    return [lr.finish(body)[0]["labels"] for lr in learners], sent, state


FULL, ONE, OTHER = [0, 1], [0], [1]


@pytest.mark.parametrize("method", ["fmcsc", "efd-mvc"])
def test_phases_and_a_lloyd_fixed_point_over_every_clients_features(method):
    alg, learners, _, _, _ = _federation(method, [FULL, FULL, FULL, ONE, OTHER])
    labels, sent, state = _run(alg, learners)
    # pre-training, 5 training rounds, candidates, then Lloyd rounds until a fixed point
    assert 1 + 5 + 1 + 1 <= len(sent) <= 1 + 5 + 1 + alg.model.kmeans_rounds
    C = state["centroids"]
    assert C.shape == (4, 4)
    E = np.vstack([lr._client.embed(state["groups"]) for lr in learners])
    assign = ((E[:, None, :] - C[None]) ** 2).sum(-1).argmin(axis=1)
    assert np.array_equal(assign, np.concatenate(labels))
    for k in np.unique(assign):
        # the final centres are the means of their members, computed here from every
        # client's features (the run only ever saw per-client sums)
        np.testing.assert_allclose(C[k], E[assign == k].mean(axis=0), atol=1e-9)


def test_a_training_round_averages_the_uploads_by_their_weights():
    alg, learners, *_ = _federation("fmcsc", [FULL, ONE, OTHER, FULL])
    rng = np.random.default_rng(5)
    setup = [lr.setup()[0] for lr in learners]
    state, extras, _ = alg.after_setup(alg.merge_setup(setup, rng), None)
    for lr in learners:
        lr.configure(extras)
    state = alg.next_state(
        alg.combine([lr.update(alg.model_body(state, extras))[0] for lr in learners]),
        state,
        float("nan"),
        tol=0.0,
        relative=True,
    ).state
    # after pre-training every group holds the sample-weighted mean network
    assert len({g.tobytes() for g in state["groups"].values()}) == 1
    body = alg.model_body(state, extras)
    uploads = [
        train_round(lr._client, state["groups"], seed)[0]
        for lr, seed in zip(learners, [11, 12, 13, 14], strict=True)
    ]
    partials = []
    for ups in uploads:
        partials.append(
            {
                "mode": "deep-train",
                "sums": {u.group: u.params * np.float32(u.weight) for u in ups},
                "weights": {u.group: u.weight for u in ups},
                "loss": 0.0,
                "n": 1,
                "contributors": 1,
            }
        )
    new = alg.next_state(alg.combine(partials), state, 0.0, tol=0.0, relative=True).state
    for group in alg.groups:
        mine = [u for ups in uploads for u in ups if u.group == group]
        # multi-view clients send the multi-view model and a copy per view; single-view
        # clients their view's model
        assert mine, group
        expected = sum(u.weight * u.params.astype(np.float64) for u in mine) / sum(
            u.weight for u in mine
        )
        np.testing.assert_allclose(new["groups"][group], expected, rtol=1e-5, atol=1e-6)
    assert body["deep"] == 1 and new["step"] == 2


@pytest.mark.parametrize("method", ["fmcsc", "efd-mvc"])
def test_same_seed_same_bytes_and_labels(method):
    runs = []
    for _ in range(2):
        alg, learners, *_ = _federation(method, [FULL, ONE, OTHER, FULL], seed=3)
        runs.append(_run(alg, learners, max_rounds=9))
    (labels_a, sent_a, _), (labels_b, sent_b, _) = runs
    assert sent_a == sent_b
    assert all(np.array_equal(a, b) for a, b in zip(labels_a, labels_b, strict=True))
    alg, learners, *_ = _federation(method, [FULL, ONE, OTHER, FULL], seed=4)
    assert _run(alg, learners, max_rounds=2)[1][1] != sent_a[1]


def test_upload_bytes_are_four_per_parameter_per_model_plus_a_fixed_envelope():
    # FMCSC: a multi-view client uploads V + 1 networks, a single-view client one; the
    # bytes beyond 4 per float32 parameter do not depend on the network's size.
    overhead = {}
    for hidden in [(16,), (40, 24)]:
        alg, learners, *_ = _federation("fmcsc", [FULL, ONE], hidden=hidden)
        _, sent, _ = _run(alg, learners, max_rounds=2)
        P = alg.model.parameter_count
        train_round = sent[1]
        for who, raw, models in [("multi", train_round[0], 3), ("single", train_round[1], 1)]:
            overhead.setdefault(who, set()).add(len(raw) - 4 * P * models)
    assert all(len(v) == 1 for v in overhead.values()), overhead
    assert all(0 < next(iter(v)) < 400 for v in overhead.values()), overhead


def test_malformed_partials_are_refused():
    alg, _learners, *_ = _federation("efd-mvc", [FULL, ONE])
    P = alg.model.parameter_count
    good = {
        "mode": "deep-train",
        "sums": {"all": np.zeros(P, np.float32)},
        "weights": {"all": 1.0},
        "loss": 0.0,
        "n": 3,
        "contributors": 1,
    }
    alg.check_partial(good)
    bad = [
        {**good, "sums": {"all": np.zeros(P, np.float64)}},
        {**good, "sums": {"all": np.zeros(P - 1, np.float32)}},
        {**good, "sums": {"all": np.full(P, np.nan, np.float32)}},
        {**good, "sums": {"view0": np.zeros(P, np.float32)}, "weights": {"view0": 1.0}},
        {**good, "weights": {"all": -1.0}},
        {**good, "weights": {}},
        {**good, "contributors": 0},
        {**good, "mode": "deep-unknown"},
        {
            "mode": "deep-lloyd",
            "sums": np.zeros((9, 4)),
            "counts": np.zeros(9),
            "inertia": 0.0,
            "n": 1,
            "contributors": 1,
        },
        {
            "mode": "deep-candidates",
            "cands": np.zeros((2, 5)),
            "sizes": np.ones(2),
            "n": 1,
            "contributors": 1,
        },
    ]
    for body in bad:
        with pytest.raises(WireError):
            alg.check_partial(body)


def test_a_model_body_is_checked():
    alg, *_ = _federation("fmcsc", [FULL, ONE])
    P = alg.model.parameter_count
    vectors = [np.zeros(P, np.float32)] * 3
    alg.read_model({"deep": 0, "groups": vectors})
    for body in [
        {"deep": -1, "groups": vectors},
        {"deep": 0, "groups": vectors[:2]},
        {"deep": 0, "groups": [np.zeros(P, np.float64)] * 3},
        {"deep": 9, "groups": vectors},  # a Lloyd round without centres
        {"deep": 9, "groups": vectors, "centroids": np.zeros((5, 4))},  # more than 4 clusters
    ]:
        with pytest.raises(WireError):
            alg.read_model(body)
