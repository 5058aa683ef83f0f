"""Stacked seeding candidates are each client's own: the same bits, the same draws."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstrata.algorithms.seeding import local_candidates
from fedstrata.algorithms.seeding_batch import local_candidates_batch


@settings(max_examples=150, deadline=None)
@given(
    B=st.integers(1, 9),
    n=st.sampled_from([1, 3, 4, 5, 5, 8, 20, 63]),
    dims=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    c=st.integers(1, 6),
    spread=st.sampled_from([1e-6, 1.0, 1e4]),
    ties=st.booleans(),  # repeated rows: equal distances, empty clusters
    nan=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_client_gets_the_candidates_and_draws_of_its_own_call(
    B, n, dims, c, spread, ties, nan, seed
):
    rng = np.random.default_rng(seed)
    views = [rng.normal(size=(B, n, d)) * spread for d in dims]
    if ties:
        for X in views:
            X[:, n // 2 :] = X[:, :1]
    if nan:
        views[0][0, 0, 0] = np.nan
    mine = [np.random.default_rng([seed, b]) for b in range(B)]
    theirs = [np.random.default_rng([seed, b]) for b in range(B)]
    with np.errstate(all="ignore"):
        got = local_candidates_batch(views, c, mine)
        want = [local_candidates([X[b] for X in views], c, theirs[b]) for b in range(B)]
    assert len(got) == B
    for (cands, sizes), (w_cands, w_sizes) in zip(got, want, strict=True):
        assert sizes.tobytes() == w_sizes.tobytes() and sizes.dtype == w_sizes.dtype
        assert [a.shape for a in cands] == [a.shape for a in w_cands]
        assert [a.tobytes() for a in cands] == [a.tobytes() for a in w_cands]
    for a, b in zip(mine, theirs, strict=True):  # each generator advanced the same
        assert a.bit_generator.state == b.bit_generator.state
