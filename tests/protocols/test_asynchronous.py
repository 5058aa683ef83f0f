"""FedAsync and FedBuff alone: staleness-weighted shares, who is asked, buffer sizes.

The strategies are driven with hand-made Contribution objects and the additive fake
algorithm of test_sync; every expected value is worked out by hand in the test.
"""

import numpy as np
import pytest

from fedstrata.errors import ValidationError
from fedstrata.protocols.asynchronous import FedAsync, FedBuff

from .test_sync import FakeAlgorithm, contribution, part


def merge(s, alg, sender, body, *, version=1, staleness=0, now=0.0):
    """Offer one reply and close (FedAsync closes on every offer)."""
    assert s.offer(contribution(sender, body, version=version, staleness=staleness, now=now))
    return s.close(alg, deadline=False)


def share_x(s, child):
    return s._ledger.shares[child]["x"]


# ------------------------------------------------------------------ FedAsync: mixing


def test_first_contribution_is_taken_whole_and_every_offer_closes():
    s = FedAsync(["a", "b", "c"], alpha=0.5)
    alg = FakeAlgorithm()
    assert s.open(1, 0.0) == (None, {})
    # staleness 3 would weigh 0.5 · 4^-0.5 = 0.25, but a first share is taken whole
    closing = merge(s, alg, "a", part(4, n=10), staleness=3)
    np.testing.assert_array_equal(closing.total["x"], [4.0, 0.0])
    assert closing.total["n"] == 10
    assert (closing.fresh, closing.need, closing.ok) == (1, 1, True)
    assert closing.fields == {
        "staleness_max": 3,
        "staleness_mean": 3.0,
        "mix_weight_min": 0.25,
        "shares": 1,
        "superseded": 0,
    }
    closing = merge(s, alg, "b", part(0, 2, n=20), version=2)
    np.testing.assert_array_equal(closing.total["x"], [4.0, 2.0])  # a's share + b's
    assert closing.total["n"] == 30
    assert closing.fields["shares"] == 2
    assert closing.fields["mix_weight_min"] == 0.5  # α · s(0)


@pytest.mark.parametrize(
    ("staleness", "kw", "s_", "w"),
    [
        # polynomial, α = 0.5, a = 0.5: w = 0.5 · (s + 1)^-0.5
        ("polynomial", {"a": 0.5}, 3, 0.25),  # 0.5 / √4
        ("polynomial", {"a": 0.5}, 0, 0.5),
        ("polynomial", {}, 8, 0.5 / 3),  # the default a = 0.5: 0.5 / √9
        ("polynomial", {"a": 1.0}, 1, 0.25),  # 0.5 / 2
        # constant: w = α whatever the staleness
        ("constant", {}, 0, 0.5),
        ("constant", {}, 7, 0.5),
        # hinge a = 10, b = 4: 1 up to b, then 1 / (a (s − b) + 1)
        ("hinge", {"a": 10.0, "b": 4.0}, 4, 0.5),
        ("hinge", {"a": 10.0, "b": 4.0}, 6, 0.5 / 21),  # 1 / (10 · 2 + 1)
        ("hinge", {}, 5, 0.5 / 11),  # defaults a = 10, b = 4: 1 / (10 · 1 + 1)
    ],
)
def test_second_contribution_moves_the_share_by_alpha_times_s(staleness, kw, s_, w):
    s = FedAsync(["a", "b"], alpha=0.5, staleness=staleness, **kw)
    alg = FakeAlgorithm()
    s.open(1, 0.0)
    merge(s, alg, "b", part(0, 1, n=5))
    merge(s, alg, "a", part(4, n=10), version=2)
    closing = merge(s, alg, "a", part(8, n=12), version=2, staleness=s_)
    # a's share: (1 − w) · 4 + w · 8 = 4 + 4w; b's share unchanged
    np.testing.assert_allclose(share_x(s, "a"), [4 + 4 * w, 0.0], rtol=1e-15)
    np.testing.assert_allclose(closing.total["x"], [4 + 4 * w, 1.0], rtol=1e-15)
    assert closing.total["n"] == 12 + 5  # counts are the newest partial's
    assert closing.fields["mix_weight_min"] == pytest.approx(w, rel=1e-15)
    assert closing.fields["staleness_max"] == s_
    assert closing.fields["shares"] == 2


def test_alpha_one_fresh_reply_replaces_the_share():
    s = FedAsync(["a"], alpha=1.0)
    alg = FakeAlgorithm()
    s.open(1, 0.0)
    merge(s, alg, "a", part(4))
    closing = merge(s, alg, "a", part(8), version=2)
    np.testing.assert_array_equal(closing.total["x"], [8.0, 0.0])
    # staleness 3 with α = 1: w = 4^-0.5 = 0.5 → 0.5 · 8 + 0.5 · 2 = 5
    closing = merge(s, alg, "a", part(2), version=3, staleness=3)
    np.testing.assert_array_equal(closing.total["x"], [5.0, 0.0])


def test_weight_is_alpha_times_staleness_function():
    s = FedAsync(["a"], alpha=0.5, staleness="polynomial", a=0.5)
    assert s.weight(0) == 0.5
    assert s.weight(3) == 0.25
    assert s.weight(15) == 0.125  # 0.5 / √16


# ------------------------------------------------------------------ FedAsync: accepts


def test_accepts_staleness_within_zero_and_max_staleness():
    s = FedAsync(["a"], max_staleness=2)
    assert [s.accepts(x) for x in (-1, 0, 1, 2, 3, 100)] == [
        False,
        True,
        True,
        True,
        False,
        False,
    ]
    z = FedAsync(["a"], max_staleness=0)
    assert (z.accepts(0), z.accepts(1)) == (True, False)


# ------------------------------------------------------------------ FedAsync: open


def test_open_asks_everyone_first_then_the_merged_and_the_overdue():
    s = FedAsync(["a", "b", "c"], retry_s=10.0)
    alg = FakeAlgorithm()
    assert s.open(1, 0.0) == (None, {})  # a, b, c asked at t = 0
    assert s.asked == ("a", "b", "c")
    merge(s, alg, "b", part(1), now=1.0)
    assert s.open(2, 1.0) == (["b"], {})  # a, c asked 1 s ago: not overdue
    assert s.asked == ("b",)
    merge(s, alg, "a", part(2), staleness=1, now=6.0)  # a answers version 1
    # t = 11: a merged; c asked at 0 (11 ≥ 10: overdue); b asked at 1 (10 ≥ 10: overdue)
    assert s.open(3, 11.0) == (None, {})
    assert s.asked == ("a", "b", "c")
    merge(s, alg, "c", part(3), version=3, now=12.0)
    # t = 20.5: c merged; a, b asked at 11 (9.5 s < 10)
    assert s.open(4, 20.5) == (["c"], {})
    merge(s, alg, "c", part(3), version=4, now=20.6)
    # t = 21: a, b asked at 11 (exactly 10 s: overdue), c merged → everyone
    assert s.open(5, 21.0) == (None, {})


def test_open_asks_merged_plus_one_overdue():
    s = FedAsync(["a", "b", "c"], retry_s=5.0)
    alg = FakeAlgorithm()
    s.open(1, 0.0)
    merge(s, alg, "a", part(1), now=1.0)
    assert s.open(2, 1.0) == (["a"], {})  # b, c asked at 0
    merge(s, alg, "b", part(1), staleness=1, now=2.0)
    assert s.open(3, 2.0) == (["b"], {})  # a asked at 1, c at 0: neither 5 s ago
    merge(s, alg, "b", part(1), version=3, now=5.0)
    # t = 5: b merged, c asked at 0 (5 s: overdue), a asked at 1 (4 s)
    assert s.open(4, 5.0) == (["b", "c"], {})


def test_deadline_with_nothing_pending_fails_and_the_next_open_asks_everyone():
    s = FedAsync(["a", "b", "c"], retry_s=100.0)
    alg = FakeAlgorithm()
    s.open(1, 0.0)
    merge(s, alg, "a", part(1), now=1.0)
    assert s.open(2, 1.0) == (["a"], {})
    closing = s.close(alg, deadline=True)
    assert closing.total is None and closing.fresh == 0 and closing.ok is False
    assert s.open(3, 11.0) == (None, {})  # retry_s = 100 not reached: the deadline did it
    assert s.asked == ("a", "b", "c")


def test_close_without_deadline_and_nothing_pending_keeps_the_asked_set():
    s = FedAsync(["a", "b"], retry_s=100.0)
    alg = FakeAlgorithm()
    s.open(1, 0.0)
    merge(s, alg, "a", part(1))
    assert s.close(alg, deadline=False).ok is False
    assert s.open(2, 1.0) == (["a"], {})


def test_non_additive_algorithm_is_refused_at_close():
    class Median(FakeAlgorithm):
        additive = False

    s = FedAsync(["a"])
    s.open(1, 0.0)
    s.offer(contribution("a", part(1)))
    with pytest.raises(ValidationError, match="additive"):
        s.close(Median(), deadline=False)


# ------------------------------------------------------------------ FedBuff


def test_fedbuff_closes_at_the_third_distinct_reply_and_merges_all_three():
    s = FedBuff(["a", "b", "c", "d"], buffer_size=3, retry_s=10.0, alpha=1.0)
    alg = FakeAlgorithm()
    assert s.open(1, 0.0) == (None, {})
    got = [
        s.offer(contribution("a", part(1, n=1), now=1.0)),
        s.offer(contribution("c", part(2, n=2), now=2.0)),
        s.offer(contribution("b", part(4, n=4), now=3.0)),
    ]
    assert got == [False, False, True]
    closing = s.close(alg, deadline=False)
    np.testing.assert_array_equal(closing.total["x"], [7.0, 0.0])  # 1 + 2 + 4
    assert closing.total["n"] == 7
    assert (closing.fresh, closing.need, closing.ok) == (3, 1, True)
    assert closing.fields["shares"] == 3
    assert s.open(2, 3.0) == (["a", "b", "c"], {})  # d asked at 0: not overdue yet
    # next buffer: a, b, d; at t = 10 c (asked at 3) is not overdue, d (asked at 0) is
    assert s.offer(contribution("a", part(10, n=1), version=2, now=4.0)) is False
    assert s.offer(contribution("d", part(0, 5, n=8), staleness=1, now=5.0)) is False
    assert s.offer(contribution("b", part(20, n=4), version=2, now=6.0)) is True
    closing = s.close(alg, deadline=False)
    # a 10 + b 20 + c 2 (kept), d's first share [0, 5] taken whole
    np.testing.assert_array_equal(closing.total["x"], [32.0, 5.0])
    assert closing.fields["shares"] == 4
    assert s.open(3, 6.0) == (["a", "b", "d"], {})


def test_fedbuff_next_open_adds_overdue_children():
    s = FedBuff(["a", "b", "c", "d", "e"], buffer_size=3, retry_s=10.0)
    alg = FakeAlgorithm()
    s.open(1, 0.0)
    for c in ("a", "b", "c"):
        s.offer(contribution(c, part(1), now=12.0))
    s.close(alg, deadline=False)
    # t = 12: a, b, c merged; d, e asked at 0 are overdue → all five
    assert s.open(2, 12.0) == (None, {})
    for c in ("d", "a", "e"):
        s.offer(contribution(c, part(1), version=2, now=13.0))
    s.close(alg, deadline=False)
    # t = 22: d, a, e merged; b, c asked at 12 (exactly 10 s) overdue too
    assert s.open(3, 22.0) == (None, {})
    for c in ("a", "b", "c"):
        s.offer(contribution(c, part(1), version=3, now=23.0))
    s.close(alg, deadline=False)
    # t = 31: d, e asked at 22 (9 s): not overdue
    assert s.open(4, 31.0) == (["a", "b", "c"], {})


def test_fedbuff_two_replies_of_one_child_count_once_towards_k():
    s = FedBuff(["a", "b", "c"], buffer_size=2, alpha=0.5, staleness="constant")
    alg = FakeAlgorithm()
    s.open(1, 0.0)
    assert s.offer(contribution("a", part(4), staleness=1, now=1.0)) is False
    assert s.offer(contribution("a", part(8), version=2, now=2.0)) is False  # still 1 distinct
    assert s.offer(contribution("b", part(0, 3), version=2, now=3.0)) is True
    closing = s.close(alg, deadline=False)
    # a: first share 4 (whole), then 0.5 · 4 + 0.5 · 8 = 6; b: [0, 3]
    np.testing.assert_array_equal(closing.total["x"], [6.0, 3.0])
    assert closing.fields["shares"] == 2
    assert closing.fields["staleness_max"] == 1
    assert closing.fields["staleness_mean"] == pytest.approx(1 / 3)  # (1 + 0 + 0) / 3
    assert s.open(2, 3.0) == (["a", "b"], {})


@pytest.mark.parametrize(("k", "children", "cap"), [(5, 2, 2), (3, 3, 3), (100, 4, 4)])
def test_fedbuff_buffer_size_is_capped_at_the_number_of_children(k, children, cap):
    kids = [f"c{i}" for i in range(children)]
    s = FedBuff(kids, buffer_size=k)
    assert s.buffer_size == cap
    assert s.describe()["buffer_size"] == cap
    s.open(1, 0.0)
    got = [s.offer(contribution(c, part(1))) for c in kids]
    assert got == [False] * (cap - 1) + [True]


def test_fedbuff_deadline_merges_a_partial_buffer():
    s = FedBuff(["a", "b", "c"], buffer_size=3, retry_s=10.0)
    alg = FakeAlgorithm()
    s.open(1, 0.0)
    assert s.offer(contribution("b", part(2, n=3), now=4.0)) is False
    closing = s.close(alg, deadline=True)
    np.testing.assert_array_equal(closing.total["x"], [2.0, 0.0])
    assert (closing.fresh, closing.need, closing.ok) == (1, 1, True)
    assert s.open(2, 5.0) == (["b"], {})  # a, c asked 5 s ago


def test_fedbuff_buffer_size_one_behaves_like_fedasync():
    s = FedBuff(["a", "b"], buffer_size=1)
    s.open(1, 0.0)
    assert s.offer(contribution("a", part(1))) is True


# ------------------------------------------------------------------ validation, describe


@pytest.mark.parametrize(
    "kwargs",
    [
        {"alpha": 0.0},
        {"alpha": 1.5},
        {"max_staleness": -1},
        {"staleness": "exponential"},
        {"staleness": "constant", "a": 1.0},
        {"staleness": "polynomial", "a": 0.0},
        {"staleness": "polynomial", "b": 1.0},
        {"staleness": "hinge", "b": -1.0},
    ],
)
def test_invalid_async_settings_raise_validation_error(kwargs):
    with pytest.raises(ValidationError):
        FedAsync(["a"], **kwargs)


def test_invalid_buffer_size_raises_validation_error():
    with pytest.raises(ValidationError):
        FedBuff(["a", "b"], buffer_size=0)


def test_describe():
    assert FedAsync(["a"], alpha=0.5, staleness="hinge", max_staleness=7).describe() == {
        "kind": "async",
        "alpha": 0.5,
        "staleness": "hinge",
        "max_staleness": 7,
    }
    assert FedBuff(["a", "b", "c"], buffer_size=2).describe() == {
        "kind": "buffered",
        "alpha": 1.0,
        "staleness": "polynomial",
        "max_staleness": 1000,
        "buffer_size": 2,
    }


def test_an_older_reply_does_not_undo_a_newer_merged_one():
    # c merged at version 5 (share 4); its version-3 reply arriving later is ignored
    s = FedAsync(["c"], alpha=1.0, staleness="constant")
    alg = FakeAlgorithm()
    s.open(5, now=0.0)
    assert s.offer(contribution("c", part(4, 4), version=5))
    s.close(alg, deadline=False)
    assert s.offer(contribution("c", part(100, 100), version=3, staleness=2)) is False
    closing = s.close(alg, deadline=True)
    assert closing.total is None and not closing.ok
    s.open(6, now=1.0)
    assert s.offer(contribution("c", part(8, 8), version=6))
    closing = s.close(alg, deadline=False)
    assert closing.fields["superseded"] == 1
    assert closing.total["x"].tolist() == [8.0, 8.0]
