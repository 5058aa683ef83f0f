"""NodeRunner after a broker restart (re-publish) and with an idle limit, over Mosquitto.

The nodes are small sans-IO test nodes; the broker is a real Mosquitto stopped and
started again on the same port with persistence off (it forgets every session and
every message it held).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiomqtt
import pytest

from fedstrata.broker.launcher import PrivateBroker
from fedstrata.broker.runner import NodeRunner
from fedstrata.nodes.events import Delivered, Event, Finished, Publish, Started, Subscribe

pytestmark = pytest.mark.broker


class Announcer:
    """Publishes b"update" on ``r/up`` once started, then waits for ever."""

    node_id = "announcer"

    def handle(self, event: Event) -> list[Any]:
        """Publish on Started, ignore the rest."""
        if isinstance(event, Started):
            return [Publish(topic="r/up", payload=b"update", qos=1)]
        return []


async def _until(cond: Any, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.01)


async def _copies_after_restart(republish: bool) -> tuple[int, float]:
    """Copies of the announcer's message a subscriber that came after the restart gets."""
    first = PrivateBroker().start()
    port = first.port
    second = PrivateBroker(port=port)
    runner = NodeRunner(
        Announcer(),
        first.host,
        port,
        client_id="announcer",
        max_attempts=100,
        backoff_s=0.05,
        backoff_max_s=0.5,
        republish=republish,
    )
    task = asyncio.create_task(runner.run())
    got: list[float] = []
    try:
        await _until(lambda: runner.traffic.publishes == 1)
        first.close()  # what the broker held is gone
        await asyncio.sleep(0.3)
        second.start()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        async with aiomqtt.Client(second.host, port, identifier="receiver") as sub:
            await sub.subscribe("r/up", qos=1)
            try:
                async with asyncio.timeout(4.0):  # > 2 * backoff_max_s + 1 after a reconnect
                    async for msg in sub.messages:
                        assert msg.payload == b"update"
                        got.append(loop.time() - t0)
            except TimeoutError:
                pass
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        first.close()
        second.close()
    return len(got), (got[0] if got else float("inf"))


def test_a_runner_publishes_its_last_message_again_after_a_broker_restart():
    copies, first_at = asyncio.run(_copies_after_restart(republish=True))
    assert copies >= 1 and first_at < 3.0, (copies, first_at)


def test_without_republish_the_message_is_lost_with_the_broker():
    copies, _ = asyncio.run(_copies_after_restart(republish=False))
    assert copies == 0


class Listener:
    """Subscribes to ``r/down`` and never finishes."""

    node_id = "listener"

    def handle(self, event: Event) -> list[Any]:
        """Subscribe on Started."""
        if isinstance(event, Started):
            return [Subscribe(pattern="r/down", qos=1)]
        assert isinstance(event, Delivered)
        return []


def test_the_idle_limit_ends_a_node_whose_parent_went_silent(mosquitto):
    runner = NodeRunner(
        Listener(),
        mosquitto.host,
        mosquitto.port,
        client_id="listener",
        idle_timeout_s=0.8,
        idle_topics=("r/down",),
    )

    async def go() -> float:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(runner.run())
        await _until(lambda: "r/down" in runner._subs)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, identifier="parent") as c:
            await c.publish("r/other", b"not from the parent", qos=1)
            await asyncio.sleep(1.2)
            assert not task.done()  # the clock starts with the parent's first message
            await c.publish("r/down", b"model", qos=1)
            t0 = loop.time()
            await c.publish("r/down", b"model", qos=1)
        async with asyncio.timeout(10):
            await task
        return loop.time() - t0

    took = asyncio.run(go())
    assert 0.6 < took < 3.0, took
    assert runner.idled_out is not None and "r/down" in runner.idled_out
    assert not runner.finished and runner.crashed is None
    assert [r["kind"] for r in runner.log.records] == ["idle_timeout"]


class SlowListener(Listener):
    """A listener whose handling of each parent message takes ``busy_s`` (a long training)."""

    node_id = "slow"

    def __init__(self, busy_s: float) -> None:
        self.busy_s = busy_s

    def handle(self, event: Event) -> list[Any]:
        """Subscribe on Started; spend ``busy_s`` on every delivery."""
        if isinstance(event, Delivered):
            import time

            time.sleep(self.busy_s)
        return super().handle(event)


def test_the_idle_limit_does_not_count_the_nodes_own_computing(mosquitto):
    runner = NodeRunner(
        SlowListener(1.2),
        mosquitto.host,
        mosquitto.port,
        client_id="slow",
        idle_timeout_s=1.0,
        idle_topics=("r/down",),
    )

    async def go() -> None:
        task = asyncio.create_task(runner.run())
        await _until(lambda: "r/down" in runner._subs)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, identifier="slow-parent") as c:
            sent = asyncio.get_running_loop().time()
            await c.publish("r/down", b"model", qos=1)  # handled for 1.2 s: longer than the limit
            # 0.4 s after the handling ended: the handling blocks this loop too, so the
            # PUBACK may be read only after it, and the pause counts from the sending
            await asyncio.sleep(sent + 1.6 - asyncio.get_running_loop().time())
            assert not task.done()
            await c.publish("r/down", b"model", qos=1)
        async with asyncio.timeout(10):
            await task

    asyncio.run(go())
    assert runner.idled_out is not None
    assert runner.traffic.delivered == 2  # the second model arrived before the limit


class WrongEffects:
    """Answers its first delivery with ``Finished`` before a ``Publish``: a node bug."""

    node_id = "wrong"

    def handle(self, event: Event) -> list[Any]:
        """Subscribe on Started; break the effect rules on the first delivery."""
        if isinstance(event, Started):
            return [Subscribe(pattern="r/wrong", qos=1)]
        return [Finished(result=None), Publish(topic="r/out", payload=b"x", qos=1)]


def test_an_effect_the_node_got_wrong_crashes_it_and_fires_its_will(mosquitto):
    runner = NodeRunner(
        WrongEffects(),
        mosquitto.host,
        mosquitto.port,
        client_id="wrong",
        presence="r/presence/wrong",
    )

    async def go() -> list[bytes]:
        seen: list[bytes] = []
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, identifier="w-watch") as w:
            await w.subscribe("r/presence/wrong", qos=1)
            task = asyncio.create_task(runner.run())
            await _until(lambda: "r/wrong" in runner._subs)
            await w.publish("r/wrong", b"go", qos=1)
            async with asyncio.timeout(10):
                await task
                async for msg in w.messages:
                    seen.append(bytes(msg.payload))
                    if msg.payload == b"":  # the will: gone without a DISCONNECT
                        break
        return seen

    seen = asyncio.run(go())
    assert runner.crashed is not None and runner.crashed.startswith("NodeProtocolError: ")
    assert "Finished must be the last effect" in runner.crashed
    assert seen[-1] == b"" and not runner.finished
    assert [r["kind"] for r in runner.log.records] == ["node_crashed"]
