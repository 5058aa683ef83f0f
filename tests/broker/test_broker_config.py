"""`fedstrata broker config`: a Mosquitto that starts with it and enforces its ACL."""

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import aiomqtt
import pytest

from fedstrata.broker.config import acl_text, bridge_text, mosquitto_conf, parse_host_port
from fedstrata.broker.launcher import find_mosquitto, free_port, wait_for_port
from fedstrata.errors import ValidationError

EXE = shutil.which("fedstrata")
FOG = """\
name: fogacl
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}, partition: {kind: iid}}
topology: {tiers: [{name: fog, count: 2}], clients: {count: 4}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
"""
PARENTS = {
    "fog-0": "cloud",
    "fog-1": "cloud",
    "client-0": "fog-0",
    "client-1": "fog-0",
    "client-2": "fog-1",
    "client-3": "fog-1",
}
TIERS = {"cloud": "cloud", "fog-0": "fog", "fog-1": "fog"}


def _as_root(conf):
    """Run as root, Mosquitto drops to user 'mosquitto', who cannot read pytest's tmp."""
    if os.geteuid() == 0:
        conf.write_text(conf.read_text() + "user root\n")


def _sections(acl):
    """The ACL's ``user`` sections: user -> its ``topic`` lines, in order."""
    out, user = {}, None
    for line in acl.splitlines():
        if line.startswith("user "):
            user = line.split(" ", 1)[1]
            out[user] = []
        elif line.startswith("topic ") and user is not None:
            out[user].append(line)
        elif not line.strip():
            user = None
    return out


def test_acl_rules_per_site():
    acl = acl_text(PARENTS, TIERS, site="fog-0")
    sections = _sections(acl)
    # a fog site: the fog node and its clients, nobody of fog-1's subtree, not the root
    assert sorted(sections) == ["client-0", "client-1", "fog-0"]
    assert sections["client-0"] == [
        "topic write fs/+/fog/fog-0/up/client-0",
        "topic read fs/+/fog/fog-0/down",
        "topic read fs/+/fog/fog-0/config",
        "topic read fs/+/fog/fog-0/to/client-0",
    ]
    assert sections["fog-0"] == [
        # its own group, as the aggregator
        "topic read fs/+/fog/fog-0/up/+",
        "topic write fs/+/fog/fog-0/down",
        "topic write fs/+/fog/fog-0/config",
        "topic write fs/+/fog/fog-0/to/+",
        "topic read fs/+/presence/client-0",
        "topic read fs/+/presence/client-1",
        # its parent's group, as a member
        "topic write fs/+/cloud/cloud/up/fog-0",
        "topic read fs/+/cloud/cloud/down",
        "topic read fs/+/cloud/cloud/config",
        "topic read fs/+/cloud/cloud/to/fog-0",
    ]
    # presence is bound to the user name; no catch-all aggregator patterns with a
    # topology (a client's user must not own fs/+/+/client-0/down, say)
    patterns = [line for line in acl.splitlines() if line.startswith("pattern")]
    assert patterns == ["pattern write fs/+/presence/%u"]
    assert "client-2" not in acl  # connects to fog-1's broker


def test_single_broker_site_gets_every_tier():
    # the root's site (one broker for the federation): every node of every tier,
    # the clients under the fogs included (they had no entry before: updates dropped)
    root = _sections(acl_text(PARENTS, TIERS, site="cloud"))
    everyone = _sections(acl_text(PARENTS, TIERS))
    lab = _sections(acl_text(PARENTS, TIERS, site="lab"))  # no node: every node too
    assert sorted(root) == sorted(everyone) == sorted(lab) == sorted([*PARENTS, "cloud"])
    assert root == everyone == lab
    assert root["client-3"][0] == "topic write fs/+/fog/fog-1/up/client-3"
    assert root["cloud"][:4] == [
        "topic read fs/+/cloud/cloud/up/+",
        "topic write fs/+/cloud/cloud/down",
        "topic write fs/+/cloud/cloud/config",
        "topic write fs/+/cloud/cloud/to/+",
    ]
    # a four-tier site: the region's subtree, two levels down
    parents = {**PARENTS, "fog-0": "region-0", "fog-1": "region-0", "region-0": "cloud"}
    tiers = {**TIERS, "region-0": "region"}
    region = _sections(acl_text(parents, tiers, site="region-0"))
    assert sorted(region) == sorted(set(parents) - {"region-0"} | {"region-0"})
    assert "topic write fs/+/region/region-0/up/fog-1" in region["fog-1"]
    assert "topic write fs/+/cloud/cloud/up/region-0" in region["region-0"]


def test_acl_with_per_node_up_topics_binds_the_sender():
    acl = acl_text(PARENTS, TIERS, per_node_up=True)
    sections = _sections(acl)
    for child, parent in PARENTS.items():
        tier = TIERS[parent]
        writes = [line for line in sections[child] if line.startswith("topic write")]
        # the one up topic a child may write is the one naming it
        ups = [line for line in writes if "/up" in line]
        assert ups == [f"topic write fs/+/{tier}/{parent}/up/{child}"], child
    assert "topic read fs/+/fog/fog-0/up/+" in sections["fog-0"]
    assert "topic read fs/+/cloud/cloud/up/+" in sections["cloud"]
    assert "cannot tell which child" not in acl
    shared = acl_text(PARENTS, TIERS, per_node_up=False)
    assert "cannot tell which child" in shared  # the file says what it does not bind
    # without a topology: only rules bound to the user name
    bare = acl_text(per_node_up=True)
    assert "\nuser " not in bare
    assert "pattern write fs/+/+/+/up/%u" in bare and "pattern read fs/+/+/%u/up/+" in bare
    assert "pattern read fs/+/+/%u/up\n" in acl_text(per_node_up=False)
    # the default is the nodes' scheme: per-node up topics
    assert acl_text(PARENTS, TIERS) == acl
    assert acl_text() == bare


def test_the_deploy_example_acl_is_what_broker_config_writes(tmp_path):
    # deploy/mosquitto/site.acl, documented in deploy/README.md: the command's output
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    res = subprocess.run(
        [
            *(EXE, "broker", "config", "--site", "cloud", "--scenario", "federation.yaml"),
            *("--password-file", tmp_path / "passwd", "--out", tmp_path / "site.conf"),
        ],
        cwd=deploy,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "site.acl").read_text() == (deploy / "mosquitto" / "site.acl").read_text()
    conf = (tmp_path / "site.conf").read_text().splitlines()
    assert "use_username_as_clientid true" in conf
    assert f"acl_file {tmp_path / 'site.acl'}" in conf


def test_acl_refuses_bad_node_ids():
    with pytest.raises(ValidationError, match="no tier known"):
        acl_text(PARENTS, {"cloud": "cloud"})
    with pytest.raises(ValidationError):
        acl_text({"client 0": "cloud"}, {"cloud": "cloud"})
    with pytest.raises(ValidationError):
        acl_text({"client-0": "cloud"}, {"cloud": "cloud"}, monitor_user="a/b")


def test_conf_and_bridge_text():
    conf = mosquitto_conf(
        "fog-0",
        port=1884,
        password_file="/p",
        acl_file="/a",
        tls_cert="/c",
        tls_key="/k",
        tls_ca="/ca",
    )
    for line in (
        "listener 1884",
        "allow_anonymous false",
        "password_file /p",
        "acl_file /a",
        "cafile /ca",
        "certfile /c",
        "keyfile /k",
    ):
        assert line in conf.splitlines()
    # with a password file the client id is the user name (no session takeover)
    assert "use_username_as_clientid true" in conf.splitlines()
    assert "use_username_as_clientid" not in mosquitto_conf("x")  # unauthenticated names
    assert "use_username_as_clientid" not in mosquitto_conf(
        "x", password_file="/p", pin_client_ids=False
    )
    # client certificates as identities: required, CN = user name, no password file
    certs = mosquitto_conf(
        "x",
        password_file="/p",
        tls_ca="/ca",
        tls_cert="/c",
        tls_key="/k",
        client_cert_identity=True,
    ).splitlines()
    for line in ("require_certificate true", "use_identity_as_username true"):
        assert line in certs
    assert "require_certificate false" not in certs and "password_file /p" not in certs
    assert "use_username_as_clientid true" in certs and "allow_anonymous false" in certs
    with pytest.raises(ValidationError, match="--tls-ca"):
        mosquitto_conf("x", tls_cert="/c", tls_key="/k", client_cert_identity=True)
    br = bridge_text("fog-0", "cloud.example:8883", cloud_id="cloud")
    # the fog's updates cross on its own up topic, the one its user may write there
    assert "address cloud.example:8883" in br and "topic fs/+/cloud/cloud/up/fog-0 out 1" in br
    assert "/up out" not in br.replace("/up/fog-0 out", "")
    assert "topic fs/+/cloud/cloud/down in 1\ntopic fs/+/cloud/cloud/config in 1" in br
    assert "topic fs/r1/# both 1" in bridge_text("fog-0", "h:1", run="r1")
    shared = bridge_text("fog-0", "h:1", cloud_id="cloud", per_node_up=False)
    assert "topic fs/+/cloud/cloud/up out 1" in shared.splitlines()
    with pytest.raises(ValidationError):
        mosquitto_conf("fog-0", tls_cert="/c")
    with pytest.raises(ValidationError):
        parse_host_port("host")
    with pytest.raises(ValidationError):
        bridge_text("fog-0", "h:1", run="a/b")


async def _collect(port, user, pattern, got, ready):
    async with aiomqtt.Client(
        "127.0.0.1", port, username=user, password=f"pw-{user}", identifier=f"t-{user}"
    ) as c:
        await c.subscribe(pattern, 1)
        ready.set()
        async for m in c.messages:
            got.append((m.topic.value, bytes(m.payload)))


async def _publish(port, user, items):
    async with aiomqtt.Client(
        "127.0.0.1", port, username=user, password=f"pw-{user}", identifier=f"p-{user}"
    ) as c:
        for topic, payload in items:
            await c.publish(topic, payload, qos=1)


async def _scenario(port):
    fog0_up, fog1_up, down = [], [], []
    ready = [asyncio.Event() for _ in range(3)]
    tasks = [
        asyncio.create_task(_collect(port, "fog-0", "fs/r1/fog/fog-0/up/+", fog0_up, ready[0])),
        asyncio.create_task(_collect(port, "fog-1", "fs/r1/fog/fog-1/up/+", fog1_up, ready[1])),
        asyncio.create_task(_collect(port, "client-1", "fs/r1/fog/fog-0/down", down, ready[2])),
    ]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready)), 10)
    # denied first, then allowed: once the allowed ones arrive, the denied ones would have too
    await _publish(
        port,
        "client-0",
        [
            ("fs/r1/fog/fog-1/up/client-0", b"not my parent"),
            ("fs/r1/fog/fog-0/up/client-1", b"not my topic: a sibling's"),
            ("fs/r1/fog/fog-0/up", b"not my topic: the shared one"),
            ("fs/r1/fog/fog-0/down", b"not an aggregator"),
            ("fs/r1/fog/fog-0/up/client-0", b"ok"),
        ],
    )
    # one session per user (use_username_as_clientid): fog-0's publisher takes over
    # fog-0's watcher, so it may only connect once the watcher has its message
    for _ in range(100):
        if fog0_up:
            break
        await asyncio.sleep(0.05)
    await _publish(port, "fog-0", [("fs/r1/fog/fog-0/down", b"state")])
    for _ in range(100):
        if down:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return fog0_up, fog1_up, down


@pytest.mark.broker
def test_mosquitto_enforces_the_generated_acl(tmp_path):
    from tests.broker.conftest import _need_mosquitto

    _need_mosquitto()
    passwd = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"
    tmp_path.chmod(0o755)
    pw = tmp_path / "passwd"
    users = ["fog-0", "fog-1", "client-0", "client-1"]
    for i, u in enumerate(users):
        args = [passwd, "-b", *(["-c"] if i == 0 else []), str(pw), u, f"pw-{u}"]
        subprocess.run(args, check=True, capture_output=True, timeout=30)
    (tmp_path / "fog.yaml").write_text(FOG)
    port = free_port()
    conf = tmp_path / "site.conf"
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    res = subprocess.run(
        [
            EXE,
            "broker",
            "config",
            "--site",
            "fog-0",
            "--out",
            conf,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--password-file",
            pw,
            "--scenario",
            tmp_path / "fog.yaml",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    # fog-1's clients connect elsewhere; add fog-1 to this broker to watch its up topic
    acl = tmp_path / "site.acl"
    acl.write_text(acl.read_text() + "\n" + acl_text(PARENTS, TIERS, site="fog-1"))
    _as_root(conf)
    proc = subprocess.Popen(
        [find_mosquitto(), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        assert wait_for_port("127.0.0.1", port, 10), proc.stderr.read1().decode()
        fog0_up, fog1_up, down = asyncio.run(_scenario(port))
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stderr.close()
    assert fog0_up == [("fs/r1/fog/fog-0/up/client-0", b"ok")]
    assert fog1_up == []
    assert down == [("fs/r1/fog/fog-0/down", b"state")]


@pytest.mark.broker
def test_wrong_password_is_refused(tmp_path):
    from tests.broker.conftest import _need_mosquitto

    _need_mosquitto()
    passwd = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"
    tmp_path.chmod(0o755)
    pw = tmp_path / "passwd"
    subprocess.run(
        [passwd, "-b", "-c", str(pw), "client-0", "pw-client-0"],
        check=True,
        capture_output=True,
        timeout=30,
    )
    port = free_port()
    acl = tmp_path / "site.acl"
    acl.write_text(acl_text(PARENTS, TIERS))
    conf = tmp_path / "site.conf"
    conf.write_text(
        mosquitto_conf("fog-0", port=port, bind="127.0.0.1", password_file=pw, acl_file=acl)
    )
    _as_root(conf)
    proc = subprocess.Popen(
        [find_mosquitto(), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert wait_for_port("127.0.0.1", port, 10)

        async def connect(password):
            async with aiomqtt.Client(
                "127.0.0.1", port, username="client-0", password=password, timeout=5
            ):
                return True

        assert asyncio.run(connect("pw-client-0"))
        with pytest.raises(aiomqtt.MqttError):
            asyncio.run(connect("wrong"))
    finally:
        proc.terminate()
        proc.wait(10)
