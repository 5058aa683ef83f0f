"""Shamir sharing over GF(2**31 - 1): recovery, errors, and what t - 1 shares show."""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from fedstrata.errors import PrivacyError, ValidationError
from fedstrata.privacy import shamir
from fedstrata.privacy.shamir import PRIME, InsufficientSharesError, InvalidShareError

FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
secrets32 = st.binary(min_size=32, max_size=32)


def test_prime_is_the_mersenne_prime_m31() -> None:
    assert PRIME == 2**31 - 1
    assert all(PRIME % d for d in range(2, math.isqrt(PRIME) + 1))  # trial division: prime
    assert shamir.SHARE_BYTES == 64
    assert shamir.SECRET_BYTES == 32


@settings(FAST, max_examples=120)
@given(
    secret=secrets32,
    n=st.integers(1, 40),
    data=st.data(),
)
def test_any_t_subset_recovers(secret: bytes, n: int, data: st.DataObject) -> None:
    t = data.draw(st.integers(1, n), label="t")
    ids = data.draw(
        st.lists(st.integers(1, PRIME - 1), min_size=n, max_size=n, unique=True), label="ids"
    )
    shares = shamir.split(secret, t, ids)
    assert list(shares) == ids
    assert all(len(s) == shamir.SHARE_BYTES for s in shares.values())
    size = data.draw(st.integers(t, n), label="subset size")
    subset = data.draw(st.permutations(ids), label="order")[:size]
    assert shamir.combine({i: shares[i] for i in subset}, t) == secret


def test_every_3_subset_of_5_recovers_and_no_2_subset_does() -> None:
    secret = os.urandom(32)
    shares = shamir.split(secret, 3, [1, 2, 3, 4, 5])
    for combo in itertools.combinations(shares, 3):
        assert shamir.combine({i: shares[i] for i in combo}, 3) == secret
    for combo in itertools.combinations(shares, 2):
        with pytest.raises(InsufficientSharesError, match="2 share"):
            shamir.combine({i: shares[i] for i in combo}, 3)


def test_large_group() -> None:
    secret = os.urandom(32)
    shares = shamir.split(secret, 501, range(1, 1001))
    rng = np.random.default_rng(0)
    picked = rng.choice(np.arange(1, 1001), size=501, replace=False)
    assert shamir.combine({int(i): shares[int(i)] for i in picked}, 501) == secret
    assert shamir.combine(shares, 501) == secret


def test_threshold_one_is_the_secret_itself() -> None:
    secret = os.urandom(32)
    shares = shamir.split(secret, 1, [7, 9])
    assert shamir.combine({9: shares[9]}, 1) == secret


@pytest.mark.parametrize("bad", [0, -1, PRIME, PRIME + 5, 1.0, "1", True, None])
def test_invalid_ids(bad: object) -> None:
    with pytest.raises(ValidationError, match="share id"):
        shamir.split(bytes(32), 2, [1, bad])  # type: ignore[list-item]
    good = shamir.split(bytes(32), 1, [1])[1]
    with pytest.raises(ValidationError, match="share id"):
        shamir.combine({bad: good, 1: good}, 1)  # type: ignore[dict-item]


def test_duplicate_ids_and_bad_thresholds() -> None:
    with pytest.raises(ValidationError, match="distinct"):
        shamir.split(bytes(32), 2, [1, 2, 1])
    with pytest.raises(ValidationError, match="distinct"):
        shamir.split(bytes(32), 2, [1, np.int64(1)])
    for t in (0, -1, True, 2.0):
        with pytest.raises(ValidationError, match="threshold"):
            shamir.split(bytes(32), t, [1, 2, 3])  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="exceeds"):
        shamir.split(bytes(32), 4, [1, 2, 3])
    for secret in (b"", bytes(31), bytes(33), "x" * 32):
        with pytest.raises(ValidationError, match="32 bytes"):
            shamir.split(secret, 1, [1])  # type: ignore[arg-type]


def test_malformed_and_inconsistent_shares() -> None:
    shares = shamir.split(os.urandom(32), 3, [1, 2, 3, 4])
    three = {i: shares[i] for i in (1, 2, 3)}
    with pytest.raises(InvalidShareError, match="64 bytes"):
        shamir.combine({**three, 1: shares[1][:-1]}, 3)
    outside = (PRIME).to_bytes(4, "little") + shares[1][4:]
    with pytest.raises(InvalidShareError, match="outside the field"):
        shamir.combine({**three, 1: outside}, 3)
    # an altered share or shares of another secret make a chunk above 16 bits (p ~ 1 - 2**-240)
    altered = bytes(b ^ 1 for b in shares[2][:4]) + shares[2][4:]
    with pytest.raises(InvalidShareError, match="inconsistent"):
        shamir.combine({**three, 2: altered}, 3)
    other = shamir.split(os.urandom(32), 3, [1, 2, 3, 4])
    with pytest.raises(InvalidShareError, match="inconsistent"):
        shamir.combine({1: shares[1], 2: shares[2], 3: other[3]}, 3)
    assert issubclass(InvalidShareError, PrivacyError)
    assert issubclass(InsufficientSharesError, PrivacyError)


def _interpolate(points: dict[int, int], at: int) -> int:
    """Value at ``at`` of the polynomial through ``points`` over GF(PRIME) (plain ints)."""
    total = 0
    for xi, yi in points.items():
        num = den = 1
        for xj in points:
            if xj != xi:
                num = num * (at - xj) % PRIME
                den = den * (xi - xj) % PRIME
        total = (total + yi * num * pow(den, PRIME - 2, PRIME)) % PRIME
    return total


@settings(FAST, max_examples=40)
@given(a=secrets32, b=secrets32, t=st.integers(2, 8))
def test_t_minus_1_shares_are_consistent_with_every_secret(a: bytes, b: bytes, t: int) -> None:
    """Perfect hiding, made checkable: t - 1 shares of ``a`` plus one forged share give ``b``."""
    ids = list(range(1, t + 1))
    seen = {i: s for i, s in shamir.split(a, t, ids).items() if i < t}  # t - 1 shares
    fresh = t + 7
    forged_chunks = []
    for c in range(shamir.CHUNKS):
        points = {i: int.from_bytes(s[4 * c : 4 * c + 4], "little") for i, s in seen.items()}
        points[0] = int.from_bytes(b[2 * c : 2 * c + 2], "little")
        forged_chunks.append(_interpolate(points, fresh).to_bytes(4, "little"))
    forged = b"".join(forged_chunks)
    assert shamir.combine({**seen, fresh: forged}, t) == b


def test_t_minus_1_shares_have_the_same_distribution_for_different_secrets() -> None:
    """Shares 1 and 2 of a 3-of-5 sharing: uniform over the field whatever the secret.

    A sanity check of the shape (top 4 bits of each field element, 16 bins), not a proof.
    """
    trials = 1500
    hists = []
    for secret in (bytes(32), b"\xff" * 32):
        tops = []
        for _ in range(trials):
            shares = shamir.split(secret, 3, [1, 2, 3, 4, 5])
            values = np.frombuffer(shares[1] + shares[2], dtype="<u4")
            tops.append(values >> 27)
        hist = np.bincount(np.concatenate(tops), minlength=16)
        assert stats.chisquare(hist).pvalue > 1e-6  # uniform
        hists.append(hist)
    assert stats.chi2_contingency(np.stack(hists)).pvalue > 1e-6  # same distribution
