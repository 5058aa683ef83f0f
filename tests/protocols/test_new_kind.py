"""A protocol kind added from outside: it touches only its own module and one registration.

``first-k`` is a small kind declared here, the way docs/protocols.md says to add one:
synchronous rounds whose root closes each round at the first ``replies`` answers (a
fixed count rather than the ``quorum`` fraction), with one key of its own. The test
registers it (as the composition root registers the built-ins) and exercises the
scenario schema (its key under its kind, refused under another, its bounds, the JSON
schema and the reference), ``validate`` refusing a capability it does not declare
(secure aggregation) with a located message, and runs on the simulator and over a real
Mosquitto.

The kind lives in this test process only: the MQTT run here is the in-process default
(``processes`` unset), whose nodes are built in this process. A run with worker
processes would need the kind registered in the workers, as the built-ins are by
importing :mod:`fedstrata.registry`.
"""

from __future__ import annotations

import copy
import csv
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from pydantic import Field

import fedstrata
from fedstrata.errors import ValidationError
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.nodes.rounds import SyncRounds
from fedstrata.nodes.strategy import Placement, Strategy, strategy_for
from fedstrata.protocols.kind import (
    Capabilities,
    KindSettings,
    ProtocolKind,
    register_kind,
    unregister_kind,
)
from fedstrata.protocols.sync import sync_rounds, sync_settings
from fedstrata.scenarios.build import protocol_config
from fedstrata.scenarios.loader import ScenarioErrors, parse_scenario, scenario_json_schema
from fedstrata.scenarios.protocol_schema import ProtocolSpec
from fedstrata.scenarios.reference import scenario_reference

# ------------------------------------------------------------------ the kind's module


class FirstKSettings(KindSettings):
    """Keys of protocol kind ``first-k``: ``replies`` (``1 .. 1000``), the answers at
    which the root closes a round (all the children asked, if fewer)."""

    replies: Annotated[int, Field(ge=1, le=1000, description="1 .. 1000")] = 2


class FirstK(SyncRounds):
    """Synchronous rounds that close at the first ``replies`` answers."""

    kind = "first-k"

    def __init__(self, children: Sequence[str], *, replies: int, **sync: Any) -> None:
        super().__init__(children, **sync)
        self.replies = replies

    def need_of(self, asked: int) -> int:
        """A round counts with ``replies`` answers (or every child asked, if fewer)."""
        return min(self.replies, asked)

    def target(self) -> int:
        """Close at the first ``replies`` answers."""
        return self.need_of(self.want)

    def describe(self) -> dict[str, Any]:
        """As sync rounds, plus the count."""
        return {**super().describe(), "replies": self.replies}


def _first_k_strategy(protocol: Any, settings: FirstKSettings, at: Placement) -> Strategy:
    if not at.root:
        return sync_rounds(protocol, at)
    return FirstK(at.children, replies=settings.replies, **sync_settings(protocol, at))


FIRST_K = ProtocolKind(
    name="first-k",
    summary="synchronous rounds that close at the first `replies` answers",
    settings=FirstKSettings,
    capabilities=Capabilities(),  # no secure aggregation
    factory=_first_k_strategy,
)

# ------------------------------------------------------------------ the tests


@pytest.fixture
def first_k() -> Iterator[ProtocolKind]:
    """The kind registered for one test (the composition root's one line, here)."""
    register_kind(FIRST_K)
    yield FIRST_K
    unregister_kind(FIRST_K.name)


DOC: dict[str, Any] = {
    "name": "first-k",
    "seed": 0,
    "data": {"dataset": "heat-kernel-synthetic", "params": {"n_per_cluster": 60}},
    "topology": {"clients": {"count": 4}},
    "algorithm": {"name": "hk-mvfc", "n_clusters": 4, "center_update": "exact"},
    "protocol": {"kind": "first-k", "replies": 3, "rule": "sum", "rounds": 8, "deadline_s": 10},
}


def text(protocol: dict[str, Any], **top: Any) -> str:
    """DOC as YAML with ``protocol`` as given (and other top-level keys)."""
    return yaml.safe_dump({**copy.deepcopy(DOC), "protocol": protocol, **top}, sort_keys=False)


def located(source: str) -> list[str]:
    with pytest.raises(ScenarioErrors) as info:
        parse_scenario(source)
    return info.value.located().splitlines()


def test_its_key_validates_under_its_kind(first_k):
    sc = parse_scenario(text({"kind": "first-k", "replies": 3}))
    assert sc.protocol.settings == FirstKSettings(replies=3)
    assert protocol_config(sc, "r").settings == FirstKSettings(replies=3)
    assert "  replies: 3\n" in sc.resolved_yaml()  # flat under protocol, as written
    assert parse_scenario(sc.resolved_yaml()) == sc


def test_its_key_is_refused_under_another_kind_and_others_under_it(first_k):
    assert located(text({"kind": "sync", "replies": 3})) == [
        "<string>:16: protocol.replies: is for protocol kind first-k (kind is 'sync'); remove it"
    ]
    assert located(text({"kind": "first-k", "buffer_size": 3})) == [
        "<string>:16: protocol.buffer_size: is for protocol kind buffered (kind is 'first-k'); "
        "remove it"
    ]
    assert located(text({"kind": "first-k", "replies": 0})) == [
        "<string>:16: protocol.replies: must be >= 1, got 0"
    ]


def test_an_unregistered_kind_is_an_unknown_kind():
    (line,) = located(text({"kind": "first-k"}))
    assert line == (
        "<string>:15: protocol.kind: must be 'sync', 'async', 'buffered' or 'adaptive', "
        "got 'first-k'"
    )


def test_the_schema_and_the_reference_document_its_key(first_k):
    props = scenario_json_schema()["$defs"]["ProtocolSpec"]["properties"]
    assert props["replies"]["maximum"] == 1000 and "first-k" in props["kind"]["enum"]
    assert "replies" in ProtocolSpec.known_fields()
    assert "| `replies` | integer | `2` | kind first-k only; 1 .. 1000 |" in scenario_reference()


def test_validate_refuses_secure_aggregation_it_does_not_declare(first_k):
    source = text({"kind": "first-k"}, privacy={"secure_aggregation": "secagg"})
    assert located(source) == [
        "<string>:15: protocol.kind: secure aggregation sums each round's masked partials: "
        "kind 'first-k' does not sum exactly the children a round asked"
    ]


def test_the_node_side_refuses_it_too(first_k):
    proto = ProtocolConfig(run="t", kind="first-k", secure="secagg")
    with pytest.raises(ValidationError, match="kind 'first-k' does not sum exactly"):
        strategy_for(
            proto, Placement(("c0", "c1", "c2"), quorum=1.0, seed=0, root=True, deadline_s=10)
        )
    other = ProtocolConfig(run="t", kind="first-k", settings=FirstKSettings(replies=2))
    middle = Placement(("a", "b"), quorum=1.0, seed=0, root=False, deadline_s=1)
    assert strategy_for(other, middle).kind == "sync"  # middle tiers run synchronous rounds


def root_rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "rounds.csv", newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["tier"] == "cloud" and r["phase"] == "iter"]


def check_record(folder: Path) -> None:
    """Every root round closed at the first 3 of 4 answers; the record names the kind."""
    rows = root_rows(folder)
    assert rows and {int(r["participants"]) for r in rows} == {3}
    assert all(r["ok"] == "True" for r in rows)
    recorded = yaml.safe_load((folder / "scenario.yaml").read_text())["protocol"]
    assert (recorded["kind"], recorded["replies"]) == ("first-k", 3)


def test_it_runs_on_the_simulator(first_k, tmp_path):
    run = fedstrata.run(copy.deepcopy(DOC), out=tmp_path / "sim")
    assert run.summary["status"] in ("converged", "round_limit"), run.summary["reason"]
    assert run.summary["metrics"]["ari"] > 0.9
    check_record(tmp_path / "sim")


def test_it_runs_over_a_real_mosquitto(first_k, tmp_path):
    from tests.broker.conftest import _need_mosquitto
    from tests.extras import require

    require("aiomqtt")
    _need_mosquitto()
    # no broker given: a private Mosquitto; nodes in this process (the kind is registered
    # here only, see the module docstring)
    run = fedstrata.run(copy.deepcopy(DOC), transport="mqtt", out=tmp_path / "mqtt")
    assert run.summary["status"] in ("converged", "round_limit"), run.summary["reason"]
    assert not math.isnan(run.summary["metrics"]["ari"])
    check_record(tmp_path / "mqtt")
