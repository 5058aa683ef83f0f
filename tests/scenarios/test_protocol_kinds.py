"""Every protocol kind on the edge-fog-cloud example, with only protocol.kind changed."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.protocol_schema import registered_kinds
from fedstrata.scenarios.run import run_scenario

EXAMPLE = Path(__file__).parents[2] / "scenarios" / "edge-fog-cloud.yaml"


def small(kind: str, **protocol) -> str:
    """The example at a test size (30 clients under 5 fogs), with ``kind`` set."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["data"]["params"] = {"n_per_cluster": 500}
    data["topology"]["tiers"][0]["count"] = 5
    data["topology"]["clients"]["count"] = 30
    data["protocol"].update(kind=kind, **protocol)
    return yaml.safe_dump(data)


def root_rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "rounds.csv", newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["tier"] == "cloud" and r["phase"] == "iter"]


@pytest.mark.parametrize("kind", list(registered_kinds()))
def test_every_kind_terminates_with_ari_above_095(kind, tmp_path):
    sc = parse_scenario(small(kind))
    summary = run_scenario(sc, tmp_path, progress=False, plots=False)
    assert summary["status"] in ("converged", "round_limit"), summary["reason"]
    assert summary["metrics"]["ari"] >= 0.95
    assert summary["rounds"] <= sc.protocol.rounds


def test_hierarchical_periods_per_fog_group(tmp_path):
    data = yaml.safe_load(small("sync"))
    data["topology"]["tiers"][0]["periods"] = {"fog-1": 3}
    summary = run_scenario(parse_scenario(yaml.safe_dump(data)), tmp_path, progress=False)
    assert summary["metrics"]["ari"] >= 0.95
    with open(tmp_path / "rounds.csv", newline="") as fh:
        fog_subs = {int(r["sub"]) for r in csv.DictReader(fh) if r["tier"] == "fog"}
    assert fog_subs == {0, 1, 2, 3}  # fog-1's three sub-rounds; the others report sub 0


def test_async_rows_carry_staleness(tmp_path):
    run_scenario(parse_scenario(small("async")), tmp_path, progress=False, plots=False)
    rows = root_rows(tmp_path)
    assert rows and all(r["staleness_max"] != "" for r in rows if r["ok"] == "True")
    assert max(int(r["staleness_max"]) for r in rows if r["staleness_max"]) >= 1


def test_adaptive_rows_carry_the_plan_and_what_it_observed(tmp_path):
    run_scenario(parse_scenario(small("adaptive")), tmp_path, progress=False, plots=False)
    rows = root_rows(tmp_path)
    assert all(float(r["plan_quorum"]) in (0.5, 0.75, 1.0) for r in rows)
    later = rows[2:]  # after the first replies the plan rests on observed delays
    assert later and all(float(r["net_delay_median_s"]) > 0 for r in later)
    # its children are fogs: an aggregator forwards float64 sums, nothing to compress
    assert {r["plan_compression"] for r in rows} == {"none"}


def test_sync_drop_closes_rounds_at_the_quorum(tmp_path):
    run_scenario(parse_scenario(small("sync", stragglers="drop")), tmp_path, progress=False)
    rows = root_rows(tmp_path)
    # quorum 0.5 of 5 fogs: a round closes with its third reply, never waits for more
    assert {int(r["participants"]) for r in rows if r["ok"] == "True"} <= {3}
