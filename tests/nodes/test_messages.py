"""Message bodies: additive partials compose, malformed bodies raise WireError."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstrata import wire
from fedstrata.algorithms.combine import ParamUpdate, weighted_average
from fedstrata.errors import WireError
from fedstrata.plugins.messages import (
    Shape,
    add_partials,
    check_partial,
    params_partial,
    solve_params,
)

SHAPE = Shape(3, (2, 4))


def _update(rng, n, held=(True, True)):
    centers = tuple(
        rng.normal(size=(3, d)) if h else None for d, h in zip(SHAPE.dims, held, strict=True)
    )
    v = rng.dirichlet(np.ones(2)) * np.array(held)
    return ParamUpdate(centers, v / v.sum(), n)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 7), split=st.integers(1, 6))
def test_tree_of_sums_equals_flat_weighted_average(seed, k, split):
    rng = np.random.default_rng(seed)
    ups = [_update(rng, int(rng.integers(1, 50))) for _ in range(k)]
    parts = [params_partial(u, "weighted") for u in ups]
    # aggregate in two levels: groups, then the group sums (through the wire, as a fog would)
    groups = [parts[i : i + split] for i in range(0, k, split)]
    sums = [
        wire.decode(
            wire.encode(
                wire.Envelope(
                    kind="update",
                    run="r",
                    round=1,
                    tier="fog",
                    sender="f",
                    body=add_partials(g, SHAPE),
                )
            )
        ).body
        for g in groups
    ]
    total = add_partials(sums, SHAPE)
    prev = type(weighted_average(ups))(tuple(np.zeros((3, d)) for d in SHAPE.dims), np.full(2, 0.5))
    got = solve_params(total, SHAPE, prev)
    want = weighted_average(ups)
    for a, b in zip(got.centers, want.centers, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.view_weights, want.view_weights, rtol=1e-12)


def test_median_items_concatenate_and_give_median():
    rng = np.random.default_rng(0)
    ups = [_update(rng, 5) for _ in range(5)]
    total = add_partials(
        [
            add_partials([params_partial(u, "median") for u in ups[:2]], SHAPE),
            add_partials([params_partial(u, "median") for u in ups[2:]], SHAPE),
        ],
        SHAPE,
    )
    assert len(total["items"]) == 5
    prev = weighted_average(ups)
    got = solve_params(total, SHAPE, prev)
    np.testing.assert_allclose(
        got.centers[0], np.median(np.stack([u.centers[0] for u in ups]), axis=0)
    )


def _good():
    return params_partial(_update(np.random.default_rng(1), 10), "weighted")


BAD = {
    "unknown mode": lambda b: b.update(mode="magic"),
    "wrong shape": lambda b: b.update(wcenters=[np.zeros((3, 3)), b["wcenters"][1]]),
    "too few views": lambda b: b.update(wcenters=b["wcenters"][:1]),
    "nan": lambda b: b.update(wviews=np.array([np.nan, 1.0])),
    "negative n": lambda b: b.update(n=-1),
    "bool n": lambda b: b.update(n=True),
    "string array": lambda b: b.update(wheld="ab"),
    "missing objective": lambda b: b.pop("objective"),
    "zero contributors": lambda b: b.update(contributors=0),
}


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_partial_raises_wire_error(case):
    body = _good()
    BAD[case](body)
    with pytest.raises(WireError):
        check_partial(body, SHAPE)


def test_mixed_modes_refused():
    rng = np.random.default_rng(2)
    with pytest.raises(WireError, match="different modes"):
        add_partials(
            [
                params_partial(_update(rng, 3), "weighted"),
                params_partial(_update(rng, 3), "median"),
            ],
            SHAPE,
        )


def _stats_body(rng):
    k, dims = SHAPE.n_clusters, SHAPE.dims
    return {
        "mode": "stats",
        "num": [rng.normal(size=(k, d)) for d in dims],
        "den": [rng.random((k, d)) for d in dims],
        "costs": rng.random(len(dims)),
        "mass": rng.random(k),
        "counts": np.array([5, 5], dtype=np.int64),
        "n": 5,
        "contributors": 1,
        "objective": 1.0,
    }


def _fields(body):
    """(key, list index or None) of every array field of a stats or params partial."""
    out = []
    for key, value in body.items():
        if isinstance(value, list):
            out += [(key, h) for h in range(len(value))]
        elif isinstance(value, np.ndarray):
            out.append((key, None))
    return out


def _set(body, field, value):
    key, h = field
    if h is None:
        body[key] = value
    else:
        body[key][h] = value


def _first_problem_in_order(body, shape):
    """The error a check field by field, in the body's documented order, must give."""
    from fedstrata.plugins.messages import _check_fields

    try:
        _check_fields(body, shape, None)
    except WireError as exc:
        return str(exc)
    return None


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    kind=st.sampled_from(["stats", "params"]),
    problems=st.lists(
        st.tuples(st.integers(0, 20), st.sampled_from(["nan", "inf", "shape", "type"])),
        max_size=3,
    ),
)
def test_one_finiteness_check_reports_the_first_problem_in_order(seed, kind, problems):
    """check_partial checks finiteness of all arrays at once; errors stay those of order."""
    rng = np.random.default_rng(seed)
    body = _stats_body(rng) if kind == "stats" else params_partial(_update(rng, 10), "weighted")
    fields = _fields(body)
    for index, problem in problems:
        field = fields[index % len(fields)]
        key, h = field
        current = body[key][h] if h is not None else body[key]
        if not isinstance(current, np.ndarray):  # already made a non-array
            continue
        arr = current.astype(np.float64)
        if problem in ("nan", "inf"):
            arr.flat[index % arr.size] = np.nan if problem == "nan" else -np.inf
            _set(body, field, arr)
        elif problem == "shape":
            _set(body, field, np.zeros((*arr.shape, 1)))
        else:
            _set(body, field, "not an array")
    want = _first_problem_in_order(body, SHAPE)
    if want is None:
        assert check_partial(body, SHAPE) == kind
    else:
        with pytest.raises(WireError) as caught:
            check_partial(body, SHAPE)
        assert str(caught.value) == want


def test_a_nan_before_a_bad_shape_is_the_error_reported():
    body = _stats_body(np.random.default_rng(0))
    body["num"][0] = np.full((3, 2), np.nan)
    body["mass"] = np.zeros(7)
    with pytest.raises(WireError, match=r"'num\[0\]' holds NaN"):
        check_partial(body, SHAPE)
    body["num"][0] = np.zeros((3, 2))
    body["costs"] = np.array([np.inf, 0.0])
    with pytest.raises(WireError, match=r"'costs' holds NaN or infinite"):
        check_partial(body, SHAPE)
