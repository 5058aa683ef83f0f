"""How long one MQTT message takes over a TCP connection: the simulator's default link model.

MQTT runs over TCP, so a lost *packet* is never a lost *message* while the
connection lives: TCP retransmits the segment, the message arrives later, in
order, and throughput falls. Only a broken connection loses messages, and
then MQTT redelivers unacknowledged QoS 1 messages when the session
reconnects (MQTT 3.1.1 §4.4; MQTT 5 forbids resending at any other time).
This module turns one transmission of ``nbytes`` into its delivery delay; the
kernel (:mod:`fedstrata.sim.engine`) keeps each connection in order and busy
while it serialises.

The model, per message of ``n = ceil(nbytes / mss)`` segments sent at once on
an established connection with round-trip time ``rtt`` (twice the sampled
one-way latency) and bandwidth ``B``:

* **Transfer.** Each segment carries ``header`` bytes of IPv4 + TCP (with the
  timestamp option Linux sends by default). The sender starts from
  ``initial_window`` segments (RFC 6928) and doubles per round trip while the
  window, not the bandwidth, limits it (slow start; Linux restarts it after an
  idle period, RFC 5681 §4.1, which is how a federation's connections spend
  most of a round); the rest leaves at ``B``. This is the short-flow latency
  model of Cardwell, Savage and Anderson, "Modeling TCP Latency" (2000),
  without loss.
* **Loss.** Each segment is lost with probability ``p``. Of a lost segment
  only the tail of the message matters: a segment with data after it is
  found by SACK/RACK about 1.25 round trips after it left (RFC 8985), which
  delays the message only when that is later than its last byte. A lost last
  segment waits for the tail loss probe, ``2 rtt + 2 ms`` after it left, or
  ``rtt + rto_min`` for a one-segment flight (Linux adds the delayed-ACK
  allowance then, capped by the retransmission timeout). A lost
  retransmission waits for the retransmission timeout ``rtt + rto_min``,
  doubled at each further loss (RFC 6298; Linux's floor is 200 ms). Large
  messages under loss also lose throughput: the window halves at each loss,
  which caps the rate at ``sqrt(3/2) * mss / (rtt * sqrt(p))`` (Mathis,
  Semke, Mahdavi and Ott, "The Macroscopic Behavior of the TCP Congestion
  Avoidance Algorithm", 1997).
* **Outage.** A segment sent while the link is down is retransmitted at the
  timeout's back-off instants ``rto * (2^k - 1)`` and arrives at the first
  one after the link is back. A connection silent for more than
  ``1.5 * keepalive`` is closed by the broker (MQTT 3.1.1 §3.1.2.10): the
  message is then lost if QoS 0 and redelivered after the reconnection (a
  TCP and an MQTT handshake, two round trips) if QoS 1.

What is not modelled: the PUBACK's own loss (it never delays a delivery),
pure ACK loss, competing flows on one connection (a connection serialises
its messages in order), cwnd kept across back-to-back messages, and the
connection set-up at the start of a run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedstrata.errors import ValidationError

if TYPE_CHECKING:
    from fedstrata.sim.links import Link

__all__ = ["DELACK", "RTO_MAX", "TcpConnection", "TcpModel"]

#: Added to a tail loss probe sent with several segments in flight: Linux's
#: TCP_TIMEOUT_MIN (2 jiffies) and the timer wheel's granularity; measured 10-25 ms
#: on Linux 6.18 (docs/network-validation.md).
_TLP_SLACK = 0.01
#: RACK's reordering window, a quarter of the round trip (RFC 8985 §6.2).
_RACK = 1.25
#: What the repair of a segment lost mid-message costs on top of RACK's 1.25 round
#: trips, seconds: Linux's delayed-ACK floor (TCP_DELACK_MIN); measured 43-80 ms on a
#: veth pair with a sub-millisecond round trip.
DELACK = 0.04
#: Linux's ceiling of the retransmission timeout (TCP_RTO_MAX), seconds.
RTO_MAX = 120.0


@dataclass(frozen=True, slots=True)
class TcpModel:
    """Parameters of the TCP + MQTT transport model (defaults: Linux, Ethernet MTU 1500).

    Parameters
    ----------
    mss
        Maximum segment size, bytes (1448 = 1500 - 20 IPv4 - 20 TCP - 12 timestamps).
    header
        IPv4 + TCP header bytes per segment (52 with timestamps).
    initial_window
        Initial congestion window, segments (RFC 6928: 10).
    rto_min
        Floor of the retransmission timeout, seconds (Linux: 0.2).
    keepalive
        MQTT keep-alive, seconds: a connection silent for 1.5 times this is closed.
    session_bytes
        IP bytes a connection costs besides its messages: TCP handshake and teardown,
        CONNECT (with the will) and CONNACK, SUBSCRIBE and SUBACK, DISCONNECT, and
        fedstrata's session-clearing connection at the end (measured on Linux 6.18 with
        Mosquitto 2: about 2,600 bytes per node connection).

    """

    mss: int = 1448
    header: int = 52
    initial_window: int = 10
    rto_min: float = 0.2
    keepalive: float = 30.0
    session_bytes: int = 2600

    def __post_init__(self) -> None:
        for name in ("mss", "initial_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(f"TcpModel.{name} must be an int >= 1, got {value!r}")
        for name in ("header", "session_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValidationError(f"TcpModel.{name} must be an int >= 0, got {value!r}")
        for name in ("rto_min", "keepalive"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValidationError(f"TcpModel.{name} must be a number > 0, got {value!r}")

    def segments(self, nbytes: int) -> int:
        """Return the number of TCP segments that carry ``nbytes`` (at least one)."""
        return max(1, -(-nbytes // self.mss))

    def transfer(self, nbytes: int, bandwidth_bps: float | None, rtt: float, loss: float) -> float:
        """Return the seconds from the first byte sent to the last byte sent, without loss delays.

        Slow start from ``initial_window`` segments while the window limits the
        rate, then the bandwidth (capped by the loss-throughput formula when
        ``loss > 0``).
        """
        n = self.segments(nbytes)
        seg_bits = (self.mss + self.header) * 8
        rate = math.inf if bandwidth_bps is None else bandwidth_bps
        per_loss = rtt * math.sqrt(loss)
        if per_loss > 0 and n > self.initial_window:
            rate = min(rate, math.sqrt(1.5) * seg_bits / per_loss)
        if rtt <= 0 or n <= self.initial_window:
            return 0.0 if rate == math.inf else (nbytes + n * self.header) * 8 / rate
        window_limit = rate * rtt / seg_bits  # segments per round trip the rate allows
        t, sent, window = 0.0, 0, self.initial_window
        while sent + window < n and window < window_limit:
            sent += window
            t += rtt
            window *= 2
        rest = nbytes + n * self.header - sent * (self.mss + self.header)
        return t + (0.0 if rate == math.inf else max(rest, 0) * 8 / rate)

    def rto(self, rtt: float) -> float:
        """Return the retransmission timeout of a connection with round trip ``rtt`` (RFC 6298)."""
        return rtt + self.rto_min

    def loss_delay(
        self,
        nbytes: int,
        rtt: float,
        loss: float,
        seg_time: float,
        draw: Callable[[], float],
        *,
        alone: bool = True,
    ) -> float:
        """Return the seconds segment losses add to a message's delivery.

        ``seg_time`` is the time one segment takes to serialise; ``draw()``
        returns uniform numbers in [0, 1) from the link's loss stream; ``alone``
        says that nothing else of the connection is unacknowledged when the
        message leaves (the kernel connection counts the previous message as
        acknowledged one round trip after it left: a PUBACK carries the ACK).
        Draws are made in a fixed order (the last segment, the lost segment
        nearest the end, then each retransmission), so a run is reproducible.

        A lost last segment waits for the tail loss probe. With a single segment
        in flight Linux arms it no earlier than the retransmission timeout
        (``rtt + rto_min``, which backs off if the probe is lost too): that is a
        one-segment message sent alone, or the end of a message paced by its
        bandwidth (each segment acknowledged before the next leaves). Otherwise
        it fires after ``2 rtt + 10 ms``. A segment lost earlier is repaired
        ``1.25 rtt + 40 ms`` after it left, which delays the message only if
        fewer segments than that follow it.
        """
        n = self.segments(nbytes)
        rto = self.rto(rtt)
        delay = 0.0
        if draw() < loss:  # the last segment
            if (n == 1 and alone) or (n > 1 and seg_time >= rtt):
                delay = rto + self._resend(2 * rto, loss, draw)
            else:
                delay = min(2 * rtt + _TLP_SLACK, rto) + self._resend(rto, loss, draw)
        if n > 1 and loss > 0:
            # distance from the end of the lost segment nearest to it (geometric)
            u = draw()
            after = 1.0 if loss >= 1.0 else 1.0 + math.log(max(u, 1e-300)) / math.log1p(-loss)
            if after < n:
                repair = _RACK * rtt + DELACK - math.floor(after) * seg_time
                if repair > 0:
                    delay = max(delay, repair + self._resend(rto, loss, draw))
        return delay

    @staticmethod
    def _resend(wait: float, loss: float, draw: Callable[[], float]) -> float:
        """Time lost to retransmissions that are lost again: ``wait``, doubled each time."""
        extra = 0.0
        while loss > 0 and draw() < loss and extra < 3600.0:
            extra += wait
            wait = min(2 * wait, RTO_MAX)
        return extra

    def outage_wait(self, rtt: float, now: float, up_at: float) -> float:
        """Return when a segment sent at ``now`` into an outage ending at ``up_at`` is resent.

        The first retransmission-timeout back-off instant at or after ``up_at``:
        ``now + rto``, then ``+ 2 rto``, ``+ 4 rto``... each wait capped at 120 s.
        """
        t, wait = now + self.rto(rtt), self.rto(rtt)
        while t < up_at:
            wait = min(2 * wait, RTO_MAX)
            t += wait
        return t

    def breaks(self, silent_s: float) -> bool:
        """Return whether a connection silent for ``silent_s`` seconds is closed by the broker."""
        return silent_s > 1.5 * self.keepalive


class TcpConnection:
    """One node's TCP connection to its broker: when each direction is free, and in order.

    The state a connection carries between messages: a message leaves when the
    one before it in the same direction has left, and arrives no earlier than
    that one (TCP delivers in order). ``breaks`` counts sessions closed under
    a message (a long outage).

    Parameters
    ----------
    model
        The TCP parameters.

    """

    __slots__ = (
        "breaks",
        "free_down",
        "free_up",
        "last_down",
        "last_up",
        "model",
        "puback_up",
        "resent_bytes",
        "seg_down",
        "seg_up",
    )

    def __init__(self, model: TcpModel) -> None:
        self.model = model
        self.free_up = self.free_down = self.last_up = self.last_down = 0.0
        # when the last segment of a message left, by direction
        self.seg_up = self.seg_down = -math.inf
        # when the node's last PUBACK left (towards the broker)
        self.puback_up = -math.inf
        self.breaks = 0
        #: Expected IP bytes of retransmitted segments (each segment is resent
        #: ``loss / (1 - loss)`` times on average), a float summed over messages.
        self.resent_bytes = 0.0

    def puback_sent(self, t: float) -> None:
        """Note that the node sent a PUBACK at ``t`` (towards its broker).

        Measured on the namespace lab (docs/network-validation.md): a node's message
        that follows its own PUBACK within the delayed-ACK window is repaired by the
        fast tail loss probe, as with two segments in flight; the broker's messages
        to the node are not (they pay the full timeout). The model follows the
        measurement; which socket behaviour makes the two sides differ is not
        pinned down.
        """
        self.puback_up = t

    def delay(
        self,
        link: Link,
        nbytes: int,
        now: float,
        up: bool,
        qos: int,
        latency: float,
        draw: Callable[[], float],
    ) -> float:
        """Return the delay of ``nbytes`` sent at ``now`` over ``link``, or ``-1``: lost.

        ``latency`` is the one-way latency drawn for this message (jitter
        included, before the link's degradation windows, which are applied
        here); ``draw()`` gives the link's loss draws. A message is lost only
        when its session closes under it (QoS 0); a QoS 1 one is redelivered
        after the reconnection, which the delay includes.
        """
        tcp = self.model
        if link.windows:
            factor, extra, bw, loss, down = link.conditions(now)
            if factor != 1.0 or extra:
                latency = latency * factor + extra
        else:
            bw, loss, down = link.bandwidth_bps, link.loss, False
        rtt = 2.0 * latency
        start = self._after_outage(link, now, rtt, qos) if down else now
        if start < 0:
            return -1.0
        free = self.free_up if up else self.free_down
        if free > start:
            start = free
        segments = -(-nbytes // tcp.mss) or 1
        serial = 0.0 if bw is None else (nbytes + segments * tcp.header) * 8 / bw
        if up:
            self.free_up = start + serial
        else:
            self.free_down = start + serial
        return self.finish(nbytes, start + serial, up, latency, bw, loss, draw) - now

    def finish(
        self,
        nbytes: int,
        sent: float,
        up: bool,
        latency: float,
        bw: float | None,
        loss: float,
        draw: Callable[[], float],
    ) -> float:
        """Return when a message whose last byte left at ``sent`` arrives (absolute time).

        Adds the latency, slow start's waits beyond the serialisation at ``bw``
        and the loss delays, and keeps the connection's order.
        """
        tcp = self.model
        rtt = 2.0 * latency
        segments = -(-nbytes // tcp.mss) or 1
        arrive = sent + latency
        if loss or (rtt > 0 and segments > tcp.initial_window):
            serial = 0.0 if bw is None else (nbytes + segments * tcp.header) * 8 / bw
            arrive += max(0.0, tcp.transfer(nbytes, bw, rtt, loss) - serial)
            if loss:
                if loss < 1.0:
                    self.resent_bytes += (nbytes + segments * tcp.header) * loss / (1.0 - loss)
                seg_time = 0.0 if bw is None else (tcp.mss + tcp.header) * 8 / bw
                previous = self.seg_up if up else self.seg_down
                left = sent - serial
                alone = left - previous >= rtt and (not up or left - self.puback_up >= rtt + DELACK)
                arrive += tcp.loss_delay(nbytes, rtt, loss, seg_time, draw, alone=alone)
        if up:
            self.seg_up = max(self.seg_up, sent)
        else:
            self.seg_down = max(self.seg_down, sent)
        last = self.last_up if up else self.last_down
        if arrive < last:
            arrive = last
        if up:
            self.last_up = arrive
        else:
            self.last_down = arrive
        return arrive

    def _after_outage(self, link: Link, now: float, rtt: float, qos: int) -> float:
        """When a message sent into an outage at ``now`` leaves; -1 if the session lost it.

        TCP resends at its back-off instants; a connection silent too long closes,
        and a QoS 1 message then waits for the reconnection (two handshakes).
        """
        up_at = link.up_at(now)
        if up_at != math.inf and not self.model.breaks(up_at - now):
            return self.model.outage_wait(rtt, now, up_at)
        self.breaks += 1
        if not qos or up_at == math.inf:
            return -1.0
        return up_at + 2.0 * rtt
