"""Generate a ready Mosquitto configuration (and its ACL) for one site of a deployment.

>>> conf = mosquitto_conf("fog-0", port=1883, acl_file="fog-0.acl")   # doctest: +SKIP
>>> acl = acl_text(parents, tier_of, site="fog-0")                    # doctest: +SKIP

Pure text generation: ``fedstrata broker config`` writes the files.

**Who is who.** Every node logs in with its node id as MQTT user name (``client-0``,
``fog-1``, ``cloud``), authenticated by the broker's ``password_file``. The ACL binds
each topic to the one user allowed to write it, and with ``pin_client_ids`` the
broker replaces every client id by the user name (``use_username_as_clientid``), so
no user can open, resume or take over another user's session either (without it, a
client of user ``client-1`` connecting with ``client-0``'s client id disconnects
``client-0`` and discards its queued messages: tried on Mosquitto 2.0.11). MQTT
carries no publisher identity to the subscribers (neither 3.1.1 nor 5), so what the
broker guarantees is *who may publish on which topic*; a node knows who sent a
message from the topic it arrived on, never from the payload.

**Access rules** (``acl_file``), for the topic scheme of :mod:`fedstrata.mqtt`
(``fs/{run}/{tier}/{group}/up/{node}|down|config|to/{node}``, the group being the
aggregator's node id, and ``fs/{run}/presence/{node}``); the run id is any (``+``),
since every run gets a fresh one. From the scenario's topology, one ``user``
section per node:

* an aggregator ``A`` of tier ``T`` reads its children's updates (``fs/+/T/A/up/+``),
  writes its group's models and configuration (``fs/+/T/A/down``,
  ``fs/+/T/A/config``) and its secure-aggregation messages to each member
  (``fs/+/T/A/to/+``), and reads its children's presence topics;
* a node ``N`` with parent ``P`` of tier ``T`` writes its updates to its own
  ``fs/+/T/P/up/N`` only, and reads ``fs/+/T/P/down``, ``fs/+/T/P/config`` and its
  own ``fs/+/T/P/to/N``;
* every user writes its own presence topic only (``pattern write fs/+/presence/%u``).

Anything else is denied: nobody but ``A`` writes ``A``'s ``down``, ``config`` or
``to/`` topics, or reads another member's ``to/`` topic; a node cannot publish into
another group, on a sibling's ``up`` topic, or on someone else's presence topic.

**Binding the sender.** The broker cannot look into payloads, so it binds identities
through topics: each child publishes on its own ``up/{node}``
(:func:`fedstrata.mqtt.up_topic`), which only that child's user may write, and the
aggregator refuses (``wrong_sender``, signed or not) an envelope whose ``sender`` is
not the child whose topic it arrived on. An authenticated child therefore cannot
speak for a sibling: the broker drops it on the sibling's topic, the aggregator on
its own. ``per_node_up=False`` writes the older shared-``up`` rules, for nodes of
before per-node topics only.

With MQTT 3.1.1 a denied PUBLISH is acknowledged and silently dropped (MQTT 5:
PUBACK reason code 0x87); a denied read means the message is simply not delivered.
"""

from __future__ import annotations

from pathlib import Path

from fedstrata.errors import ValidationError

__all__ = ["PER_NODE_UP", "acl_text", "bridge_text", "mosquitto_conf", "parse_host_port"]

#: Whether children publish their updates on per-node topics ``.../up/{node}``
#: (then the broker binds an update's sender) instead of the group's shared ``up``.
#: It must match the nodes' topic scheme (:func:`fedstrata.mqtt.up_topic`, per node
#: since the broker binds identities): an ACL for per-node topics denies every update
#: of nodes that publish on the shared one, and the reverse.
PER_NODE_UP = True


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


def _site_nodes(children: dict[str, list[str]], nodes: set[str], site: str | None) -> set[str]:
    """The nodes that may connect to ``site``'s broker: the site's whole subtree.

    A single broker for the federation is the root's site (or a site that is no
    node, such as ``lab``): every node of every tier. A fog site's broker gets the
    fog node and everything below it; entries of nodes that connect elsewhere in a
    bridged deployment stay unused (they grant each node its own topics only).
    """
    if site is None or site not in nodes:
        return nodes
    keep, todo = set(), [site]
    while todo:
        node = todo.pop()
        if node not in keep:
            keep.add(node)
            todo += children.get(node, [])
    return keep


def acl_text(
    parents: dict[str, str] | None = None,
    tier_of: dict[str, str] | None = None,
    *,
    site: str | None = None,
    monitor_user: str | None = None,
    per_node_up: bool | None = None,
) -> str:
    """Return a Mosquitto ``acl_file`` for the topic scheme (see the module docstring).

    Parameters
    ----------
    parents
        The parent of every node but the root (``Wiring.parents``); ``None`` writes
        ``pattern`` rules bound to the user name only (an aggregator's own group
        topics and everyone's presence; with ``per_node_up`` also every node's own
        ``up/{node}`` in any group): no child can then publish on a shared ``up``.
    tier_of
        The tier of every aggregator (``Wiring.tier_of``).
    site
        Keep only the ``user`` sections of the site's subtree (the site and every
        node below it, all tiers); every node when ``site`` is ``None``, the root,
        or no node of the topology.
    monitor_user
        A user that may read ``$SYS/#`` (the broker counters of
        :mod:`fedstrata.broker.sysstats`).
    per_node_up
        Children publish on ``.../up/{node}`` (the broker binds an update's sender)
        instead of the shared ``.../up``; default :data:`PER_NODE_UP`.

    Raises
    ------
    ValidationError
        If a node id is not a valid single topic level or an aggregator's tier is
        unknown.

    """
    per_node = PER_NODE_UP if per_node_up is None else per_node_up
    up_read = "up/+" if per_node else "up"
    lines = [
        "# fedstrata ACL (generated by fedstrata broker config). User name = node id;",
        "# topics fs/{run}/{tier}/{group}/"
        + ("up/{node}" if per_node else "up")
        + "|down|config|to/{node} and",
        "# fs/{run}/presence/{node}, '+' matching any run id. Everything not granted is denied.",
        "# everyone: write its own presence topic, nobody else's",
        "pattern write fs/+/presence/%u",
    ]
    if not per_node:
        lines += [
            "# children share their parent's up topic: the broker cannot tell which child",
            "# an update claims to come from (only signatures can)",
        ]
    if parents is None:
        lines += [
            "# aggregators (by user name): their group's updates, models, configuration",
            f"pattern read fs/+/+/%u/{up_read}",
            "pattern write fs/+/+/%u/down",
            "pattern write fs/+/+/%u/config",
            "pattern write fs/+/+/%u/to/+",
        ]
        if per_node:
            lines.append("pattern write fs/+/+/+/up/%u")
    lines.append("")
    if monitor_user is not None:
        lines += [f"user {_check_name('monitor user', monitor_user)}", "topic read $SYS/#", ""]
    if parents is None:
        return "\n".join(lines)
    tiers = tier_of or {}
    children: dict[str, list[str]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    nodes = set(parents) | set(children) | set(tiers)
    keep = _site_nodes(children, nodes, site)
    for node in sorted(keep, key=_natural):
        _check_name("node id", node)
        section = []
        if node in children or node in tiers:
            tier = tiers.get(node)
            if tier is None:
                raise ValidationError(f"no tier known for aggregator {node!r}")
            group = f"fs/+/{_check_name('tier', tier)}/{node}"
            section += [
                f"topic read {group}/{up_read}",
                f"topic write {group}/down",
                f"topic write {group}/config",
                f"topic write {group}/to/+",
            ]
            section += [
                f"topic read fs/+/presence/{c}"
                for c in sorted(children.get(node, []), key=_natural)
            ]
        parent = parents.get(node)
        if parent is not None:
            tier = tiers.get(parent)
            if tier is None:
                raise ValidationError(f"no tier known for {parent!r}, the parent of {node!r}")
            group = f"fs/+/{_check_name('tier', tier)}/{_check_name('node id', parent)}"
            section += [
                f"topic write {group}/up" + (f"/{node}" if per_node else ""),
                f"topic read {group}/down",
                f"topic read {group}/config",
                f"topic read {group}/to/{node}",
            ]
        if section:
            lines += [f"user {node}", *section, ""]
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
    per_node_up: bool | None = None,
) -> str:
    """Return the bridge section connecting ``site``'s broker to the broker at ``remote``.

    With ``cloud_id`` only what a fog site exchanges with its parent crosses: the
    parent group's ``up`` (out), its ``down``, ``config`` and the site's own
    ``to/{site}`` (in: secure aggregation's messages for it) and the site's
    presence (out);
    without it every topic of the run (``fs/{run}/#``) is bridged both ways.
    The remote broker sees the bridge as the user ``remote_username`` (the site's
    node id by default), so its ACL for that node applies to the bridge. With
    ``per_node_up`` (default :data:`PER_NODE_UP`) the site's updates go out on the
    parent group's ``up/{site}``, the one ``up`` topic the site's user may write.
    """
    host, port = parse_host_port(remote)
    _check_name("site", site)
    per_node = PER_NODE_UP if per_node_up is None else per_node_up
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
            f"topic {group}/up{f'/{site}' if per_node else ''} out 1",
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
    pin_client_ids: bool | None = None,
    client_cert_identity: bool = False,
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

    ``client_cert_identity`` makes the TLS listener require a client certificate
    signed by ``tls_ca`` and take the user name from its Common Name
    (``require_certificate``, ``use_identity_as_username``): a node is then whoever
    holds the private key of the certificate issued for its node id, whatever user
    name it sends, and the listener ignores ``password_file``.

    ``pin_client_ids`` (default: on with a ``password_file`` or
    ``client_cert_identity``) sets
    ``use_username_as_clientid``: the broker uses each client's user name as its
    client id, so a user cannot take over (disconnect, resume, drain) another user's
    session by claiming its client id, and clients without a user name are refused.
    It also means one connection per user: a second connection with the same
    credentials (a watcher logged in as a node while the node runs) disconnects the
    first. It is not reloaded by SIGHUP.
    """
    _check_name("site", site)
    if not 1 <= port <= 65535:
        raise ValidationError(f"port must be in 1..65535, got {port}")
    if (tls_cert is None) != (tls_key is None) or (tls_ca is not None and tls_cert is None):
        raise ValidationError("TLS needs both --tls-cert and --tls-key (--tls-ca is optional)")
    if client_cert_identity and tls_ca is None:
        raise ValidationError(
            "client certificates as identities need TLS and the CA that signs them (--tls-ca)"
        )
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
        lines += [f"certfile {tls_cert}", f"keyfile {tls_key}"]
        if client_cert_identity:
            lines += [
                "# the user name is the Common Name of the client's certificate (its node id)",
                "require_certificate true",
                "use_identity_as_username true",
            ]
        else:
            lines.append("require_certificate false")
    lines.append("")
    authenticated = password_file is not None or client_cert_identity
    pin = authenticated if pin_client_ids is None else pin_client_ids
    if client_cert_identity:
        lines.append("allow_anonymous false")
    elif password_file is not None:
        lines += ["allow_anonymous false", f"password_file {password_file}"]
    else:
        lines += ["# no password_file: user names are not authenticated", "allow_anonymous true"]
    if pin:
        lines += [
            "# one session per user: the client id is replaced by the (authenticated) user",
            "# name, so nobody can take over another node's session with its client id",
            "use_username_as_clientid true",
        ]
    if acl_file is not None:
        lines.append(f"acl_file {acl_file}")
    text = "\n".join(lines) + "\n"
    if bridge:
        text += "\n" + bridge
    return text
