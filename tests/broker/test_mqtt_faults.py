"""Faults on a real Mosquitto: a broker restart, a crashed client, garbage on the wire.

Each test wraps :func:`fedstrata.scenarios.run_mqtt._run_nodes` to act at a chosen
point of the run: the root's effects are held back (its ``_drain`` waits) right
after a given round was recorded, the fault is injected, then the root goes on.
"""

import asyncio
import inspect
import json
import time

import aiomqtt
import numpy as np
import pytest

from fedstrata.broker.launcher import PrivateBroker
from fedstrata.broker.runner import OFFLINE, ONLINE
from fedstrata.mqtt import up_filter
from fedstrata.scenarios import run_mqtt
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate
from tests.broker.conftest import _need_mosquitto, need_tool
from tests.broker.test_run_mqtt import FLAT, flat

pytestmark = pytest.mark.broker


# the $SYS reading (when run_mqtt has it) adds ~3 s per run and is not what is tested here
def _fast(fn):
    return {"sys_stats": False} if "sys_stats" in inspect.signature(fn).parameters else {}


_FAST = _fast(run_mqtt.mqtt_run)


def _root_rounds(log, root_id):
    return [
        r["fields"]["round"] for r in log.records if r["node"] == root_id and r["kind"] == "round"
    ]


def _hold_root_after(monkeypatch, after_round, inject, *, before=None):
    """Run ``inject(fed, log, runners)`` while the root is held after round ``after_round``."""
    orig = run_mqtt._run_nodes
    seen = {}

    async def wrapped(fed, log, runners, timeout_s, *rest):
        root_id = fed.scenario.topology.cloud_id
        root = runners[root_id]
        drain = root._drain
        held = {"done": False}

        async def holding_drain(client):
            if not held["done"] and any(r >= after_round for r in _root_rounds(log, root_id)):
                held["done"] = True
                seen["held_at"] = log.now()
                await inject(fed, log, runners)
            await drain(client)

        root._drain = holding_drain
        ctx = await before(fed) if before is not None else None
        try:
            return await orig(fed, log, runners, timeout_s, *rest)
        finally:
            if ctx is not None:
                await ctx.__aexit__(None, None, None)
            seen["runners"] = runners
            seen["log"] = log

    monkeypatch.setattr(run_mqtt, "_run_nodes", wrapped)
    return seen


def _assert_same_model(fed, s, rows, fed_sim, s_sim, rows_sim):
    assert s["status"] == s_sim["status"] and s["rounds"] == s_sim["rounds"]
    for a, b in zip(fed.final_state.centers, fed_sim.final_state.centers, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(fed.final_labels, fed_sim.final_labels)
    # every round closed with every client's contribution, as in the simulator
    key = lambda r: (r["round"], r["tier"], r["phase"], r["participants"], r.get("objective"))  # noqa: E731
    assert [key(r) for r in rows] == [key(r) for r in rows_sim]


@pytest.mark.parametrize("protocol", [4, 5], ids=["mqtt311", "mqtt5"])
def test_broker_restart_mid_run_loses_nothing(monkeypatch, protocol):
    _need_mosquitto()
    sc = flat()
    fed_sim, s_sim, rows_sim = simulate(sc)
    broker = PrivateBroker(persistence=True).start()
    outage = {}

    async def restart(fed, log, runners):
        t0 = time.monotonic()
        await asyncio.to_thread(broker.stop)  # SIGTERM: Mosquitto saves its sessions
        outage["down_at"] = log.now()
        await asyncio.sleep(0.3)
        await asyncio.to_thread(broker.start)  # same port, reads the persistence file
        outage["s"] = time.monotonic() - t0

    seen = _hold_root_after(monkeypatch, 3, restart)
    try:
        fed, s, rows = run_mqtt.mqtt_run(
            sc, broker.host, broker.port, timeout_s=60, protocol=protocol, **_FAST
        )
    finally:
        broker.close()
    _assert_same_model(fed, s, rows, fed_sim, s_sim, rows_sim)
    assert 0.3 <= outage["s"] < 10
    # every node saw the outage and came back; the record says so
    reconnects = {tier: row["reconnects"] for tier, row in s["per_tier"].items()}
    assert reconnects == {"cloud": 1, "edge": 3}, reconnects  # once per node
    back = [r for r in seen["log"].records if r["kind"] == "transport_reconnect"]
    assert sorted(r["node"] for r in back) == sorted(seen["runners"])
    assert all(0 < r["fields"]["outage_s"] < 10 for r in back)
    assert not any(r["kind"] == "transport_failed" for r in seen["log"].records)
    print(  # the figures, for -s
        f"outage {outage['s']:.3f} s; reconnects per tier {reconnects}; per node outage "
        f"{sorted(round(r['fields']['outage_s'], 3) for r in back)}; wall {s['wall_time_s']} s"
    )
    for r in seen["runners"].values():  # every session was cleared at the end
        assert r.finished and r.traffic.clears == 1


def test_crashed_client_round_closes_by_deadline_and_quorum(monkeypatch, mosquitto, tmp_path):
    sc = parse_scenario(
        FLAT.format(seed=5).replace(
            "rounds: 12, tol: 1.0e-6, deadline_s: 30",
            "rounds: 4, tol: 0.0, deadline_s: 0.5, quorum: 0.5",
        )
    )
    assert sc.protocol.rounds == 4 and sc.protocol.quorum == 0.5
    wills = []

    async def watch(fed):
        client = aiomqtt.Client(mosquitto.host, mosquitto.port, identifier=f"w-{time.time_ns()}")
        await client.__aenter__()
        await client.subscribe(f"fs/{fed.protocol.run}/presence/+", qos=1)

        async def collect():
            async for msg in client.messages:
                wills.append((msg.topic.value, bytes(msg.payload)))

        task = asyncio.create_task(collect())

        class Ctx:
            async def __aexit__(self, *exc):
                await asyncio.sleep(0.2)  # let the last presence messages in
                task.cancel()
                await client.__aexit__(None, None, None)

        return Ctx()

    victim = None

    async def crash(fed, log, runners):
        nonlocal victim
        victim = sorted(n for n in runners if n != sc.topology.cloud_id)[0]
        runners[victim].abort()  # no DISCONNECT: the broker publishes its will

    seen = _hold_root_after(monkeypatch, 1, crash, before=watch)
    out = tmp_path / "o"
    summary = run_mqtt.run_scenario_mqtt(
        sc, out, broker=mosquitto.url, plots=False, **_fast(run_mqtt.run_scenario_mqtt)
    )
    assert summary["status"] == "round_limit" and summary["rounds"] == 4
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["status"] == "round_limit" and (out / "rounds.csv").exists()
    assert (out / "model.npz").exists() and (out / "labels.csv").exists()
    runners = seen["runners"]
    assert runners[victim].result is None and not runners[victim].finished
    assert all(r.finished for n, r in runners.items() if n != victim)
    # the rounds after the crash closed at the deadline with 2 of 3 clients
    root_rounds = [
        r["fields"]
        for r in seen["log"].records
        if r["node"] == sc.topology.cloud_id and r["kind"] == "round"
    ]
    assert [f["participants"] for f in root_rounds][-2:] == [2, 2]
    assert all(f["participants"] == 3 for f in root_rounds[:1])
    topic = f"fs/{summary['run_id']}/presence/{victim}"
    assert (topic, ONLINE) in wills and (topic, OFFLINE) in wills
    # the other nodes disconnected cleanly: no will of theirs
    assert [t for t, p in wills if p == OFFLINE] == [topic]


def test_garbage_truncated_and_replayed_updates_are_dropped(monkeypatch, mosquitto):
    pub = need_tool("mosquitto_pub")
    sc = flat()
    fed_sim, s_sim, rows_sim = simulate(sc)
    captured = []

    async def sniff(fed):
        topic = up_filter(fed.protocol.run, "cloud", sc.topology.cloud_id)
        client = aiomqtt.Client(mosquitto.host, mosquitto.port, identifier=f"s-{time.time_ns()}")
        await client.__aenter__()
        await client.subscribe(topic, qos=1)

        async def collect():
            async for msg in client.messages:
                captured.append((msg.topic.value, bytes(msg.payload)))

        task = asyncio.create_task(collect())

        class Ctx:
            async def __aexit__(self, *exc):
                task.cancel()
                await client.__aexit__(None, None, None)

        return Ctx()

    async def mosquitto_pub(topic, payload):
        proc = await asyncio.create_subprocess_exec(
            pub, "-h", mosquitto.host, "-p", str(mosquitto.port), "-q", "1", "-t", topic, "-s",
            stdin=asyncio.subprocess.PIPE,
        )  # fmt: skip
        await proc.communicate(payload)
        assert proc.returncode == 0

    async def inject(fed, log, runners):
        assert captured, "no update was seen on the up topic"
        topic, old = captured[0]  # an update of an earlier round
        await mosquitto_pub(topic, b"\x00\xffnot an envelope at all")
        await mosquitto_pub(topic, old[: len(old) // 2])
        await mosquitto_pub(topic, old)
        await asyncio.sleep(0.2)  # they reach the root's inbox before it goes on

    seen = _hold_root_after(monkeypatch, 3, inject, before=sniff)
    fed, s, rows = run_mqtt.mqtt_run(sc, mosquitto.host, mosquitto.port, timeout_s=60, **_FAST)
    _assert_same_model(fed, s, rows, fed_sim, s_sim, rows_sim)
    root = sc.topology.cloud_id
    kinds = [r["kind"] for r in seen["log"].records if r["node"] == root]
    assert kinds.count("dropped") == 2, kinds  # the garbage and the truncated update
    # the replay of an earlier round: a real run signs (per-run keys), so the root's seal
    # refuses it as a replay before the node would count it late
    refused = [r["fields"]["reason"] for r in seen["log"].records if r["kind"] == "rejected"]
    assert refused == ["replay"], kinds
    assert kinds.count("late") + kinds.count("duplicate") == 0, kinds


def test_a_will_on_a_subscribed_presence_topic_becomes_peer_lost(mosquitto):
    from fedstrata.broker.runner import NodeRunner, RunLog
    from fedstrata.mqtt import presence_topic
    from fedstrata.nodes.events import Delivered, Finished, PeerLost, Started, Subscribe

    run = f"p{time.time_ns()}"

    class Idle:
        node_id = "idle"

        def handle(self, event):
            return []

    events = []

    class Watcher:
        node_id = "watcher"

        def handle(self, event):
            events.append(event)
            if isinstance(event, Started):
                return [Subscribe(pattern=f"fs/{run}/presence/+", qos=1)]
            if isinstance(event, PeerLost):
                return [Finished(result=event.node_id)]
            return []

    log = RunLog()
    watcher = NodeRunner(Watcher(), mosquitto.host, mosquitto.port, log=log, client_id=f"{run}-w")
    idle = NodeRunner(
        Idle(),
        mosquitto.host,
        mosquitto.port,
        log=log,
        client_id=f"{run}-i",
        presence=presence_topic(run, "idle"),
        protocol=5,
    )

    async def go():
        async with asyncio.timeout(10):
            w = asyncio.create_task(watcher.run())
            while "fs/" + run + "/presence/+" not in watcher._subs:
                await asyncio.sleep(0.01)
            i = asyncio.create_task(idle.run())
            while idle.traffic.presence_publishes < 1:
                await asyncio.sleep(0.01)
            idle.abort()
            await i
            return await w

    assert asyncio.run(go()) == "idle"
    # the "online" presence is not handed to the node; the will is, as PeerLost only
    assert not any(isinstance(e, Delivered) for e in events)
    assert idle.traffic.presence_publishes == 1 and idle.traffic.clears == 0
    assert watcher.traffic.clears == 1
