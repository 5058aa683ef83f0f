"""Ed25519 signed messages, key files and replay protection."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey, VerifyKey

from fedstrata.errors import FedstrataError, PrivacyError, ValidationError, WireError
from fedstrata.privacy import signing as sg
from fedstrata.privacy.signing import AuthenticationError, KeyFileError, NodeKeys

FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=300)

ALICE = NodeKeys.derived(42, "edge-1")
BOB = NodeKeys.derived(42, "edge-2")
ROSTER = {"edge-1": ALICE.public_key, "edge-2": BOB.public_key}
TOPIC = "fs/r/cloud/cloud/up"
posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


def reason_of(
    data: bytes,
    sender: str,
    verifier: sg.Verifier | None = None,
    topic: str = "fs/r/cloud/cloud/up",
) -> str:
    with pytest.raises(AuthenticationError) as info:
        (verifier or sg.Verifier(ROSTER)).verify(data, sender, topic)
    assert info.value.sender == sender
    return info.value.reason


# ---------------------------------------------------------------------------
# signing and verifying


@pytest.mark.parametrize("payload", [b"", b"x", b"\x87\xa1v\x01" * 100, bytes(range(256))])
def test_round_trip_and_layout(payload: bytes) -> None:
    data = sg.sign(payload, ALICE, TOPIC)
    assert len(data) == len(payload) + sg.SIGNATURE_BYTES == len(payload) + 64
    assert data[64:] == payload
    # the first 64 bytes are a plain Ed25519 signature over
    # CONTEXT || uint16 BE len(topic) || topic || payload
    signed = sg.CONTEXT + bytes([0, len(TOPIC)]) + TOPIC.encode() + payload
    assert sg.signed_context(TOPIC, payload) == signed
    VerifyKey(ALICE.public_key).verify(signed, data[:64])
    assert ALICE.sign(payload, TOPIC) == data  # Ed25519 is deterministic
    verifier = sg.Verifier(ROSTER)
    assert verifier.verify(data, "edge-1", TOPIC) == payload
    assert verifier.verify(bytearray(data), "edge-1", TOPIC) == payload
    assert verifier.counts == {"accepted": 2}


@FAST
@given(
    payload=st.binary(max_size=200),
    position=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
)
def test_any_modified_byte_is_forged(payload: bytes, position: int, flip: int) -> None:
    data = bytearray(sg.sign(payload, ALICE, TOPIC))
    data[position % len(data)] ^= flip
    assert reason_of(bytes(data), "edge-1") == "forged"


def test_every_single_byte_position_is_covered() -> None:
    data = sg.sign(b"fedstrata round 3", ALICE, TOPIC)
    verifier = sg.Verifier(ROSTER)
    for i in range(len(data)):
        tampered = bytearray(data)
        tampered[i] ^= 0x01
        assert reason_of(bytes(tampered), "edge-1", verifier) == "forged"
    assert verifier.counts == {"forged": len(data)}


def test_wrong_key_is_forged() -> None:
    data = sg.sign(b"update", BOB, TOPIC)
    assert reason_of(data, "edge-1") == "forged"  # Bob's message claimed as Alice's
    swapped = sg.Verifier({"edge-1": BOB.public_key, "edge-2": ALICE.public_key})
    assert reason_of(sg.sign(b"update", ALICE, TOPIC), "edge-1", swapped) == "forged"


def test_a_signature_is_for_one_topic() -> None:
    data = sg.sign(b"update", ALICE, "fs/r/cloud/cloud/up")
    verifier = sg.Verifier(ROSTER)
    assert verifier.verify(data, "edge-1", "fs/r/cloud/cloud/up") == b"update"
    for other in ["fs/r/fog/fog-0/up", "fs/r2/cloud/cloud/up", "fs/r/cloud/cloud/up/", ""]:
        assert reason_of(data, "edge-1", verifier, topic=other) == "forged"
    # the length prefix keeps topic and payload apart: moving a byte across fails
    # ("...upu", "pdate") and ("...up", "update") concatenate to the same bytes
    signature = sg.sign(b"pdate", ALICE, "fs/r/cloud/cloud/upu")[:64]
    moved = signature + b"update"
    assert reason_of(moved, "edge-1", verifier, topic="fs/r/cloud/cloud/up") == "forged"
    with pytest.raises(ValidationError, match="topic"):
        sg.sign(b"x", ALICE, "t" * 65_536)
    with pytest.raises(ValidationError, match="topic"):
        verifier.verify(data, "edge-1", None)  # type: ignore[arg-type]


def test_a_version_1_signature_does_not_verify() -> None:
    # v1 signed CONTEXT_v1 || payload, without the topic
    v1 = SigningKey(ALICE.seed).sign(b"fedstrata/signed-message/v1\x00" + b"update").signature
    assert reason_of(v1 + b"update", "edge-1") == "forged"


def test_signature_without_the_context_is_forged() -> None:
    # a signature made by the same key for another protocol (no CONTEXT) does not pass
    raw = SigningKey(ALICE.seed).sign(b"update")
    assert bytes(raw) == raw.signature + b"update"
    assert reason_of(bytes(raw), "edge-1") == "forged"


def test_truncated_and_unsigned() -> None:
    data = sg.sign(b"a payload of some length", ALICE, TOPIC)
    verifier = sg.Verifier(ROSTER)
    for cut in [0, 1, 32, 63]:
        assert reason_of(data[:cut], "edge-1", verifier) == "unsigned"
    for cut in [64, 65, len(data) - 1]:
        assert reason_of(data[:cut], "edge-1", verifier) == "forged"
    assert reason_of(data[1:], "edge-1", verifier) == "forged"
    # an unsigned message long enough to look signed is forged, a short one unsigned
    assert reason_of(b"\x87" + b"\x00" * 100, "edge-1", verifier) == "forged"
    assert reason_of(b"\x87\xa1v\x01", "edge-1", verifier) == "unsigned"
    assert verifier.counts == {"unsigned": 5, "forged": 5}


def test_unknown_sender_is_checked_first() -> None:
    verifier = sg.Verifier(ROSTER)
    assert reason_of(sg.sign(b"hi", ALICE, TOPIC), "fog-9", verifier) == "unknown_sender"
    assert reason_of(b"", "fog-9", verifier) == "unknown_sender"
    assert "edge-1" in verifier
    assert "fog-9" not in verifier
    assert verifier.counts == {"unknown_sender": 2}


def test_error_classes() -> None:
    err = AuthenticationError("forged", "edge-1", "bad signature")
    assert isinstance(err, PrivacyError)
    assert isinstance(err, WireError)  # a node's WireError boundary drops it
    assert isinstance(err, FedstrataError)
    assert str(err) == "forged: message from 'edge-1' (bad signature)"
    assert set(sg.REASONS) == {
        "unsigned",
        "forged",
        "unknown_sender",
        "replay",
        "wrong_run",
        "wrong_topic",
        "wrong_sender",
    }
    with pytest.raises(ValidationError):
        AuthenticationError("nope", "x")


def test_verifier_and_sign_reject_misuse() -> None:
    with pytest.raises(ValidationError, match="32 bytes"):
        sg.Verifier({"a": b"\x01" * 31})
    with pytest.raises(ValidationError, match="valid Ed25519 point"):
        sg.Verifier({"a": b"\x00" * 32})  # a low-order point
    with pytest.raises(ValidationError, match="mapping"):
        sg.Verifier([("a", ALICE.public_key)])  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="payload"):
        sg.sign("text", ALICE, TOPIC)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="NodeKeys"):
        sg.sign(b"x", ALICE.seed, TOPIC)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="data"):
        sg.Verifier(ROSTER).verify("text", "edge-1", TOPIC)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# keys


def test_derive_seed_is_a_personalised_blake2b() -> None:
    seed = sg.derive_seed(42, "edge-1")
    expected = hashlib.blake2b(b"42\x00edge-1", digest_size=32, person=b"fedstrata-sign").digest()
    assert seed == expected
    assert len(seed) == 32
    assert sg.derive_seed(42, "edge-1") == seed
    assert sg.derive_seed(43, "edge-1") != seed
    assert sg.derive_seed(42, "edge-2") != seed
    assert sg.derive_seed(4, "2edge-1") != sg.derive_seed(42, "edge-1")
    assert sg.derive_seed(-42, "edge-1") != seed
    assert sg.derive_seed(2**100, "ü") == sg.derive_seed(2**100, "ü")
    assert NodeKeys.derived(42, "edge-1").public_key == NodeKeys(seed).public_key
    with pytest.raises(ValidationError):
        sg.derive_seed(True, "edge-1")
    with pytest.raises(ValidationError):
        sg.derive_seed(1, b"edge-1")  # type: ignore[arg-type]


def test_node_keys() -> None:
    keys = NodeKeys(b"\x07" * 32)
    assert keys.seed == b"\x07" * 32
    assert keys.public_key == bytes(SigningKey(b"\x07" * 32).verify_key)
    assert keys.seed.hex() not in repr(keys)
    assert keys.public_key.hex() in repr(keys)
    fresh = NodeKeys.generate()
    assert fresh.public_key != NodeKeys.generate().public_key
    with pytest.raises(ValidationError, match="32 bytes"):
        NodeKeys(b"\x07" * 31)


@posix_only
def test_key_file_round_trip_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    old = os.umask(0)  # even with a permissive umask, the file is 0600
    try:
        ALICE.save(path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes() == (ALICE.seed.hex() + "\n").encode()
    assert NodeKeys.load(path).public_key == ALICE.public_key


@posix_only
def test_key_file_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    ALICE.save(path)
    with pytest.raises(KeyFileError, match="exists"):
        BOB.save(path)
    assert NodeKeys.load(path).public_key == ALICE.public_key
    os.chmod(path, 0o644)
    BOB.save(path, overwrite=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert NodeKeys.load(path).public_key == BOB.public_key
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.key"]  # no temporary left


@posix_only
@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o700 | 0o004])
def test_key_file_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "node.key"
    ALICE.save(path)
    os.chmod(path, mode)
    with pytest.raises(KeyFileError, match="chmod 600"):
        NodeKeys.load(path)
    assert NodeKeys.load(path, check_permissions=False).public_key == ALICE.public_key


@posix_only
def test_key_file_formats(tmp_path: Path) -> None:
    raw = tmp_path / "raw.key"
    fd = os.open(raw, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, BOB.seed)
    os.close(fd)
    assert NodeKeys.load(raw).public_key == BOB.public_key
    upper = tmp_path / "upper.key"
    fd = os.open(upper, os.O_WRONLY | os.O_CREAT, 0o400)
    os.write(fd, b"  " + BOB.seed.hex().upper().encode() + b"\r\n")
    os.close(fd)
    assert NodeKeys.load(upper).public_key == BOB.public_key
    for i, content in enumerate([b"", b"zz" * 32, BOB.seed.hex()[:-2].encode(), BOB.seed * 2]):
        bad = tmp_path / f"bad{i}.key"
        fd = os.open(bad, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, content)
        os.close(fd)
        with pytest.raises(KeyFileError, match="64 hex digits"):
            NodeKeys.load(bad)
    with pytest.raises(KeyFileError):
        NodeKeys.load(tmp_path / "missing.key")


# ---------------------------------------------------------------------------
# replay protection


def replayed(guard: sg.ReplayGuard, *args: object) -> bool:
    try:
        guard.admit(*args)  # type: ignore[arg-type]
    except AuthenticationError as err:
        reason = err.reason
    else:
        return False
    assert reason == "replay"
    return True


def test_replay_of_an_old_round_is_rejected_and_a_new_round_accepted() -> None:
    guard = sg.ReplayGuard()
    assert guard.last_round("edge-1", "update") is None
    assert not replayed(guard, "edge-1", "update", 3)
    assert replayed(guard, "edge-1", "update", 3)  # the same message again
    assert replayed(guard, "edge-1", "update", 2)  # an older round
    assert not replayed(guard, "edge-1", "update", 4)
    assert replayed(guard, "edge-1", "update", 3)
    assert not replayed(guard, "edge-1", "update", 10)  # rounds may be skipped
    assert guard.last_round("edge-1", "update") == 10
    assert guard.counts == {"accepted": 3, "replay": 3}


def test_several_messages_per_round_are_told_apart_by_sub() -> None:
    guard = sg.ReplayGuard()
    assert not replayed(guard, "edge-1", "update", 5, "phase1")
    assert not replayed(guard, "edge-1", "update", 5, "phase2")
    assert replayed(guard, "edge-1", "update", 5, "phase1")
    assert not replayed(guard, "edge-1", "update", 6, "phase1")
    assert replayed(guard, "edge-1", "update", 5, "phase2")  # round 5 is behind now
    assert not replayed(guard, "edge-1", "update", 6, 0)  # int subs are their own values


def test_kinds_and_senders_are_independent() -> None:
    guard = sg.ReplayGuard()
    assert not replayed(guard, "edge-1", "update", 7)
    assert not replayed(guard, "edge-1", "secagg/keys", 3)  # another kind, earlier round
    assert not replayed(guard, "edge-2", "update", 1)  # another sender
    assert replayed(guard, "edge-2", "update", 0)
    assert guard.last_round("edge-1", "secagg/keys") == 3


def test_replay_guard_rejects_misuse() -> None:
    guard = sg.ReplayGuard()
    with pytest.raises(ValidationError):
        guard.admit("edge-1", "update", 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        guard.admit("edge-1", "update", True)
    with pytest.raises(ValidationError):
        guard.admit("edge-1", "update", 1, sub=(1, 2))  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        guard.admit(None, "update", 1)  # type: ignore[arg-type]
    assert guard.counts == {}


def test_verify_then_guard_pipeline() -> None:
    verifier, guard = sg.Verifier(ROSTER), sg.ReplayGuard()
    messages = [sg.sign(f"round {r}".encode(), ALICE, TOPIC) for r in range(3)]
    for r, data in enumerate(messages):
        assert verifier.verify(data, "edge-1", TOPIC) == f"round {r}".encode()
        guard.admit("edge-1", "update", r)
    # an attacker re-sends round 1: the signature is valid, the guard refuses it
    assert verifier.verify(messages[1], "edge-1", TOPIC) == b"round 1"
    assert replayed(guard, "edge-1", "update", 1)
