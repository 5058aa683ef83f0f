"""Suite-wide policy: which tests are ``slow``, so ``-m "not slow"`` is a quick check.

A test is slow when it starts something heavy, whatever its own code looks like: a real
Mosquitto (``tests/broker``, ``tests/device``), the installed ``fedstrata`` command in a
subprocess (each pays about a second of imports), a benchmark at its smoke size, a
notebook, PyTorch training, or whole example and paper scenarios. Those are marked here
by module, so a new test in such a module is slow without anyone remembering to say so;
single slow tests in otherwise quick modules carry ``@pytest.mark.slow`` themselves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import fedstrata.registry  # noqa: F401  (tests build nodes directly: the composition root)

HERE = Path(__file__).resolve().parent

SLOW_MODULES = (
    "broker/",
    "device/",
    "benchmarks/",
    "notebooks/",
    "algorithms/deep/",
    "plugins/test_deep_plugin.py",
    "scenarios/test_deep_runs.py",
    "scenarios/test_papers.py",
    "scenarios/test_fault_property.py",
    "scenarios/test_study.py",
    "scenarios/test_sweep.py",
    "scenarios/test_secure_runs.py",
    "scenarios/test_examples.py",
    "scenarios/test_golden_records.py",
    "scenarios/test_budget.py",
    "scenarios/test_corpus.py",
    "analysis/test_report.py",
    "test_cli.py",
    "test_cli_init_schema.py",
    "test_registry.py",
    "test_types.py",
    "docs/",
)
"""Paths under ``tests/`` whose every test is slow (a folder ends with ``/``)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`SLOW_MODULES` ``slow``."""
    slow = pytest.mark.slow
    for item in items:
        try:
            rel = Path(str(item.path)).resolve().relative_to(HERE).as_posix()
        except ValueError:  # a test outside tests/ (a notebook collected by path, say)
            continue
        if rel.startswith(SLOW_MODULES):
            item.add_marker(slow)
