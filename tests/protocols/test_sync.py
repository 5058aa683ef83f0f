"""Synchronous rounds (SyncRounds) alone: straggler policies, sampling, over-selection.

The strategy is driven with hand-made Contribution objects and a tiny additive fake
algorithm; every expected value is worked out by hand in the test.
"""

import numpy as np
import pytest

from fedstrata.errors import ValidationError
from fedstrata.nodes.strategy import Closing, Contribution
from fedstrata.protocols.sync import SyncRounds


class FakeAlgorithm:
    """Only what the strategies and their Ledger use: an additive ``x`` array and ``n``."""

    name = "fake/sum"
    additive = True

    def __init__(self) -> None:
        self.combined: list[list[dict]] = []

    def combine(self, partials):
        self.combined.append(list(partials))
        return {
            "x": sum((np.asarray(p["x"], dtype=float) for p in partials), np.zeros(2)),
            "n": sum(p["n"] for p in partials),
        }

    def mix(self, old, new, weight):
        return {"x": (1.0 - weight) * old["x"] + weight * new["x"], "n": new["n"]}


def part(x0, x1=0.0, n=1):
    return {"x": np.array([x0, x1], dtype=float), "n": n}


def contribution(sender, body, *, version=1, staleness=0, now=0.0, nbytes=100):
    return Contribution(sender, body, version, staleness, now, nbytes)


def names(k):
    return [f"c{i}" for i in range(k)]


def test_fake_algorithm_sums_and_mixes():
    alg = FakeAlgorithm()
    total = alg.combine([part(1, 2, n=3), part(10, 20, n=4)])
    np.testing.assert_array_equal(total["x"], [11.0, 22.0])
    assert total["n"] == 7
    mixed = alg.mix(part(4), part(8, n=9), 0.25)
    np.testing.assert_array_equal(mixed["x"], [5.0, 0.0])
    assert mixed["n"] == 9


# ------------------------------------------------------------------ wait


def test_wait_closes_only_when_every_asked_child_replied():
    s = SyncRounds(["a", "b", "c"], quorum=0.5, stragglers="wait")
    assert s.open(1, 0.0) == (None, {})
    assert s.asked == ("a", "b", "c")
    assert s.target() == 3
    assert s.offer(contribution("a", part(1, n=10))) is False
    assert s.offer(contribution("b", part(2, n=20))) is False
    assert s.received == frozenset({"a", "b"})
    assert s.offer(contribution("c", part(4, n=30))) is True
    closing = s.close(FakeAlgorithm(), deadline=False)
    np.testing.assert_array_equal(closing.total["x"], [7.0, 0.0])  # 1 + 2 + 4
    assert closing.total["n"] == 60
    assert (closing.fresh, closing.need, closing.ok) == (3, 2, True)  # need ceil(0.5·3)
    assert closing.fields == {}  # no stale_used outside use_last
    assert s.received == frozenset()


def test_wait_deadline_reports_fresh_count_against_need():
    # 5 children, quorum 0.5: need = ceil(2.5) = 3
    s = SyncRounds(names(5), quorum=0.5, stragglers="wait")
    s.open(1, 0.0)
    assert s.offer(contribution("c0", part(1))) is False
    assert s.offer(contribution("c3", part(2))) is False
    closing = s.close(FakeAlgorithm(), deadline=True)
    assert (closing.fresh, closing.need, closing.ok) == (2, 3, False)
    np.testing.assert_array_equal(closing.total["x"], [3.0, 0.0])

    s.open(2, 10.0)
    for c, x in (("c1", 1), ("c2", 2), ("c4", 4)):
        assert s.offer(contribution(c, part(x), version=2)) is False  # wait wants all 5
    closing = s.close(FakeAlgorithm(), deadline=True)
    assert (closing.fresh, closing.need, closing.ok) == (3, 3, True)
    np.testing.assert_array_equal(closing.total["x"], [7.0, 0.0])


def test_deadline_with_no_reply_has_no_total():
    s = SyncRounds(names(4), quorum=0.75)
    s.open(1, 0.0)
    closing = s.close(FakeAlgorithm(), deadline=True)
    assert closing == Closing(None, 0, 3)  # ceil(0.75·4) = 3
    assert closing.ok is False


def test_combine_sees_replies_in_sorted_sender_order():
    alg = FakeAlgorithm()
    s = SyncRounds(["a", "b", "c"])
    s.open(1, 0.0)
    for c in ("c", "a", "b"):
        s.offer(contribution(c, {**part(1), "who": c}))
    s.close(alg, deadline=False)
    assert [p["who"] for p in alg.combined[-1]] == ["a", "b", "c"]


# ------------------------------------------------------------------ drop


@pytest.mark.parametrize(
    ("k", "quorum", "need"),
    [(4, 0.5, 2), (5, 0.5, 3), (4, 0.75, 3), (3, 1.0, 3), (6, 0.1, 1), (4, 0.0, 1)],
)
def test_drop_closes_as_soon_as_the_quorum_replied(k, quorum, need):
    s = SyncRounds(names(k), quorum=quorum, stragglers="drop")
    s.open(1, 0.0)
    assert s.target() == need
    got = [s.offer(contribution(c, part(i + 1))) for i, c in enumerate(names(k)[:need])]
    assert got == [False] * (need - 1) + [True]
    closing = s.close(FakeAlgorithm(), deadline=False)
    assert (closing.fresh, closing.need, closing.ok) == (need, need, True)
    # x = 1 + 2 + ... + need
    np.testing.assert_array_equal(closing.total["x"], [need * (need + 1) / 2, 0.0])
    assert closing.fields == {}


# ------------------------------------------------------------------ use_last


def test_use_last_counts_the_last_partial_of_children_that_did_not_reply():
    s = SyncRounds(["a", "b", "c"], quorum=0.5, stragglers="use_last")
    alg = FakeAlgorithm()
    # round 1: a and b (target ceil(1.5) = 2); c has never replied, nothing stale to use
    s.open(1, 0.0)
    assert s.offer(contribution("a", part(1, n=10))) is False
    assert s.offer(contribution("b", part(2, n=20))) is True
    closing = s.close(alg, deadline=False)
    np.testing.assert_array_equal(closing.total["x"], [3.0, 0.0])
    assert closing.total["n"] == 30
    assert (closing.fresh, closing.need) == (2, 2)
    assert closing.fields == {"stale_used": 0}

    # round 2: c and a reply; b counts by its round-1 partial
    s.open(2, 10.0)
    assert s.offer(contribution("c", part(0, 10, n=30), version=2)) is False
    assert s.offer(contribution("a", part(100, n=11), version=2)) is True
    closing = s.close(alg, deadline=False)
    np.testing.assert_array_equal(closing.total["x"], [102.0, 10.0])  # a 100 + b 2, c 10
    assert closing.total["n"] == 11 + 20 + 30
    assert (closing.fresh, closing.need, closing.ok) == (2, 2, True)
    assert closing.fields == {"stale_used": 1}

    # round 3, deadline with only b: a and c by their last partials
    s.open(3, 20.0)
    assert s.offer(contribution("b", part(5, n=21), version=3)) is False
    closing = s.close(alg, deadline=True)
    np.testing.assert_array_equal(closing.total["x"], [105.0, 10.0])  # a 100 + b 5, c 10
    assert closing.total["n"] == 11 + 21 + 30
    assert (closing.fresh, closing.need, closing.ok) == (1, 2, False)
    assert closing.fields == {"stale_used": 2}


def test_use_last_round_with_no_reply_has_no_total():
    s = SyncRounds(["a", "b"], stragglers="use_last")
    s.open(1, 0.0)
    s.offer(contribution("a", part(1)))
    s.offer(contribution("b", part(2)))
    s.close(FakeAlgorithm(), deadline=False)
    s.open(2, 10.0)
    closing = s.close(FakeAlgorithm(), deadline=True)
    assert closing.total is None and closing.fresh == 0 and not closing.ok


# ------------------------------------------------------------------ sampling


def test_sample_half_of_ten_asks_five_sorted_and_seeded():
    children = names(10)
    s = SyncRounds(children, sample=0.5, seed=7)
    assert s.wanted() == 5
    asked, extra = s.open(1, 0.0)
    assert extra == {}
    assert len(asked) == 5 == len(set(asked))
    assert set(asked) <= set(children)
    assert asked == sorted(asked)
    assert s.asked == tuple(asked)
    assert s.target() == 5  # wait: the k wanted
    # same seed, same sequence of asked subsets
    again = SyncRounds(children, sample=0.5, seed=7)
    first = [asked] + [s.open(v, 0.0)[0] for v in range(2, 6)]
    second = [again.open(v, 0.0)[0] for v in range(1, 6)]
    assert first == second


def test_over_select_asks_more_and_wait_closes_at_the_wanted_k():
    children = names(10)
    s = SyncRounds(children, sample=0.5, over_select=0.4, seed=3, quorum=1.0)
    asked, _ = s.open(1, 0.0)
    assert len(asked) == 7  # ceil(5 · 1.4)
    assert set(asked) <= set(children) and asked == sorted(asked)
    done = [s.offer(contribution(c, part(1))) for c in asked[:5]]
    assert done == [False, False, False, False, True]
    closing = s.close(FakeAlgorithm(), deadline=False)
    assert (closing.fresh, closing.need, closing.ok) == (5, 5, True)
    np.testing.assert_array_equal(closing.total["x"], [5.0, 0.0])


def test_over_select_beyond_all_children_asks_everyone():
    s = SyncRounds(names(4), sample=0.5, over_select=2.0)  # ceil(2 · 3) = 6 > 4
    assert s.open(1, 0.0) == (None, {})
    assert s.asked == tuple(names(4))
    assert s.target() == 2


def test_describe():
    s = SyncRounds(["a"], stragglers="drop", sample=0.5, over_select=0.25)
    assert s.describe() == {
        "kind": "sync",
        "stragglers": "drop",
        "sample": 0.5,
        "over_select": 0.25,
    }


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "kwargs",
    [
        {"stragglers": "bogus"},
        {"stragglers": "WAIT"},
        {"sample": 0.0},
        {"sample": -0.5},
        {"sample": 1.5},
        {"over_select": -0.1},
        {"over_select": 100.5},
    ],
)
def test_invalid_settings_raise_validation_error(kwargs):
    with pytest.raises(ValidationError):
        SyncRounds(["a", "b"], **kwargs)
