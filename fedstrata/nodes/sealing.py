"""Signed envelopes in the node core (``privacy.sign``).

Every message a node sends is signed; every one it receives is verified and checked
against replays.

A :class:`Seal` sits where a node encodes and decodes envelopes. Without keys it is
the plain wire format. With keys (:class:`~fedstrata.privacy.signing.NodeKeys`) every
payload is ``Ed25519 signature (64 bytes) || envelope`` and a received payload is
accepted only if

1. it is not a bare envelope (``unsigned``),
2. the envelope's sender has a registered public key (``unknown_sender``),
3. the signature over the envelope verifies with it (``forged``: any changed byte,
   another node's key, a sender field rewritten), and
4. the :class:`~fedstrata.privacy.signing.ReplayGuard` has not seen a later round
   of that sender and kind, nor another message for the same slot (``replay``: an
   old round sent again). The very same message again (a QoS 1 redelivery, a
   retained message after a reconnect) passes: the node counts it as a duplicate.

A rejection is a :class:`~fedstrata.privacy.signing.AuthenticationError` (a
``WireError``): the nodes record it as ``rejected`` with its reason and drop the
message, as they do any malformed message.

Keys: in a simulation, and in an MQTT run of one machine, derived from the
scenario's seed (:meth:`NodeKeys.derived`: reproducible, and only as secret as the
seed). On devices (``fedstrata node``), read from the node's key file, with every
node's public key from a roster file (``fedstrata keys`` writes both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fedstrata import wire
from fedstrata.errors import WireError
from fedstrata.nodes.events import Record
from fedstrata.privacy.signing import (
    SIGNATURE_BYTES,
    AuthenticationError,
    NodeKeys,
    ReplayGuard,
    Verifier,
)

__all__ = ["PLAIN", "Seal", "rejected"]


class Seal:
    """Encode/sign and verify/decode envelopes for one node.

    Parameters
    ----------
    keys
        The node's signing keys; ``None`` with ``public_keys`` ``None``: no signing.
    public_keys
        Node id → Ed25519 public key of every node it may hear from.
    """

    def __init__(
        self, keys: NodeKeys | None = None, public_keys: Mapping[str, bytes] | None = None
    ) -> None:
        if (keys is None) != (public_keys is None):
            raise ValueError("signing needs both the node's keys and the public keys")
        self.keys = keys
        self.public_keys = None if public_keys is None else dict(public_keys)
        self.verifier = None if public_keys is None else Verifier(public_keys)
        self.guard = ReplayGuard()
        # signatures accepted in each sender's latest round of a kind: a transport
        # duplicate (QoS 1 redelivery, a retained message again) carries the same
        # deterministic Ed25519 signature and is the node's to count, not a replay
        self._accepted: dict[tuple[str, str], tuple[int, dict[str, bytes]]] = {}

    def fresh(self) -> Seal:
        """The same keys with an empty replay memory (a node restarted after a crash)."""
        return Seal(self.keys, self.public_keys)

    @property
    def signing(self) -> bool:
        """Whether messages are signed and verified."""
        return self.keys is not None

    def wrap(self, payload: bytes) -> bytes:
        """An encoded envelope as sent: signed when signing is on."""
        return payload if self.keys is None else self.keys.sign(payload)

    def encode(self, env: wire.Envelope) -> bytes:
        """``wire.encode(env)``, signed when signing is on."""
        return self.wrap(wire.encode(env))

    def decode(
        self, data: bytes, parse: Callable[[bytes], wire.Envelope] = wire.decode
    ) -> wire.Envelope:
        """The envelope of a received payload; raises WireError/AuthenticationError."""
        if self.verifier is None:
            return parse(data)
        try:
            bare = parse(data)
        except WireError:
            bare = None
        if bare is not None:
            self.verifier.counts["unsigned"] += 1
            raise AuthenticationError("unsigned", bare.sender, "a bare envelope")
        env = parse(data[SIGNATURE_BYTES:])  # who it claims to be from, to pick the key
        self.verifier.verify(data, env.sender)
        body = env.body
        sub = f"{body.get('phase', '')}/{body.get('type', '')}/{body.get('sub', 0)}"
        signature = bytes(data[:SIGNATURE_BYTES])
        key = (env.sender, env.kind)
        try:
            self.guard.admit(env.sender, env.kind, env.round, sub)
        except AuthenticationError:
            seen = self._accepted.get(key)
            if seen is not None and seen[0] == env.round and seen[1].get(sub) == signature:
                return env  # the same message again: a duplicate, not a replay
            raise
        seen = self._accepted.get(key)
        if seen is None or seen[0] != env.round:
            seen = self._accepted[key] = (env.round, {})
        seen[1][sub] = signature
        return env


def rejected(node: str, exc: AuthenticationError) -> Record:
    """The record of a message a node refused: ``rejected`` with the reason."""
    return Record(
        kind="rejected", fields={"node": node, "reason": exc.reason, "sender": exc.sender}
    )


#: The seal of a node that does not sign.
PLAIN = Seal()
