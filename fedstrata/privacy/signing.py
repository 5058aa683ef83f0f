"""Ed25519 signed messages (PyNaCl), node keys and replay protection.

Signed message layout
---------------------
::

    offset  size  field
    0       64    Ed25519 signature (RFC 8032) over the signed context (below)
    64      rest  payload, unchanged (typically a fedstrata.wire envelope)

The overhead is exactly :data:`SIGNATURE_BYTES` = 64 bytes per message. Nothing
else is added: no tag, version byte or key id. The signature covers, and only these
bytes are signed (none but the payload is sent)::

    CONTEXT || uint16 big-endian len(topic) || topic (UTF-8) || payload

:data:`CONTEXT` is a fixed domain-separation prefix, so a fedstrata signature can
never pass as a signature for another protocol that uses the same key, or the
reverse. The topic is the MQTT topic the message is published on, so a message
re-published on another topic no longer verifies (``forged``); with the envelope's
``run``, ``round``, ``sender`` and ``body`` inside the payload, the signature binds
the run, the topic, the sender, the round and the body together. The receiver
knows the claimed sender from the envelope, looks up that sender's public key, and
verifies with the topic the message arrived on. Plain ``crypto_sign_open`` of the
bytes does not verify them; use :class:`Verifier`.

The signature authenticates the bytes, not who the payload claims to be. After
:meth:`Verifier.verify`, the caller must check that the decoded envelope's
``sender`` is the sender it verified against, that its ``run`` is the receiver's
run and that the sender may speak on the topic, then pass the envelope's
``(sender, kind, round)`` to :class:`ReplayGuard`
(:class:`fedstrata.nodes.sealing.Seal` does all of it).

Rejections
----------
:class:`AuthenticationError` (a :class:`~fedstrata.errors.PrivacyError` and a
:class:`~fedstrata.errors.WireError`, so a node's ``WireError`` boundary drops it)
carries ``reason``, one of :data:`REASONS`:

- ``unknown_sender``: no public key is registered for the claimed sender. This is
  checked first.
- ``unsigned``: the data is shorter than a signature, so it cannot be signed (the
  seal also says so of a bare envelope).
- ``forged``: the signature does not verify. This covers any modified byte, a
  wrong key, a truncation that leaves at least 64 bytes, unsigned data of 64 bytes
  or more, and a message received on another topic than it was signed for.
- ``replay``: :class:`ReplayGuard` has already seen this message or a later one.
- ``wrong_run``, ``wrong_topic``, ``wrong_sender``: raised by
  :class:`~fedstrata.nodes.sealing.Seal` (signed or not) for an envelope of another
  run, a topic the node does not listen to or that does not carry this kind, and a
  sender who may not publish on that topic.

Both classes count their outcomes by reason in ``counts``.

Keys
----
:class:`NodeKeys` holds a node's Ed25519 key pair, derived from a 32-byte seed. On
devices the seed lives in a key file, written by :meth:`NodeKeys.save` as 64
lowercase hex digits and a newline, with mode 0600. :meth:`NodeKeys.load` accepts
that, or exactly 32 raw bytes, and refuses a file that group or others can access
(as OpenSSH does). A run over a real broker generates fresh keys per run
(:meth:`NodeKeys.generate`) or reads key files. In simulations, :func:`derive_seed`
gives every node a reproducible seed from the scenario's master seed: such keys are
only as secret as the master seed, which is public, so they protect nothing outside
a simulation.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from nacl.bindings import crypto_core_ed25519_is_valid_point
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey
from nacl.utils import random as nacl_random

from fedstrata.errors import PrivacyError, ValidationError, WireError

__all__ = [
    "CONTEXT",
    "PUBLIC_KEY_BYTES",
    "REASONS",
    "SEED_BYTES",
    "SIGNATURE_BYTES",
    "AuthenticationError",
    "KeyFileError",
    "NodeKeys",
    "ReplayGuard",
    "Verifier",
    "derive_seed",
    "sign",
    "signed_context",
]

SIGNATURE_BYTES: Final = 64
"""Size of an Ed25519 signature, and the whole per-message overhead."""

SEED_BYTES: Final = 32
"""Size of an Ed25519 seed (the secret key material)."""

PUBLIC_KEY_BYTES: Final = 32
"""Size of an Ed25519 public key."""

CONTEXT: Final = b"fedstrata/signed-message/v2\x00"
"""The domain-separation prefix signed in front of the topic and the payload; not sent.

v2 binds the topic (v1 signed ``CONTEXT || payload``): a v1 signature never verifies.
"""

MAX_TOPIC_BYTES: Final = 65_535
"""The longest topic that can be signed: an MQTT topic's limit (MQTT 3.1.1 §1.5.3)."""

REASONS: Final = (
    "unsigned",
    "forged",
    "unknown_sender",
    "replay",
    "wrong_run",
    "wrong_topic",
    "wrong_sender",
)
"""Every value of :attr:`AuthenticationError.reason`."""

_PERSON: Final = b"fedstrata-sign"  # BLAKE2b personalisation (at most 16 bytes)


class AuthenticationError(PrivacyError, WireError):
    """An inbound message was rejected. :attr:`reason` is one of :data:`REASONS`."""

    def __init__(self, reason: str, sender: str, detail: str = "") -> None:
        if reason not in REASONS:
            raise ValidationError(f"unknown reason {reason!r}")
        self.reason = reason
        self.sender = sender
        super().__init__(f"{reason}: message from {sender!r}" + (f" ({detail})" if detail else ""))


class KeyFileError(PrivacyError):
    """A key file is missing, malformed, or accessible by group or others."""


def _bytes(name: str, value: object, size: int | None = None) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise ValidationError(f"{name} must be bytes, got {type(value).__name__}")
    b = bytes(value)
    if size is not None and len(b) != size:
        raise ValidationError(f"{name} must be {size} bytes, got {len(b)}")
    return b


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a str, got {type(value).__name__}")
    return value


# ---------------------------------------------------------------------------
# keys


def derive_seed(master_seed: int, node_id: str) -> bytes:
    """A node's 32-byte Ed25519 seed for simulations: a hash of the master seed and the id.

    ``BLAKE2b-256(decimal(master_seed) || 0x00 || utf8(node_id), person="fedstrata-sign")``.
    The decimal string contains no NUL byte, so the input is unambiguous. The
    personalisation separates these seeds from every other use of BLAKE2b in
    fedstrata. Anyone who knows the master seed knows every node's key, so real
    deployments use :meth:`NodeKeys.generate` and key files instead.
    """
    if isinstance(master_seed, bool) or not isinstance(master_seed, int):
        raise ValidationError(f"master_seed must be an int, got {master_seed!r}")
    node = _text("node_id", node_id)
    data = str(master_seed).encode("ascii") + b"\x00" + node.encode("utf-8")
    return hashlib.blake2b(data, digest_size=SEED_BYTES, person=_PERSON).digest()


class NodeKeys:
    """A node's Ed25519 signing key pair, derived from a 32-byte seed.

    ``repr`` shows only the public key. The seed is readable as :attr:`seed`, but
    only :meth:`save` should need it.
    """

    __slots__ = ("_key",)

    def __init__(self, seed: bytes) -> None:
        self._key = SigningKey(_bytes("seed", seed, SEED_BYTES))

    @classmethod
    def generate(cls) -> NodeKeys:
        """Fresh keys from the operating system's random generator (for devices)."""
        return cls(nacl_random(SEED_BYTES))

    @classmethod
    def derived(cls, master_seed: int, node_id: str) -> NodeKeys:
        """Reproducible keys for a simulation, from :func:`derive_seed`."""
        return cls(derive_seed(master_seed, node_id))

    @property
    def seed(self) -> bytes:
        """The 32-byte secret seed."""
        return bytes(self._key)

    @property
    def public_key(self) -> bytes:
        """The 32-byte public key, to give to every :class:`Verifier` of this node."""
        return bytes(self._key.verify_key)

    def __repr__(self) -> str:
        return f"NodeKeys(public_key={self.public_key.hex()})"

    def sign(self, payload: bytes, topic: str) -> bytes:
        """``signature || payload`` for a message published on ``topic`` (as :func:`sign`)."""
        body = _bytes("payload", payload)
        return self._key.sign(signed_context(topic, body)).signature + body

    # -- key files ------------------------------------------------------------

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write the seed as 64 hex digits and a newline to a new file of mode 0600.

        The file is created with mode 0600 from the start, so it is never readable
        by others, not even briefly. An existing file is an error unless
        ``overwrite``. Overwriting writes a temporary file next to the target and
        renames it over the target, which is atomic.
        """
        target = Path(path)
        data = (self.seed.hex() + "\n").encode("ascii")
        if not overwrite:
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                raise KeyFileError(f"{target}: exists (pass overwrite=True)") from None
            _write_private(fd, data)
            return
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_private(fd, data)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, check_permissions: bool = True) -> NodeKeys:
        """Read a key file: 64 hex digits (surrounding whitespace ignored) or 32 raw bytes.

        On POSIX systems, a file that group or others can access (``mode & 0o077``)
        is refused unless ``check_permissions=False``.
        """
        source = Path(path)
        try:
            if check_permissions and os.name == "posix":
                mode = stat.S_IMODE(source.stat().st_mode)
                if mode & 0o077:
                    raise KeyFileError(
                        f"{source}: permissions {mode:04o} let group or others read the key;"
                        " run chmod 600"
                    )
            raw = source.read_bytes()
        except OSError as exc:
            raise KeyFileError(f"{source}: {exc.strerror or exc}") from None
        if len(raw) == SEED_BYTES:
            return cls(raw)
        text = raw.strip()
        try:
            seed = bytes.fromhex(text.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            seed = b""
        if len(seed) != SEED_BYTES or len(text) != 2 * SEED_BYTES:
            raise KeyFileError(f"{source}: expected 64 hex digits or 32 raw bytes")
        return cls(seed)


def _write_private(fd: int, data: bytes) -> None:
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)  # exactly 0600, whatever the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------
# signing and verifying


def signed_context(topic: str, payload: bytes) -> bytes:
    """The bytes a signature covers: ``CONTEXT || uint16 BE len(topic) || topic || payload``.

    The length prefix keeps topic and payload apart: no other (topic, payload) pair
    gives the same bytes.
    """
    name = _text("topic", topic).encode("utf-8")
    if len(name) > MAX_TOPIC_BYTES:
        raise ValidationError(f"topic is {len(name)} bytes, more than {MAX_TOPIC_BYTES}")
    return CONTEXT + len(name).to_bytes(2, "big") + name + payload


def sign(payload: bytes, keys: NodeKeys, topic: str) -> bytes:
    """``signature || payload`` for ``topic``: 64 bytes more than ``payload`` (module docstring)."""
    if not isinstance(keys, NodeKeys):
        raise ValidationError(f"keys must be NodeKeys, got {type(keys).__name__}")
    return keys.sign(payload, topic)


class Verifier:
    """Checks signed messages against a fixed roster of public keys.

    Parameters
    ----------
    public_keys
        Node id → 32-byte Ed25519 public key. Keys that are not valid curve points
        are refused here, not at the first message.

    Attributes
    ----------
    counts
        ``Counter`` of outcomes: ``"accepted"`` and the rejection reasons.
    """

    def __init__(self, public_keys: Mapping[str, bytes]) -> None:
        if not isinstance(public_keys, Mapping):
            raise ValidationError("public_keys must be a mapping of node id to key bytes")
        keys: dict[str, VerifyKey] = {}
        for node, key in public_keys.items():
            _text("node id", node)
            raw = _bytes(f"public key of {node!r}", key, PUBLIC_KEY_BYTES)
            if not crypto_core_ed25519_is_valid_point(raw):
                raise ValidationError(f"public key of {node!r} is not a valid Ed25519 point")
            keys[node] = VerifyKey(raw)
        self._keys = keys
        self.counts: Counter[str] = Counter()

    def __contains__(self, sender: object) -> bool:
        return sender in self._keys

    def _reject(self, reason: str, sender: str, detail: str = "") -> AuthenticationError:
        self.counts[reason] += 1
        return AuthenticationError(reason, sender, detail)

    def verify(self, data: bytes, sender: str, topic: str) -> bytes:
        """Return the payload of ``data``, signed by ``sender`` for ``topic``.

        Raises :class:`AuthenticationError` with reason ``unknown_sender``,
        ``unsigned`` or ``forged``, checked in that order (``forged`` also when
        ``data`` was signed for another topic).
        """
        blob = _bytes("data", data)
        who = _text("sender", sender)
        _text("topic", topic)
        key = self._keys.get(who)
        if key is None:
            raise self._reject("unknown_sender", who)
        if len(blob) < SIGNATURE_BYTES:
            raise self._reject("unsigned", who, f"{len(blob)} bytes, shorter than a signature")
        payload = blob[SIGNATURE_BYTES:]
        try:
            key.verify(signed_context(topic, payload), blob[:SIGNATURE_BYTES])
        except BadSignatureError:
            raise self._reject("forged", who, "bad signature") from None
        self.counts["accepted"] += 1
        return payload


# ---------------------------------------------------------------------------
# replay protection


class ReplayGuard:
    """Rejects messages it has seen before and messages from rounds already left behind.

    The rule, per ``(sender, kind)``: the guard keeps the highest round accepted so
    far, ``r``, and the ``sub`` values accepted in round ``r``. A message
    ``(sender, kind, round, sub)`` is accepted if ``round > r``, which starts a new
    round, or if ``round == r`` and ``sub`` is new in it. Otherwise it is rejected
    with reason ``replay``: an older round, or an exact repeat.

    ``sub`` distinguishes legitimate messages of one kind in one round. Examples are
    the phases of an exact two-phase iteration, the steps of a SecAgg session, or the
    parts of a split update. Messages of different kinds never affect each other.
    Within one ``(sender, kind)``, rounds must not go backwards: a message for round
    ``r - 1`` that arrives after one for round ``r`` is refused. The transport must
    therefore keep each sender's order for a kind (MQTT does, per client and QoS).
    A duplicate that the transport delivers twice (QoS 1) is also refused.

    Attributes
    ----------
    counts
        ``Counter`` of ``"accepted"`` and ``"replay"``.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[int, set[str | int]]] = {}
        self.counts: Counter[str] = Counter()

    def last_round(self, sender: str, kind: str) -> int | None:
        """The highest round accepted from ``sender`` for ``kind`` (None before any)."""
        entry = self._last.get((sender, kind))
        return None if entry is None else entry[0]

    def admit(self, sender: str, kind: str, round: int, sub: str | int = "") -> None:
        """Record the message if it is new, else raise :class:`AuthenticationError` (``replay``)."""
        who = _text("sender", sender)
        what = _text("kind", kind)
        if isinstance(round, bool) or not isinstance(round, int):
            raise ValidationError(f"round must be an int, got {round!r}")
        if isinstance(sub, bool) or not isinstance(sub, str | int):
            raise ValidationError(f"sub must be a str or an int, got {sub!r}")
        entry = self._last.get((who, what))
        if entry is None or round > entry[0]:
            self._last[(who, what)] = (round, {sub})
        elif round == entry[0] and sub not in entry[1]:
            entry[1].add(sub)
        else:
            self.counts["replay"] += 1
            last = entry[0]
            raise AuthenticationError(
                "replay", who, f"{what} round {round} sub {sub!r}; last accepted round {last}"
            )
        self.counts["accepted"] += 1
