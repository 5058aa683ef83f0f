"""Partials as flat vectors and back (what secure aggregation sums), with hypothesis."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fedstrata.errors import WireError
from fedstrata.privacy import fixedpoint
from fedstrata.privacy.layout import Layout, SummedField, flatten, unflatten

LAYOUT = Layout(
    (
        SummedField("w", ((2, 3), (2, 1)), listed=True, optional_by="held", noised=True),
        SummedField("held", ((2,),)),
        SummedField("counts", ((2,),), integer=True),
        SummedField("n", ((),), integer=True),
        SummedField("objective", ((),)),
    ),
    {"mode": "params"},
)

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@st.composite
def partials(draw):
    held = draw(st.lists(st.booleans(), min_size=2, max_size=2))
    w = [
        draw(arrays(np.float64, shape, elements=finite)) if h else None
        for h, shape in zip(held, ((2, 3), (2, 1)), strict=True)
    ]
    return {
        "mode": "params",
        "w": w,
        "held": np.array(held, dtype=np.float64),
        "counts": draw(arrays(np.int64, (2,), elements=st.integers(0, 10**6))),
        "n": draw(st.integers(0, 10**9)),
        "objective": draw(finite),
    }


@given(partials())
def test_a_partial_comes_back_from_its_vector(p):
    v = flatten(p, LAYOUT)
    assert v.shape == (LAYOUT.length,) == (6 + 2 + 2 + 2 + 1 + 1,)
    back = unflatten(v, LAYOUT)
    assert back["mode"] == "params"
    for a, b, h in zip(back["w"], p["w"], p["held"], strict=True):
        if h:
            np.testing.assert_array_equal(a, b)
        else:
            assert a is None
    np.testing.assert_array_equal(back["counts"], p["counts"])
    assert back["counts"].dtype == np.int64
    assert back["n"] == p["n"] and isinstance(back["n"], int)
    assert back["objective"] == p["objective"]


@settings(max_examples=60)
@given(st.lists(partials(), min_size=1, max_size=12))
def test_the_decoded_fixed_point_sum_of_vectors_is_the_sum_of_partials(ps):
    """Encode each vector, add modulo 2**64, decode: the partials' sum within precision."""
    scale = 24
    clip = 2.0**30
    total = np.zeros(LAYOUT.length, dtype=np.uint64)
    for p in ps:
        total += fixedpoint.encode(
            flatten(p, LAYOUT), scale_bits=scale, clip=clip, n_summands=len(ps)
        )
    s = unflatten(fixedpoint.decode(total, n_summands=len(ps), scale_bits=scale, clip=clip), LAYOUT)
    tol = len(ps) * 2.0**-scale
    assert s["n"] == sum(p["n"] for p in ps)
    np.testing.assert_array_equal(s["counts"], sum(p["counts"] for p in ps))
    for h in range(2):
        held = [p["w"][h] for p in ps if p["w"][h] is not None]
        if not held:
            assert s["w"][h] is None  # nobody held the view: None again, not zeros
        else:
            np.testing.assert_allclose(s["w"][h], sum(held), rtol=1e-12, atol=tol)


def test_what_cannot_travel_through_a_sum_is_refused():
    p = {
        "mode": "params",
        "w": [np.zeros((2, 3)), None],
        "held": np.array([1.0, 0.0]),
        "counts": np.zeros(2, dtype=np.int64),
        "n": 1,
        "objective": 0.0,
    }
    flatten(p, LAYOUT)
    with pytest.raises(WireError, match="cannot be securely aggregated"):
        flatten({**p, "items": []}, LAYOUT)
    with pytest.raises(WireError, match="must be 'params'"):
        flatten({**p, "mode": "stats"}, LAYOUT)
    with pytest.raises(WireError, match="shape"):
        flatten({**p, "held": np.zeros(3)}, LAYOUT)
    with pytest.raises(WireError, match="not numeric"):
        flatten({**p, "n": "1"}, LAYOUT)
    assert flatten({**p, "sub": 2}, LAYOUT, skip=("sub",)).shape == (LAYOUT.length,)
    with pytest.raises(WireError, match="length"):
        unflatten(np.zeros(3), LAYOUT)
