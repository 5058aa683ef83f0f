"""A site broker with TLS, passwords and the generated ACL, on a real Mosquitto.

The test CA, the broker's certificate (for 127.0.0.1, as an IP subject alternative
name) and a client certificate are made here with ``cryptography``; the broker runs
the configuration ``fedstrata broker config`` writes for the site (TLS listener,
``mosquitto_passwd`` file, ACL with the scenario's users). Then:

* a three-tier run over ``mqtts://`` with every node logging in as itself gives the
  simulator's rounds and labels;
* a client that does not trust the test CA (or speaks plain MQTT, or brings no
  credentials) gets a one-line :class:`TransportError` at once;
* the broker refuses what the ACL denies: a client publishing to a ``down`` topic,
  to another group's ``up``, to the tier above's ``up`` or to another client's
  presence (MQTT 5: PUBACK reason code 0x87, not authorised; MQTT 3.1.1: the
  PUBLISH is acknowledged and dropped), and a subscriber reading every ``fs/#``
  topic never sees those messages while the allowed ones, sent afterwards, do arrive.

The configuration pins client ids to user names (one session per user), so the
watcher is a separate ``audit`` user (its read-all line is added to the generated ACL
by this test): a node's own user name can hold one connection only.
"""

import asyncio
import datetime as dt
import ipaddress
import re
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
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedstrata.broker.endpoint import Endpoint
from fedstrata.broker.launcher import PrivateBroker
from fedstrata.broker.runner import probe_broker
from fedstrata.errors import TransportError
from fedstrata.scenarios.loader import load_scenario
from fedstrata.scenarios.run import simulate
from fedstrata.scenarios.run_mqtt import mqtt_run, run_scenario_mqtt
from fedstrata.scenarios.wiring import wire_topology
from tests.broker.conftest import _need_mosquitto
from tests.broker.conftest import need_tool as _tool

pytestmark = pytest.mark.broker

EXE = shutil.which("fedstrata")
SCENARIO = """\
name: tlsacl
seed: 3
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}, partition: {kind: iid}}
topology: {tiers: [{name: fog, count: 2}], clients: {count: 4}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 8, tol: 1.0e-6, deadline_s: 30}
"""
#: MQTT 5 reason code of a PUBACK for a PUBLISH the ACL denies (not authorised).
NOT_AUTHORIZED = 0x87


def _password(user):
    return f"pw-{user}"


# --- a test PKI ---------------------------------------------------------------------


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(folder, stem, cert, key):
    crt, pem = folder / f"{stem}.crt", folder / f"{stem}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return crt, pem


def _certificate(subject, key, issuer, issuer_key, *, ca, usage=None, san=None):
    now = dt.datetime.now(dt.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        b = b.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if san is not None:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def make_pki(folder: Path) -> dict[str, Path]:
    """A test CA, a server certificate for 127.0.0.1, a client certificate, another CA."""
    out = {}
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("fedstrata test CA", ca_key, "fedstrata test CA", ca_key, ca=True)
    out["ca"], _ = _write(folder, "ca", ca, ca_key)
    key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate(
        "127.0.0.1",
        key,
        "fedstrata test CA",
        ca_key,
        ca=False,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        san=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
    )
    out["server_cert"], out["server_key"] = _write(folder, "server", server, key)
    key = ec.generate_private_key(ec.SECP256R1())
    client = _certificate(
        "cloud",
        key,
        "fedstrata test CA",
        ca_key,
        ca=False,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    out["client_cert"], out["client_key"] = _write(folder, "client", client, key)
    # an unrelated CA with the same name: its clients must not trust our broker
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _certificate("fedstrata test CA", other_key, "fedstrata test CA", other_key, ca=True)
    out["other_ca"], _ = _write(folder, "other-ca", other, other_key)
    return out


# --- the site broker ----------------------------------------------------------------


@dataclass
class Site:
    broker: PrivateBroker
    pki: dict[str, Path]
    scenario: object
    nodes: list[str]
    folder: Path

    def endpoint(self, user=None, **kwargs):
        """The broker over TLS (trusting the test CA), logged in as ``user``."""
        kwargs.setdefault("ca_file", str(self.pki["ca"]))
        if user is not None:
            kwargs.update(username=user, password=_password(user))
        return Endpoint.from_url(self.broker.url, **kwargs)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    _need_mosquitto()
    passwd = _tool("mosquitto_passwd")
    folder = tmp_path_factory.mktemp("tls-site")
    pki = make_pki(folder)
    (folder / "scenario.yaml").write_text(SCENARIO)
    sc = load_scenario(folder / "scenario.yaml")
    wiring = wire_topology(sc)
    nodes = sorted(set(wiring.parents) | set(wiring.parents.values()))
    assert nodes == ["client-0", "client-1", "client-2", "client-3", "cloud", "fog-0", "fog-1"]
    for i, user in enumerate([*nodes, "monitor", "audit"]):
        args = [passwd, "-b", *(["-c"] if i == 0 else []), folder / "passwd", user, _password(user)]
        subprocess.run(args, check=True, capture_output=True, timeout=30)
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"

    def config(port):
        # "lab" is no aggregator: one broker for the whole federation, every node in the ACL
        args = [
            *(EXE, "broker", "config", "--site", "lab", "--out", folder / "lab.conf"),
            *("--port", str(port), "--bind", "127.0.0.1", "--scenario", folder / "scenario.yaml"),
            *("--tls-ca", pki["ca"], "--tls-cert", pki["server_cert"]),
            *("--tls-key", pki["server_key"], "--password-file", folder / "passwd"),
            *("--monitor-user", "monitor"),
        ]
        res = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        conf = (folder / "lab.conf").read_text()
        assert "use_username_as_clientid true" in conf.splitlines()
        # a test-only watcher that may read every topic of every run
        with (folder / "lab.acl").open("a") as acl:
            acl.write("\nuser audit\ntopic read fs/#\n")
        return conf

    with PrivateBroker(config=config, log_file=folder / "mosquitto.log") as broker:
        assert broker.tls and broker.url.startswith("mqtts://127.0.0.1:")
        yield Site(broker, pki, sc, nodes, folder)


def test_three_tier_run_over_tls_with_per_node_logins(site):
    sc = site.scenario
    endpoints = {n: site.endpoint(n) for n in site.nodes}
    # the root also shows a client certificate (accepted, not required)
    endpoints["cloud"] = site.endpoint(
        "cloud", cert_file=str(site.pki["client_cert"]), key_file=str(site.pki["client_key"])
    )
    started = time.monotonic()
    fed, s, rows = mqtt_run(sc, site.endpoint("monitor"), node_brokers=endpoints, timeout_s=60)
    elapsed = time.monotonic() - started
    fed_sim, s_sim, rows_sim = simulate(sc)
    assert s["status"] in ("converged", "round_limit"), (s["status"], s["reason"], s["warnings"])
    assert s["status"] == s_sim["status"] and s["rounds"] == s_sim["rounds"] == 8
    assert s["broker"] == site.broker.url and s["broker"].startswith("mqtts://")
    np.testing.assert_array_equal(fed.final_labels, fed_sim.final_labels)
    key = lambda r: (r["round"], r["tier"], r["phase"], r["participants"])  # noqa: E731
    assert [key(r) for r in rows] == [key(r) for r in rows_sim]
    for tier in ("edge", "fog", "cloud"):
        assert s["per_tier"][tier]["publishes"] == s_sim["per_tier"][tier]["publishes"], tier
    assert all(t["reconnects"] == 0 for t in s["per_tier"].values()), s["per_tier"]
    # the monitor user may read $SYS (only it may: see the ACL)
    assert s["broker_sys"] is not None, s["broker_sys_reason"]
    print(f"three-tier run over TLS: {s['rounds']} rounds in {elapsed:.2f} s")


@pytest.mark.parametrize(
    "how",
    ["system CAs only", "another CA", "plain MQTT to the TLS port", "no credentials"],
)
def test_clients_the_broker_must_not_accept_get_a_transport_error(site, how, tmp_path):
    if how == "system CAs only":
        endpoint = Endpoint.from_url(site.broker.url, username="cloud", password="pw-cloud")
    elif how == "another CA":
        endpoint = site.endpoint("cloud", ca_file=str(site.pki["other_ca"]))
    elif how == "plain MQTT to the TLS port":
        endpoint = Endpoint(
            site.broker.host, site.broker.port, username="cloud", password="pw-cloud"
        )
    else:
        endpoint = site.endpoint()
    plain = how == "plain MQTT to the TLS port"
    started = time.monotonic()
    with pytest.raises(TransportError, match="cannot reach the MQTT broker") as err:
        asyncio.run(probe_broker(endpoint, timeout_s=3 if plain else 15))
    elapsed = time.monotonic() - started
    message = str(err.value)
    assert len(message.splitlines()) == 1
    if plain:
        # Mosquitto resets the connection at once ("wrong version number"), but the
        # client only notices at the probe's timeout: bounded, not a hang
        assert elapsed < 3 + 2, elapsed
    elif how == "no credentials":  # refused by CONNACK, not by the timeout
        assert "authori" in message.lower(), message
    else:  # refused in the TLS handshake, not by the timeout
        assert "certificate verify failed" in message, message
    if how == "another CA":  # the run command stops there too, before writing a record
        with pytest.raises(TransportError, match="certificate verify failed"):
            run_scenario_mqtt(site.scenario, tmp_path / "run", broker=endpoint, plots=False)
        assert not (tmp_path / "run" / "summary.json").exists()
    assert site.broker.running


class Subscriber:
    """A paho client over TLS (own thread) logged in as ``user``, collecting messages."""

    def __init__(self, site, user, topics):
        self.got = []
        self.cond = threading.Condition()
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"sub-{user}-{secrets.token_hex(3)}"
        )
        self.client.username_pw_set(user, _password(user))
        self.client.tls_set(ca_certs=str(site.pki["ca"]))
        granted, self.reasons = threading.Event(), None

        def on_connect(client, userdata, flags, reason, props):
            if not reason.is_failure:
                client.subscribe([(t, 1) for t in topics])

        def on_subscribe(client, userdata, mid, reasons, props):
            self.reasons = reasons
            granted.set()

        def on_message(client, userdata, msg):
            with self.cond:
                self.got.append((msg.topic, bytes(msg.payload)))
                self.cond.notify_all()

        self.client.on_connect = on_connect
        self.client.on_subscribe = on_subscribe
        self.client.on_message = on_message
        self.client.connect(site.broker.host, site.broker.port, keepalive=30)
        self.client.loop_start()
        assert granted.wait(15), f"{user}: no SUBACK"
        assert not any(r.is_failure for r in self.reasons), (user, self.reasons)

    def wait_for(self, n, timeout_s):
        with self.cond:
            return self.cond.wait_for(lambda: len(self.got) >= n, timeout_s)

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


def _mosquitto_pub(site, user, topic, payload, version="mqttv5"):
    """Publish once at QoS 1 with ``mosquitto_pub``; return the PUBACK's reason code."""
    args = [
        *(_tool("mosquitto_pub"), "-h", "127.0.0.1", "-p", str(site.broker.port)),
        *("--cafile", str(site.pki["ca"]), "-u", user, "-P", _password(user)),
        *("-i", f"pub-{user}-{secrets.token_hex(3)}", "-V", version, "-q", "1", "-d"),
        *("-t", topic, "-m", payload),
    ]
    res = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0, (res.stdout, res.stderr)
    acks = re.findall(r"received PUBACK \(Mid: \d+, RC:(\d+)\)", res.stdout)
    assert len(acks) == 1, res.stdout
    return int(acks[0]), res.stderr


def test_the_broker_refuses_what_the_acl_denies(site):
    _tool("mosquitto_pub")
    run = "r1"

    def up(group: str, node: str) -> str:
        """``node``'s own update topic in ``group``: fs/r1/<tier>/<group>/up/<node>."""
        return f"fs/{run}/{'cloud' if group == 'cloud' else 'fog'}/{group}/up/{node}"

    down = lambda group: f"fs/{run}/fog/{group}/down"  # noqa: E731
    presence = lambda node: f"fs/{run}/presence/{node}"  # noqa: E731
    audit = Subscriber(site, "audit", ["fs/#"])  # reads everything the broker routes
    try:
        # client-0 (child of fog-0) tries what it must not do
        denied = [
            (up("fog-1", "client-0"), "another group's up"),
            (up("cloud", "client-0"), "the tier above's up"),
            (up("fog-0", "client-1"), "a sibling's up"),
            (down("fog-0"), "its group's down"),
            (presence("client-1"), "another client's presence"),
        ]
        for topic, what in denied:
            rc, stderr = _mosquitto_pub(site, "client-0", topic, f"denied: {what}")
            assert rc == NOT_AUTHORIZED, (what, rc)
            assert "Not authorized" in stderr, stderr
        # MQTT 3.1.1 has no reason code: the PUBLISH is acknowledged and dropped
        rc, _ = _mosquitto_pub(site, "client-0", down("fog-0"), "denied: 3.1.1", "mqttv311")
        assert rc == 0
        # then what is allowed, by the same clients: the watcher gets exactly these
        allowed = [
            ("client-0", up("fog-0", "client-0"), "update of client-0"),
            ("client-1", presence("client-1"), "online"),
            ("client-2", up("fog-1", "client-2"), "update of client-2"),
            ("fog-0", up("cloud", "fog-0"), "update of fog-0"),
            ("fog-0", down("fog-0"), "state of fog-0"),
        ]
        for user, topic, payload in allowed:
            rc, stderr = _mosquitto_pub(site, user, topic, payload)
            assert rc < 0x80, (user, topic, rc, stderr)
        # a subscriber gets its messages in the order the broker routed them: once the
        # allowed ones (sent after the denied ones) are in, a leaked one would be too
        assert audit.wait_for(len(allowed), 15), audit.got
        time.sleep(0.2)  # a stray extra message would arrive within this
        with audit.cond:
            got = list(audit.got)
        assert got == [(t, p.encode()) for _, t, p in allowed]
    finally:
        audit.close()
    assert site.broker.running


def test_private_broker_generates_a_tls_listener_with_passwords_and_acl(site, tmp_path):
    from fedstrata.broker.config import acl_text
    from fedstrata.broker.launcher import free_port
    from fedstrata.errors import ValidationError

    wiring = wire_topology(site.scenario)
    acl = tmp_path / "all.acl"
    acl.write_text(acl_text(dict(wiring.parents), dict(wiring.tier_of)))
    plain = free_port()
    with PrivateBroker(
        tls_cert=site.pki["server_cert"],
        tls_key=site.pki["server_key"],
        tls_ca=site.pki["ca"],
        password_file=site.folder / "passwd",
        acl_file=acl,
        extra_config=f"listener {plain} 127.0.0.1",  # a second, plain listener
    ) as broker:
        assert broker.tls and broker.url == f"mqtts://127.0.0.1:{broker.port}"
        ok = broker.endpoint(username="fog-0", password=_password("fog-0"))
        assert ok.ca_file == str(site.pki["ca"])  # the broker's CA by default
        asyncio.run(probe_broker(ok, timeout_s=15))
        plain_ep = Endpoint("127.0.0.1", plain, username="fog-0", password=_password("fog-0"))
        asyncio.run(probe_broker(plain_ep, timeout_s=15))
        for refused in (broker.endpoint(), broker.endpoint(username="fog-0", password="no")):
            with pytest.raises(TransportError, match="authori"):
                asyncio.run(probe_broker(refused, timeout_s=15))
    assert not broker.running
    for bad in (
        {"tls_cert": "server.crt"},
        {"tls_ca": "ca.crt"},
        {"config": "listener 1883"},  # a text needs its port
        {"config": lambda port: "", "acl_file": "x.acl"},
        {"config": lambda port: "", "persistence": True},
    ):
        with pytest.raises(ValidationError):
            PrivateBroker(**bad)
