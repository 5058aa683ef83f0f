"""Names and addresses of what a lab creates: unique per process, recognisable after a crash.

A namespace is ``fsl-<pid>-<name>``, a veth end ``fsl<pid>-<k><a|b>`` (interface names
are limited to 15 characters), an address pair the ``/30`` block ``10.203.<k / 64>.<4 (k
% 64)>`` of link ``k``: private addresses, only ever configured inside namespaces the lab
created.
"""

from __future__ import annotations

import ipaddress
import os
import re

from fedstrata.errors import ValidationError

__all__ = [
    "PREFIX",
    "link_addresses",
    "namespace_name",
    "owner_pid",
    "prefix_for",
    "veth_names",
]

PREFIX = "fsl-"
"""Every namespace a lab creates starts with this."""

IFNAMSIZ = 15
"""The longest interface name Linux accepts."""

MAX_LINKS = 64 * 256
"""Links one lab can address in ``10.203.0.0/16`` (``/30`` blocks)."""

_OWNED = re.compile(r"^fsl-(\d+)-")


def prefix_for(pid: int | None = None) -> str:
    """The namespace prefix of process ``pid`` (default: this one): ``fsl-<pid>-``."""
    return f"{PREFIX}{os.getpid() if pid is None else pid}-"


def namespace_name(prefix: str, name: str) -> str:
    """The namespace of ``name`` (a node or site id) under ``prefix``."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
        raise ValidationError(f"namespace name {name!r}: use 1-64 letters, digits, _ . -")
    return f"{prefix}{name}"


def owner_pid(namespace: str) -> int | None:
    """The pid whose prefix ``namespace`` carries, or None for a name no lab made."""
    m = _OWNED.match(namespace)
    return int(m.group(1)) if m else None


def veth_names(prefix: str, k: int) -> tuple[str, str]:
    """The two ends of link ``k``: ``fsl<pid>-<k>a`` (upper side), ``...b`` (lower side)."""
    pid = owner_pid(prefix)
    if pid is None:
        raise ValidationError(f"{prefix!r} is not a lab prefix (fsl-<pid>-)")
    a, b = f"fsl{pid}-{k}a", f"fsl{pid}-{k}b"
    if len(a) > IFNAMSIZ:
        raise ValidationError(f"interface name {a!r} is longer than {IFNAMSIZ} characters")
    return a, b


def link_addresses(k: int) -> tuple[str, str]:
    """The addresses (with ``/30``) of the upper and lower end of link ``k``."""
    if not 0 <= k < MAX_LINKS:
        raise ValidationError(f"link index {k} outside 0 .. {MAX_LINKS - 1}")
    net = ipaddress.ip_network(f"10.203.{k // 64}.{4 * (k % 64)}/30")
    upper, lower = list(net.hosts())
    return f"{upper}/30", f"{lower}/30"
