"""The multi-view plug-in's lean path: the model read once per process, the views prepared
once per configuration, with the bits of the long way."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstrata.algorithms.kernels import kernel_reference
from fedstrata.algorithms.multiview import (
    MultiViewModel,
    State,
    local_statistics,
    objective,
    prepare_views,
)
from fedstrata.errors import WireError
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.plugins import multiview as mvp
from fedstrata.plugins.messages import Shape, read_state, references_body, state_body

SHAPE = Shape(3, (2, 3))


def views(seed, n=5):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(n, 2)), rng.normal(size=(n, 3)) * 3.0]


def body_of(seed, scale=False):
    rng = np.random.default_rng(1000 + seed)
    body = {
        "phase": "iter",
        "centers": [rng.normal(size=(3, 2)), rng.normal(size=(3, 3))],
        "view_weights": np.array([0.3, 0.7]),
    }
    if scale:
        body["view_scale"] = np.array([0.5, 2.0])
    return body


def test_read_global_is_read_once_and_cannot_be_changed_by_its_readers():
    body = body_of(1)
    models = mvp.GlobalModels()
    a = mvp.read_global(body, SHAPE, models)
    assert a is mvp.read_global({**body}, SHAPE, models)  # same bytes: the same parsed model
    assert a is not mvp.read_global(body, SHAPE, mvp.GlobalModels())  # nothing shared besides
    assert all(not x.flags.writeable for x in (*a.centers, a.view_weights))
    with pytest.raises(ValueError, match="read-only"):
        a.centers[0][0, 0, 0] = 1.0
    want = read_state(body, SHAPE).batched()
    for x, y in zip((*a.centers, a.view_weights), (*want.centers, want.view_weights), strict=True):
        assert x.shape == y.shape and x.tobytes() == y.tobytes()
    body["centers"][0][0, 0] += 1.0  # the sender's body changes: a different model
    b = mvp.read_global(body, SHAPE, models)
    assert b is not a and b.centers[0][0, 0, 0] == a.centers[0][0, 0, 0] + 1.0
    scaled = mvp.read_global(body_of(1, scale=True), SHAPE)
    assert scaled is not a and scaled.view_scale is not None
    assert mvp.read_global(body_of(1), SHAPE).view_scale is None


def test_read_global_checks_every_model_it_has_not_seen():
    bad = body_of(2)
    bad["centers"][1][0, 0] = np.nan
    for _ in range(2):  # a rejected model is not remembered
        with pytest.raises(WireError, match="NaN"):
            mvp.read_global(bad, SHAPE)
    wrong = body_of(3)
    wrong["view_weights"] = np.array([0.9, 0.9])
    with pytest.raises(WireError, match="sum to 1"):
        mvp.read_global(wrong, SHAPE)
    odd = body_of(4)
    odd["centers"] = [a.astype(np.float32) for a in odd["centers"]]  # not the fast path
    got = mvp.read_global(odd, SHAPE)
    assert got.centers[0].dtype == np.float64
    with pytest.raises(WireError):
        mvp.read_global({**body_of(5), "view_scale": None}, SHAPE)


@pytest.mark.parametrize("rule", ["sum", "weighted"])
@pytest.mark.parametrize("update", ["exact", "paper"])
def test_the_lean_path_gives_the_bits_of_the_long_way(rule, update):
    model = MultiViewModel(3, center_update=update)
    iters = 1 if rule == "sum" else 2
    proto = ProtocolConfig(run="t", rule=rule, kernel_scope="global", local_iters=iters)
    algo = mvp.multiview_algorithm(model, proto, SHAPE)
    pooled = views(7, n=40)
    extras = references_body([kernel_reference(X) for X in pooled])
    for seed in range(3):
        vs = views(seed)
        learner = algo.learner(vs, view_ids=(0, 1), rng=np.random.default_rng(seed), node_id="c")
        learner.configure(extras)
        ref = algo.learner(vs, view_ids=(0, 1), rng=np.random.default_rng(seed), node_id="c")
        pv = prepare_views(
            vs,
            model,
            view_ids=(0, 1),
            n_views=2,
            references=[kernel_reference(X) for X in pooled],
        )
        for r in range(3):
            body = body_of(10 * seed + r)
            got, _ = learner.update(body)
            want, _ = algo.local_update(ref, read_state(body, SHAPE).batched(), pv)
            assert got.keys() == want.keys()
            for key in got:
                a, b = got[key], want[key]
                if isinstance(a, list):
                    assert [x.tobytes() for x in a] == [y.tobytes() for y in b], key
                elif isinstance(a, np.ndarray):
                    assert a.tobytes() == b.tobytes(), key
                else:
                    assert a == b, key
        done, _ = learner.finish(body_of(99))
        assert done["labels"].shape == (5,)


def test_configure_refuses_malformed_references_and_keeps_the_previous_ones():
    model = MultiViewModel(3)
    algo = mvp.multiview_algorithm(model, ProtocolConfig(run="t", rule="sum"), SHAPE)
    vs = views(0)
    learner = algo.learner(vs, view_ids=(0, 1), rng=np.random.default_rng(0), node_id="c")
    good = references_body([kernel_reference(X) for X in vs])
    learner.configure(good)
    before = learner.prepared()
    with pytest.raises(WireError):
        learner.configure({"refs": [None, None]})
    with pytest.raises(WireError):
        learner.configure({"refs": "x"})
    assert learner.prepared() is before
    learner.configure(good)  # a new configuration: the views are prepared again
    after = learner.prepared()
    assert after is not before
    assert all(x.tobytes() == y.tobytes() for x, y in zip(after.deltas, before.deltas, strict=True))


def test_model_bodies_carry_the_state_only():
    model = MultiViewModel(3)
    algo = mvp.multiview_algorithm(model, ProtocolConfig(run="t", rule="sum"), SHAPE)
    state = read_state(body_of(0), SHAPE)
    extras = references_body([kernel_reference(X) for X in views(0)])
    body = algo.model_body(state, extras)
    assert "refs" not in body and body.keys() == state_body(state).keys()
    back, got_extras = algo.read_model(body)
    assert got_extras == {} and back.view_weights.tobytes() == state.view_weights.tobytes()


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 40),
    c=st.integers(1, 6),
    dims=st.lists(st.integers(1, 11), min_size=1, max_size=3),
    held_mask=st.integers(1, 7),
    distance=st.sampled_from(["ked", "euclidean"]),
    kernel=st.sampled_from(["type1", "type2", "none"]),
    update=st.sampled_from(["exact", "paper", "derivation"]),
    membership=st.sampled_from(["fuzzy", "hard"]),
    m=st.sampled_from([2.0, 1.5, 3.0]),
    alpha=st.sampled_from([5.0, 2.0, 500.0]),  # 500: v^α rescaled (view_powers)
    scaled=st.booleans(),
    spread=st.sampled_from([1e-3, 1.0, 30.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_lean_statistics_has_the_bits_of_local_statistics(
    n, c, dims, held_mask, distance, kernel, update, membership, m, alpha, scaled, spread, seed
):
    rng = np.random.default_rng(seed)
    H = len(dims)
    held = [g for g in range(H) if held_mask >> g & 1] or [0]
    model = MultiViewModel(
        c,
        m=m,
        alpha=alpha,
        distance=distance,
        kernel=kernel,
        center_update=update,
        membership=membership,
    )
    data = [rng.normal(size=(n, dims[g])) * spread for g in held]
    if n > 1:
        data[0][1] = data[0][0]  # a repeated sample: ties in the memberships
    pv = prepare_views(data, model, view_ids=held, n_views=H)
    weights = rng.dirichlet(np.ones(H))
    centers = tuple(rng.normal(size=(1, c, d)) * spread for d in dims)
    if n > 0:
        centers[held[0]][0, 0] = data[0][0]  # a centre on a sample: a zero distance
    scale = rng.uniform(0.2, 3.0, size=(1, H)) if scaled else None
    state = State(centers, weights[None], scale)
    glob = mvp.GlobalModel(state)
    with np.errstate(all="ignore"):
        want = local_statistics(pv, state, model)
        J_want = objective(want, state.view_weights, alpha)[0]
        got = mvp.lean_statistics(pv, glob, model)
    want = want.take(0)
    num, den, costs, mass, J = got
    assert [a.tobytes() for a in num] == [a.tobytes() for a in want.center_num]
    assert [a.tobytes() for a in den] == [a.tobytes() for a in want.center_den]
    assert [a.shape for a in num + den] == [a.shape for a in want.center_num + want.center_den]
    assert costs.tobytes() == want.view_costs.tobytes()
    assert mass.tobytes() == want.cluster_mass.tobytes()
    assert np.float64(J).tobytes() == np.float64(J_want).tobytes()
