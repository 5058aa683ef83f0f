"""NodeRunner with toy nodes over a real Mosquitto: publish, subscribe, retained, timers."""

import asyncio
import time

import pytest

from fedstrata.broker.runner import NodeRunner, RunLog, parse_broker_url, probe_broker
from fedstrata.errors import TransportError, ValidationError
from fedstrata.mqtt import publish_packet_size
from fedstrata.nodes.events import (
    CancelTimer,
    Compute,
    Delivered,
    Finished,
    Publish,
    Record,
    SetTimer,
    Started,
    Subscribe,
    TimerFired,
)

pytestmark = pytest.mark.broker


class Echo:
    """Echoes every message on in/ back reversed on out/; finishes on b"stop"."""

    def __init__(self, node_id, prefix):
        self.node_id = node_id
        self.prefix = prefix
        self.seen = []

    def handle(self, event):
        if isinstance(event, Started):
            return [Subscribe(pattern=f"{self.prefix}/in/#", qos=1)]
        if isinstance(event, Delivered):
            self.seen.append((event.topic, event.payload))
            out = Publish(topic=f"{self.prefix}/out", payload=event.payload[::-1], qos=1)
            if event.payload == b"stop":
                return [
                    out,
                    Record(kind="echo_done", fields={"n": len(self.seen)}),
                    Finished(result=self.seen),
                ]
            return [out, Compute(flops=10.0)]
        return []


class Driver:
    """Publishes a retained greeting, checks the echo, exercises timers, then stops the echo."""

    def __init__(self, node_id, prefix):
        self.node_id = node_id
        self.prefix = prefix
        self.log = []

    def handle(self, event):
        self.log.append(
            type(event).__name__ + (f":{event.name}" if isinstance(event, TimerFired) else "")
        )
        if isinstance(event, Started):
            return [
                Subscribe(pattern=f"{self.prefix}/out", qos=1),
                # retained: the echo gets it even if it subscribes after this publish
                Publish(topic=f"{self.prefix}/in/hello", payload=b"hello", qos=1, retain=True),
                SetTimer(name="rearmed", delay_s=5.0),  # re-armed to 0.2 s below
                SetTimer(name="cancelled", delay_s=0.01),
                CancelTimer(name="cancelled"),
                CancelTimer(name="unknown"),
            ]
        if isinstance(event, Delivered):
            if event.payload == b"olleh":
                # re-arming replaces: "rearmed" fires once, after "first"
                return [SetTimer(name="first", delay_s=0.05), SetTimer(name="rearmed", delay_s=0.2)]
            if event.payload == b"pots":
                return [
                    Record(kind="driver_done", fields={"now": event.now}),
                    Finished(result=self.log),
                ]
            return []
        if isinstance(event, TimerFired) and event.name == "rearmed":
            return [Publish(topic=f"{self.prefix}/in/x", payload=b"stop", qos=0)]
        return []


async def _run_pair(host, port, prefix, protocol=4):
    log = RunLog()
    echo = NodeRunner(
        Echo("echo", prefix),
        host,
        port,
        log=log,
        client_id=f"{prefix}-echo",
        tier="edge",
        protocol=protocol,
    )
    driver = NodeRunner(
        Driver("driver", prefix),
        host,
        port,
        log=log,
        client_id=f"{prefix}-drv",
        tier="cloud",
        protocol=protocol,
    )
    async with asyncio.timeout(10):
        results = await asyncio.gather(echo.run(), driver.run())
    return log, echo, driver, results


@pytest.mark.parametrize("protocol", [4, 5], ids=["mqtt311", "mqtt5"])
def test_echo_publish_subscribe_retained_timers(mosquitto, protocol):
    prefix = f"t{time.monotonic_ns()}"
    log, echo, driver, (seen, dlog) = asyncio.run(
        _run_pair(mosquitto.host, mosquitto.port, prefix, protocol)
    )
    assert seen == [(f"{prefix}/in/hello", b"hello"), (f"{prefix}/in/x", b"stop")]
    timers = [e for e in dlog if e.startswith("TimerFired")]
    assert timers == ["TimerFired:first", "TimerFired:rearmed"]
    assert dlog[0] == "Started" and dlog[-1] == "Delivered"
    assert echo.finished and driver.finished and echo.failure is None
    # byte counts: payload lengths and exact PUBLISH packet sizes
    assert driver.traffic.publishes == 2
    assert driver.traffic.payload_bytes_out == len(b"hello") + len(b"stop")
    assert driver.traffic.packet_bytes_out == publish_packet_size(
        f"{prefix}/in/hello", 5, 1, protocol=protocol
    ) + publish_packet_size(f"{prefix}/in/x", 4, 0, protocol=protocol)
    assert echo.traffic.publishes == 2 and echo.traffic.delivered == 2
    assert echo.traffic.compute_flops == 10.0
    assert (
        log.tier_bytes["cloud"] == driver.traffic.packet_bytes_out + driver.traffic.packet_bytes_in
    )
    assert log.tier_bytes["edge"] == echo.traffic.packet_bytes_out + echo.traffic.packet_bytes_in
    kinds = [(r["node"], r["kind"]) for r in log.records]
    assert ("echo", "echo_done") in kinds and ("driver", "driver_done") in kinds
    for r in log.records:
        assert set(r) == {"t", "node", "kind", "fields", "wire_bytes"} and r["t"] >= 0


def test_retained_message_reaches_a_late_subscriber(mosquitto):
    prefix = f"t{time.monotonic_ns()}"
    asyncio.run(_run_pair(mosquitto.host, mosquitto.port, prefix))  # leaves in/hello retained

    class Late:
        node_id = "late"

        def handle(self, event):
            if isinstance(event, Started):
                return [Subscribe(pattern=f"{prefix}/in/#", qos=1)]
            if isinstance(event, Delivered):
                return [Finished(result=(event.topic, event.payload))]
            return []

    async def go():
        async with asyncio.timeout(5):
            return await NodeRunner(
                Late(), mosquitto.host, mosquitto.port, client_id=f"{prefix}-late"
            ).run()

    assert asyncio.run(go()) == (f"{prefix}/in/hello", b"hello")


def test_unreachable_broker_gives_up_with_a_record():
    class Idle:
        node_id = "idle"

        def handle(self, event):
            return []

    runner = NodeRunner(Idle(), "127.0.0.1", 1, max_attempts=3, backoff_s=0.01)
    t0 = time.monotonic()
    assert asyncio.run(runner.run()) is None
    assert time.monotonic() - t0 < 5
    assert not runner.finished and "after 3 attempts" in runner.failure
    assert [r["kind"] for r in runner.log.records] == ["transport_failed"]
    with pytest.raises(TransportError, match="cannot reach the MQTT broker"):
        asyncio.run(probe_broker("127.0.0.1", 1, timeout_s=2))


@pytest.mark.parametrize(
    ("url", "expected"),
    [("mqtt://127.0.0.1:1884", ("127.0.0.1", 1884)), ("mqtt://broker", ("broker", 1883))],
)
def test_parse_broker_url(url, expected):
    assert parse_broker_url(url) == expected


@pytest.mark.parametrize(
    "url",
    ["127.0.0.1:1883", "http://h:1", "mqtt://h:0", "mqtt://h:99999", "mqtt://:1", "mqtt://h:1/x"],
)
def test_parse_broker_url_rejects(url):
    with pytest.raises(ValidationError):
        parse_broker_url(url)


def test_reconnects_and_resubscribes_after_a_broker_restart(mosquitto):
    import aiomqtt

    from fedstrata.broker.launcher import PrivateBroker

    class Waiter:
        node_id = "waiter"

        def handle(self, event):
            if isinstance(event, Started):
                return [Subscribe(pattern="r/in", qos=1)]
            if isinstance(event, Delivered):
                return [Finished(result=event.payload)]
            return []

    first = PrivateBroker().start()
    port = first.port
    second = PrivateBroker(port=port)
    runner = NodeRunner(
        Waiter(),
        first.host,
        port,
        client_id="waiter",
        max_attempts=100,
        backoff_s=0.02,
        backoff_max_s=0.2,
    )

    async def until(cond, timeout=5.0):
        async with asyncio.timeout(timeout):
            while not cond():
                await asyncio.sleep(0.01)

    async def go():
        task = asyncio.create_task(runner.run())
        try:
            await until(lambda: "r/in" in runner._subs)
            first.close()  # the broker goes away (and forgets every session)
            await asyncio.sleep(0.2)
            second.start()
            await until(lambda: runner.traffic.connects >= 2)
            async with aiomqtt.Client(second.host, port, identifier="pub") as c:
                # retained: it arrives whether the runner re-subscribes before or after
                await c.publish("r/in", b"after", qos=1, retain=True)
            async with asyncio.timeout(5):
                return await task
        finally:
            task.cancel()

    try:
        assert asyncio.run(go()) == b"after"
    finally:
        first.close()
        second.close()
    assert runner.failure is None and runner.traffic.connects >= 2
