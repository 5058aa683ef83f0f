"""Optional extras in the tests: skipped where an extra is missing, never under CI.

A newcomer who installed only ``.[dev,mqtt]`` sees the tests of the ``[deep]`` and
``[ray]`` extras skipped with the install command as the reason; CI (``CI`` set,
``.ci/run`` installs every extra) fails instead, so no test is silently skipped there.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

EXTRA_OF = {"torch": "deep", "ray": "ray"}
"""The pip extra that provides each optional module."""


def has(module: str) -> bool:
    """Whether ``module`` can be imported here."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def require(module: str) -> ModuleType:
    """Import ``module``; without it, skip (fail under CI) naming the extra to install.

    Usable at module level (the whole file is skipped) and inside a test.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = EXTRA_OF.get(module, module)
        reason = f'{module} is missing: pip install -e ".[{extra}]" ({exc})'
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
