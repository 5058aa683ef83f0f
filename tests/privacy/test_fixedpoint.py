"""Fixed-point encoding: exact sums, the headroom rule, range checks, bad input."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fedstrata.errors import PrivacyError, ValidationError
from fedstrata.privacy import fixedpoint as fp
from fedstrata.privacy.fixedpoint import FixedPointOverflowError

FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def ring_sum(encodings: list[np.ndarray], modulus_bits: int = 64) -> np.ndarray:
    total = np.zeros_like(encodings[0])
    for e in encodings:
        total += e  # uint64 wraps modulo 2**64
    return fp.wrap(total, modulus_bits=modulus_bits)


@st.composite
def sums(draw: st.DrawFn) -> tuple[np.ndarray, int, float, int]:
    """(values of shape (n, L), scale_bits, clip, modulus_bits) within the headroom rule."""
    n = draw(st.integers(1, 1000))
    length = draw(st.integers(1, 4))
    modulus_bits = draw(st.sampled_from([64, 64, 48, 32]))
    clip = draw(st.sampled_from([1e-3, 0.5, 1.0, 3.7, 1000.0, 2.0**20]))
    scale_bits = draw(st.integers(0, 40))
    bound = np.ldexp(clip, scale_bits)
    assume(bound >= 1)
    assume(n <= fp.max_summands(scale_bits=scale_bits, clip=clip, modulus_bits=modulus_bits))
    # extremes at and beyond the clip bound, zeros, tiny values, ordinary values
    special = st.sampled_from([clip, -clip, 2 * clip, -3 * clip, 0.0, -0.0, 5e-324, -1e-300])
    value = st.one_of(special, st.floats(-clip, clip, allow_nan=False))
    kind = draw(st.sampled_from(["mixed", "all+clip", "all-clip"]))
    if kind == "all+clip":
        x = np.full((n, length), clip)
    elif kind == "all-clip":
        x = np.full((n, length), -clip)
    else:
        head = draw(st.lists(value, min_size=length, max_size=8 * length))
        x = np.resize(np.asarray(head, dtype=np.float64), (n, length))
        x *= draw(st.sampled_from([1.0, -1.0]))
    return x, scale_bits, clip, modulus_bits


@pytest.mark.slow
@settings(FAST, max_examples=150)
@given(case=sums(), data=st.data())
def test_masked_sum_decodes_to_the_exact_rounded_sum(case, data) -> None:
    x, f, clip, k = case
    n = x.shape[0]
    enc = [fp.encode(row, scale_bits=f, clip=clip, n_summands=n, modulus_bits=k) for row in x]
    assert all(e.dtype == np.uint64 for e in enc)
    assert k == 64 or not any((e >> np.uint64(k)).any() for e in enc)
    # masks that cancel modulo 2**k do not change the decoded sum
    seed = data.draw(st.integers(0, 2**32 - 1))
    mask = np.random.default_rng(seed).integers(0, 2**64, size=x.shape[1], dtype=np.uint64)
    enc[0] = fp.wrap(enc[0] + mask, modulus_bits=k)
    enc[-1] = fp.wrap(enc[-1] - mask, modulus_bits=k)
    got = fp.decode(ring_sum(enc, k), n_summands=n, scale_bits=f, clip=clip, modulus_bits=k)

    clipped = np.clip(x, -clip, clip)
    q = np.rint(np.ldexp(clipped, f))
    for j in range(x.shape[1]):
        exact_q = sum(int(v) for v in q[:, j])
        assert got[j] == float(Fraction(exact_q, 2**f))  # decode is exact up to float rounding
        exact = sum(Fraction(float(v)) for v in clipped[:, j])
        assert abs(Fraction(exact_q, 2**f) - exact) <= Fraction(n, 2 ** (f + 1))


@settings(FAST, max_examples=60)
@given(
    f=st.integers(0, 40),
    clip=st.sampled_from([0.25, 1.0, 1000.0, 12345.678]),
    k=st.sampled_from([64, 40, 16]),
    sign=st.sampled_from([1.0, -1.0]),
)
def test_headroom_boundary_is_exact(f: int, clip: float, k: int, sign: float) -> None:
    assume(np.ldexp(clip, f) >= 1)
    n_max = fp.max_summands(scale_bits=f, clip=clip, modulus_bits=k)
    assume(1 <= n_max <= 10**6)
    one = fp.encode([sign * clip], scale_bits=f, clip=clip, n_summands=n_max, modulus_bits=k)
    total = fp.wrap(one * np.uint64(n_max), modulus_bits=k)  # n_max summands at the bound
    got = fp.decode(total, n_summands=n_max, scale_bits=f, clip=clip, modulus_bits=k)
    q = fp.max_abs_encoding(scale_bits=f, clip=clip)
    assert got[0] == sign * float(Fraction(n_max * q, 2**f))
    with pytest.raises(FixedPointOverflowError):
        fp.encode([0.0], scale_bits=f, clip=clip, n_summands=n_max + 1, modulus_bits=k)
    with pytest.raises(FixedPointOverflowError):
        fp.decode(total, n_summands=n_max + 1, scale_bits=f, clip=clip, modulus_bits=k)


def test_headroom_rule_numbers() -> None:
    # n * Q <= 2**(k-1) - 1 with Q = rint(clip * 2**f)
    assert fp.max_abs_encoding(scale_bits=4, clip=100) == 1600
    assert fp.max_summands(scale_bits=4, clip=100, modulus_bits=16) == 32767 // 1600 == 20
    assert fp.max_summands(scale_bits=24, clip=1000.0) == (2**63 - 1) // (1000 * 2**24)
    fp.check_headroom(n_summands=20, scale_bits=4, clip=100, modulus_bits=16)
    with pytest.raises(FixedPointOverflowError, match="at most 20 summands"):
        fp.check_headroom(n_summands=21, scale_bits=4, clip=100, modulus_bits=16)
    assert issubclass(FixedPointOverflowError, PrivacyError)


def test_overflowing_sum_with_small_modulus_is_refused_not_wrapped() -> None:
    # 21 values at +100 would give 33600 > 2**15 - 1: in 16 bits that wraps to -31936
    enc = [fp.encode([100.0], scale_bits=4, clip=100, n_summands=20, modulus_bits=16)] * 21
    total = ring_sum(enc, 16)
    with pytest.raises(FixedPointOverflowError):
        fp.decode(total, n_summands=21, scale_bits=4, clip=100, modulus_bits=16)


@pytest.mark.parametrize("k", [64, 32])
def test_out_of_range_sum_is_detected(k: int) -> None:
    enc = fp.encode([7.0, -7.0], scale_bits=10, clip=10.0, n_summands=3, modulus_bits=k)
    ok = fp.decode(ring_sum([enc] * 3, k), n_summands=3, scale_bits=10, clip=10.0, modulus_bits=k)
    assert ok.tolist() == [21.0, -21.0]
    # five summands at 7 exceed 3 * 10: not a sum of three clipped values
    with pytest.raises(FixedPointOverflowError, match="outside"):
        fp.decode(ring_sum([enc] * 5, k), n_summands=3, scale_bits=10, clip=10.0, modulus_bits=k)
    # leftover mask: a uniform value almost surely leaves the range
    junk = np.random.default_rng(1).integers(0, 2**k, size=1000, dtype=np.uint64)
    with pytest.raises(FixedPointOverflowError):
        fp.decode(junk, n_summands=3, scale_bits=10, clip=10.0, modulus_bits=k)
    # the most negative ring value is outside too (no abs() overflow)
    lowest = np.array([1 << (k - 1)], dtype=np.uint64)
    with pytest.raises(FixedPointOverflowError):
        fp.decode(lowest, n_summands=3, scale_bits=10, clip=10.0, modulus_bits=k)


def test_clipping_and_rounding() -> None:
    x = np.array([-5.0, -1.0, -0.3, 0.0, 0.3, 1.0, 5.0])
    enc = fp.encode(x, scale_bits=2, clip=1.0, n_summands=1)
    got = fp.decode(enc, n_summands=1, scale_bits=2, clip=1.0)
    assert got.tolist() == [-1.0, -1.0, -0.25, 0.0, 0.25, 1.0, 1.0]
    assert enc[0] == 2**64 - 4  # two's complement of -4
    matrix = fp.encode(np.ones((2, 3)), scale_bits=8, clip=2.0, n_summands=2)
    assert matrix.shape == (2, 3)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_is_rejected(bad: float) -> None:
    with pytest.raises(ValidationError, match="NaN or infinite"):
        fp.encode([1.0, bad], scale_bits=8, clip=1.0, n_summands=1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"scale_bits": -1, "clip": 1.0}, "scale_bits"),
        ({"scale_bits": 1.5, "clip": 1.0}, "scale_bits"),
        ({"scale_bits": 8, "clip": 0.0}, "clip"),
        ({"scale_bits": 8, "clip": float("nan")}, "clip"),
        ({"scale_bits": 8, "clip": 1e-9}, "resolution"),
        ({"scale_bits": 8, "clip": 1.0, "modulus_bits": 65}, "modulus_bits"),
        ({"scale_bits": 8, "clip": 1.0, "modulus_bits": 1}, "modulus_bits"),
        ({"scale_bits": 8, "clip": 1.0, "n_summands": 0}, "n_summands"),
        ({"scale_bits": 8, "clip": 1.0, "n_summands": True}, "n_summands"),
    ],
)
def test_invalid_parameters(kwargs: dict, match: str) -> None:
    kwargs = {"n_summands": 1, **kwargs}
    with pytest.raises(ValidationError, match=match):
        fp.encode([0.5], **kwargs)


def test_invalid_inputs() -> None:
    with pytest.raises(ValidationError, match="dtype"):
        fp.encode(np.array([1j]), scale_bits=8, clip=1.0, n_summands=1)
    with pytest.raises(ValidationError, match="integers"):
        fp.decode(np.array([1.5]), n_summands=1, scale_bits=8, clip=1.0)
    with pytest.raises(ValidationError, match="integers"):
        fp.decode(np.array([-1]), n_summands=1, scale_bits=8, clip=1.0)
    with pytest.raises(ValidationError, match="uint64"):
        fp.wrap(np.array([1], dtype=np.int64))
    # Python ints and other unsigned arrays are accepted
    assert fp.decode([2**64 - 256], n_summands=1, scale_bits=8, clip=1.0).tolist() == [-1.0]
    assert fp.decode(np.array([256], np.uint32), n_summands=1, scale_bits=8, clip=1.0) == [1.0]
