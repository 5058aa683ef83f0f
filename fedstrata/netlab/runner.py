"""Run a lab's commands: the one place where ``ip``, ``tc`` and ``nft`` are executed.

A :class:`Runner` is any callable ``(argv, input=None) -> stdout``; tests hand the lab a
fake that records the commands instead of running them.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Protocol

from fedstrata.errors import TransportError

__all__ = ["TOOLS", "Runner", "SubprocessRunner", "missing_tools"]

TOOLS = ("ip", "tc", "nft")
"""The commands a lab runs (mosquitto is looked up by the deployment)."""


class Runner(Protocol):
    """Runs one command and returns its standard output."""

    def __call__(self, argv: list[str], input: str | None = None) -> str:
        """Run ``argv`` (with ``input`` on its standard input); raise on failure."""
        ...


class SubprocessRunner:
    """Runs commands with :func:`subprocess.run`; a failure raises :class:`TransportError`.

    Parameters
    ----------
    timeout_s : float
        Longest a single command may take.
    """

    def __init__(self, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s

    def __call__(self, argv: list[str], input: str | None = None) -> str:
        """Run ``argv``; its standard output, or :class:`TransportError` with its stderr."""
        try:
            res = subprocess.run(
                argv, input=input, capture_output=True, text=True, timeout=self.timeout_s
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TransportError(f"{' '.join(argv)}: {exc}") from exc
        if res.returncode != 0:
            raise TransportError(f"{' '.join(argv)}: {res.stderr.strip() or res.returncode}")
        return res.stdout


def missing_tools(tools: tuple[str, ...] = TOOLS) -> list[str]:
    """The commands of ``tools`` that are not on ``PATH``."""
    return [t for t in tools if shutil.which(t) is None]
