"""Explicit units in scenario values: durations, bandwidths and percentages."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedstrata.scenarios.loader import ScenarioErrors, parse_scenario
from fedstrata.scenarios.units import (
    BANDWIDTH_UNITS,
    DURATION_UNITS,
    parse_quantity,
    to_fraction,
    to_mbps,
    to_seconds,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("40ms", 0.04),
        ("2s", 2.0),
        ("1.5min", 90.0),
        ("2h", 7200.0),
        ("500us", 0.0005),
        ("500µs", 0.0005),
        ("10ns", 1e-8),
        ("3 sec", 3.0),
        (" 40 ms ", 0.04),
        ("1e3ms", 1.0),
        (".5s", 0.5),
        ("-2s", -2.0),  # the schema's bounds refuse it, with the value as written
    ],
)
def test_durations(text, seconds):
    assert to_seconds(text) == pytest.approx(seconds, rel=1e-15)


@pytest.mark.parametrize(
    ("text", "mbps"),
    [("5Mbps", 5.0), ("100kbps", 0.1), ("1Gbps", 1000.0), ("8bps", 8e-6), ("5 mbps", 5.0)],
)
def test_bandwidths(text, mbps):
    assert to_mbps(text) == pytest.approx(mbps, rel=1e-15)


@pytest.mark.parametrize(("text", "frac"), [("10%", 0.1), ("0.5%", 0.005), ("100 %", 1.0)])
def test_percentages(text, frac):
    assert to_fraction(text) == pytest.approx(frac, rel=1e-15)


@pytest.mark.parametrize("value", [0.1, 3, True, None, "0.1", " 2 ", "1e-3", [1], {"a": 1}])
def test_non_unit_values_pass_through(value):
    """Numbers and quoted numbers are left to the strict schema, exactly as before."""
    for conv in (to_seconds, to_mbps, to_fraction):
        assert conv(value) is value


@pytest.mark.parametrize(
    ("conv", "text", "message"),
    [
        (to_seconds, "40 parsecs", "'40 parsecs' is not a duration (e.g. 40ms, 2s)"),
        (to_seconds, "40Ms", "'40Ms' is not a duration (e.g. 40ms, 2s)"),
        (to_seconds, "fast", "'fast' is not a duration (e.g. 40ms, 2s)"),
        (to_seconds, "5%", "'5%' is not a duration (e.g. 40ms, 2s)"),
        (to_mbps, "5MB/s", "'5MB/s' is not a bandwidth (e.g. 5Mbps, 100kbps)"),
        (to_fraction, "10 percent", "'10 percent' is not a fraction (e.g. 0.1 or 10%)"),
        (to_fraction, "ms", "'ms' is not a fraction (e.g. 0.1 or 10%)"),
    ],
)
def test_wrong_units_are_refused(conv, text, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        conv(text)


_FINITE = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)


@given(_FINITE, st.sampled_from(sorted(DURATION_UNITS)), st.sampled_from(["", " "]))
def test_duration_round_trips(x, unit, gap):
    mul, div = DURATION_UNITS[unit]
    got = parse_quantity(f"{x!r}{gap}{unit}", DURATION_UNITS)
    assert got == x * mul / div
    if unit in ("s", "sec"):
        assert got == x  # seconds are the plain number, bit for bit


@given(_FINITE, st.sampled_from(sorted(BANDWIDTH_UNITS)))
def test_bandwidth_round_trips(x, unit):
    mul, div = BANDWIDTH_UNITS[unit]
    for spelling in (unit, unit.upper(), unit[:-3] + "bps", unit.capitalize()):
        got = parse_quantity(f"{x!r}{spelling}", BANDWIDTH_UNITS, fold_case=True)
        assert got == x * mul / div
    assert to_mbps(f"{x!r}Mbps") == x


@given(st.floats(min_value=0, max_value=100, allow_nan=False))
def test_percent_round_trips(x):
    assert to_fraction(f"{x!r}%") == x / 100
    assert math.isclose(to_fraction(f"{x!r}%") * 100, x, rel_tol=1e-15, abs_tol=1e-300)


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_scenario_value_with_unit_equals_plain_number(x):
    """``deadline_s: <x*1000>ms`` validates to the same scenario as ``deadline_s: <x>``."""
    if x == 0:
        return  # deadline_s must be > 0 either way
    plain = parse_scenario(f"protocol: {{deadline_s: {x!r}}}\n")
    unit = parse_scenario(f"protocol: {{deadline_s: {x!r}s}}\n")
    assert unit == plain


def test_units_everywhere_in_a_scenario():
    sc = parse_scenario(
        "topology:\n"
        "  tiers: [{name: fog, count: 1, deadline_s: 1.5min,"
        " link: {latency: {dist: lognormal, median: 20ms, sigma: 0.5}, bandwidth_mbps: 1Gbps}}]\n"
        "  clients:\n"
        "    count: 2\n"
        "    link: {latency: 40ms, jitter: 5ms, bandwidth_mbps: 100kbps, loss: 2%}\n"
        "protocol: {deadline_s: 2s, quorum: 50%}\n"
        "faults:\n"
        "  dropout: 10%\n"
        "  crashes: [{node: client-0, at: 1.5s, restart_after: 500ms}]\n"
        "  partitions: [{nodes: [fog-0], start: 0.5s, end: 1min}]\n"
    )
    fog = sc.topology.tiers[0]
    assert fog.deadline_s == 90.0
    assert fog.link.latency.median == 0.02 and fog.link.bandwidth_mbps == 1000.0
    link = sc.topology.clients.link
    assert link.latency.dist == "constant" and link.latency.value == 0.04
    assert link.jitter.value == 0.005
    assert link.bandwidth_mbps == 0.1 and link.loss == 0.02
    assert sc.protocol.deadline_s == 2.0 and sc.protocol.quorum == 0.5
    assert sc.faults.dropout == 0.1
    assert sc.faults.crashes[0].at == 1.5 and sc.faults.crashes[0].restart_after == 0.5
    assert sc.faults.partitions[0].start == 0.5 and sc.faults.partitions[0].end == 60.0


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "topology:\n  clients:\n    link: {latency: 40 parsecs}\n",
            "<string>:3: topology.clients.link.latency: '40 parsecs' is not a duration "
            "(e.g. 40ms, 2s)",
        ),
        (
            'faults:\n  dropout: "0.1"\n',  # quoted numbers stay refused (strict types)
            "<string>:2: faults.dropout: must be a number, got '0.1'",
        ),
        (
            "protocol:\n  deadline_s: 2e10s\n",
            "<string>:2: protocol.deadline_s: must be <= 1000000000, got '2e10s'",
        ),
        (
            "topology:\n  clients:\n    link: {latency: 2e10s}\n",
            "<string>:3: topology.clients.link.latency: must be <= 1e9 seconds, got '2e10s'",
        ),
        (
            "protocol:\n  deadline_s: 1e400s\n",
            "<string>:2: protocol.deadline_s: must be a finite number, got '1e400s'",
        ),
        (
            "topology:\n  clients:\n    link: {jitter: 1e400ms}\n",
            "<string>:3: topology.clients.link.jitter: must be a finite number, got '1e400ms'",
        ),
    ],
)
def test_located_unit_errors(text, line):
    with pytest.raises(ScenarioErrors) as info:
        parse_scenario(text)
    assert info.value.located() == line
