"""fedstrata: federated multi-view clustering over hierarchical edge-fog-cloud networks.

The Python API (:mod:`fedstrata.api`) is re-exported here and imported on first use,
so that ``import fedstrata`` stays fast (no pandas, SimPy or PyTorch until needed)::

    import fedstrata

    run = fedstrata.run("scenarios/paper-flat.yaml", seed=3)
    run.rounds, run.labels, run.model, run.summary
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedstrata.version import __version__

#: Names of :mod:`fedstrata.api` available as ``fedstrata.<name>``.
_API = ("NotARecordError", "Run", "StudyResult", "SweepResult", "load", "run", "study", "sweep")

__all__ = [
    "NotARecordError",
    "Run",
    "StudyResult",
    "SweepResult",
    "__version__",
    "load",
    "run",
    "study",
    "sweep",
]

if TYPE_CHECKING:  # for type checkers and editors; at run time __getattr__ imports
    from fedstrata.api import (
        NotARecordError,
        Run,
        StudyResult,
        SweepResult,
        load,
        run,
        study,
        sweep,
    )


def __getattr__(name: str) -> Any:
    """Import the Python API on first use of one of its names (PEP 562)."""
    if name in _API:
        from fedstrata import api

        value = getattr(api, name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'fedstrata' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
