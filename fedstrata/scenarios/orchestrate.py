"""One run on any transport: build the federation once, drive it, summarise it.

A :class:`Transport` knows three things: how to build the federation for it (the
simulator builds it as is; the MQTT runner names it by its run id and signs it with
the run's keys), how to drive the nodes (the SimPy kernel, asyncio tasks over a
broker, a pool of worker processes) and how to say what happened, as a
transport-neutral :class:`~fedstrata.scenarios.summary.RunResult` carrying its own
counters. :class:`Run` does the rest the same way for every transport: the warnings
the nodes raise while they run go into the record, and one summary builder
(:func:`~fedstrata.scenarios.summary.summarize`) makes ``summary.json`` and the rows
of ``rounds.csv``. The record files are written by
:func:`fedstrata.scenarios.run.write_run`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from fedstrata.scenarios.summary import RunResult, count_warning, summarize

if TYPE_CHECKING:  # types only: a transport builds the federation
    from fedstrata.scenarios.build import Federation
    from fedstrata.scenarios.schema import Scenario

__all__ = ["Run", "Transport", "counting_warnings"]


class Transport(Protocol):
    """How a federation is built, driven and reported on one transport."""

    def build(self, sc: Scenario) -> Federation:
        """The federation of ``sc`` as this transport runs it."""
        ...

    def drive(self, fed: Federation) -> Any:
        """Run the nodes until the run ends; return what :meth:`result` needs."""
        ...

    def result(self, fed: Federation, driven: Any, caught: dict[str, int]) -> RunResult:
        """What happened, given :meth:`drive`'s return and the warnings ``caught``."""
        ...


@contextlib.contextmanager
def counting_warnings() -> Iterator[dict[str, int]]:
    """Count warnings (category and text → times) instead of printing them.

    Numerical warnings of node code go into the record, not onto the terminal.
    """
    caught: dict[str, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, category, *_a, **_k: count_warning(
            caught, category, message
        )
        yield caught


class Run:
    """One run of a scenario on one transport.

    Parameters
    ----------
    scenario
        A validated scenario.
    transport
        The simulator's, or the MQTT runner's.
    seed
        Overrides the scenario's seed (data, partition, links, faults, client seeds).
    """

    def __init__(self, scenario: Scenario, transport: Transport, seed: int | None = None) -> None:
        self.scenario = scenario if seed is None else scenario.model_copy(update={"seed": seed})
        self.transport = transport

    def execute(self) -> tuple[Federation, dict[str, Any], list[dict[str, Any]]]:
        """Build, drive and summarise; return the federation, summary and ``rounds.csv`` rows."""
        fed = self.transport.build(self.scenario)
        with counting_warnings() as caught:
            driven = self.transport.drive(fed)
        summary, rows = summarize(fed, self.transport.result(fed, driven, caught))
        summary["warnings"] = [*fed.data_notes(), *summary["warnings"]]
        return fed, summary, rows
