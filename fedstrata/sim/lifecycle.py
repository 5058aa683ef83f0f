"""Node life cycle in the kernel: start, clean finish, crash (with will) and restart.

Plain functions over the :class:`~fedstrata.sim.engine.Engine`: these are
rare events, kept out of the engine's hot path. A session that ends cleanly
(``Finished``: MQTT DISCONNECT) discards its will; one that ends uncleanly
(a crash) has it published by every broker it was registered with
(MQTT 3.1.1 §3.1.2.5, §3.14.4).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fedstrata.errors import ValidationError
from fedstrata.mqtt import Will
from fedstrata.nodes.events import Started
from fedstrata.sim.broker import Message, SimBroker
from fedstrata.sim.state import NodeState, Status

if TYPE_CHECKING:
    from fedstrata.sim.engine import Engine

__all__ = ["crash", "finish", "start"]


def start(eng: Engine, ns: NodeState, inc: int) -> None:
    """Connect the node (register its will) and hand it ``Started``; deferred while offline.

    Parameters
    ----------
    eng
        The engine.
    ns
        The node.
    inc
        The incarnation this start is for; a start meant for a crashed
        incarnation does nothing.
    """
    if ns.inc != inc:
        return
    now = eng.env.now
    avail = ns.avail
    if avail is not None and not avail.is_online(now):
        t_on = avail.next_online(now)
        if t_on is None:
            # Offline for good: it never starts. A terminal status, so that a later crash
            # (or anything else) does not count it out a second time.
            ns.status = Status.OFFLINE
            eng.drop(ns, "offline", None, kind="suppressed")
            eng.unfinished -= 1
        else:
            eng.call(t_on - now, start, eng, ns, inc)
        return
    ns.status = Status.LIVE
    if ns.will is not None:
        port = eng.route(ns, ns.will.topic)
        port.broker.set_will(port, ns.will)
    if eng.events is not None:
        eng.log("start", ns.node_id, ns.node_id)
    eng.feed(ns, Started(now=now))


def finish(eng: Engine, ns: NodeState, result: Any) -> None:
    """Record ``result`` and disconnect the node cleanly: no will, nothing more reaches it."""
    ns.status = Status.FINISHED
    eng.results[ns.node_id] = result
    eng.unfinished -= 1
    eng.live -= len(ns.timers)  # their events are stale now
    ns.timers.clear()
    ns.pending = None
    for port in ns.ports:
        port.broker.disconnect(port, clean=True)
    if eng.events is not None:
        eng.log("finish", ns.node_id, ns.node_id)


def crash(
    eng: Engine,
    ns: NodeState,
    restart_after: float | None,
    factory: Callable[[], Any] | None,
    *,
    reason: str = "crash fault",
) -> None:
    """End the node's session uncleanly now; maybe restart it ``restart_after`` seconds later.

    ``reason`` (why it crashed) goes into :attr:`Engine.crashes` and the ``crash``
    event.

    Its wills are published, its timers, queued events and Compute are
    dropped, and messages in flight to it are dropped when they arrive
    (they carry the old incarnation). A crash of a node that already
    finished or crashed is logged and ignored.
    """
    now = eng.env.now
    if ns.status is not Status.LIVE and ns.status is not Status.PENDING:
        if eng.events is not None:
            eng.log("crash", ns.node_id, ns.node_id, reason=f"ignored: {ns.status.value}")
        return
    ns.inc += 1
    ns.status = Status.CRASHED
    ns.busy = False
    ns.pending = None
    eng.live -= len(ns.timers)
    ns.timers.clear()
    eng.crashes.append(
        {
            "node": ns.node_id,
            "t": round(now, 9),
            "reason": reason,
            "restarts": restart_after is not None,
        }
    )
    if eng.events is not None:
        eng.log("crash", ns.node_id, ns.node_id, reason=reason)
    for port in ns.ports:
        will = port.broker.disconnect(port, clean=False)
        if will is not None:
            _publish_will(eng, ns, port.broker, will, now)
    if restart_after is None:
        eng.unfinished -= 1
    else:
        eng.call(restart_after, _restart, eng, ns, factory)


def _restart(eng: Engine, ns: NodeState, factory: Callable[[], Any] | None) -> None:
    if factory is not None:
        node = factory()
        if getattr(node, "node_id", None) != ns.node_id:
            raise ValidationError(
                f"restart factory for {ns.node_id!r} returned a node with id "
                f"{getattr(node, 'node_id', None)!r}"
            )
        ns.node = node
    if eng.events is not None:
        eng.log("restart", ns.node_id, ns.node_id)
    start(eng, ns, ns.inc)


def _publish_will(eng: Engine, ns: NodeState, broker: SimBroker, will: Will, now: float) -> None:
    msg = Message(
        will.topic, will.payload, will.qos, will.retain, eng.next_mid(), ns.node_id, eng.protocol
    )
    eng.publishes += 1
    ns.publishes += 1  # the node's message, published for it by the broker
    if eng.events is not None:
        eng.log(
            "will",
            broker.site,
            None,
            topic=will.topic,
            mid=msg.mid,
            qos=will.qos,
            retain=will.retain,
            node=ns.node_id,
        )
    eng.fanout(broker, msg, now, None)
