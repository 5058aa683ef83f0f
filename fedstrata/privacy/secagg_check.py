"""SecAgg's consistency check: members sign the survivor set before anyone reveals.

Bonawitz et al. (CCS 2017, round 3 "ConsistencyCheck") stop a server that tells
different members different survivor sets: told that ``u`` survived, a holder reveals
its share of ``u``'s self-mask seed ``b_u``; told that ``u`` dropped, its share of
``u``'s mask key ``s_u``. With both, the server unmasks ``u``'s own input. So before
revealing, every member signs the survivor set ``S`` (U3) it was told, and reveals only
once the server shows it enough signatures, by other members, over that same ``S``.

The rule, per owner
-------------------
A holder ``w`` reveals shares of the owners ``u`` it holds (its partners and itself)
only if, for *each* such ``u``, at least ``t`` of ``u``'s holders ``H(u)`` (``u`` and
its neighbours) signed the very ``S`` that ``w`` signed. Suppose an honest ``w1``
revealed ``b_u`` (``u ∈ S1``) and an honest ``w2`` revealed ``s_u`` (``u ∉ S2``). Then
``t`` members of ``H(u)`` signed ``S1`` and ``t`` signed ``S2 ≠ S1``; an honest member
signs once per session, so with ``c`` of ``H(u)`` colluding with the server,
``2 t - c <= h``. The threshold rule ``2 t > h`` makes that impossible for ``c = 0``
and, in general, for ``c < 2 t - h``.

In plain SecAgg ``H(u)`` is the whole roster, so each member gets every signature.
In SecAgg+ the owners a member holds are its neighbours, whose holders lie within two
hops on the Harary ring: the server forwards the signatures of that ball
(``2 k + 1`` members at most), so the check keeps SecAgg+'s O(k) cost per member.
Bell et al. (CCS 2020) state the same per-neighbourhood rule for their malicious
variant. This module is the pure part (what is signed, the set's encoding, the count);
:mod:`fedstrata.privacy.secagg` runs the round.

Keys
----
Signing keys are per session: each member draws a fresh Ed25519 key with its two X25519
keys in round 0 and advertises its verify key with them; the server forwards each
member the verify keys of its ball with the key list, before any survivor set exists.
They are exactly as authentic as the X25519 keys: nothing authenticates any of them
(no PKI, see the module docstring of :mod:`fedstrata.privacy.secagg`), so a server that
substitutes keys in round 0 defeats this check as it defeats the rest.

What keeps an individual input hidden
-------------------------------------
The server gets ``y_u`` for ``u`` ∈ U3. To read one ``x_u`` it would need ``b_u`` and
also ``s_u`` (or ``s_v`` for every partner ``v`` of ``u``). The checks that deny it
that are listed here (module names refer to :mod:`fedstrata.privacy.secagg`).

* **Consistency rule (client).** One unmask request may not list a client both as
  survivor and as dropped, and its lists must be the U3 the client signed. A client
  signs once and answers one unmask request, then refuses every further message.
* **Consistency check (both).** ``2 t > h`` (``h``: holders of a client's shares,
  ``n`` or ``k + 1``), and a holder reveals shares of ``u`` only over a U3 that ``t``
  of ``u``'s holders signed. Two different survivor sets each signed by ``t`` of
  ``u``'s ``h`` holders would need a member to sign twice, so a server that tells
  different clients different survivor sets gets no reveal from some of them, and
  never ``t`` shares of both ``b_u`` and ``s_u`` (with fewer than ``2 t - h`` of
  ``u``'s holders colluding with it).
* **Self check (client).** A client refuses to reveal anything if it is not listed
  among the survivors: it sent its masked input. Its own ``s`` share never leaves it.
* **Enough partners (client).** A client masks only if it has at least ``t - 1``
  partners (round 2). It unmasks only if at least ``t`` of its partners and itself
  are listed as survivors (round 3). With fewer, the "sum" could be its own input.
* **Binding.** Ciphertexts bind the session and the sender and recipient indices.
  Pair seeds bind the session. Clients reject keys for non-neighbours, duplicated
  public keys and low-order points.
* **Server side.** With fewer than ``t`` clients in a round, or fewer than ``t``
  shares for some ``b_u`` or ``s_u``, the server raises
  :class:`BelowThresholdError`. It never returns a partial or wrong sum. A rebuilt
  ``b_u`` must match ``u``'s commitment, a rebuilt ``s_u`` must match ``u``'s public
  key, and the result must pass the fixed-point range check.

Not covered: nothing authenticates the public keys (Bonawitz et al.'s active variant
assumes a PKI). A malicious server can swap keys in round 0 (man in the middle, which
also forges the consistency check), fill the roster with clients of its own (Sybils),
or pick a graph seed that suits it. Reopening a round with the same inputs is refused
by the node layer (:mod:`fedstrata.nodes.secure`), not here: one object, one session.
Bonawitz et al. prove it for a server colluding with fewer than ``t`` clients; Bell et al. give the
probabilistic version for SecAgg+ with suitable ``k`` and ``t``. This code follows
those protocols and has had no independent security review.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Protocol

from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import SigningKey, VerifyKey

__all__ = [
    "CHECK",
    "SIGNATURE_BYTES",
    "SIGNED",
    "decode_set",
    "encode_set",
    "sign",
    "signatures_problem",
    "signing_key",
    "survivors_problem",
    "verifies",
]

CHECK: Final = "secagg/check"
"""Server → member: the survivor set S (U3) to sign, as a bitmap over the roster."""
SIGNED: Final = "secagg/signed"
"""Member → server: its Ed25519 signature over (session, S)."""
SIGNATURE_BYTES: Final = 64
"""The length of an Ed25519 signature."""
_LABEL: Final = b"fedstrata.sa.cc\x00"


def encode_set(roster: Sequence[str], members: Iterable[str]) -> bytes:
    """``members`` as a bitmap over ``roster`` (bit i of byte i // 8 = roster[i])."""
    chosen = frozenset(members)
    bits = bytearray((len(roster) + 7) // 8)
    for i, who in enumerate(roster):
        if who in chosen:
            bits[i // 8] |= 1 << (i % 8)
    return bytes(bits)


def decode_set(roster: Sequence[str], bits: object) -> frozenset[str] | None:
    """The members a bitmap names; None unless it is a bitmap over ``roster`` exactly."""
    if not isinstance(bits, bytes | bytearray) or len(bits) != (len(roster) + 7) // 8:
        return None
    chosen = frozenset(who for i, who in enumerate(roster) if bits[i // 8] >> (i % 8) & 1)
    if encode_set(roster, chosen) != bytes(bits):
        return None  # a padding bit is set: one set must have one encoding (one signature)
    return chosen


def signing_key() -> SigningKey:
    """A fresh per-session Ed25519 signing key."""
    return SigningKey.generate()


def _statement(session: bytes, bits: bytes) -> bytes:
    return _LABEL + session + bits


def sign(key: SigningKey, session: bytes, bits: bytes) -> bytes:
    """The signature of (session, S); the session binds the round and the aggregator."""
    return bytes(key.sign(_statement(session, bits)).signature)


def verifies(verify_key: bytes, session: bytes, bits: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is the key's signature over (session, S)."""
    try:
        VerifyKey(verify_key).verify(_statement(session, bits), signature)
    except (BadSignatureError, CryptoError, ValueError, TypeError):
        return False
    return True


def survivors_problem(
    me: str, u3: frozenset[str], neighbours: frozenset[str], partners: frozenset[str], t: int
) -> tuple[bool, str] | None:
    """Why ``me`` refuses to sign ``u3`` (below threshold?, reason), or None.

    It refuses a set that leaves it out (it sent its masked input), that names a
    neighbour who never sent it shares (sets only shrink: U3 ⊆ U2), or with fewer than
    ``t`` members, or fewer than ``t`` among its partners and itself (the "sum" could be
    its own input).
    """
    if me not in u3:
        return False, f"client {me} sent its masked input but is not listed as a survivor"
    if unknown := u3 & (neighbours - partners):
        return False, f"partners that never sent shares are listed: {sorted(unknown)}"
    if len(u3) < t or 1 + len(u3 & partners) < t:
        alive = 1 + len(u3 & partners)
        return (
            True,
            f"client {me}: {alive} survivor(s) among its partners and itself, threshold {t}",
        )
    return None


class _Neighbours(Protocol):
    def neighbours(self, who: str) -> frozenset[str]: ...


def signatures_problem(
    me: str,
    signatures: Mapping[str, bytes],
    verify_keys: Mapping[str, bytes],
    session: bytes,
    bits: bytes,
    owners: Iterable[str],
    graph: _Neighbours,
    t: int,
) -> str | None:
    """Why a holder refuses to reveal shares of ``owners`` after these signatures, or None.

    Every forwarded signature must verify over the set ``bits`` this holder signed,
    under a verify key it got with its key list (``me`` signed too); then
    each owner needs ``t`` signing holders (see "The rule, per owner").
    """
    for who, signature in signatures.items():
        key = verify_keys.get(who)
        if key is None or not verifies(key, session, bits, signature):
            return f"the signature of {who!r:.40} is not over the survivor set signed here"
    signers = frozenset(signatures) | {me}  # its own signature is not forwarded back
    for u in sorted(owners):
        if len((graph.neighbours(u) | {u}) & signers) < t:
            return f"fewer than {t} holders of {u}'s shares signed the survivor set: refusing"
    return None
