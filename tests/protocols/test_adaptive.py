"""Adaptive network-aware aggregation (§7.3): observer EWMAs, plan costs, plan choice.

Every expected value is worked out by hand in the test, never by the code under test.
"""

import contextlib
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedstrata.errors import ValidationError
from fedstrata.protocols.adaptive import (
    COMPRESSIONS,
    KERNEL_FS,
    ChildEstimate,
    NetworkObserver,
    Plan,
    PlanCost,
    choose_plan,
    default_candidates,
    expected_round_time,
    network_kernel_scale,
    plan_costs,
)

BYTES = {"none": 8000.0, "float32": 4000.0, "float16": 2000.0}
REL_ERROR = {"none": 0.0, "float32": 1e-7, "float16": 1e-3}


def est(delay, loss=0.0, bps=None, replies=1, misses=0):
    return ChildEstimate(delay_s=delay, loss=loss, bytes_per_s=bps, replies=replies, misses=misses)


def costs_by_plan(costs):
    return {c.plan: c for c in costs}


# ------------------------------------------------------------------ observer


def test_ewma_delay_and_bandwidth_after_three_replies():
    obs = NetworkObserver(smoothing=0.5)
    obs.sent(1, 10.0, ["a", "b"])
    obs.received("a", 1, 12.0, 1000)  # delay 2, 500 B/s: seeds
    obs.sent(2, 20.0, ["a", "b"])
    obs.received("a", 2, 21.0, 1000)  # delay 1 -> 0.5·1 + 0.5·2 = 1.5; 1000 B/s -> 750
    obs.sent(3, 30.0, ["a", "b"])
    obs.received("a", 3, 34.0, 2000)  # delay 4 -> 0.5·4 + 0.5·1.5 = 2.75; 500 B/s -> 625
    e = obs.estimate("a")
    assert e.delay_s == pytest.approx(2.75)
    assert e.bytes_per_s == pytest.approx(625.0)
    assert (e.replies, e.misses, e.loss) == (3, 0, 0.0)
    assert obs.estimate("b") is None  # asked, but no reply and nothing closed


def test_ewma_default_smoothing():
    obs = NetworkObserver()  # α = 0.3
    for v, (t0, t1) in enumerate([(0.0, 2.0), (10.0, 11.0), (20.0, 24.0)]):
        obs.sent(v, t0, ["a"])
        obs.received("a", v, t1, 0)
    # 2 -> 0.3·1 + 0.7·2 = 1.7 -> 0.3·4 + 0.7·1.7 = 2.39
    assert obs.estimate("a").delay_s == pytest.approx(2.39)
    assert obs.estimate("a").bytes_per_s is None  # empty replies give no bandwidth sample


def test_misses_counted_on_close():
    obs = NetworkObserver()  # α = 0.3, loss starts at 0
    obs.sent(1, 0.0, ["a", "b", "c"])
    obs.received("a", 1, 1.0, 10)
    obs.closed(1)
    b = obs.estimate("b")
    assert (b.misses, b.replies, b.delay_s, b.bytes_per_s) == (1, 0, 0.0, None)
    assert b.loss == pytest.approx(0.3)
    assert obs.estimate("a").loss == 0.0
    obs.sent(2, 10.0, ["a", "b", "c"])
    obs.received("b", 2, 11.0, 10)
    obs.closed(2)
    assert obs.estimate("b").loss == pytest.approx(0.21)  # 0.3·0 + 0.7·0.3
    c = obs.estimate("c")
    assert c.loss == pytest.approx(0.51)  # 0.3·1 + 0.7·0.3
    assert c.misses == 2
    obs.closed(2)  # closing twice changes nothing
    assert obs.estimate("c").misses == 2


def test_late_reply_after_close_updates_delay_not_loss():
    obs = NetworkObserver()
    obs.sent(1, 0.0, ["a"])
    obs.closed(1)
    obs.received("a", 1, 5.0, 100)
    e = obs.estimate("a")
    assert (e.misses, e.replies) == (1, 1)
    assert e.loss == pytest.approx(0.3)
    assert e.delay_s == 5.0
    assert e.bytes_per_s == pytest.approx(20.0)


def test_reply_to_older_version_is_timed_from_its_send():
    obs = NetworkObserver()
    obs.sent(1, 0.0, ["a"])
    obs.sent(2, 10.0, ["a"])
    obs.received("a", 1, 12.0, 0)
    assert obs.estimate("a").delay_s == 12.0


def test_duplicates_and_unknown_versions_ignored():
    obs = NetworkObserver()
    obs.sent(1, 0.0, ["a"])
    assert obs.received("a", 99, 1.0, 10) is None  # never sent
    assert obs.received("a", "1", 1.0, 10) is None  # not a version
    assert obs.estimate("a") is None
    obs.received("a", 1, 2.0, 10)
    assert obs.received("a", 1, 3.0, 10) is None  # duplicate
    e = obs.estimate("a")
    assert (e.delay_s, e.replies) == (2.0, 1)
    obs.closed(42)  # unknown: ignored


def test_resend_keeps_first_send_time_and_adds_children():
    obs = NetworkObserver()
    obs.sent(1, 0.0, ["a"])
    obs.sent(1, 4.0, ["a", "b"])
    obs.received("a", 1, 5.0, 0)
    obs.received("b", 1, 5.0, 0)
    assert obs.estimate("a").delay_s == 5.0
    assert obs.estimate("b").delay_s == 1.0


def test_snapshot_values_and_empty():
    obs = NetworkObserver()
    assert obs.snapshot() == {
        "net_delay_median_s": 0.0,
        "net_delay_p90_s": 0.0,
        "net_loss_mean": 0.0,
        "net_children_seen": 0,
    }
    obs.sent(1, 0.0, ["a", "b", "c", "d"])
    for child, t in (("a", 2.0), ("b", 4.0), ("c", 6.0)):
        obs.received(child, 1, t, 100)
    obs.closed(1)  # d misses: loss 0.3
    snap = obs.snapshot()
    assert snap["net_delay_median_s"] == pytest.approx(4.0)
    assert snap["net_delay_p90_s"] == pytest.approx(5.6)  # 4 + 0.8·(6 − 4)
    assert snap["net_loss_mean"] == pytest.approx(0.075)  # 0.3 / 4
    assert snap["net_children_seen"] == 4


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, math.nan, math.inf, True, "0.3"])
def test_bad_smoothing(bad):
    with pytest.raises(ValidationError):
        NetworkObserver(smoothing=bad)


def test_bad_observer_events():
    obs = NetworkObserver()
    for now in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValidationError):
            obs.sent(1, now, ["a"])
    obs.sent(1, 0.0, ["a"])
    with pytest.raises(ValidationError):
        obs.received("a", 1, math.nan, 10)
    with pytest.raises(ValidationError):
        obs.received("a", 1, 1.0, -1)
    with pytest.raises(ValidationError):
        obs.sent(-1, 0.0, ["a"])
    obs.closed(1)
    with pytest.raises(ValidationError):
        obs.sent(1, 2.0, ["b"])
    assert obs.estimate("a").misses == 1  # the failed calls left no trace


EVENTS = st.lists(
    st.one_of(
        st.tuples(
            st.just("sent"),
            st.integers(0, 5),
            st.floats(-1e6, 1e6),
            st.sets(st.sampled_from("abcd")),
        ),
        st.tuples(
            st.just("recv"),
            st.sampled_from("abcd"),
            st.integers(0, 6),
            st.floats(-1e6, 1e6),
            st.integers(0, 10**6),
        ),
        st.tuples(st.just("close"), st.integers(0, 6)),
    ),
    max_size=40,
)


@given(EVENTS)
def test_snapshot_never_nan(events):
    obs = NetworkObserver()
    for ev in events:
        if ev[0] == "sent":
            with contextlib.suppress(ValidationError):  # a closed version
                obs.sent(ev[1], ev[2], ev[3])
        elif ev[0] == "recv":
            obs.received(*ev[1:])
        else:
            obs.closed(ev[1])
    snap = obs.snapshot()
    assert set(snap) == {
        "net_delay_median_s",
        "net_delay_p90_s",
        "net_loss_mean",
        "net_children_seen",
    }
    assert all(math.isfinite(v) for v in snap.values())
    for c in "abcd":
        e = obs.estimate(c)
        assert e is None or (0.0 <= e.loss <= 1.0 and e.delay_s >= 0.0)


# ------------------------------------------------------------------ plans and costs


def test_plan_validation_and_fields():
    assert Plan(0.75, "float16").as_fields() == {"plan_quorum": 0.75, "plan_compression": "float16"}
    for q in (0.0, -0.5, 1.01, math.nan, True):
        with pytest.raises(ValidationError):
            Plan(q, "none")
    with pytest.raises(ValidationError):
        Plan(1.0, "int8")
    assert COMPRESSIONS == ("none", "float32", "float16")


def test_default_candidates_order():
    plans = default_candidates()
    assert len(plans) == 9
    assert plans[0] == Plan(0.5, "none")
    assert plans[1] == Plan(0.5, "float32")
    assert plans[-1] == Plan(1.0, "float16")
    assert default_candidates((1.0,), ("float16",)) == [Plan(1.0, "float16")]


def test_expected_round_time_quorum_order_statistic():
    ests = [est(3.0), est(1.0), est(4.0), est(2.0)]
    assert expected_round_time(Plan(0.5, "none"), ests, BYTES, default_delay_s=9.0) == 2.0
    assert expected_round_time(Plan(0.75, "none"), ests, BYTES, default_delay_s=9.0) == 3.0
    assert expected_round_time(Plan(1.0, "none"), ests, BYTES, default_delay_s=9.0) == 4.0
    assert expected_round_time(Plan(0.01, "none"), ests, BYTES, default_delay_s=9.0) == 1.0
    assert expected_round_time(Plan(1.0, "none"), [], BYTES, default_delay_s=9.0) == 0.0
    # 0.7·10 is 7.000000000000001 in floats: the 7th, not the 8th, delay
    ten = [est(float(d)) for d in range(1, 11)]
    assert expected_round_time(Plan(0.7, "none"), ten, BYTES, default_delay_s=9.0) == 7.0


def test_expected_round_time_loss_bandwidth_and_unknown():
    plan = Plan(1.0, "none")
    assert expected_round_time(
        plan, [est(2.0, loss=0.5)], BYTES, default_delay_s=1.0
    ) == pytest.approx(4.0)
    # loss clipped at 0.95: 2 / 0.05
    assert expected_round_time(
        plan, [est(2.0, loss=1.0)], BYTES, default_delay_s=1.0
    ) == pytest.approx(40.0)
    # unknown child: default delay, loss 0
    assert expected_round_time(plan, [None], BYTES, default_delay_s=5.0) == 5.0
    # known only by its misses: default delay with its loss, 5 / (1 − 0.5)
    dead = est(0.0, loss=0.5, replies=0, misses=2)
    assert expected_round_time(plan, [dead], BYTES, default_delay_s=5.0) == pytest.approx(10.0)
    # float16 saves (2000 − 8000) / 1000 = −6 s of 8 s
    slow = est(8.0, bps=1000.0)
    assert expected_round_time(
        Plan(1.0, "float16"), [slow], BYTES, default_delay_s=1.0
    ) == pytest.approx(2.0)
    assert expected_round_time(
        Plan(1.0, "float32"), [slow], BYTES, default_delay_s=1.0
    ) == pytest.approx(4.0)
    # floored at 0.1·delay: 1 − 60 < 0.1
    fast_small = est(1.0, bps=100.0)
    assert expected_round_time(
        Plan(1.0, "float16"), [fast_small], BYTES, default_delay_s=1.0
    ) == pytest.approx(0.1)


def test_clustering_cost_counts_expected_loss():
    ests = {"a": est(1.0, loss=0.5), "b": est(10.0)}  # t_a = 2, t_b = 10
    samples = {"a": 100, "b": 300, "extra": 5}
    half, full = plan_costs(
        [Plan(0.5, "none"), Plan(1.0, "float16")],
        ests,
        samples=samples,
        bytes_of=BYTES,
        rel_error=REL_ERROR,
        lambda_net=0.1,
        default_delay_s=1.0,
    )
    # quorum 0.5: only a is waited for; missing (300 + 100·0.5) / 400
    assert half.clustering == pytest.approx(0.875)
    assert half.communication == pytest.approx(2.0)
    assert half.total == pytest.approx(0.875 + 0.2)
    # quorum 1: missing 100·0.5 / 400, plus float16's error; no bandwidth known
    assert full.clustering == pytest.approx(0.125 + 1e-3)
    assert full.communication == pytest.approx(10.0)
    assert full.total == pytest.approx(0.126 + 1.0)
    assert isinstance(full, PlanCost)


def test_uniform_fast_network_picks_full_quorum():
    ests = {c: est(0.05, bps=1e6) for c in "abcd"}
    samples = dict.fromkeys("abcd", 50)
    plan, costs = choose_plan(
        default_candidates(),
        ests,
        samples=samples,
        bytes_of=BYTES,
        rel_error=REL_ERROR,
        lambda_net=0.1,
        default_delay_s=1.0,
    )
    # t: none 0.05, float32 0.05 − 0.004 = 0.046, float16 0.05 − 0.006 = 0.044
    # quorum 1 totals: none 0.005; float32 1e-7 + 0.0046; float16 1e-3 + 0.0044
    assert plan == Plan(1.0, "float32")
    assert costs_by_plan(costs)[Plan(1.0, "float32")].total == pytest.approx(0.0046001)
    assert costs_by_plan(costs)[Plan(0.5, "none")].total == pytest.approx(0.5 + 0.005)


def slow_child_network():
    ests = {f"c{i}": est(0.1) for i in range(9)}
    ests["slow"] = est(10.0)
    return ests, dict.fromkeys(ests, 100)


@pytest.mark.parametrize(
    ("quorums", "expected_quorum", "expected_total"),
    [
        ((0.5, 0.75, 1.0), 0.75, 0.2 + 0.1),  # k = 8: 2 of 10 missing, waits 0.1 s
        ((0.5, 0.75, 0.9, 1.0), 0.9, 0.1 + 0.1),  # k = 9: only the slow one missing
    ],
)
def test_one_slow_child_and_large_lambda_lowers_quorum(quorums, expected_quorum, expected_total):
    ests, samples = slow_child_network()
    plan, costs = choose_plan(
        default_candidates(quorums),
        ests,
        samples=samples,
        bytes_of=BYTES,
        rel_error=REL_ERROR,
        lambda_net=1.0,
        default_delay_s=1.0,
    )
    assert plan == Plan(expected_quorum, "none")
    assert costs_by_plan(costs)[plan].total == pytest.approx(expected_total)
    assert costs_by_plan(costs)[Plan(1.0, "none")].total == pytest.approx(10.0)


def test_lambda_zero_picks_full_quorum():
    ests, samples = slow_child_network()
    plan, costs = choose_plan(
        default_candidates(),
        ests,
        samples=samples,
        bytes_of=BYTES,
        rel_error=REL_ERROR,
        lambda_net=0.0,
        default_delay_s=1.0,
    )
    assert plan == Plan(1.0, "none")
    assert costs_by_plan(costs)[plan].total == 0.0


def test_low_bandwidth_and_large_lambda_compresses():
    ests = {c: est(8.0, bps=1000.0) for c in "abcd"}  # 8000 B in 8 s
    kwargs = {
        "samples": dict.fromkeys("abcd", 10),
        "bytes_of": BYTES,
        "rel_error": REL_ERROR,
        "default_delay_s": 1.0,
    }
    plan, costs = choose_plan(default_candidates(), ests, lambda_net=1.0, **kwargs)
    # quorum 1 totals: none 8, float32 4 + 1e-7, float16 2 + 1e-3;
    # quorum 0.75 (3 of 4) waits as long and loses 1/4 of the samples
    assert plan == Plan(1.0, "float16")
    assert costs_by_plan(costs)[plan].total == pytest.approx(2.001)
    plan, _ = choose_plan(default_candidates(), ests, lambda_net=0.0, **kwargs)
    assert plan == Plan(1.0, "none")


def test_ties_broken_by_candidate_order():
    ests = {"a": est(1.0)}
    kwargs = {
        "samples": {"a": 1},
        "bytes_of": BYTES,
        "rel_error": {"none": 0.0, "float32": 0.0, "float16": 0.0},
        "lambda_net": 1.0,
        "default_delay_s": 1.0,
    }
    first = [Plan(1.0, "float32"), Plan(1.0, "none")]
    assert choose_plan(first, ests, **kwargs)[0] == Plan(1.0, "float32")
    assert choose_plan(first[::-1], ests, **kwargs)[0] == Plan(1.0, "none")


def test_cost_validation():
    ests = {"a": est(1.0)}
    good = {
        "samples": {"a": 1},
        "bytes_of": BYTES,
        "rel_error": REL_ERROR,
        "lambda_net": 1.0,
        "default_delay_s": 1.0,
    }
    plans = [Plan(1.0, "float16")]
    for key, bad in [
        ("lambda_net", -0.1),
        ("lambda_net", math.inf),
        ("samples", {}),
        ("bytes_of", {"none": 1.0}),
        ("rel_error", {"none": 0.0}),
        ("default_delay_s", math.nan),
    ]:
        with pytest.raises(ValidationError):
            plan_costs(plans, ests, **{**good, key: bad})
    with pytest.raises(ValidationError):
        choose_plan([], ests, **good)
    with pytest.raises(ValueError, match="loss"):  # ValidationError is a ValueError
        est(1.0, loss=1.5)


ESTIMATES = st.lists(
    st.one_of(
        st.none(),
        st.builds(
            est,
            st.floats(0.0, 100.0),
            loss=st.floats(0.0, 1.0),
            bps=st.one_of(st.none(), st.floats(1.0, 1e7)),
            replies=st.integers(0, 5),
        ),
    ),
    max_size=8,
)
PLANS = st.builds(Plan, st.floats(0.01, 1.0), st.sampled_from(COMPRESSIONS))


@given(ESTIMATES, PLANS, st.floats(0.0, 100.0), st.floats(0.0, 100.0))
def test_total_monotone_in_lambda(ests, plan, lam1, lam2):
    lo, hi = sorted((lam1, lam2))
    named = {f"c{i}": e for i, e in enumerate(ests)}
    kwargs = {
        "samples": {c: i + 1 for i, c in enumerate(named)},
        "bytes_of": BYTES,
        "rel_error": REL_ERROR,
        "default_delay_s": 2.0,
    }
    (a,) = plan_costs([plan], named, lambda_net=lo, **kwargs)
    (b,) = plan_costs([plan], named, lambda_net=hi, **kwargs)
    assert a.total <= b.total
    assert a.communication == expected_round_time(plan, ests, BYTES, default_delay_s=2.0)


@given(ESTIMATES, st.sampled_from(COMPRESSIONS), st.floats(0.01, 1.0), st.floats(0.01, 1.0))
def test_quorum_trades_time_for_samples(ests, comp, q1, q2):
    lo, hi = sorted((q1, q2))
    named = {f"c{i}": e for i, e in enumerate(ests)}
    small, large = plan_costs(
        [Plan(lo, comp), Plan(hi, comp)],
        named,
        samples={c: i + 1 for i, c in enumerate(named)},
        bytes_of=BYTES,
        rel_error=REL_ERROR,
        lambda_net=1.0,
        default_delay_s=2.0,
    )
    assert small.communication <= large.communication
    assert small.clustering >= large.clustering - 1e-12


# ------------------------------------------------------------------ Eq. 138 (experimental)


def test_network_kernel_scale():
    assert network_kernel_scale(0.0, 1.0) == 1.0
    assert network_kernel_scale(2.0, 2.0) == pytest.approx(0.36787944117144233)  # e^-1
    assert network_kernel_scale(1.0, 0.5) == pytest.approx(0.1353352832366127)  # e^-2
    assert KERNEL_FS["exp"] is network_kernel_scale
    assert KERNEL_FS["none"](5.0, 1.0) == 1.0
    for lat, tau in [(-1.0, 1.0), (1.0, 0.0), (math.nan, 1.0), (1.0, math.inf)]:
        with pytest.raises(ValidationError):
            network_kernel_scale(lat, tau)
        with pytest.raises(ValidationError):
            KERNEL_FS["none"](lat, tau)


@given(st.floats(0.0, 1e3), st.floats(1e-3, 1e3))
def test_network_kernel_scale_in_unit_interval(lat, tau):
    assert 0.0 <= network_kernel_scale(lat, tau) <= 1.0
