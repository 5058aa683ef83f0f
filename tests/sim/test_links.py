"""Latency models, links and their time windows."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstrata.errors import ValidationError
from fedstrata.sim.links import (
    Constant,
    Degradation,
    Empirical,
    LatencyModel,
    Link,
    LogNormal,
    Normal,
    Outage,
    Pareto,
    Sampler,
)

MODELS = [
    Constant(0.2),
    Normal(0.01, 0.05),
    LogNormal(0.04, 0.8),
    Pareto(0.01, 1.5),
    Empirical((0.1, 0.0, 0.3)),
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: type(m).__name__)
def test_models_are_never_negative(model: LatencyModel) -> None:
    rng = np.random.default_rng(0)
    many = model.sample_many(rng, 5000)
    assert many.shape == (5000,)
    assert (many >= 0).all()
    one = model.sample(rng)
    assert isinstance(one, float) and one >= 0


@settings(max_examples=50)
@given(st.floats(0, 10), st.floats(0, 10), st.integers(0, 2**32))
def test_truncated_normal_property(mean: float, std: float, seed: int) -> None:
    x = Normal(mean, std).sample_many(np.random.default_rng(seed), 200)
    assert (x >= 0).all()


def test_model_parametrisations() -> None:
    rng = np.random.default_rng(1)
    x = LogNormal(0.05, 0.5).sample_many(rng, 20_000)
    assert np.median(x) == pytest.approx(0.05, rel=0.03)
    assert np.mean(x) == pytest.approx(0.05 * math.exp(0.125), rel=0.03)
    p = Pareto(0.01, 3.0).sample_many(rng, 20_000)
    assert p.min() >= 0.01
    assert np.mean(p) == pytest.approx(3 * 0.01 / 2, rel=0.05)
    e = Empirical((1.0, 2.0)).sample_many(rng, 1000)
    assert set(e.tolist()) == {1.0, 2.0}
    assert Constant(0.3).sample(rng) == 0.3
    # Truncation, not clipping: no mass at exactly 0.
    n = Normal(0.0, 1.0).sample_many(rng, 10_000)
    assert (n > 0).all()


@pytest.mark.parametrize(
    "make",
    [
        lambda: Constant(-1),
        lambda: Constant(float("nan")),
        lambda: Normal(-0.1, 1),
        lambda: Normal(0.1, -1),
        lambda: LogNormal(0, 1),
        lambda: LogNormal(1, -1),
        lambda: Pareto(0, 1),
        lambda: Pareto(1, 0),
        lambda: Empirical(()),
        lambda: Empirical((0.1, -0.2)),
        lambda: Link(-0.1),
        lambda: Link(0.1, loss=1.5),
        lambda: Link(0.1, loss=-0.1),
        lambda: Link(0.1, bandwidth_bps=0),
        lambda: Link("fast"),
        lambda: Degradation(2.0, 2.0),
        lambda: Degradation(2.0, 1.0),
        lambda: Degradation(0, 1, loss=2.0),
        lambda: Degradation(0, 1, bandwidth_factor=0),
        lambda: Degradation(-1, 1),
        lambda: Outage(3.0, 1.0),
        lambda: Link(0.1, windows=("x",)),
    ],
)
def test_validation(make: Callable[[], object]) -> None:
    with pytest.raises(ValidationError):
        make()


def test_empirical_from_csv(tmp_path: Path) -> None:
    plain = tmp_path / "plain.csv"
    plain.write_text("# rtt trace\n0.010\n0.020\n\n0.030\n")
    assert Empirical.from_csv(plain).values == (0.01, 0.02, 0.03)
    headed = tmp_path / "headed.csv"
    headed.write_text("host,latency_s\na,0.5\nb,0.25\n")
    assert Empirical.from_csv(headed, column="latency_s").values == (0.5, 0.25)
    assert Empirical.from_csv(headed, column=1).values == (0.5, 0.25)
    bad = tmp_path / "bad.csv"
    bad.write_text("latency\n0.1\nfast\n")
    with pytest.raises(ValidationError, match="row 2"):
        Empirical.from_csv(bad)
    with pytest.raises(ValidationError):
        Empirical.from_csv(headed, column="nope")
    empty = tmp_path / "empty.csv"
    empty.write_text("# nothing\n")
    with pytest.raises(ValidationError):
        Empirical.from_csv(empty)


def test_link_delay_exact() -> None:
    rng = np.random.default_rng(0)
    link = Link(0.1, bandwidth_bps=8000, jitter=Constant(0.05))
    assert isinstance(link.latency, Constant)
    assert link.transmit_delay(1000, rng, 0.0) == pytest.approx(0.15 + 1.0)
    assert Link(0.1).transmit_delay(10**6, rng, 0.0) == 0.1  # unlimited bandwidth
    assert not link.is_lost(rng, 0.0)


def test_link_windows() -> None:
    rng = np.random.default_rng(0)
    link = Link(0.1, bandwidth_bps=8000).with_windows(
        Degradation(1.0, 2.0, latency_factor=2.0, extra_latency=0.5, bandwidth_factor=0.5),
        Degradation(1.5, 3.0, loss=1.0),
        Outage(5.0, math.inf),
    )
    assert link.transmit_delay(1000, rng, 0.99) == pytest.approx(1.1)
    assert link.transmit_delay(1000, rng, 1.0) == pytest.approx(0.2 + 0.5 + 2.0)
    assert link.transmit_delay(1000, rng, 2.0) == pytest.approx(1.1)
    assert not link.is_lost(rng, 1.2)
    assert link.is_lost(rng, 1.5)  # loss override 1.0
    assert not link.is_lost(rng, 3.0)
    assert link.is_lost(rng, 5.0) and link.is_lost(rng, 1e9)
    c = link.conditions(1.7)
    assert (c.latency_factor, c.extra_latency, c.bandwidth_bps, c.loss, c.down) == (
        2.0,
        0.5,
        4000.0,
        1.0,
        False,
    )


def test_link_loss_rate() -> None:
    rng = np.random.default_rng(3)
    link = Link(0.0, loss=0.2)
    lost = sum(link.is_lost(rng, 0.0) for _ in range(10_000))
    assert 1800 < lost < 2200


def test_sampler_hands_out_draws_in_order() -> None:
    a = np.random.default_rng(9).random(300)
    rng = np.random.default_rng(9)
    s = Sampler(rng.random)
    assert [s() for _ in range(300)] == a.tolist()
