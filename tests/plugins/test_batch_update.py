"""The multi-view family's batched client step and final labels: each client's own bits."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstrata.algorithms.kernels import kernel_reference
from fedstrata.algorithms.multiview import MultiViewModel
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.plugins import multiview as mvp
from fedstrata.plugins.messages import Shape, read_state, references_body


def _packed(body):
    from fedstrata import wire

    env = wire.Envelope(kind="update", run="t", round=0, tier="edge", sender="c", body=body)
    return wire.encode(env)


def _same(got, want):
    assert got.keys() == want.keys()
    for key in got:
        a, b = got[key], want[key]
        if isinstance(a, list):
            assert [x.shape for x in a] == [y.shape for y in b], key
            assert [x.tobytes() for x in a] == [y.tobytes() for y in b], key
        elif isinstance(a, np.ndarray):
            assert a.shape == b.shape and a.dtype == b.dtype, key
            assert a.tobytes() == b.tobytes(), key
        else:
            assert type(a) is type(b) and a == b, key


@settings(max_examples=120, deadline=None)
@given(
    c=st.integers(1, 6),
    dims=st.lists(st.integers(1, 11), min_size=1, max_size=3),
    sizes=st.lists(st.sampled_from([1, 2, 5, 5, 5, 9, 300]), min_size=1, max_size=12),
    masks=st.lists(st.integers(1, 7), min_size=12, max_size=12),
    distance=st.sampled_from(["ked", "euclidean"]),
    kernel=st.sampled_from(["type1", "type2", "none"]),
    update=st.sampled_from(["exact", "paper", "derivation"]),
    membership=st.sampled_from(["fuzzy", "hard"]),
    m=st.sampled_from([2.0, 1.3, 3.0]),
    alpha=st.sampled_from([5.0, 2.0, 500.0]),  # 500: v^α rescaled (view_powers)
    bandwidth=st.sampled_from([None, 1.0]),
    spread=st.sampled_from([1e-3, 1.0, 30.0]),
    seed=st.integers(0, 2**32 - 1),
    scaled=st.booleans(),  # MVKM-ED's per-view β on δ, carried by the model
)
def test_every_batched_partial_has_the_bits_of_the_clients_own_update(
    c,
    dims,
    sizes,
    masks,
    distance,
    kernel,
    update,
    membership,
    m,
    alpha,
    bandwidth,
    spread,
    seed,
    scaled,
):
    rng = np.random.default_rng(seed)
    H = len(dims)
    shape = Shape(c, tuple(dims))
    model = MultiViewModel(
        c,
        m=m,
        alpha=alpha,
        distance=distance,
        kernel=kernel,
        center_update=update,
        membership=membership,
        bandwidth=bandwidth,
    )
    algo = mvp.multiview_algorithm(model, ProtocolConfig(run="t", rule="sum"), shape)
    pooled = [rng.normal(size=(50, d)) * spread for d in dims]
    extras = references_body([kernel_reference(X) for X in pooled])
    learners = []
    for j, n in enumerate(sizes):
        held = tuple(g for g in range(H) if masks[j] >> g & 1) or (0,)
        data = [rng.normal(size=(n, dims[g])) * spread for g in held]
        learner = algo.learner(data, view_ids=held, rng=np.random.default_rng(j), node_id=f"c{j}")
        learner.configure(extras)
        learners.append(learner)
    body = {
        "phase": "iter",
        "centers": [rng.normal(size=(c, d)) * spread for d in dims],
        "view_weights": rng.dirichlet(np.ones(H)),
    }
    if scaled:
        body["view_scale"] = rng.uniform(0.1, 3.0, size=H)
    with np.errstate(all="ignore"):
        batched = algo.update_batch(learners, body)
        own = [learner.update(body) for learner in learners]
    assert len(batched) == len(learners)
    for got, want, n in zip(batched, own, sizes, strict=True):
        if n > mvp.LEAN_MAX_SAMPLES:
            assert got is None  # not the lean step: the client computes its own
            continue
        assert got is not None
        _same(got[0], want[0])
        assert got[1] == want[1]
    final = {**body, "phase": "final"}
    with np.errstate(all="ignore"):
        batched_final = algo.finish_batch(learners, final)
        own_final = [learner.finish(final) for learner in learners]
    for got, want, n in zip(batched_final, own_final, sizes, strict=True):
        if n > mvp.LEAN_MAX_SAMPLES:
            assert got is None
            continue
        assert got is not None
        _same(got[0], want[0])  # labels and memberships: dtype, shape and bytes
        assert got[0]["memberships"].flags.c_contiguous and got[1] == want[1]
    observers = []
    for j in range(len(sizes)):
        held = learners[j].view_ids
        refs = [kernel_reference(pooled[g]) for g in held]
        observers.append(algo.observer(learners[j].views, held, refs))
    state = read_state(body, shape)
    with np.errstate(all="ignore"):
        together = algo.labels_batch(observers, state)
        alone = [o(state) for o in observers]
    for got, want in zip(together, alone, strict=True):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_dp_and_per_client_kernel_scales_are_left_to_the_clients():
    shape = Shape(2, (2,))
    model = MultiViewModel(2)
    body = {"phase": "iter", "centers": [np.eye(2)], "view_weights": np.ones(1)}
    proto = ProtocolConfig(run="t", rule="sum")
    algo = mvp.multiview_algorithm(model, proto, shape)
    X = np.random.default_rng(0).normal(size=(5, 2))
    extras = references_body([kernel_reference(X)])
    learner = algo.learner([X], view_ids=(0,), rng=np.random.default_rng(0), node_id="a")
    learner.configure(extras)
    assert algo.update_batch([learner], body)[0] is not None
    assert algo.update_batch([learner], {**body, "kernel_scale": {"a": 0.5}}) == [None]
    noisy = mvp.multiview_algorithm(
        model, ProtocolConfig(run="t", rule="sum", dp_clip=1.0, dp_noise=1.0), shape
    )
    other = noisy.learner([X], view_ids=(0,), rng=np.random.default_rng(0), node_id="b")
    other.configure(extras)
    assert noisy.update_batch([other], body) == [None]
    assert algo.update_batch([other], body) == [None]  # another algorithm's learner
    weighted = mvp.multiview_algorithm(model, ProtocolConfig(run="t", rule="weighted"), shape)
    assert weighted.update_batch([learner], body) == [None]  # local fitting: never batched
    final = {**body, "phase": "final"}
    assert algo.finish_batch([learner], final)[0] is not None
    assert weighted.finish_batch([learner], final) == [None]
    personal = mvp.multiview_algorithm(
        model, ProtocolConfig(run="t", rule="sum", personal_iters=3), shape
    )
    mine = personal.learner([X], view_ids=(0,), rng=np.random.default_rng(0), node_id="c")
    mine.configure(extras)
    assert personal.finish_batch([mine], final) == [None]  # fits its local model first


def test_a_stack_is_kept_only_for_a_group_asked_for_again():
    """Groups asked for once (a first round's stragglers) are not held to the end."""
    from fedstrata.plugins.batch_update import StackCache, stack_views

    shape = Shape(2, (3,))
    algo = mvp.multiview_algorithm(MultiViewModel(2), ProtocolConfig(run="t", rule="sum"), shape)
    rng = np.random.default_rng(0)
    pvs = [
        algo.learner([rng.normal(size=(4, 3))], view_ids=(0,), rng=rng, node_id=f"c{j}").prepared()
        for j in range(5)
    ]
    cache = StackCache(entries=2)
    once = cache.get(pvs[:1])
    assert cache._stacks == {} and len(cache._seen) == 1
    first, second, third = cache.get(pvs), cache.get(pvs), cache.get(pvs)
    assert first is not second and second is third  # kept from the second request
    want = stack_views(pvs)
    for a, b in zip(third.views + third.dX, want.views + want.dX, strict=True):
        assert a.tobytes() == b.tobytes()
    assert once.views[0].tobytes() == pvs[0].views[0][None].tobytes()
    for k in range(1, 5):  # the seen groups and the stacks stay within ``entries``
        cache.get(pvs[:k])
        cache.get(pvs[:k])
    assert len(cache._stacks) <= 2 and len(cache._seen) <= 2


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([2, 5, 5, 5, 9]), min_size=1, max_size=8),
    partial=st.lists(st.booleans(), min_size=8, max_size=8),
    bandwidth=st.sampled_from([None, 1.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_batched_setup_replies_are_each_clients_own_and_draw_only_when_claimed(
    sizes, partial, bandwidth, seed
):
    rng = np.random.default_rng(seed)
    shape = Shape(3, (2, 3))
    model = MultiViewModel(3, bandwidth=bandwidth)
    algo = mvp.multiview_algorithm(model, ProtocolConfig(run="t", rule="sum"), shape)

    def learners(tag):
        out = []
        for j, n in enumerate(sizes):
            held = (1,) if partial[j] else (0, 1)
            data = [
                np.random.default_rng([seed, j, g]).normal(size=(n, shape.dims[g])) for g in held
            ]
            gen = np.random.default_rng([seed, j])
            out.append(algo.learner(data, view_ids=held, rng=gen, node_id=f"{tag}{j}"))
        return out

    mine, theirs = learners("a"), learners("b")
    before = [m.rng.bit_generator.state for m in mine]
    batched = algo.setup_batch(mine, {"phase": "setup"})
    assert [m.rng.bit_generator.state for m in mine] == before  # nothing drawn yet
    for j, (got, learner, own) in enumerate(zip(batched, mine, theirs, strict=True)):
        want = own.setup()
        if partial[j]:
            assert got is None  # no candidates to seed: its own call
            continue
        assert got is not None
        assert _packed(got[0]) == _packed(want[0])  # every value, bit for bit
        assert got[1] == want[1]
        assert got[2]() is True  # claimed: the draws of its own call
        assert learner.rng.bit_generator.state == own.rng.bit_generator.state
    mover = learners("c")
    entries = algo.setup_batch(mover, {"phase": "setup"})
    for learner, entry in zip(mover, entries, strict=True):
        if entry is not None:
            learner.rng.random()  # the generator moved: the batched reply is refused
            assert entry[2]() is False
    assert algo.setup_batch(mine, {"phase": "setup", "request": {}}) == [None] * len(mine)
    del rng
