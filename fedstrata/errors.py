"""Exceptions raised by fedstrata; all derive from :class:`FedstrataError`."""

from __future__ import annotations

__all__ = [
    "ConvergenceWarning",
    "FedstrataError",
    "NodeProtocolError",
    "PluginError",
    "PrivacyError",
    "ScenarioError",
    "TransportError",
    "ValidationError",
    "WireError",
    "error_reason",
    "missing_extra",
]


class FedstrataError(Exception):
    """Base class of every error fedstrata raises on purpose."""


class ValidationError(FedstrataError, ValueError):
    """Bad input to a public function or estimator (shapes, values, parameters)."""


class ScenarioError(FedstrataError, ValueError):
    """A scenario file is invalid.

    Parameters
    ----------
    reason
        What is wrong, in words a user can act on.
    file, line, path
        Where: the file name, the 1-based line, the dotted field path.
    """

    def __init__(
        self, reason: str, *, file: str | None = None, line: int | None = None, path: str = ""
    ) -> None:
        self.reason = reason
        self.file = file
        self.line = line
        self.path = path
        super().__init__(self.located())

    def located(self) -> str:
        """Return ``file:line: path: reason`` with the known parts."""
        where = ":".join(str(p) for p in (self.file, self.line) if p is not None)
        parts = [p for p in (where, self.path) if p]
        return ": ".join([*parts, self.reason])


class WireError(FedstrataError, ValueError):
    """A message could not be encoded or decoded."""


class NodeProtocolError(FedstrataError):
    """A node received an event it cannot accept in its current state."""


class PrivacyError(FedstrataError):
    """Secure aggregation or differential privacy failed or was misconfigured."""


class PluginError(FedstrataError):
    """An installed plug-in (an entry point of group ``fedstrata.plugins``) cannot be used."""


class TransportError(FedstrataError):
    """The real MQTT transport failed (broker unreachable, connection lost)."""


class ConvergenceWarning(UserWarning):
    """An iterative fit stopped at its iteration limit or hit a degenerate state."""


def error_reason(exc: BaseException, limit: int = 300) -> str:
    """``"Type: message"`` of an exception, on one line and at most ``limit`` characters."""
    text = " ".join(str(exc).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def missing_extra(extra: str, what: str, exc: ImportError) -> ValidationError:
    """The usage error of a feature whose pip extra is not installed (exit 2, one line)."""
    return ValidationError(
        f'{what} needs the [{extra}] extra: pip install "fedstrata[{extra}]" ({exc})'
    )
