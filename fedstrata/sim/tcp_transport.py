"""The kernel's hops under the TCP + MQTT model (:mod:`fedstrata.sim.tcp`): no MQTT resends.

On a live TCP connection a QoS 1 message is never resent by MQTT, never
duplicated and never lost: segment losses only delay it. So a hop here is one
scheduled arrival, and its PUBACK is counted in bytes but needs no timer.
What can still lose a message is the end of a session: a broken connection
(QoS 0 lost, QoS 1 redelivered after the reconnection), a node that is
offline (QoS 1 held by the sender or, for a persistent session, by the broker
until the node is back), a crashed or finished receiver. Co-located hops
(no link) keep the engine's own zero-delay path.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from simpy.events import NORMAL

from fedstrata.sim.state import FAST, SLOW, Hop, Port, Status
from fedstrata.sim.tcp import TcpModel

if TYPE_CHECKING:
    from fedstrata.sim.engine import Engine

__all__ = ["TcpTransport"]

_LIVE = Status.LIVE
_FINISHED = Status.FINISHED


class TcpTransport:
    """Sends and receives the engine's wire hops under a :class:`~fedstrata.sim.tcp.TcpModel`.

    Parameters
    ----------
    engine
        The engine whose counters, log and nodes it uses.
    model
        The TCP parameters.

    """

    __slots__ = ("_cb_broker", "_cb_node", "_engine", "_puback_ip", "_waiting", "model")

    def __init__(self, engine: Engine, model: TcpModel) -> None:
        self._engine = engine
        self.model = model
        # the PUBACK's segment and the pure ACK the other end answers it with
        self._puback_ip = engine.puback_bytes + 2 * model.header
        self._cb_broker = (self._arrive_broker,)
        self._cb_node = (self._arrive_node,)
        # Over a shared access link: per connection and direction, the messages
        # waiting for the one in flight (a TCP connection sends one after another).
        self._waiting: dict[tuple[int, bool], deque[tuple[Hop, float]]] = {}

    def send(self, hop: Hop, now: float) -> None:
        """Transmit ``hop`` over its wire port (the caller handles co-located ports)."""
        eng = self._engine
        port = hop.port
        q, up = hop.qos, hop.up
        msg = hop.msg
        if up:
            avail = port.ns.avail
            if avail is not None and not avail.is_online(now):
                self._hold(hop, now, avail.next_online(now))
                return
        size = msg.size1 if q else msg.size0
        model = self.model
        segments = -(-size // model.mss) or 1
        # pure ACKs: one per two segments; the last odd one's too unless a PUBACK carries it
        ip, acks = size + segments * model.header, ((segments + (not q)) // 2) * model.header
        if up:
            port.up_bytes += size
            port.up_msgs += 1
            port.ip_up += ip
            port.ip_down += acks
        else:
            port.down_bytes += size
            port.down_msgs += 1
            port.ip_down += ip
            port.ip_up += acks
        eng.tier_bytes[port.ns.tier] += size
        if eng.events is not None:
            eng._log_msg("send", hop, size, hop.tries > 0)
        if port.broker.access is not None and not self._down(port, now):
            self._queue(hop, ip * 8.0)
            return
        if port.mode == FAST and segments <= model.initial_window:
            d = self._plain(port, ip, now, up)
        else:
            d = port.tcp_delay(size, now, up, q)
        if d < 0:  # the connection closed under a QoS 0 message
            eng.drop(port.ns, "outage", hop)
            return
        hop.t_sent = now
        hop.callbacks = self._cb_broker if up else self._cb_node  # type: ignore[assignment]
        eng.live += 1
        eng._schedule(hop, NORMAL, d)

    @staticmethod
    def _plain(port: Port, ip: int, now: float, up: bool) -> float:
        """Return the delay on a link without loss, jitter or windows (a FAST port).

        :meth:`~fedstrata.sim.tcp.TcpConnection.delay` for a message within the initial
        window, with the same floats and fewer calls (the kernel's hot path).
        """
        conn = port.conn
        assert conn is not None
        buf = port.lat_buf
        lat = buf.pop() if buf else port.refill()
        bw = port.link.bandwidth_bps  # type: ignore[union-attr]
        start = conn.free_up if up else conn.free_down
        if start < now:
            start = now
        sent = start + (0.0 if bw is None else ip * 8 / bw)
        arrive = sent + lat
        if up:
            if arrive < conn.last_up:
                arrive = conn.last_up
            conn.free_up = sent
            conn.last_up = arrive
            if sent > conn.seg_up:
                conn.seg_up = sent
        else:
            if arrive < conn.last_down:
                arrive = conn.last_down
            conn.free_down = sent
            conn.last_down = arrive
            if sent > conn.seg_down:
                conn.seg_down = sent
        return arrive - now

    def _puback_losses(self, hop: Hop, now: float) -> None:
        """Count the expected resends a PUBACK's loss causes (bytes only: no delivery waits).

        A lost PUBACK is resent like any TCP data (``loss / (1 - loss)`` times on
        average), and until it arrives the publisher's last segment goes unacknowledged,
        so its tail loss probe resends that segment once (probability ``loss``).
        """
        port = hop.port
        link, conn = port.link, port.conn
        if link is None or conn is None:
            return
        loss = link.conditions(now).loss if link.windows else link.loss
        if not 0.0 < loss < 1.0:
            return
        model = self.model
        size = hop.msg.size1
        last = size - (-(-size // model.mss) - 1) * model.mss  # the last segment's data
        resent = (self._engine.puback_bytes + model.header) * loss / (1.0 - loss)
        conn.resent_bytes += resent + (last + model.header) * loss

    @staticmethod
    def _down(port: Port, now: float) -> bool:
        link = port.link
        return bool(link is not None and link.windows and link.conditions(now).down)

    def _queue(self, hop: Hop, bits: float) -> None:
        """Send ``hop`` over its broker's shared access link once its connection is free."""
        key = (id(hop.port), hop.up)
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.append((hop, bits))
            return
        self._waiting[key] = deque()
        self._start(hop, bits)

    def _start(self, hop: Hop, bits: float) -> None:
        port = hop.port
        link = port.link
        assert link is not None
        now = self._engine.env.now
        cap = link.conditions(now).bandwidth_bps if link.windows else link.bandwidth_bps
        pipe = port.broker.access[0 if hop.up else 1]  # type: ignore[index]
        pipe.add(bits, cap, lambda t: self._crossed(hop, t))

    def _crossed(self, hop: Hop, t: float) -> None:
        """The last bit of ``hop`` crossed the shared link at ``t``: schedule its arrival."""
        eng = self._engine
        port = hop.port
        link, conn = port.link, port.conn
        assert link is not None
        assert conn is not None
        lat = port.draw_latency()
        if link.windows:
            factor, extra, bw, loss, _ = link.conditions(t)
            lat = lat * factor + extra
        else:
            bw, loss = link.bandwidth_bps, link.loss
        msg = hop.msg
        size = msg.size1 if hop.qos else msg.size0
        arrive = conn.finish(size, t, hop.up, lat, bw, loss, port._loss_draw)
        hop.t_sent = t
        hop.callbacks = self._cb_broker if hop.up else self._cb_node  # type: ignore[assignment]
        eng.live += 1
        eng._schedule(hop, NORMAL, arrive - t)
        key = (id(port), hop.up)
        waiting = self._waiting[key]
        if waiting:
            self._start(*waiting.popleft())
        else:
            del self._waiting[key]

    def _hold(self, hop: Hop, now: float, t_on: float | None) -> None:
        """An offline sender: QoS 1 waits in its session until it is back, QoS 0 is not sent."""
        eng = self._engine
        if not hop.qos or t_on is None:
            eng.drop(hop.port.ns, "offline", hop, kind="not_sent")
            return
        hop.tries += 1  # the next transmission is the session's redelivery
        eng.call(t_on - now, self._resend, hop)

    def _resend(self, hop: Hop) -> None:
        ns = hop.port.ns
        if hop.inc != ns.inc or ns.status is not _LIVE:
            return  # the session ended with the node: its stored messages with it
        self._engine.retransmissions += 1
        self.send(hop, self._engine.env.now)

    def _arrive_broker(self, hop: Hop) -> None:
        eng = self._engine
        eng.live -= 1
        now = eng.env.now
        if hop.qos:
            port = hop.port
            port.ack_down_bytes += eng.puback_bytes
            port.ip_down += self._puback_ip
            if port.mode == SLOW:  # only a SLOW link can lose
                self._puback_losses(hop, now)
        if eng.events is not None:
            eng._log_msg("recv", hop, None, False)
        eng.fanout(hop.port.broker, hop.msg, now, None)

    def _arrive_node(self, hop: Hop) -> None:
        eng = self._engine
        eng.live -= 1
        now = eng.env.now
        ns = hop.ns
        if self._ended(hop):
            return
        avail = ns.avail
        if avail is not None and not avail.is_online(now):
            t_on = avail.next_online(now) if hop.qos else None
            if t_on is None:
                eng.drop(ns, "offline", hop)
                return
            # A persistent session: the broker keeps the message and sends it on reconnect.
            hop.tries += 1
            eng.call(t_on - now, self._redeliver, hop)
            return
        if hop.qos:
            port = hop.port
            port.ack_up_bytes += eng.puback_bytes
            port.ip_up += self._puback_ip
            if port.mode == SLOW:
                self._puback_losses(hop, now)
            if port.conn is not None:
                port.conn.puback_sent(now)
        eng.hand_over(ns, hop, now)

    def _redeliver(self, hop: Hop) -> None:
        eng = self._engine
        eng.retransmissions += 1
        if not self._ended(hop):
            self.send(hop, eng.env.now)

    def _ended(self, hop: Hop) -> bool:
        """Drop ``hop`` if the session it was meant for has ended; return whether it had."""
        ns = hop.ns
        if hop.inc == ns.inc and ns.status is _LIVE:
            return False
        gone = ns.status is _FINISHED and hop.inc == ns.inc
        self._engine.drop(ns, "finished" if gone else "crashed", hop)
        return True
