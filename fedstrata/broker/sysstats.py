"""Read the broker's own traffic counters (``$SYS/broker/...``) around a run.

Mosquitto publishes its counters every ``sys_interval`` seconds as retained
messages under ``$SYS/broker/``. :class:`SysMonitor` subscribes to them before the
nodes start and reads them again after they finish; :meth:`SysMonitor.deltas`
gives the broker's count of the run, to set beside the nodes' own ``bytes_up`` /
``bytes_down``.

The two never agree exactly, by design: the nodes count only their MQTT PUBLISH
packets, the broker counts every packet it reads or writes (CONNECT, CONNACK,
SUBSCRIBE, SUBACK, PUBACK, PINGREQ, PINGRESP, DISCONNECT) of every client. The
monitor's own deliveries (the ``$SYS`` messages it receives during the run) are
counted by the broker too; they are reported apart (``monitor_bytes_in``) and
subtracted in ``bytes_sent_other``.

A broker that does not publish ``$SYS`` (or denies it to this client) yields
``None`` with a one-line reason, never an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from typing import Any

from fedstrata.errors import TransportError, missing_extra

try:
    import aiomqtt
except ImportError as exc:  # a usage error that names the extra, not a bug
    raise missing_extra("mqtt", "the MQTT transport", exc) from exc

from fedstrata.broker.endpoint import Endpoint
from fedstrata.mqtt import publish_packet_size

__all__ = ["SYS_NOTE", "SYS_TOPICS", "BackgroundSysMonitor", "SysMonitor"]

#: The counters read, by the key they get in the summary.
SYS_TOPICS: dict[str, str] = {
    "bytes_received": "$SYS/broker/bytes/received",
    "bytes_sent": "$SYS/broker/bytes/sent",
    "messages_received": "$SYS/broker/messages/received",
    "messages_sent": "$SYS/broker/messages/sent",
    "publish_received": "$SYS/broker/publish/messages/received",
    "publish_sent": "$SYS/broker/publish/messages/sent",
}
#: Changes every second, so ``bytes/sent`` (its delivery to us) is republished every interval.
_UPTIME = "$SYS/broker/uptime"

#: Why the broker's bytes exceed the nodes' own.
SYS_NOTE = (
    "the broker counts every MQTT packet of every client (CONNECT, SUBSCRIBE, PUBACK, "
    "PINGREQ, DISCONNECT and their answers), the nodes only their PUBLISH packets"
)


class SysMonitor:
    """One extra MQTT client reading the broker's ``$SYS`` counters.

    Use inside a running event loop::

        mon = SysMonitor(host, port)
        await mon.start()       # connect, subscribe, wait for a fresh update
        ...                     # the run
        await mon.stop()        # wait for the update after the run, disconnect
        stats = mon.deltas()    # dict, or None with mon.reason

    Parameters
    ----------
    sys_interval_s
        The broker's ``sys_interval`` (how often it publishes ``$SYS``).
    wait_s
        The longest wait for an update at start and at stop.

    """

    def __init__(
        self,
        broker: str | Endpoint,
        port: int = 1883,
        *,
        sys_interval_s: float = 1.0,
        wait_s: float = 3.0,
        protocol: aiomqtt.ProtocolVersion = aiomqtt.ProtocolVersion.V311,
    ) -> None:
        self.endpoint = broker if isinstance(broker, Endpoint) else Endpoint(broker, port)
        self.sys_interval_s = sys_interval_s
        self.wait_s = wait_s
        self.protocol = protocol
        self.reason: str | None = None
        self.before: dict[str, int] = {}
        self.after: dict[str, int] = {}
        self.monitor_bytes_in = 0  # $SYS PUBLISH bytes delivered to us between the snapshots
        self._values: dict[str, int] = {}
        self._stamp: dict[str, float] = {}  # when each counter last arrived (monotonic)
        self._counting = False
        self._client: aiomqtt.Client | None = None
        self._reader: asyncio.Task[None] | None = None
        self._topic_key = {t: k for k, t in SYS_TOPICS.items()}

    async def start(self) -> bool:
        """Connect, subscribe and take the *before* snapshot; return whether it worked."""
        try:
            kwargs = self.endpoint.client_kwargs()
        except TransportError as exc:
            self.reason = f"the $SYS monitor could not connect: {exc}"
            return False
        client = aiomqtt.Client(
            **kwargs,
            identifier=f"fs-sys-{random.getrandbits(48):012x}",
            protocol=self.protocol,
            timeout=5.0,
        )
        try:
            await client.__aenter__()
        except (aiomqtt.MqttError, OSError) as exc:
            self.reason = f"the $SYS monitor could not connect: {str(exc).strip() or exc!r}"
            return False
        self._client = client
        self._reader = asyncio.create_task(self._read(client), name="sys-monitor")
        try:
            await client.subscribe([(t, 0) for t in (*SYS_TOPICS.values(), _UPTIME)])
        except aiomqtt.MqttError as exc:
            self.reason = f"the $SYS monitor could not subscribe: {exc}"
            await self._close()
            return False
        # the retained values may predate our own connection: wait for a fresh update
        since = time.monotonic()
        if not await self._fresh(since, self.wait_s):
            self.reason = (
                "the broker published no $SYS/broker/bytes counters within "
                f"{self.wait_s:g} s (it does not publish $SYS, or denies it to this client)"
            )
            await self._close()
            return False
        self.before = dict(self._values)
        self._counting = True
        return True

    async def stop(self) -> None:
        """Wait for the first update published after now, take the *after* snapshot."""
        if self._client is None:
            return
        since = time.monotonic()
        # the first update published after `since` counts all the run's packets
        await self._fresh(since + 0.05, self.wait_s)
        self._counting = False
        self.after = dict(self._values)
        await self._close()

    def deltas(self) -> dict[str, Any] | None:
        """The counters' growth over the run (``None`` when unknown: see :attr:`reason`)."""
        if not self.before or not self.after:
            if self.reason is None:
                self.reason = "the $SYS monitor did not run"
            return None
        out: dict[str, Any] = {
            key: (self.after[key] - self.before[key])
            if key in self.after and key in self.before
            else None
            for key in SYS_TOPICS
        }
        out["monitor_bytes_in"] = self.monitor_bytes_in
        out["bytes_sent_other"] = out["bytes_sent"] - self.monitor_bytes_in
        return out

    async def _fresh(self, since: float, timeout_s: float) -> bool:
        """Wait for a live ``bytes/sent`` update arriving after ``since`` (bounded).

        The broker publishes all its changed counters at once, every ``sys_interval``;
        ``bytes/received`` is only republished when it changed, so its latest value
        is current whenever ``bytes/sent`` is.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            if self._stamp.get("bytes_sent", -1.0) >= since and "bytes_received" in self._values:
                return True
            if time.monotonic() >= deadline or (self._reader is not None and self._reader.done()):
                return False
            await asyncio.sleep(0.02)

    async def _read(self, client: aiomqtt.Client) -> None:
        with contextlib.suppress(aiomqtt.MqttError):
            async for msg in client.messages:
                topic = msg.topic.value
                payload = msg.payload
                if isinstance(payload, bytes | bytearray):
                    text = bytes(payload).decode("ascii", "replace")
                else:
                    text = str(payload)
                if self._counting:
                    n = len(payload) if isinstance(payload, bytes | bytearray) else len(text)
                    self.monitor_bytes_in += publish_packet_size(topic, n, msg.qos)
                key = self._topic_key.get(topic)
                if key is None:
                    continue
                try:
                    self._values[key] = int(text.strip())
                except ValueError:
                    continue
                if not msg.retain:  # a live update, not the stored value
                    self._stamp[key] = time.monotonic()

    async def _close(self) -> None:
        client, self._client = self._client, None
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                await self._reader
            self._reader = None
        if client is not None:
            with contextlib.suppress(aiomqtt.MqttError, OSError):
                await client.__aexit__(None, None, None)


class BackgroundSysMonitor:
    """A :class:`SysMonitor` on its own thread and event loop.

    :meth:`start` returns at once, so the *before* snapshot (up to one
    ``sys_interval``) is taken while the caller prepares the run; :meth:`wait_ready`
    blocks until it is; :meth:`stop` takes the *after* snapshot (``read=False``:
    just disconnect). :attr:`monitor` holds the results.
    """

    def __init__(self, broker: str | Endpoint, port: int = 1883, **kwargs: Any) -> None:
        self.monitor = SysMonitor(broker, port, **kwargs)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._read = True
        self._thread = threading.Thread(target=self._main, name="fs-sys-monitor", daemon=True)

    def start(self) -> BackgroundSysMonitor:
        """Start the thread; the *before* snapshot is taken in the background."""
        self._thread.start()
        return self

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Wait for the *before* snapshot (or its failure); return whether it ended."""
        return self._ready.wait(timeout_s)

    def stop(self, *, read: bool = True) -> None:
        """Take the *after* snapshot (unless ``read`` is false), disconnect, join."""
        self._read = read
        self._ready.wait(self.monitor.wait_s + 10)
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(self.monitor.wait_s + 10)

    def _main(self) -> None:
        with contextlib.suppress(Exception):  # the monitor must never break a run
            asyncio.run(self._watch())
        self._ready.set()

    async def _watch(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            ok = await self.monitor.start()
        finally:
            self._ready.set()
        if not ok:
            return
        await self._stop.wait()
        if self._read:
            await self.monitor.stop()
        else:
            self.monitor.reason = "not read"
            await self.monitor._close()
