"""Nothing escapes ``handle``: mutations of genuine messages, to every node role.

The machinery is ``benchmarks/fuzz_handle.py`` (its long run takes 1,000,000 cases);
here a seeded sample of a few thousand cases runs in the suite, the genuine messages
are checked to pass the declared schemas untouched, and each place a malformed body
used to raise from (found by that fuzzer and from outside) has its regression test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedstrata import wire
from fedstrata.errors import WireError
from fedstrata.nodes.bodies import CATEGORIES
from fedstrata.nodes.events import Delivered, Publish, Record, TimerFired
from fedstrata.nodes.secure import REFUSALS, SecureMember

ROOT = Path(__file__).resolve().parents[2]


def _load_fuzzer() -> Any:
    spec = importlib.util.spec_from_file_location("fuzz_handle", ROOT / "benchmarks/fuzz_handle.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_handle"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


fz = _load_fuzzer()


@pytest.fixture(scope="module")
def captures() -> list[Any]:
    """Genuine deliveries of every scenario of the fuzzer (about 200, a few seconds)."""
    return fz.capture_all()


def _by_label(captures: list[Any], scenario: str, label: str) -> Any:
    for cap in captures:
        if cap.scenario == scenario and cap.label.startswith(label):
            return cap
    raise AssertionError(f"no capture {label!r} in {scenario}: the scenarios changed")


def _deliver(cap: Any, body: dict[str, Any], **header: Any) -> list[Any]:
    """A fresh copy of the capture's node handed ``body`` (signed like the original)."""
    env = wire.Envelope(
        kind=header.get("kind", cap.env.kind),
        run=cap.env.run,
        round=cap.env.round,
        tier=cap.env.tier,
        sender=cap.env.sender,
        body=body,
    )
    payload = fz.payload_of(cap, env)
    assert payload is not None
    node = cap.node()
    effects = node.handle(Delivered(now=cap.now, topic=cap.topic, payload=payload))
    assert isinstance(effects, list)
    return effects


def _drops(effects: list[Any]) -> list[dict[str, Any]]:
    return [e.fields for e in effects if isinstance(e, Record) and e.kind == "dropped"]


def test_the_captures_cover_every_role_and_message_family(captures):
    labels = {c.label for c in captures}
    roles = {c.role for c in captures}
    assert roles == {"client", "middle", "root"}
    for part in (
        "/down/model/setup",
        "/down/model/iter",
        "/down/model/final",
        "/config/control/",
        "/up/update/stats",
        "/up/update/params+qsgd4",
        "/up/update/items+float16",
        "/up/update/tensor",
        "/up/update/deep-",
        "/up/secagg/secagg/masked",
        "/to/secagg/secagg/unmask",
        "iter+secagg",
    ):
        assert any(part in label for label in labels), part
    assert any(c.signer is not None for c in captures)  # signed messages are re-signed


def test_genuine_messages_pass_their_schemas(captures):
    """The schemas refuse nothing a real node sends: each capture, unmutated, is taken."""
    for cap in captures:
        effects = _deliver(cap, cap.env.body)
        assert not _drops(effects), (cap.label, _drops(effects))
        assert not [e for e in effects if isinstance(e, Record) and e.kind == "rejected"]


def test_a_seeded_sample_of_mutants_never_escapes(captures):
    """4,000 structure-aware mutants round robin over every capture: no exception."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 1e308 sums are the input
        report = fz.fuzz(captures, 4_000, seed=20)
    assert report.cases == 4_000
    assert not report.escapes, fz.print_report(report, 1.0) or dict(report.escapes)
    assert set(report.by_role) == {"client", "middle", "root"}
    # the mutants reach past the schema: some are taken and answered
    assert report.effects["dropped"] > 0 and report.effects["Publish"] > 0


def _arr() -> np.ndarray:
    return np.array([1.0, 2.0])


# (scenario, capture label prefix, body field, replacement): each raised before
REGRESSIONS = [
    ("flat-sum-signed", "client/down/model/iter", "phase", _arr()),  # client.py phase in (...)
    ("flat-sum-signed", "client/down/model/final", "phase", ["final"]),
    ("flat-sum-signed", "client/down/model/iter", "ask", [_arr()]),  # client.py _asked
    ("adaptive-fog", "client/down/model/iter", "compression", _arr()),  # client.py scheme
    ("flat-sum-signed", "root/up/update/stats", "mode", _arr()),  # messages.py _check_plain
    ("fog-weighted-qsgd", "middle/up/update/params+qsgd4", "mode", [1, 2]),  # decompress
    ("fog-weighted-qsgd", "middle/up/update/params+qsgd4", "compression", _arr()),  # parse_tag
    ("flat-sum-signed", "root/up/update/setup", "mode", _arr()),  # plugins/_setup.py:55
    ("flat-sum-signed", "root/up/update/setup", "n", [3]),  # plugins/_setup.py:65
    ("fog-weighted-qsgd", "root/up/update/params", "sub", _arr()),  # aggregator.py sub !=
    ("adaptive-fog", "middle/down/model/setup", "ask", [_arr()]),  # aggregator.py ask
    ("adaptive-fog", "middle/down/model/iter", "sub", {"a": 1}),  # aggregator.py int(sub)
    ("adaptive-fog", "middle/down/model/iter", "quorum", _arr()),
    ("tensor-person", "root/up/update/tensor", "mode", _arr()),  # plugins/tensor.py
    ("deep-fmcsc", "root/up/update/deep-", "mode", _arr()),  # plugins/deep.py
    ("secagg-flat-signed", "root/up/secagg/secagg/masked", "sub", _arr()),  # aggregator.py
    ("secagg-flat-signed", "root/up/secagg/secagg/keys", "type", np.zeros(0)),  # secagg.py
    ("secagg-flat-signed", "root/up/secagg/secagg/shares", "session", np.zeros(0)),
    ("secagg-flat-signed", "client/to/secagg/secagg/key_list", "type", ["a"]),  # secure.py
    ("secagg-flat-signed", "client/to/secagg/secagg/collect", "type", {"a": 1}),
    ("secagg-flat-signed", "client/to/secagg/secagg/unmask", "sub", _arr()),  # member_answer
    ("secagg-flat-signed", "client/to/secagg/secagg/collect", "session", _arr()),
    ("secagg-plus-fog", "middle/down/model/iter+secagg", "sub", _arr()),  # aggregator.py
    ("secagg-plus-fog", "middle/to/secagg/secagg/unmask", "type", {"t": 1}),
    ("flat-sum-signed", "client/config/control/", "config", _arr()),
    ("flat-sum-signed", "client/config/control/", "extras", [1]),
]


@pytest.mark.parametrize(("scenario", "label", "key", "value"), REGRESSIONS)
def test_a_routing_field_of_the_wrong_type_is_dropped_as_malformed(
    captures, scenario, label, key, value
):
    cap = _by_label(captures, scenario, label)
    effects = _deliver(cap, {**cap.env.body, key: value})
    [drop] = _drops(effects)
    assert drop["category"] == "malformed" and drop["node"] == cap.node().node_id
    assert key in drop["reason"]
    assert not [e for e in effects if isinstance(e, Publish)]


def test_a_model_secagg_setup_of_the_wrong_shape_is_dropped(captures):
    """secagg.py's setup comparison: the setup map's own fields are declared too."""
    cap = _by_label(captures, "secagg-flat-signed", "client/down/model/iter+secagg")
    setup = cap.env.body["secagg"]
    for bad in ({**setup, "type": _arr()}, {**setup, "roster": [_arr()]}, [setup], "x"):
        [drop] = _drops(_deliver(cap, {**cap.env.body, "secagg": bad}))
        assert drop["category"] == "malformed"


def test_a_body_a_node_cannot_read_is_dropped_not_raised_for_every_kind(captures):
    """An empty body in every captured message family: a malformed drop, never a crash."""
    for cap in captures:
        effects = _deliver(cap, {})
        drops = _drops(effects)
        if drops:
            assert {d["category"] for d in drops} <= set(CATEGORIES)


def test_garbage_is_counted_apart_from_malformed(captures):
    cap = _by_label(captures, "fog-weighted-qsgd", "root/up/update/params")
    node = cap.node()
    effects = node.handle(Delivered(now=cap.now, topic=cap.topic, payload=b"\x93\x01\x02"))
    [drop] = _drops(effects)
    assert drop["category"] == "garbage"


def test_unbounded_candidate_weights_are_refused_at_receipt(captures):
    """seeding.py's k-means++ draw raised on weights whose sum overflows (found by fuzzing)."""
    cap = _by_label(captures, "flat-sum-signed", "root/up/update/setup")
    w = cap.env.body["init_w"]
    [drop] = _drops(_deliver(cap, {**cap.env.body, "init_w": np.full_like(w, 1e308)}))
    assert drop["category"] == "malformed" and "initialisation weights" in drop["reason"]


@pytest.mark.parametrize("role", ["root", "middle"])
def test_a_partial_of_another_phase_fails_the_round_instead_of_raising(captures, role):
    """Genuine deep-lloyd partials while the round collects candidates.

    Middle tier: beside another child's candidates, the sum is refused (``combine``).
    Root: from every child, the model step refuses them (``next_state``). Both raised
    NodeProtocolError before.
    """
    cap = _by_label(captures, "deep-efd-fog", f"{role}/up/update/deep-candidates")
    lloyd = _by_label(captures, "deep-efd-fog", f"{role}/up/update/deep-lloyd")
    node = cap.node()
    other = sorted(node.children - {cap.env.sender})[0]
    wrong = dataclasses.replace(cap.env, sender=other, body=lloyd.env.body)
    first = cap.env if role == "middle" else dataclasses.replace(cap.env, body=lloyd.env.body)
    effects = []
    assert cap.signer is None  # ``wrong`` is another child's: cap's key could not sign it
    for env in (first, wrong):
        payload = fz.payload_of(cap, env)
        # each child publishes on its own up topic: ``wrong`` on the other child's
        topic = cap.topic.rsplit("/", 1)[0] + "/" + env.sender
        effects += node.handle(Delivered(now=cap.now, topic=topic, payload=payload))
    for k in range(1, 5):  # the round closes at its deadline: nothing escapes then either
        effects += node.handle(TimerFired(now=cap.now + 1e4 * k, name="deadline"))
    kind = "round" if role == "root" else "aggregate"
    first = next(e.fields for e in effects if isinstance(e, Record) and e.kind == kind)
    assert first["ok"] is False
    if role == "root":
        assert "partial in a" in first["failure"]


def test_the_plug_in_readers_raise_only_wire_errors_on_any_body(captures):
    """Readers called directly, past the node schema: mutants of genuine bodies.

    ``check_partial``/``check_setup`` of every aggregator's algorithm on update bodies
    and ``read_model`` on model bodies: a refusal is a WireError, never anything else.
    """
    rng = np.random.default_rng(4)
    targets = []
    for cap in captures:
        if cap.role == "client":
            continue
        algorithm = cap.node().algorithm
        if cap.env.kind == "update":
            setup = cap.env.body.get("mode") == "setup"
            targets.append((cap, algorithm.check_setup if setup else algorithm.check_partial))
        elif cap.env.kind == "model" and cap.env.body.get("phase") != "setup":
            targets.append((cap, algorithm.read_model))
    assert len({c.scenario for c, _ in targets}) >= 10
    calls = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(6):
            for cap, reader in targets:
                body = fz.mutate_body(cap.env.body, rng)
                with contextlib.suppress(WireError):  # anything else fails the test
                    reader(body)
                calls += 1
    assert calls == 6 * len(targets)


def _member(node):
    """A node's membership of its parent's secure session (a client's, or a middle tier's)."""
    membership = getattr(node, "_parent_session", None)
    if membership is not None:
        return membership.member
    return getattr(node, "_member", None)


def test_the_secure_aggregation_parsers_refuse_only_with_their_refusals(captures):
    """Past the schema: mutated session messages straight into the server and members.

    ``SecureCollection.receive``, ``SecureMember.handle`` and a member built from a
    mutated setup raise only what the nodes record (REFUSALS), never anything else.
    """
    rng = np.random.default_rng(8)
    calls = 0
    secure = [c for c in captures if c.scenario.startswith(("secagg", "tensor-secagg"))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(15):
            for cap in secure:
                body = fz.mutate_body(cap.env.body, rng)
                body.pop("sub", None)
                node = cap.node()
                with contextlib.suppress(*REFUSALS):
                    driver = getattr(node, "_secure", None)  # aggregators only
                    session = None if driver is None else driver.session
                    if "/up/secagg/" in cap.label and session is not None:
                        calls += 1
                        session.receive(cap.env.sender, body, 0)
                    elif "/to/secagg/" in cap.label and _member(node) is not None:
                        calls += 1
                        _member(node).handle(body)
                    elif "iter+secagg" in cap.label:
                        calls += 1
                        setup = body.get("secagg")
                        SecureMember(node.node_id, node.protocol, node._layout, setup).keys()
    assert calls > 500
