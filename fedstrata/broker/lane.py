"""A lean path for one node's messages through a connected aiomqtt client.

aiomqtt drives paho-mqtt from asyncio in a general way that costs, per message,
far more Python than the message itself (measured with 1,000 nodes in one process:
the MQTT stack took more CPU than the nodes' own work):

* every message read goes through an ``asyncio.Queue``, then a task and an
  ``asyncio.wait`` per message in ``client.messages``, and paho's topic matcher
  builds a recursive closure (a reference cycle, left to the garbage collector)
  for every message, although no per-topic callback is ever registered;
* every QoS 1 PUBLISH waits for its PUBACK through an ``asyncio.Event``, a task and
  ``asyncio.wait_for``;
* every packet written wakes the loop through ``call_soon_threadsafe`` (a write to
  the loop's self-pipe), then registers and removes a writer on the socket;
* paho reads each packet with at least three ``recv`` calls (1 byte of packet type,
  1 byte per remaining-length byte, then the rest).

:class:`Lane` keeps aiomqtt for what it does once per connection (CONNECT with its
will, session flags, credentials and TLS, DISCONNECT, keep-alive) and replaces the
per-message glue once the connection is up: paho's ``on_message`` hands
``(topic, payload, qos)`` straight to the runner, a PUBLISH or SUBSCRIBE waits on
one future with one timer, writes are flushed by a plain ``call_soon`` (a writer is
registered only while the socket is full), and a plain TCP socket is read 64 KiB at
a time. The packets on the wire and their order are unchanged.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import aiomqtt
from paho.mqtt.client import MQTT_ERR_SUCCESS

__all__ = ["Lane", "ReadAhead"]

#: Bytes asked of the socket at once by :class:`ReadAhead`.
READ_CHUNK = 65536


class ReadAhead:
    """A plain TCP socket whose ``recv`` reads ahead into a buffer.

    paho asks for 1 byte, then 1, then the rest of each packet; this serves those
    calls from one ``recv`` of up to :data:`READ_CHUNK` bytes. ``pending()`` says
    how many bytes are buffered: aiomqtt's read callback keeps reading while it is
    positive (the hook it has for TLS sockets, which buffer too). Every other
    attribute is the socket's.
    """

    __slots__ = ("_buf", "_pos", "_sock")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = b""
        self._pos = 0

    def recv(self, bufsize: int) -> bytes:
        """Up to ``bufsize`` bytes: from the buffer, else from one read of the socket."""
        pos = self._pos
        if pos >= len(self._buf):
            data = self._sock.recv(max(bufsize, READ_CHUNK))  # BlockingIOError propagates
            if len(data) <= bufsize:
                return data
            self._buf, pos = data, 0
        end = pos + bufsize
        self._pos = end
        return self._buf[pos:end]

    def pending(self) -> int:
        """Bytes read from the socket and not yet handed out."""
        return max(0, len(self._buf) - self._pos)

    def send(self, data: Any) -> int:
        """The socket's ``send``."""
        return self._sock.send(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _Waiter:
    """What aiomqtt's PUBACK/SUBACK callbacks find in its pending maps: resolves a future."""

    __slots__ = ("fut",)

    def __init__(self, fut: asyncio.Future[Any]) -> None:
        self.fut = fut

    def set(self) -> None:  # aiomqtt's on_publish
        if not self.fut.done():
            self.fut.set_result(None)

    def done(self) -> bool:  # aiomqtt's on_subscribe
        return self.fut.done()

    def set_result(self, value: Any) -> None:
        if not self.fut.done():
            self.fut.set_result(value)


class _NoFilters:
    """paho's per-topic callback matcher when there are none: matches nothing, no cycle."""

    __slots__ = ()

    def iter_match(self, topic: str) -> tuple[()]:
        return ()


_NO_FILTERS = _NoFilters()


def _time_out(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(aiomqtt.MqttError("Operation timed out"))


class Lane:
    """The lean per-message path of one connected :class:`aiomqtt.Client`.

    Parameters
    ----------
    client
        A client whose ``async with`` has been entered (CONNACK received).
    deliver
        Called as ``deliver(topic, payload, qos)`` for every message, in order,
        from the event loop.
    lost
        Called once with an :class:`aiomqtt.MqttError` when the connection fails.

    """

    def __init__(
        self,
        client: aiomqtt.Client,
        deliver: Callable[[str, bytes, int], None],
        lost: Callable[[BaseException], None],
    ) -> None:
        self.client = client
        self._client = client._client  # paho's client (the runner's abort shuts its socket)
        self._loop: asyncio.AbstractEventLoop = client._loop
        self._deliver = deliver
        self._lost = lost
        self._flush_pending = False
        self._writer = False
        paho = self._client
        sock = paho._sock
        self._fd = -1 if sock is None else sock.fileno()
        if type(sock) is socket.socket:
            paho._sock = ReadAhead(sock)
        # aiomqtt's callbacks are in place until here: hand over what it queued
        queue = client._queue
        while not queue.empty():
            m = queue.get_nowait()
            deliver(m.topic.value, _as_bytes(m.payload), m.qos)
        paho._on_message_filtered = _NO_FILTERS
        paho.on_message = self._on_message
        paho.on_socket_register_write = self._register_write
        paho.on_socket_unregister_write = self._unregister_write
        self._aiomqtt_close = paho.on_socket_close
        paho.on_socket_close = self._on_socket_close
        # a writer aiomqtt registered during the connect (from its executor thread,
        # possibly after paho last asked to unregister) would stay on the fd for good
        if self._fd >= 0:
            self._loop.remove_writer(self._fd)
        if paho.want_write():
            self._register_write(paho, None, sock)
        client._disconnected.add_done_callback(self._on_disconnected)

    def close(self) -> None:
        """Stop reporting a lost connection (the session is over)."""
        self.client._disconnected.remove_done_callback(self._on_disconnected)

    # -- paho callbacks --------------------------------------------------------------

    def _on_message(self, _client: Any, _userdata: Any, message: Any) -> None:
        self._deliver(message.topic, _as_bytes(message.payload), message.qos)

    def _on_disconnected(self, fut: asyncio.Future[Any]) -> None:
        cause = None if fut.cancelled() else fut.exception()
        err = aiomqtt.MqttError("Disconnected during message iteration")
        err.__cause__ = cause
        self._lost(err)

    def _register_write(self, _client: Any, _userdata: Any, _sock: Any) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            self._loop.call_soon(self._flush)

    def _unregister_write(self, _client: Any, _userdata: Any, _sock: Any) -> None:
        self._writer = False
        self._loop.remove_writer(self._fd)  # ours, or one aiomqtt left from the connect

    def _on_socket_close(self, client: Any, userdata: Any, sock: Any) -> None:
        # no writer may outlive the socket: a new one on the same fd number would
        # find the selector's stale entry
        self._unregister_write(client, userdata, sock)
        self._aiomqtt_close(client, userdata, sock)

    def _flush(self) -> None:
        """Write what paho queued; wait for the socket only if it is full."""
        self._flush_pending = False
        paho = self._client
        if paho._sock is None:
            return
        try:
            paho.loop_write()
        except Exception as exc:  # as aiomqtt's writer: a broken connection
            disconnected = self.client._disconnected
            if not disconnected.done():
                disconnected.set_exception(exc)
            return
        if paho._sock is not None and paho.want_write() and not self._writer:
            self._writer = True
            self._loop.add_writer(self._fd, self._flush)

    # -- requests --------------------------------------------------------------------

    async def publish(
        self, topic: str, payload: bytes, *, qos: int, retain: bool, timeout: float
    ) -> None:
        """Publish; with QoS 1, return once the PUBACK came (``MqttError`` after ``timeout``)."""
        info = self._client.publish(topic, payload, qos, retain)
        if info.rc != MQTT_ERR_SUCCESS:
            raise aiomqtt.MqttCodeError(info.rc, "Could not publish message")
        if info.is_published():
            return
        await self._wait(info.mid, self.client._pending_publishes, timeout)

    async def subscribe(self, pattern: str, qos: int, *, timeout: float) -> None:
        """Subscribe and return once the SUBACK came (``MqttError`` after ``timeout``)."""
        rc, mid = self._client.subscribe(pattern, qos)
        if rc != MQTT_ERR_SUCCESS or mid is None:
            raise aiomqtt.MqttCodeError(rc, "Could not subscribe to topic")
        await self._wait(mid, self.client._pending_subscribes, timeout)

    async def _wait(self, mid: int, pending: dict[int, Any], timeout: float) -> None:
        fut = self._loop.create_future()
        pending[mid] = _Waiter(fut)
        timer = self._loop.call_later(timeout, _time_out, fut)
        try:
            await fut
        finally:
            timer.cancel()
            pending.pop(mid, None)


def _as_bytes(payload: Any) -> bytes:
    if type(payload) is bytes:
        return payload
    if isinstance(payload, bytearray | memoryview):
        return bytes(payload)
    return b"" if payload is None else str(payload).encode("utf-8")
