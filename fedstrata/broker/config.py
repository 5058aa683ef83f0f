"""Generate a ready Mosquitto configuration (and its ACL) for one site of a deployment.

>>> conf = mosquitto_conf("fog-0", port=1883, acl_file="fog-0.acl")   # doctest: +SKIP
>>> acl = acl_text(scenario, site="fog-0")                            # doctest: +SKIP

Pure text generation: ``fedstrata broker config`` writes the files.

Access rules (``acl_file``), with every client logging in with its node id as user
name (``client-0``, ``fog-1``, ``cloud``) and the topic scheme of
:mod:`fedstrata.mqtt` (``fs/{run}/{tier}/{group}/up|down|config``, the group being
the aggregator's node id, and ``fs/{run}/presence/{node}``); the run id is any
(``+``), since every run gets a fresh one:

* for everyone (``pattern`` lines, ``%u`` the user name): an aggregator reads its
  own group's ``up`` (``fs/+/+/%u/up``) and writes its own group's ``down`` and
  ``config`` (``fs/+/+/%u/down``, ``fs/+/+/%u/config``: the models and the run's
  configuration) and its secure-aggregation messages to each member
  (``fs/+/+/%u/to/+``); every node writes its own presence (``fs/+/presence/%u``);
* per node (``user`` sections, from the scenario's topology): a node with parent
  ``P`` of tier ``T`` writes ``fs/+/T/P/up`` and reads ``fs/+/T/P/down``,
  ``fs/+/T/P/config`` and its own ``fs/+/T/P/to/{node}``; an aggregator reads its
  children's presence topics.

Anything else is denied: a client cannot publish another group's ``up``, any
``down`` or ``config``, or someone else's presence, and reads nothing but its
parent's ``down`` and ``config``.
With MQTT 3.1.1 a denied PUBLISH is acknowledged and silently dropped; a denied
read means the message is simply not delivered.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from fedstrata.errors import ValidationError

__all__ = ["acl_text", "bridge_text", "mosquitto_conf", "parse_host_port"]


def parse_host_port(text: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` too).

    Raises
    ------
    ValidationError
        If the port is missing or not in 1..65535.

    """
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValidationError(f"{text!r} is not HOST:PORT (a port in 1..65535)")
    return host, int(port)


def _check_name(what: str, value: str) -> str:
    if not value or any(c in value for c in "/+#\x00 \t\r\n") or value.startswith("$"):
        raise ValidationError(
            f"{what} {value!r} must be non-empty, not start with '$' and contain no "
            "'/', '+', '#' or whitespace"
        )
    return value


def _site_nodes(parents: dict[str, str], site: str | None) -> set[str] | None:
    """The nodes that connect to ``site``'s broker: the site and its children."""
    if site is None:
        return None
    members = {site} | {n for n, p in parents.items() if p == site}
    return members if len(members) > 1 or site in parents else None


def acl_text(
    parents: dict[str, str] | None = None,
    tier_of: dict[str, str] | None = None,
    *,
    site: str | None = None,
    monitor_user: str | None = None,
) -> str:
    """Return a Mosquitto ``acl_file`` for the topic scheme (see the module docstring).

    Parameters
    ----------
    parents
        The parent of every node but the root (``Wiring.parents``); ``None`` writes
        the ``pattern`` rules only (then no client can publish its updates: add the
        ``user`` sections by hand).
    tier_of
        The tier of every aggregator (``Wiring.tier_of``).
    site
        Keep only the ``user`` sections of the nodes that connect to this site's
        broker (the site and its children); all nodes when it is not an aggregator.
    monitor_user
        A user that may read ``$SYS/#`` (the broker counters of
        :mod:`fedstrata.broker.sysstats`).

    """
    lines = [
        "# fedstrata ACL: user name = node id; topics fs/{run}/{tier}/{group}/up|down|config",
        "# and fs/{run}/presence/{node}; '+' matches any run id.",
        "# aggregators: read their group's up, write their group's down and config",
        "pattern read fs/+/+/%u/up",
        "pattern write fs/+/+/%u/down",
        "pattern write fs/+/+/%u/config",
        "pattern write fs/+/+/%u/to/+",
        "# everyone: write its own presence",
        "pattern write fs/+/presence/%u",
        "",
    ]
    if monitor_user is not None:
        lines += [f"user {_check_name('monitor user', monitor_user)}", "topic read $SYS/#", ""]
    if parents is None:
        return "\n".join(lines)
    tiers = tier_of or {}
    keep = _site_nodes(parents, site)
    children: dict[str, list[str]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    nodes: Iterable[str] = sorted(set(parents) | set(children), key=_natural)
    for node in nodes:
        if keep is not None and node not in keep:
            continue
        section = []
        parent = parents.get(node)
        if parent is not None:
            tier = tiers.get(parent)
            if tier is None:
                raise ValidationError(f"no tier known for {parent!r}, the parent of {node!r}")
            section += [
                f"topic write fs/+/{tier}/{parent}/up",
                f"topic read fs/+/{tier}/{parent}/down",
                f"topic read fs/+/{tier}/{parent}/config",
                f"topic read fs/+/{tier}/{parent}/to/{node}",
            ]
        section += [
            f"topic read fs/+/presence/{c}" for c in sorted(children.get(node, []), key=_natural)
        ]
        if section:
            lines += [f"user {_check_name('node id', node)}", *section, ""]
    return "\n".join(lines)


def _natural(node: str) -> tuple[str, int, str]:
    prefix, _, index = node.rpartition("-")
    return (prefix, int(index), node) if index.isdigit() else (node, -1, node)


def bridge_text(
    site: str,
    remote: str,
    *,
    run: str = "+",
    cloud_id: str | None = None,
    cloud_tier: str = "cloud",
    remote_username: str | None = None,
) -> str:
    """Return the bridge section connecting ``site``'s broker to the broker at ``remote``.

    With ``cloud_id`` only what a fog site exchanges with its parent crosses: the
    parent group's ``up`` (out), its ``down``, ``config`` and the site's own
    ``to/{site}`` (in: secure aggregation's messages for it) and the site's
    presence (out);
    without it every topic of the run (``fs/{run}/#``) is bridged both ways.
    The remote broker sees the bridge as the user ``remote_username`` (the site's
    node id by default), so its ACL for that node applies to the bridge.
    """
    host, port = parse_host_port(remote)
    _check_name("site", site)
    if run != "+":
        _check_name("run", run)
    lines = [
        f"# bridge from site {site} to {host}:{port}",
        f"connection fs-bridge-{site}",
        f"address {host}:{port}",
        "bridge_protocol_version mqttv311",
        "cleansession false",
        f"remote_clientid fs-bridge-{site}",
        f"remote_username {_check_name('remote user', remote_username or site)}",
        "# remote_password ...   (when the remote broker has a password_file)",
        "try_private true",
        "notifications false",
    ]
    if cloud_id is None:
        lines.append(f"topic fs/{run}/# both 1")
    else:
        group = f"fs/{run}/{_check_name('tier', cloud_tier)}/{_check_name('cloud id', cloud_id)}"
        lines += [
            f"topic {group}/up out 1",
            f"topic {group}/down in 1",
            f"topic {group}/config in 1",
            f"topic {group}/to/{site} in 1",
            f"topic fs/{run}/presence/{site} out 1",
        ]
    return "\n".join(lines) + "\n"


def mosquitto_conf(
    site: str,
    *,
    port: int = 1883,
    bind: str | None = None,
    acl_file: str | Path | None = None,
    password_file: str | Path | None = None,
    tls_ca: str | Path | None = None,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
    bridge: str | None = None,
    sys_interval: int = 1,
) -> str:
    """Return a ``mosquitto.conf`` for one site.

    ``bridge`` is the text of :func:`bridge_text` (appended as is). ``sys_interval``
    is how often (seconds) the broker publishes its ``$SYS`` counters; the run's
    monitor (:mod:`fedstrata.broker.sysstats`) waits at most 3 s for a fresh
    update before and after a run, so it must be shorter than that. TLS needs all of
    ``tls_cert`` and ``tls_key`` (``tls_ca`` optional: client certificates are not
    required). Without ``password_file`` clients connect anonymously or with any
    user name they claim, so the ACL then guards only against mistakes, not against
    impostors.
    """
    _check_name("site", site)
    if not 1 <= port <= 65535:
        raise ValidationError(f"port must be in 1..65535, got {port}")
    if (tls_cert is None) != (tls_key is None) or (tls_ca is not None and tls_cert is None):
        raise ValidationError("TLS needs both --tls-cert and --tls-key (--tls-ca is optional)")
    lines = [
        f"# Mosquitto configuration of fedstrata site {site} (generated by fedstrata)",
        "per_listener_settings false",
        "persistence false",
        f"sys_interval {int(sys_interval)}",
        "set_tcp_nodelay true",
        "max_queued_messages 100000",
        "",
        f"listener {port}" + (f" {bind}" if bind else ""),
    ]
    if tls_cert is not None:
        if tls_ca is not None:
            lines.append(f"cafile {tls_ca}")
        lines += [f"certfile {tls_cert}", f"keyfile {tls_key}", "require_certificate false"]
    lines.append("")
    if password_file is not None:
        lines += ["allow_anonymous false", f"password_file {password_file}"]
    else:
        lines += ["# no password_file: user names are not authenticated", "allow_anonymous true"]
    if acl_file is not None:
        lines.append(f"acl_file {acl_file}")
    text = "\n".join(lines) + "\n"
    if bridge:
        text += "\n" + bridge
    return text
