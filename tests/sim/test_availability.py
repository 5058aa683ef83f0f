"""Markov availability: O(1) online sampling, the chain's law, grid rounding, cost."""

from __future__ import annotations

import math
import time
import tracemalloc

import numpy as np
import pytest

from fedstrata.errors import ValidationError
from fedstrata.sim.faults import MarkovAvailability


def chain(a: float, b: float, step: float, seed: int = 0, **kw: bool) -> MarkovAvailability:
    return MarkovAvailability(a, b, step, np.random.default_rng(seed), **kw)


def transition(a: float, b: float, n: int) -> np.ndarray:
    """n-step transition matrix over (off, on) by matrix power (independent of the code)."""
    p = np.array([[1 - b, b], [a, 1 - a]])
    return np.linalg.matrix_power(p, n)


def pair_freq(states: np.ndarray) -> tuple[float, float, int, int]:
    """Empirical P(on next | on), P(on next | off) of consecutive samples and their counts."""
    prev, nxt = states[:-1], states[1:]
    n_on, n_off = int(prev.sum()), int((~prev).sum())
    return nxt[prev].mean(), nxt[~prev].mean(), n_on, n_off


def close(p_hat: float, p: float, n: int, z: float = 5.0) -> bool:
    """|p_hat - p| within z standard errors of a binomial proportion (plus a hair)."""
    return abs(p_hat - p) <= z * math.sqrt(max(p * (1 - p), 1e-12) / max(n, 1)) + 1e-9


def test_constant_within_a_step_and_stationary_share() -> None:
    av = chain(0.3, 0.6, 2.0)
    states = [av.is_online(t) for t in np.arange(0, 4000, 0.5)]
    for k in range(0, len(states), 4):  # changes happen at multiples of the step only
        assert len(set(states[k : k + 4])) == 1
    assert abs(np.mean(states) - 2 / 3) < 0.03  # b / (a + b)


@pytest.mark.parametrize(
    ("a", "b"),
    [(0.3, 0.6), (0.05, 0.02), (0.9, 0.8), (0.5, 0.5), (1e-3, 1e-3)],
)
def test_long_run_fraction_online(a: float, b: float) -> None:
    # Queries 7 steps apart over many mixing times, step 1e-9 s: 1.4e6 grid steps.
    av = chain(a, b, 1e-9, seed=3)
    n = 200_000
    on = np.fromiter((av.is_online(i * 7e-9) for i in range(n)), bool, n)
    pi = b / (a + b)
    # Samples are correlated: allow for the effective sample size of a two-state chain.
    lam = abs(1 - a - b) ** 7
    n_eff = n * (1 - lam) / (1 + lam)
    assert close(on.mean(), pi, int(n_eff))


@pytest.mark.parametrize(("a", "b", "gap"), [(0.3, 0.2, 1), (0.3, 0.2, 3), (0.9, 0.8, 2)])
def test_k_step_transition_frequencies(a: float, b: float, gap: int) -> None:
    step = 0.1  # t = i * gap * 0.1 is a multiple of the step up to float rounding
    av = chain(a, b, step, seed=11)
    n = 120_000
    states = np.fromiter((av.is_online(i * gap * step) for i in range(n)), bool, n)
    p_on_on, p_on_off, n_on, n_off = pair_freq(states)
    p = transition(a, b, gap)
    assert close(p_on_on, p[1, 1], n_on), (p_on_on, p[1, 1])
    assert close(p_on_off, p[0, 1], n_off), (p_on_off, p[0, 1])


def test_irregular_query_times_follow_the_chain() -> None:
    # Random gaps of 1..40 steps (and random offsets inside a step): for each gap, the
    # pairs (state, state gap steps later) match the matrix power of the chain.
    a, b, step = 0.15, 0.1, 1e-3
    rng = np.random.default_rng(5)
    gaps = rng.integers(1, 41, size=150_000)
    ks = np.cumsum(gaps)
    offsets = rng.uniform(0.0, 0.9, size=ks.size)
    av = chain(a, b, step, seed=2)
    states = np.fromiter(
        (av.is_online((k + o) * step) for k, o in zip(ks.tolist(), offsets.tolist(), strict=True)),
        bool,
        ks.size,
    )
    for g in (1, 2, 5, 13, 40):
        sel = np.flatnonzero(gaps[1:] == g)
        prev, nxt = states[sel], states[sel + 1]
        p = transition(a, b, g)
        assert close(nxt[prev].mean(), p[1, 1], int(prev.sum()))
        assert close(nxt[~prev].mean(), p[0, 1], int((~prev).sum()))


def test_one_step_sojourns_are_geometric() -> None:
    # Every grid point asked: the run lengths online are geometric with mean 1 / a.
    a, b = 0.2, 0.4
    av = chain(a, b, 1.0, seed=9)
    n = 200_000
    states = np.fromiter((av.is_online(float(k)) for k in range(n)), bool, n)
    p_on_on, p_on_off, n_on, n_off = pair_freq(states)
    assert close(p_on_on, 1 - a, n_on) and close(p_on_off, b, n_off)
    edges = np.flatnonzero(np.diff(states.astype(np.int8)))
    runs = np.diff(edges)[(states[edges[:-1] + 1])]  # run lengths of online stretches
    assert abs(runs.mean() - 1 / a) < 0.1


def test_extreme_probabilities() -> None:
    never_back = chain(1.0, 0.0, 1.0)
    assert never_back.is_online(0.5) and not never_back.is_online(1.0)
    assert never_back.next_online(7.0) is None
    assert not never_back.is_online(1e300)
    always = chain(0.0, 0.5, 1.0)
    assert all(always.is_online(float(t)) for t in range(100))
    off_for_good = chain(1.0, 0.0, 1e-9, start_online=False)
    assert off_for_good.next_online(0.0) is None
    assert not off_for_good.is_online(1e6)
    # a = b = 1 alternates every step, whatever the jump between queries; the times
    # i * 1e-6 are multiples of 1e-9 up to float rounding: even indices, online.
    alt = chain(1.0, 1.0, 1e-9)
    assert all(alt.is_online(i * 1e-6) for i in range(10_000))
    assert not alt.is_online(0.3e-8 + 1e-2)  # index 10_000_003: odd
    frozen = chain(0.0, 0.0, 1e-9, start_online=False)
    assert not frozen.is_online(1e9) and frozen.next_online(2e9) is None
    # p_off = 1, p_on = 0 starting offline: never online, no change ever drawn.
    dead = chain(1.0, 0.0, 1e-9, start_online=False)
    assert [dead.is_online(t) for t in (0.0, 1.0, 1e6)] == [False] * 3


def test_change_at_t_applies_at_t() -> None:
    alt = chain(1.0, 1.0, 0.1)
    # 0.3 / 0.1 = 2.9999999999999996 in floats: still index 3 (odd: offline).
    assert [alt.is_online(t) for t in (0.0, 0.1, 0.2, 0.3, 0.7, 1.0)] == [
        True,
        False,
        True,
        False,
        False,
        True,
    ]


def test_next_online_is_the_first_online_time() -> None:
    av = chain(0.3, 0.6, 2.0, seed=4)
    assert av.next_online(0.0) == 0.0
    t = 0.0
    checked = 0
    while checked < 200:
        t += 0.5
        if av.is_online(t):
            continue
        t_on = av.next_online(t)
        assert t_on is not None and t_on > t and t_on % 2.0 == 0
        assert not av.is_online(t_on - 0.5)  # still offline just before
        assert av.is_online(t_on)
        t = t_on
        checked += 1


def test_next_online_round_trips_at_huge_indices() -> None:
    # Step 1e-9 s around t = 1e6 s (indices ~1e15) and 1e9 s (beyond 2**53, several
    # indices per float): the time returned is online when asked, and strictly later.
    for t0 in (1e6, 1e9):
        av = chain(0.6, 0.3, 1e-9, seed=8)
        t = t0
        for _ in range(2000):
            if not av.is_online(t):
                t_on = av.next_online(t)
                assert t_on is not None and t_on > t
                if t0 < 1e7:
                    assert av.is_online(t_on)
                t = t_on
            t = math.nextafter(t, math.inf) if t0 > 1e7 else t + 1e-9
        assert isinstance(av._k1, int) and av._k1 > (2**53 if t0 > 1e7 else 10**14)
    tiny = chain(0.5, 0.5, 1e-300, seed=1)  # t / step beyond floats: exact Fractions
    assert isinstance(tiny.is_online(1e10), bool)
    assert isinstance(tiny._k1, int | None)  # grid indices are Python ints


def test_same_seed_same_queries_same_answers() -> None:
    times = np.cumsum(np.random.default_rng(1).exponential(3e-9, 20_000)).tolist()
    runs = []
    for _ in range(2):
        av = chain(0.4, 0.3, 1e-9, seed=42)
        runs.append([av.is_online(t) for t in times])
    assert runs[0] == runs[1]
    other = chain(0.4, 0.3, 1e-9, seed=43)
    assert [other.is_online(t) for t in times] != runs[0]


def test_queries_must_not_go_back_in_time() -> None:
    av = chain(0.3, 0.3, 1.0)
    av.is_online(5.0)
    assert av.is_online(5.0) == av.is_online(5.0)  # the same time again is fine
    with pytest.raises(ValidationError, match="non-decreasing"):
        av.is_online(4.9)
    av.next_online(6.0)
    with pytest.raises(ValidationError, match="non-decreasing"):
        av.next_online(5.5)
    alt = chain(1.0, 1.0, 1.0)  # the next change is one step away: no fast path
    assert alt.is_online(3.5) is False
    with pytest.raises(ValidationError, match="non-decreasing"):
        alt.is_online(2.5)
    with pytest.raises(ValidationError):
        chain(0.3, 0.3, 1.0).is_online(math.inf)
    with pytest.raises(ValidationError):
        chain(0.3, 0.3, 1.0).is_online(math.nan)
    with pytest.raises(ValidationError):
        MarkovAvailability(0.3, 0.3, 0.0, np.random.default_rng(0))


@pytest.mark.slow
def test_a_million_queries_at_step_1e9_are_fast_and_bounded() -> None:
    av = chain(0.5, 0.5, 1e-9, seed=7)
    is_online = av.is_online
    t0 = time.perf_counter()
    on = 0
    for i in range(1_000_000):  # 1e6 queries over 1e12 grid steps (t up to 1000 s)
        on += is_online(i * 1e-3)
    elapsed = time.perf_counter() - t0
    assert abs(on / 1e6 - 0.5) < 0.005
    # ~0.7 s on an idle 2-core box (the old toggle list grew until MemoryError); the
    # bound leaves room for a loaded machine.
    assert elapsed < 3.0, f"{elapsed:.2f} s"
    # Memory: no history is kept; only fixed-size draw buffers.
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(50_000):
            is_online(1000.0 + i * 1.0)
        grown = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert grown < 64_000, grown
