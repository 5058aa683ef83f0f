"""The built-in algorithm plug-ins' declarations, and the docs that list them.

docs/algorithms.md names every algorithm with its estimator; the table is checked
against the registered declarations here, so that a name added or removed in a
plug-in shows up as a failing test rather than a stale page.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import pytest

import fedstrata.registry  # noqa: F401  (registers the built-in plug-ins)
from fedstrata.nodes.algorithm import Algorithm
from fedstrata.plugins.spec import (
    AlgorithmPlugin,
    AlgorithmSettings,
    Capabilities,
    algorithm_plugins,
    register_algorithm_plugin,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "algorithms.md"
ROW = re.compile(r"^\| `([a-z0-9-]+)` \| (`(\w+)`|— \(federated only\)) \|", re.M)


def _built_in() -> dict[str, str | None]:
    """Every registered name and its estimator's class name (None: federated only)."""
    out: dict[str, str | None] = {}
    for plugin in algorithm_plugins():
        for name in plugin.names:
            entry = plugin.estimators.get(name)
            out[name] = None if entry is None else entry[0].rpartition(":")[2]
    return out


def test_the_algorithms_table_is_the_declarations():
    rows = {m.group(1): m.group(3) for m in ROW.finditer(DOC.read_text(encoding="utf-8"))}
    assert rows == _built_in()


def test_the_first_registered_algorithm_is_the_default_and_takes_every_capability():
    first = algorithm_plugins()[0]
    assert first.names[0] == "hk-mvfc"
    caps = first.capabilities_of("hk-mvfc")
    assert caps.secure_aggregation and caps.dp and caps.rules is None


def test_a_name_can_be_registered_once():
    class Twin(AlgorithmSettings):
        """A second hk-mvfc."""

        name: Literal["hk-mvfc"]

    class Unnamed(AlgorithmSettings):
        """A name that is no literal."""

        name: str = "anything"

    twin = AlgorithmPlugin(
        family="twin", settings=(Twin,), build=lambda inp: None, model_type=Twin, factory=Twin
    )
    with pytest.raises(ValueError, match="already registered: hk-mvfc"):
        register_algorithm_plugin(twin)
    unnamed = AlgorithmPlugin(
        family="unnamed",
        settings=(Unnamed,),
        build=lambda inp: None,
        model_type=Unnamed,
        factory=Unnamed,
    )
    with pytest.raises(ValueError, match="settings without a name"):
        register_algorithm_plugin(unnamed)
    assert all(p.family not in ("twin", "unnamed") for p in algorithm_plugins())


def test_a_reason_for_an_unknown_capability_is_refused():
    with pytest.raises(ValueError, match="unknown capabilities"):
        Capabilities(reasons={"colour": "no"})


def test_the_default_stop_test_names_no_equation():
    assert Algorithm.parameter_stop_test(None, relative=True) == "the relative model change"  # type: ignore[arg-type]
    assert Algorithm.parameter_stop_test(None, relative=False) == "the model change"  # type: ignore[arg-type]
