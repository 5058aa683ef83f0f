"""The broker binds identities: an authenticated insider cannot publish as another node.

A real Mosquitto runs the configuration ``fedstrata broker config --site cloud``
writes for a single-broker site (every tier on one broker) with a
``mosquitto_passwd`` file, every node logging in as itself. Then:

* a three-tier run (two fogs, four clients) with per-node logins gives the
  simulator's rounds and labels: every legitimate publish and subscribe of a run,
  the clients under the fogs included, is allowed;
* client-1, authenticated with its own password, publishes genuine envelopes that
  claim to come from another node (unsigned, signed with its own key, or a
  signature of the victim's) on the victim's topics: its presence, its per-node
  ``up`` topic, the aggregator's ``down``, ``config`` and ``to/client-0``. The
  broker refuses each one (MQTT 5 PUBACK 0x87; MQTT 3.1.1 drops it) and a watcher
  allowed to read every ``fs/#`` topic receives none of them;
* client-1 connecting with client-0's client id neither disconnects client-0 nor
  takes its queued messages (the client id is pinned to the user name);
* every child publishes its updates on its own ``up/{node}``: client-1 cannot write
  client-0's (nor the group's bare ``up``), and what it writes on its own claiming
  to be client-0 the aggregator's seal refuses as ``wrong_sender``, signed or not,
  so the topic a message arrives on names its real publisher.
"""

import secrets
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
import pytest

from fedstrata import wire
from fedstrata.broker.config import acl_text
from fedstrata.broker.endpoint import Endpoint
from fedstrata.broker.launcher import PrivateBroker
from fedstrata.nodes.config import Address
from fedstrata.nodes.sealing import PLAIN, Seal, aggregator_routes
from fedstrata.privacy.signing import AuthenticationError, NodeKeys, sign
from fedstrata.scenarios.loader import load_scenario
from fedstrata.scenarios.run import simulate
from fedstrata.scenarios.run_mqtt import mqtt_run
from fedstrata.scenarios.wiring import wire_topology
from tests.broker.conftest import _need_mosquitto, need_tool

pytestmark = pytest.mark.broker

EXE = shutil.which("fedstrata")
SCENARIO = """\
name: identity
seed: 5
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}, partition: {kind: iid}}
topology: {tiers: [{name: fog, count: 2}], clients: {count: 4}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 6, tol: 1.0e-6, deadline_s: 30}
"""
#: MQTT 5 reason code of a PUBACK for a PUBLISH the ACL denies (not authorised).
NOT_AUTHORIZED = 0x87


def _password(user):
    return f"pw-{user}"


@dataclass
class Site:
    broker: PrivateBroker
    folder: Path
    scenario: object
    nodes: list[str]

    def endpoint(self, user):
        return Endpoint.from_url(self.broker.url, username=user, password=_password(user))


def _passwords(path, users):
    passwd = need_tool("mosquitto_passwd")
    for i, user in enumerate(users):
        args = [passwd, "-b", *(["-c"] if i == 0 else []), path, user, _password(user)]
        subprocess.run(args, check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    _need_mosquitto()
    folder = tmp_path_factory.mktemp("identity-site")
    (folder / "scenario.yaml").write_text(SCENARIO)
    sc = load_scenario(folder / "scenario.yaml")
    wiring = wire_topology(sc)
    nodes = sorted(set(wiring.parents) | set(wiring.parents.values()))
    assert len(nodes) == 7  # cloud, fog-0, fog-1, client-0..3
    _passwords(folder / "passwd", [*nodes, "monitor", "audit"])
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"

    def config(port):
        args = [
            *(EXE, "broker", "config", "--site", "cloud", "--out", folder / "cloud.conf"),
            *("--port", str(port), "--bind", "127.0.0.1", "--scenario", folder / "scenario.yaml"),
            *("--password-file", folder / "passwd", "--monitor-user", "monitor"),
        ]
        res = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        # the file names the code writes: FILE and FILE's stem + .acl
        assert res.stdout.split() == [
            *("wrote", str(folder / "cloud.conf"), "and", str(folder / "cloud.acl"))
        ]
        conf = (folder / "cloud.conf").read_text()
        assert "use_username_as_clientid true" in conf.splitlines()
        assert f"acl_file {folder / 'cloud.acl'}" in conf.splitlines()
        acl = (folder / "cloud.acl").read_text()
        # the root's site is the whole federation: a section for every node of every tier
        assert [ln for ln in acl.splitlines() if ln.startswith("user ")] == [
            f"user {u}" for u in ["monitor", "client-0", "client-1", "client-2", "client-3"]
        ] + ["user cloud", "user fog-0", "user fog-1"]
        # a test-only watcher with full read rights
        (folder / "cloud.acl").write_text(acl + "\nuser audit\ntopic read fs/#\n")
        return conf

    with PrivateBroker(config=config, log_file=folder / "mosquitto.log") as broker:
        yield Site(broker, folder, sc, nodes)


def test_a_three_tier_run_on_the_single_broker_site_with_per_node_logins(site):
    sc = site.scenario
    started = time.monotonic()
    fed, s, rows = mqtt_run(
        sc,
        site.endpoint("monitor"),
        node_brokers={n: site.endpoint(n) for n in site.nodes},
        timeout_s=60,
    )
    elapsed = time.monotonic() - started
    fed_sim, s_sim, rows_sim = simulate(sc)
    assert s["status"] in ("converged", "round_limit"), (s["status"], s["reason"], s["warnings"])
    assert (s["status"], s["rounds"]) == (s_sim["status"], s_sim["rounds"])
    np.testing.assert_array_equal(fed.final_labels, fed_sim.final_labels)
    key = lambda r: (r["round"], r["tier"], r["phase"], r["participants"])  # noqa: E731
    assert [key(r) for r in rows] == [key(r) for r in rows_sim]
    # every update reached its aggregator, edge clients included (none was dropped)
    for tier in ("edge", "fog", "cloud"):
        assert s["per_tier"][tier]["publishes"] == s_sim["per_tier"][tier]["publishes"], tier
        assert s["per_tier"][tier]["delivered"] == s_sim["per_tier"][tier]["delivered"], tier
    # one session per user: nobody was disconnected by a clash of client ids
    assert all(t["reconnects"] == 0 for t in s["per_tier"].values()), s["per_tier"]
    assert s["broker_sys"] is not None, s["broker_sys_reason"]
    print(f"single-broker three-tier run, per-node logins: {s['rounds']} rounds, {elapsed:.2f} s")


class Watcher:
    """A paho client (own thread) logged in as ``user``, collecting what it receives."""

    def __init__(self, port, user, topics, *, client_id=None, clean=True):
        self.got = []
        self.disconnects = []
        self.cond = threading.Condition()
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=client_id or f"watch-{user}-{secrets.token_hex(3)}",
            clean_session=clean,
        )
        self.client.username_pw_set(user, _password(user))
        self.client.reconnect_delay_set(60, 60)  # a takeover must show, not be papered over
        ready = threading.Event()
        failed = []

        def on_connect(client, userdata, flags, reason, props):
            if reason.is_failure:
                failed.append(str(reason))
                ready.set()
            elif topics:
                client.subscribe([(t, 1) for t in topics])
            else:
                ready.set()

        def on_subscribe(client, userdata, mid, reasons, props):
            failed.extend(str(r) for r in reasons if r.is_failure)
            ready.set()

        def on_message(client, userdata, msg):
            with self.cond:
                self.got.append((msg.topic, bytes(msg.payload)))
                self.cond.notify_all()

        def on_disconnect(client, userdata, flags, reason, props):
            with self.cond:
                self.disconnects.append(str(reason))
                self.cond.notify_all()

        self.client.on_connect = on_connect
        self.client.on_subscribe = on_subscribe
        self.client.on_message = on_message
        self.client.on_disconnect = on_disconnect
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        assert ready.wait(15) and not failed, (user, failed)

    def wait_for(self, n, timeout_s):
        with self.cond:
            return self.cond.wait_for(lambda: len(self.got) >= n, timeout_s)

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


def _publish(port, user, topic, payload, folder, version="mqttv5"):
    """Publish ``payload`` once at QoS 1 as ``user`` with ``mosquitto_pub``; the PUBACK code."""
    path = folder / f"payload-{secrets.token_hex(4)}.bin"
    path.write_bytes(payload)
    args = [
        *(need_tool("mosquitto_pub"), "-h", "127.0.0.1", "-p", str(port)),
        *("-u", user, "-P", _password(user), "-i", f"pub-{secrets.token_hex(3)}"),
        *("-V", version, "-q", "1", "-d", "-t", topic, "-f", str(path)),
    ]
    res = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, (res.stdout, res.stderr)
    acks = [line for line in res.stdout.splitlines() if "received PUBACK" in line]
    assert len(acks) == 1, res.stdout
    return int(acks[0].rsplit("RC:", 1)[1].rstrip(")"))


def _envelopes(run, claimed, tier, kind="update"):
    """Genuine envelopes claiming ``claimed`` sent them: (what, payload for a topic)."""
    env = wire.Envelope(
        kind=kind, run=run, round=1, tier=tier, sender=claimed, body={"n": 3, "phase": "fit"}
    )
    plain = wire.encode(env)
    own, victim = NodeKeys.generate(), NodeKeys.generate()
    return [
        ("unsigned", lambda topic: plain),
        ("signed with the insider's own key", lambda topic: sign(plain, own, topic)),
        ("signed with the victim's key", lambda topic: sign(plain, victim, topic)),
    ]


def _attack(site_port, folder, attacks, allowed):
    """Run the insider's publishes under an ``fs/#`` watcher; return what it received.

    ``attacks`` are ``(user, topic, payload)`` the broker must refuse (MQTT 5 reason
    code 0x87); ``allowed`` are sent afterwards and must be acknowledged. The watcher
    receives messages in the order the broker routed them, so once the allowed ones
    are in, a leaked attack would be in too.
    """
    audit = Watcher(site_port, "audit", ["fs/#"])
    try:
        for user, topic, payload in attacks:
            assert _publish(site_port, user, topic, payload, folder) == NOT_AUTHORIZED, topic
        for user, topic, payload in allowed:
            assert _publish(site_port, user, topic, payload, folder) == 0, (user, topic)
        assert audit.wait_for(len(allowed), 15), audit.got
        time.sleep(0.2)  # a stray extra message would show within this
        with audit.cond:
            return list(audit.got)
    finally:
        audit.close()


def test_an_insider_cannot_publish_as_another_node(site):
    run, port = f"r-{secrets.token_hex(3)}", site.broker.port
    group = f"fs/{run}/fog/fog-0"
    attacks = []
    for _, payload in _envelopes(run, "client-0", "edge"):
        attacks += [
            ("client-1", f"fs/{run}/presence/client-0", payload(f"fs/{run}/presence/client-0")),
            ("client-1", f"{group}/up/client-0", payload(f"{group}/up/client-0")),
            ("client-1", f"{group}/up", payload(f"{group}/up")),  # the old shared topic
            # another group's up, even under its own name
            ("client-1", f"fs/{run}/fog/fog-1/up/client-1", payload(f"fs/{run}/fog/fog-1/up/c")),
        ]
    # the insider speaking for its aggregator, to its siblings and to the tier above
    for _, payload in _envelopes(run, "fog-0", "fog", kind="model"):
        for topic in (f"{group}/down", f"{group}/config", f"{group}/to/client-0"):
            attacks.append(("client-1", topic, payload(topic)))
        up = f"fs/{run}/cloud/cloud/up/fog-0"
        attacks.append(("client-1", up, payload(up)))
    assert len(attacks) == 3 * 4 + 3 * 4
    own = wire.encode(
        wire.Envelope(kind="update", run=run, round=1, tier="edge", sender="client-1", body={})
    )
    allowed = [("client-1", f"{group}/up/client-1", own)]
    got = _attack(port, site.folder, attacks, allowed)
    assert got == [(f"{group}/up/client-1", own)]
    # MQTT 3.1.1 has no reason code: acknowledged, and dropped all the same
    audit = Watcher(port, "audit", ["fs/#"])
    try:
        topic = f"fs/{run}/presence/client-0"
        assert _publish(port, "client-1", topic, b"", site.folder, "mqttv311") == 0
        assert _publish(port, "client-0", topic, b"online", site.folder, "mqttv311") == 0
        assert audit.wait_for(1, 15)
        time.sleep(0.2)
        assert audit.got == [(topic, b"online")]
    finally:
        audit.close()


def test_a_child_cannot_send_an_update_as_its_sibling(site):
    # the ACL `fedstrata broker config` wrote: each child writes only its own up/{node};
    # on that topic the aggregator's seal binds the envelope's sender to the topic
    run, port = f"r-{secrets.token_hex(3)}", site.broker.port
    group = f"fs/{run}/fog/fog-0"
    mine, theirs = f"{group}/up/client-1", f"{group}/up/client-0"
    keys = {n: NodeKeys.derived(3, n) for n in site.nodes}

    def update(sender):
        return wire.encode(
            wire.Envelope(kind="update", run=run, round=1, tier="edge", sender=sender, body={})
        )

    claim = update("client-0")  # client-1's update, claiming to be client-0's
    attacks = [
        ("client-1", topic, payload)
        for topic in (theirs, f"{group}/up", f"{group}/up/fog-0")
        for payload in (claim, sign(claim, keys["client-1"], topic))
    ]
    genuine = [update("client-0"), sign(update("client-0"), keys["client-0"], theirs)]
    forged = [claim, sign(claim, keys["client-1"], mine)]
    allowed = [
        *(("client-1", mine, p) for p in forged),  # its own topic: the broker lets it through
        *(("client-0", theirs, p) for p in genuine),
        ("fog-0", f"fs/{run}/cloud/cloud/up/fog-0", b"from fog-0"),
    ]
    got = _attack(port, site.folder, attacks, allowed)
    assert got == [(t, p) for _, t, p in allowed]
    # a reader of everything saw on client-0's topic client-0's own messages only
    assert [p for t, p in got if t == theirs] == genuine
    # the aggregator fog-0 refuses client-1's claims (unsigned, or signed with its own
    # key) as wrong_sender, and takes client-0's
    wiring = wire_topology(site.scenario)
    children = sorted(c for c, p in wiring.parents.items() if p == "fog-0")
    assert {"client-0", "client-1"} <= set(children)
    routes = aggregator_routes(run, "fog", "fog-0", children, Address("cloud", "cloud"))
    public = {n: k.public_key for n, k in keys.items()}
    seals = [PLAIN.bind(run, routes), Seal(keys["fog-0"], public).bind(run, routes)]
    for seal, bad, good in zip(seals, forged, genuine, strict=True):
        with pytest.raises(AuthenticationError) as info:
            seal.decode(bad, mine)
        assert (info.value.reason, info.value.sender) == ("wrong_sender", "client-0")
        assert seal.decode(good, theirs).sender == "client-0"
        assert seal.counts == {"wrong_sender": 1, "accepted": 1}


def test_the_generated_acl_is_the_per_node_one(site):
    # `fedstrata broker config` writes per-node up topics, the scheme the nodes use
    wiring = wire_topology(site.scenario)
    acl = (site.folder / "cloud.acl").read_text()
    ours = acl_text(dict(wiring.parents), dict(wiring.tier_of), per_node_up=True)
    assert all(line in acl.splitlines() for line in ours.splitlines())
    assert "topic write fs/+/fog/fog-0/up/client-1" in acl.splitlines()
    assert not [ln for ln in acl.splitlines() if ln.rstrip().endswith("/up")]


def test_an_insider_cannot_take_over_a_node_session(site):
    run, port = f"r-{secrets.token_hex(3)}", site.broker.port
    member = f"fs/{run}/fog/fog-0/to/client-0"
    victim_id = f"fs-{run}-client-0"  # the client id the node runner uses
    # client-0 subscribes with a persistent session, then goes offline
    victim = Watcher(port, "client-0", [member], client_id=victim_id, clean=False)
    victim.close()
    # its aggregator sends it a message meanwhile: the broker queues it
    assert _publish(port, "fog-0", member, b"share for client-0", site.folder) == 0
    # the insider claims client-0's client id and asks to resume the session
    thief = Watcher(port, "client-1", [], client_id=victim_id, clean=False)
    time.sleep(0.5)
    thief.close()
    assert thief.got == []
    # client-0 comes back: its session and queued message are still there
    victim = Watcher(port, "client-0", [], client_id=victim_id, clean=False)
    try:
        assert victim.wait_for(1, 10), "the queued message was lost"
        assert victim.got == [(member, b"share for client-0")]
        # while client-0 is online, the insider connecting with its id changes nothing
        thief = Watcher(port, "client-1", [], client_id=victim_id, clean=True)
        assert _publish(port, "fog-0", member, b"next", site.folder) == 0
        assert victim.wait_for(2, 10), victim.got
        with victim.cond:
            assert victim.disconnects == []
        thief.close()
    finally:
        victim.close()
        # leave no persistent session behind for the module's other tests
        for user in ("client-0", "client-1"):
            Watcher(port, user, [], clean=True).close()
