"""SecAgg and SecAgg+ for one aggregation group, as sans-IO client and server objects.

The protocol is that of Bonawitz et al., "Practical Secure Aggregation for
Privacy-Preserving Machine Learning" (CCS 2017), in its honest-but-curious form. The
SecAgg+ variant of Bell et al., "Secure Single-Server Aggregation with
(Poly)Logarithmic Overhead" (CCS 2020), is also available: each client masks with and
shares its keys among only its ``degree`` neighbours on a random regular graph. The
server learns the sum, modulo 2**k, of the fixed-point encodings
(:mod:`fedstrata.privacy.fixedpoint`) of the surviving clients' vectors.

Nothing here does I/O. A :class:`SecAggServer` turns received messages into the next
round's messages. A :class:`SecAggClient` turns one server message into one reply.
Messages are plain dicts with ``str`` keys and values of type ``str``, ``int``,
``float``, ``None``, ``bytes``, lists, dicts and ``uint64`` numpy arrays, so
:mod:`fedstrata.wire` can carry them as they are. One object serves one aggregation:
keys and seeds are fresh every time. A caller that aggregates per tier or per group
runs one server, and one client per member, for each.

Rounds
------
Notation: ``U1 ⊇ U2 ⊇ U3 ⊇ U4 ⊇ U5`` are the clients whose reply the server received
in rounds 0 to 4. ``N(u)`` is u's neighbourhood (every other client in SecAgg). ``t`` is
the threshold.

0. **Advertise keys.** The server sends ``secagg/setup`` to every client (session id,
   roster, graph seed, parameters). Each client checks the parameters against its own
   :class:`SecAggConfig` and answers ``secagg/keys`` with two fresh X25519 public keys,
   ``c`` for encryption (NaCl ``Box``) and ``s`` for mask agreement, and a fresh
   Ed25519 verify key ``v`` (the consistency check's).
1. **Share keys.** The server sends each client the keys of its neighbours in U1
   (``secagg/key_list``). The client draws a self-mask seed ``b`` (32 random bytes).
   It Shamir-splits ``b`` and its ``s`` private key t-of-h among itself and those
   neighbours (:mod:`fedstrata.privacy.shamir`; share id = roster position + 1) and
   encrypts each neighbour's pair of shares for that neighbour with ``Box``. The
   plaintext binds the session and both indices. The client keeps its own share and
   answers ``secagg/shares`` with the ciphertexts and a BLAKE2b commitment to ``b``.
2. **Masked input.** The server forwards to each client in U2 the ciphertexts
   addressed to it (``secagg/collect``). Client ``u`` decrypts them and answers
   ``secagg/masked`` with
   ``y_u = x_u + PRG(b_u) + Σ_{v>u} PRG(s_uv) − Σ_{v<u} PRG(s_uv) mod 2**k``,
   where ``v`` ranges over the neighbours whose shares it received and
   ``s_uv = BLAKE2b(X25519(s_u, s_v), session, u, v)``
   (:func:`fedstrata.privacy.prg.expand`).
3. **Consistency check** (:mod:`fedstrata.privacy.secagg_check`). The server sends
   U3 to every client in U3 (``secagg/check``); each signs (session, U3) with the
   per-session Ed25519 key it advertised in round 0 (``secagg/signed``).
4. **Unmasking.** The server sends each signer (U4) its lists ``survivors`` (U3
   members among its share partners and itself) and ``dropped`` (U2 - U3 members
   among its share partners) and the signatures a client needs, in ``secagg/unmask``.
   A client reveals only if the lists match the U3 it signed and, for every owner of
   shares it holds, ``t`` of that owner's holders signed that same U3. The client answers
   ``secagg/reveal`` with its shares of ``b`` for the survivors and its shares of
   ``s`` for the dropped. :meth:`SecAggServer.finish` rebuilds every ``b_u``
   (u ∈ U3) and every ``s_u`` (u ∈ U2 - U3) from ``t`` shares each. It checks them
   against the commitment and the public key, removes the self masks and the dropped
   clients' pairwise masks, and returns Σ_{u ∈ U3} x_u. A client that sent ``y_u``
   and then vanished is still in the sum, because its ``b_u`` comes back from the
   others' shares.

The server closes a round when its caller calls :meth:`~SecAggServer.advance` (or
:meth:`~SecAggServer.finish`), typically once :attr:`~SecAggServer.waiting_for` is
empty or a deadline has passed. Replies that arrive after that are ignored.

Check tag
---------
Each client appends one masked word to its input, a linear tag over its encoded input
(:mod:`fedstrata.privacy.secagg_tag`); :meth:`SecAggServer.finish` refuses a sum whose
tag differs (:class:`CheckTagError`): garbage passes with probability ``2**-k``.

SecAgg+ graph
-------------
With ``degree = k`` (even), the graph is the Harary graph H(k, n), a circulant: put
the clients on a ring and join each to the k/2 nearest on each side. The positions
come from a uniformly random permutation derived from the server's 32-byte graph
seed, so every client computes its own neighbourhood. Google's federated-compute
SecAgg server builds its secret-sharing graph the same way. Each client then keeps
``k + 1`` shares (its own included) and does O(k) key agreements and PRG expansions
instead of O(n). Bell et al. take k = O(log n) and give the constants.
``degree=None``, or ``degree >= n - 1``, means the complete graph: plain SecAgg.

What keeps an individual input hidden, and what does not, is listed in
:mod:`fedstrata.privacy.secagg_check` with the consistency check.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from nacl.bindings import crypto_scalarmult, crypto_scalarmult_base
from nacl.exceptions import CryptoError
from nacl.public import Box, PrivateKey, PublicKey
from nacl.signing import SigningKey
from numpy.typing import ArrayLike, NDArray

from fedstrata.errors import PrivacyError, ValidationError, WireError
from fedstrata.privacy import fixedpoint, prg, shamir
from fedstrata.privacy import secagg_check as cc
from fedstrata.privacy.secagg_tag import check_tag

__all__ = [
    "CHECK",
    "COLLECT",
    "KEYS",
    "KEY_LIST",
    "MASKED",
    "REVEAL",
    "SETUP",
    "SHARES",
    "SIGNED",
    "UNMASK",
    "AggregateResult",
    "BelowThresholdError",
    "CheckTagError",
    "ClientPhase",
    "ConsistencyError",
    "MalformedMessageError",
    "Message",
    "SecAggClient",
    "SecAggConfig",
    "SecAggError",
    "SecAggServer",
    "ServerPhase",
    "check_tag",
    "neighbourhoods",
]

Message = dict[str, Any]
"""A protocol message: a plain dict that :mod:`fedstrata.wire` can encode."""

SETUP: Final = "secagg/setup"
"""Server → client, round 0: session, roster, graph seed and parameters."""
KEYS: Final = "secagg/keys"
"""Client → server, round 0: the client's two public keys."""
KEY_LIST: Final = "secagg/key_list"
"""Server → client, round 1: the neighbours' public keys."""
SHARES: Final = "secagg/shares"
"""Client → server, round 1: encrypted shares per neighbour and a commitment to b."""
COLLECT: Final = "secagg/collect"
"""Server → client, round 2: the ciphertexts addressed to the client."""
MASKED: Final = "secagg/masked"
"""Client → server, round 2: the masked input vector."""
CHECK: Final = cc.CHECK
SIGNED: Final = cc.SIGNED
UNMASK: Final = "secagg/unmask"
"""Server → client, round 3: which partners survived and which dropped."""
REVEAL: Final = "secagg/reveal"
"""Client → server, round 3: shares of b (survivors) and of s (dropped)."""

SESSION_BYTES: Final = 16
"""The length of a session id: fresh random bytes per aggregation, in every message."""
KEY_BYTES: Final = 32
"""The length of an X25519 public key."""
_INDEX: Final = struct.Struct("<II")
_PLAINTEXT_BYTES: Final = SESSION_BYTES + _INDEX.size + 2 * shamir.SHARE_BYTES
_CIPHERTEXT_BYTES: Final = _PLAINTEXT_BYTES + Box.NONCE_SIZE + 16  # nonce + Poly1305 tag
_PAIR_LABEL: Final = b"fedstrata.sa.pm"
_COMMIT_LABEL: Final = b"fedstrata.sa.bc"
_GRAPH_LABEL: Final = b"fedstrata.sa.gr"


class SecAggError(PrivacyError):
    """Secure aggregation failed: the base class of this module's errors."""


class BelowThresholdError(SecAggError):
    """Too few clients, partners or shares to continue without risking privacy."""


class ConsistencyError(SecAggError):
    """A client refuses a request that contradicts what it knows or could unmask someone."""


class MalformedMessageError(SecAggError, WireError):
    """A message lacks a field or has one of the wrong type or size."""


class CheckTagError(SecAggError):
    """The unmasked sum fails its check tag: some masked input was not a valid masking."""


# ---------------------------------------------------------------------------- config


def _check_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValidationError(f"{name} must be an int >= {low}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class SecAggConfig:
    """Parameters both sides must agree on; the server announces them, clients compare.

    Parameters
    ----------
    vector_length
        The length ``L`` of every input vector.
    clip
        Inputs are clipped to ``[-clip, clip]`` before encoding.
    threshold
        ``t``: shares needed to rebuild a secret, ``2 t > h`` and ``t <= h`` where ``h``
        is the holder count (:meth:`holders`). ``None`` picks the smallest allowed,
        ``h // 2 + 1``, which tolerates the most dropouts.
    scale_bits
        Fixed-point resolution ``2**-scale_bits``.
    modulus_bits
        ``k``: sums are taken modulo ``2**k``.
    degree
        ``None`` for SecAgg (complete graph). An even ``k >= 2`` for SecAgg+
        (each client's neighbours on a random Harary graph). ``k >= n - 1`` also
        gives the complete graph.
    """

    vector_length: int
    clip: float
    threshold: int | None = None
    scale_bits: int = fixedpoint.DEFAULT_SCALE_BITS
    modulus_bits: int = fixedpoint.DEFAULT_MODULUS_BITS
    degree: int | None = None

    def __post_init__(self) -> None:
        _check_int("vector_length", self.vector_length, 1)
        if self.threshold is not None:
            _check_int("threshold", self.threshold, 2)
        if self.degree is not None:
            _check_int("degree", self.degree, 2)
            if self.degree % 2:
                raise ValidationError(f"degree must be even (Harary circulant), got {self.degree}")
        fixedpoint.max_summands(
            scale_bits=self.scale_bits, clip=self.clip, modulus_bits=self.modulus_bits
        )

    def complete(self, n: int) -> bool:
        """Whether a group of ``n`` clients uses the complete graph (plain SecAgg)."""
        return self.degree is None or self.degree >= n - 1

    def holders(self, n: int) -> int:
        """``h``: how many clients hold shares of one client's secrets (itself included)."""
        return n if self.complete(n) else self.degree + 1  # type: ignore[operator]

    def threshold_for(self, n: int) -> int:
        """The threshold used in a group of ``n`` clients."""
        h = self.holders(n)
        return h // 2 + 1 if self.threshold is None else self.threshold

    def check_group(self, n: int) -> None:
        """Raise ``ValidationError`` (or a fixed-point error) unless ``n`` clients can run."""
        _check_int("the group size", n, 3)
        h, t = self.holders(n), self.threshold_for(n)
        if not (2 * t > h and t <= h and t >= 2):
            raise ValidationError(
                f"threshold {t} with {h} share holders per client: need 2*t > h, t <= h, t >= 2"
            )
        fixedpoint.check_headroom(
            n_summands=n,
            scale_bits=self.scale_bits,
            clip=self.clip,
            modulus_bits=self.modulus_bits,
        )

    def as_fields(self) -> dict[str, Any]:
        """The parameters as message fields (announced in ``secagg/setup``)."""
        return {
            "vector_length": self.vector_length,
            "clip": float(self.clip),
            "threshold": self.threshold,
            "scale_bits": self.scale_bits,
            "modulus_bits": self.modulus_bits,
            "degree": self.degree,
        }


# ----------------------------------------------------------------------------- graph


class _Graph:
    """Neighbourhoods without materialising the complete graph."""

    def __init__(self, roster: Sequence[str], config: SecAggConfig, graph_seed: bytes) -> None:
        self.members = frozenset(roster)
        self.complete = config.complete(len(roster))
        self.half = 0 if self.complete else config.degree // 2  # type: ignore[operator]
        self.ring: list[str] = []
        self.position: dict[str, int] = {}
        if not self.complete:
            keys = {
                who: hashlib.blake2b(
                    graph_seed + i.to_bytes(4, "little"), digest_size=16, person=_GRAPH_LABEL
                ).digest()
                for i, who in enumerate(roster)
            }
            self.ring = sorted(roster, key=keys.__getitem__)
            self.position = {who: p for p, who in enumerate(self.ring)}

    def neighbours(self, who: str) -> frozenset[str]:
        """The clients ``who`` masks with and shares to (never itself)."""
        if self.complete:
            return self.members - {who}
        p, n = self.position[who], len(self.ring)
        offsets = [d for j in range(1, self.half + 1) for d in (j, -j)]
        return frozenset(self.ring[(p + d) % n] for d in offsets)

    def ball(self, who: str) -> frozenset[str]:
        """The holders of the shares ``who`` holds (two hops), but ``who``: its signers."""
        if self.complete:
            return self.members - {who}
        near = self.neighbours(who)
        return near.union(*(self.neighbours(v) for v in near)) - {who}


def neighbourhoods(
    roster: Sequence[str], config: SecAggConfig, graph_seed: bytes
) -> dict[str, frozenset[str]]:
    """Every client's neighbourhood for this roster, configuration and graph seed."""
    graph = _Graph(roster, config, graph_seed)
    return {who: graph.neighbours(who) for who in roster}


# --------------------------------------------------------------------------- helpers


def _commit(b: bytes, session: bytes, index: int) -> bytes:
    h = hashlib.blake2b(digest_size=32, person=_COMMIT_LABEL)
    h.update(session + index.to_bytes(4, "little"))
    h.update(b)
    return h.digest()


def _agree(private: bytes, public: bytes) -> bytes:
    try:
        return crypto_scalarmult(private, public)
    except CryptoError as exc:
        raise ConsistencyError("a public key is invalid (low-order point)") from exc


def _pair_mask(
    private: bytes, public: bytes, session: bytes, i: int, j: int, length: int
) -> NDArray[np.uint64]:
    context = session + _INDEX.pack(min(i, j), max(i, j))
    seed = prg.derive_seed(_agree(private, public), label=_PAIR_LABEL, context=context)
    return prg.expand(seed, length)


def _equals(message: Mapping[str, Any], name: str, value: str | bytes) -> bool:
    """Whether field ``name`` is exactly ``value`` (a field of another type never is).

    Routing fields are compared only once their type is known: ``==`` with an array
    in their place would raise instead of answering.
    """
    field = message.get(name)
    return type(field) is type(value) and field == value


def _field(message: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = message.get(name)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise MalformedMessageError(f"{message.get('type')}: field {name!r} missing or invalid")
    return value


def _bytes(message: Mapping[str, Any], name: str, size: int) -> bytes:
    value = _field(message, name, (bytes, bytearray))
    if len(value) != size:
        raise MalformedMessageError(f"{message.get('type')}: field {name!r} must be {size} bytes")
    return bytes(value)


def _bytes_map(message: Mapping[str, Any], name: str, size: int) -> dict[str, bytes]:
    value = _field(message, name, Mapping)
    out: dict[str, bytes] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, bytes | bytearray) or len(item) != size:
            raise MalformedMessageError(f"{message.get('type')}: bad entry in {name!r}")
        out[key] = bytes(item)
    return out


def _id_list(message: Mapping[str, Any], name: str, roster: frozenset[str]) -> list[str]:
    value = _field(message, name, (list, tuple))
    if not all(isinstance(v, str) and v in roster for v in value) or len(set(value)) != len(value):
        raise MalformedMessageError(f"{message.get('type')}: {name!r} must list distinct members")
    return list(value)


def _check_roster(roster: object) -> tuple[str, ...]:
    if not isinstance(roster, list | tuple) or not all(isinstance(v, str) and v for v in roster):
        raise MalformedMessageError("the roster must be a list of non-empty strings")
    if len(set(roster)) != len(roster):
        raise MalformedMessageError("the roster lists a client twice")
    return tuple(roster)


# ---------------------------------------------------------------------------- client


class ClientPhase(enum.Enum):
    """What a :class:`SecAggClient` expects next."""

    SETUP = "setup"
    KEY_LIST = "key_list"
    COLLECT = "collect"
    CHECK = "check"
    UNMASK = "unmask"
    DONE = "done"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class _Held:
    sk: bytes
    b: bytes


class SecAggClient:
    """One client of one aggregation; feed it the server's messages with :meth:`handle`.

    Parameters
    ----------
    client_id
        This client's id in the server's roster.
    config
        The parameters this client accepts; the server's setup must match them.

    Any error raised by :meth:`handle` leaves the client :attr:`~ClientPhase.ABORTED`.
    It drops its secrets (its references to them; Python cannot scrub memory) and
    answers nothing more. Call :meth:`set_input` before handing it ``secagg/collect``
    (a caller whose update is not ready yet holds that message back).
    """

    def __init__(self, client_id: str, config: SecAggConfig) -> None:
        if not isinstance(client_id, str) or not client_id:
            raise ValidationError("client_id must be a non-empty string")
        self.client_id = client_id
        self.config = config
        self.phase = ClientPhase.SETUP
        self._x: NDArray[np.float64] | None = None
        self._session = b""
        self._roster: tuple[str, ...] = ()
        self._members: frozenset[str] = frozenset()
        self._index: dict[str, int] = {}
        self._neighbours: frozenset[str] = frozenset()
        self._graph: _Graph | None = None
        self._t = 0
        self._g_sk: SigningKey | None = cc.signing_key()  # per session, as the X25519 keys
        self._v_pks: dict[str, bytes] = {}
        self._signed = b""  # the survivor set it signed (bitmap)
        self._c_sk: PrivateKey | None = None
        self._s_sk: PrivateKey | None = None
        self._s_pks: dict[str, bytes] = {}
        self._boxes: dict[str, Box] = {}
        self._b: bytes | None = None
        self._held: dict[str, _Held] = {}
        self._partners: frozenset[str] = frozenset()

    def set_input(self, x: ArrayLike) -> None:
        """Set the vector to aggregate; allowed until the masked input is sent."""
        if self.phase not in (ClientPhase.SETUP, ClientPhase.KEY_LIST, ClientPhase.COLLECT):
            raise SecAggError(f"client {self.client_id}: the masked input was already sent")
        arr = np.asarray(x)
        if arr.dtype.kind not in "biuf" or arr.shape != (self.config.vector_length,):
            raise ValidationError(
                f"input must be a real vector of length {self.config.vector_length}, "
                f"got dtype {arr.dtype} shape {arr.shape}"
            )
        arr = arr.astype(np.float64)
        if not np.isfinite(arr).all():
            raise ValidationError("input holds NaN or infinite values")
        self._x = arr

    def handle(self, message: Mapping[str, Any]) -> Message:
        """Process one server message and return the reply to send back.

        Raises
        ------
        MalformedMessageError, ConsistencyError, BelowThresholdError, SecAggError
            The client refuses; it is aborted and stays so.
        """
        if self.phase in (ClientPhase.DONE, ClientPhase.ABORTED):
            raise ConsistencyError(
                f"client {self.client_id} is {self.phase.value}: it answers no further request"
            )
        handler = {
            ClientPhase.SETUP: self._on_setup,
            ClientPhase.KEY_LIST: self._on_key_list,
            ClientPhase.COLLECT: self._on_collect,
            ClientPhase.CHECK: self._on_check,
            ClientPhase.UNMASK: self._on_unmask,
        }[self.phase]
        try:
            if not isinstance(message, Mapping):
                raise MalformedMessageError("a message must be a mapping")
            return handler(message)
        except BaseException:
            self._wipe(ClientPhase.ABORTED)
            raise

    # -- rounds

    def _expect(self, message: Mapping[str, Any], kind: str) -> None:
        if not _equals(message, "type", kind):
            got = message.get("type")
            shown = got if isinstance(got, str) else type(got).__name__
            raise ConsistencyError(f"client {self.client_id} expected {kind!r}, got {shown!r:.60}")
        if self.phase is not ClientPhase.SETUP and not _equals(message, "session", self._session):
            raise ConsistencyError(f"client {self.client_id}: message of another session")

    def _reply(self, kind: str, **fields: Any) -> Message:
        return {"type": kind, "session": self._session, **fields}

    def _on_setup(self, message: Mapping[str, Any]) -> Message:
        self._expect(message, SETUP)
        for name, mine in self.config.as_fields().items():
            theirs = message.get(name)
            if type(theirs) is not type(mine) or theirs != mine:
                raise ConsistencyError(
                    f"server announced {name}={theirs!r}, client {self.client_id} expects {mine!r}"
                )
        self._session = _bytes(message, "session", SESSION_BYTES)
        self._roster = _check_roster(message.get("roster"))
        if self.client_id not in self._roster:
            raise ConsistencyError(f"client {self.client_id} is not in the roster")
        self.config.check_group(len(self._roster))
        seed = _bytes(message, "graph_seed", 32)
        self._members = frozenset(self._roster)
        self._index = {who: i for i, who in enumerate(self._roster)}
        self._graph = _Graph(self._roster, self.config, seed)
        self._neighbours = self._graph.neighbours(self.client_id)
        self._t = self.config.threshold_for(len(self._roster))
        self._c_sk, self._s_sk = PrivateKey.generate(), PrivateKey.generate()
        assert self._g_sk is not None  # dropped only when the session ends
        self.phase = ClientPhase.KEY_LIST
        return self._reply(
            KEYS,
            c_pk=bytes(self._c_sk.public_key),
            s_pk=bytes(self._s_sk.public_key),
            v_pk=bytes(self._g_sk.verify_key),
        )

    def _on_key_list(self, message: Mapping[str, Any]) -> Message:
        self._expect(message, KEY_LIST)
        assert self._c_sk is not None
        assert self._s_sk is not None
        c_pks = _bytes_map(message, "c_pks", KEY_BYTES)
        s_pks = _bytes_map(message, "s_pks", KEY_BYTES)
        if set(c_pks) != set(s_pks):
            raise MalformedMessageError("c_pks and s_pks name different clients")
        assert self._graph is not None
        v_pks = _bytes_map(message, "v_pks", KEY_BYTES)
        ball = self._graph.ball(self.client_id)
        if stray := (set(c_pks) - self._neighbours) | (set(v_pks) - ball):
            raise ConsistencyError(f"keys for clients that are not neighbours: {sorted(stray)}")
        keys = [bytes(self._c_sk.public_key), bytes(self._s_sk.public_key)]
        keys += [*c_pks.values(), *s_pks.values()]
        if len(set(keys)) != len(keys):
            raise ConsistencyError("the public keys are not all distinct")
        if 1 + len(c_pks) < self._t:
            raise BelowThresholdError(
                f"client {self.client_id}: {len(c_pks)} neighbour(s) left, threshold {self._t}"
            )
        try:
            self._boxes = {v: Box(self._c_sk, PublicKey(pk)) for v, pk in c_pks.items()}
        except CryptoError as exc:
            raise ConsistencyError("a public key is invalid (low-order point)") from exc
        self._s_pks, self._v_pks = s_pks, v_pks
        self._b = os.urandom(prg.SEED_BYTES)
        me = self._index[self.client_id]
        ids = {who: self._index[who] + 1 for who in [self.client_id, *c_pks]}
        sk_shares = shamir.split(bytes(self._s_sk), self._t, ids.values())
        b_shares = shamir.split(self._b, self._t, ids.values())
        self._held = {self.client_id: _Held(sk_shares[me + 1], b_shares[me + 1])}
        ciphertexts = {}
        for v, box in self._boxes.items():
            plain = (
                self._session
                + _INDEX.pack(me, self._index[v])
                + sk_shares[ids[v]]
                + b_shares[ids[v]]
            )
            ciphertexts[v] = bytes(box.encrypt(plain))
        self.phase = ClientPhase.COLLECT
        return self._reply(
            SHARES, ciphertexts=ciphertexts, b_commitment=_commit(self._b, self._session, me)
        )

    def _open(self, sender: str, ciphertext: bytes) -> _Held:
        try:
            plain = self._boxes[sender].decrypt(ciphertext)
        except CryptoError as exc:
            raise ConsistencyError(f"the ciphertext from {sender} does not authenticate") from exc
        head = SESSION_BYTES + _INDEX.size
        if (
            len(plain) != _PLAINTEXT_BYTES
            or plain[:SESSION_BYTES] != self._session
            or _INDEX.unpack(plain[SESSION_BYTES:head])
            != (self._index[sender], self._index[self.client_id])
        ):
            raise ConsistencyError(f"the shares from {sender} are bound to another context")
        return _Held(plain[head : head + shamir.SHARE_BYTES], plain[head + shamir.SHARE_BYTES :])

    def _on_collect(self, message: Mapping[str, Any]) -> Message:
        self._expect(message, COLLECT)
        assert self._s_sk is not None
        assert self._b is not None
        ciphertexts = _bytes_map(message, "ciphertexts", _CIPHERTEXT_BYTES)
        if stray := set(ciphertexts) - set(self._boxes):
            raise ConsistencyError(f"ciphertexts from clients without keys: {sorted(stray)}")
        if 1 + len(ciphertexts) < self._t:
            raise BelowThresholdError(
                f"client {self.client_id}: {len(ciphertexts)} partner(s) left, threshold {self._t}"
            )
        if self._x is None:
            raise SecAggError(f"client {self.client_id}: set_input was never called")
        for sender, ciphertext in ciphertexts.items():
            self._held[sender] = self._open(sender, ciphertext)
        self._partners = frozenset(ciphertexts)
        cfg, n = self.config, len(self._roster)
        q = fixedpoint.encode(
            self._x,
            scale_bits=cfg.scale_bits,
            clip=cfg.clip,
            n_summands=n,
            modulus_bits=cfg.modulus_bits,
        )
        # the input and its check tag, masked together (one more word on the wire)
        y = np.append(q, check_tag(q, self._session, cfg.modulus_bits))
        length = cfg.vector_length + 1
        y += prg.expand(self._b, length)
        me, sk = self._index[self.client_id], bytes(self._s_sk)
        for v in self._partners:
            j = self._index[v]
            mask = _pair_mask(sk, self._s_pks[v], self._session, me, j, length)
            if j > me:
                y += mask
            else:
                y -= mask
        y &= np.uint64((1 << cfg.modulus_bits) - 1)
        self._c_sk = self._s_sk = self._b = None
        self._boxes = {}
        self._x = None
        self.phase = ClientPhase.CHECK
        return self._reply(MASKED, masked=y)

    def _on_check(self, message: Mapping[str, Any]) -> Message:
        self._expect(message, CHECK)
        bits = message.get("survivors")
        u3 = cc.decode_set(self._roster, bits)
        if u3 is None:
            raise MalformedMessageError("secagg/check: 'survivors' must be a roster bitmap")
        me, partners = self.client_id, self._partners
        problem = cc.survivors_problem(me, u3, self._neighbours, partners, self._t)
        if problem is not None:
            raise (BelowThresholdError if problem[0] else ConsistencyError)(problem[1])
        self._signed = bytes(bits)  # type: ignore[arg-type]
        self.phase = ClientPhase.UNMASK
        assert self._g_sk is not None
        return self._reply(SIGNED, signature=cc.sign(self._g_sk, self._session, self._signed))

    def _check_signatures(self, message: Mapping[str, Any]) -> None:
        """Refuse unless each owner it holds has ``t`` holders that signed its survivor set."""
        assert self._graph is not None
        signatures = _bytes_map(message, "signatures", cc.SIGNATURE_BYTES)
        owners = self._partners | {self.client_id}
        problem = cc.signatures_problem(
            self.client_id,
            signatures,
            self._v_pks,
            self._session,
            self._signed,
            owners,
            self._graph,
            self._t,
        )
        if problem is not None:
            raise ConsistencyError(f"client {self.client_id}: {problem}")

    def _on_unmask(self, message: Mapping[str, Any]) -> Message:
        self._expect(message, UNMASK)
        survivors = _id_list(message, "survivors", self._members)
        dropped = _id_list(message, "dropped", self._members)
        if both := set(survivors) & set(dropped):
            raise ConsistencyError(
                f"{sorted(both)} listed as survivor and as dropped: refusing both kinds of shares"
            )
        u3 = cc.decode_set(self._roster, self._signed)
        assert u3 is not None
        mine = self._partners | {self.client_id}
        if set(survivors) != u3 & mine or set(dropped) != self._partners - u3:
            raise ConsistencyError(
                f"client {self.client_id}: the unmasking's survivors differ from the set it signed"
            )
        self._check_signatures(message)
        b_shares = {u: self._held[u].b for u in survivors if u in self._held}
        sk_shares = {u: self._held[u].sk for u in dropped if u in self._held}
        self._wipe(ClientPhase.DONE)
        return self._reply(REVEAL, b_shares=b_shares, sk_shares=sk_shares)

    def _wipe(self, phase: ClientPhase) -> None:
        self.phase = phase
        self._c_sk = self._s_sk = self._b = None
        self._x = None
        self._boxes = {}
        self._held = {}
        self._g_sk = None


# ---------------------------------------------------------------------------- server


class ServerPhase(enum.Enum):
    """Which replies a :class:`SecAggServer` is collecting."""

    KEYS = "keys"
    SHARES = "shares"
    MASKED = "masked"
    CHECK = "check"
    REVEAL = "reveal"
    DONE = "done"
    ABORTED = "aborted"


_EXPECTED: Final = {
    ServerPhase.KEYS: KEYS,
    ServerPhase.SHARES: SHARES,
    ServerPhase.MASKED: MASKED,
    ServerPhase.CHECK: SIGNED,
    ServerPhase.REVEAL: REVEAL,
}


@dataclass(frozen=True, slots=True)
class AggregateResult:
    """The outcome of one aggregation.

    Attributes
    ----------
    total
        Σ encode(x_u) over the survivors, modulo ``2**k`` (``uint64``).
    values
        ``total`` decoded to float64 (:func:`fedstrata.privacy.fixedpoint.decode`).
    survivors
        The clients whose inputs are in the sum (U3), in roster order.
    dropped
        The clients that shared keys but sent no masked input (U2 - U3).
    """

    total: NDArray[np.uint64]
    values: NDArray[np.float64]
    survivors: tuple[str, ...]
    dropped: tuple[str, ...]


class SecAggServer:
    """The server side of one aggregation over ``roster``.

    Call :meth:`start`, then alternate :meth:`receive` (every reply) and
    :meth:`advance` (close a round) until the phase is
    :attr:`~ServerPhase.REVEAL`, then call :meth:`finish`.

    Parameters
    ----------
    roster
        The client ids, in an order that fixes their indices (share id = position + 1).
    config
        The protocol parameters.
    session, graph_seed
        For tests only; by default 16 and 32 fresh random bytes.
    """

    def __init__(
        self,
        roster: Sequence[str],
        config: SecAggConfig,
        *,
        session: bytes | None = None,
        graph_seed: bytes | None = None,
    ) -> None:
        try:
            self.roster = _check_roster(list(roster))
        except MalformedMessageError as exc:
            raise ValidationError(str(exc)) from exc
        config.check_group(len(self.roster))
        self.config = config
        self.session = os.urandom(SESSION_BYTES) if session is None else bytes(session)
        self.graph_seed = os.urandom(32) if graph_seed is None else bytes(graph_seed)
        if len(self.session) != SESSION_BYTES or len(self.graph_seed) != 32:
            raise ValidationError("session must be 16 bytes and graph_seed 32 bytes")
        self.threshold = config.threshold_for(len(self.roster))
        self.phase = ServerPhase.KEYS
        self._started = False
        self._index = {who: i for i, who in enumerate(self.roster)}
        self._graph = _Graph(self.roster, config, self.graph_seed)
        self._expected: frozenset[str] = frozenset()
        self._keys: dict[str, tuple[bytes, bytes]] = {}
        self._v_pks: dict[str, bytes] = {}
        self._u3_bits = b""
        self._signatures: dict[str, bytes] = {}
        self._ciphertexts: dict[str, dict[str, bytes]] = {}
        self._commitments: dict[str, bytes] = {}
        self._forwarded: dict[str, frozenset[str]] = {}
        self._masked: dict[str, NDArray[np.uint64]] = {}
        self._asked: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        self._reveals: dict[str, tuple[dict[str, bytes], dict[str, bytes]]] = {}

    def _received(self) -> Mapping[str, object]:
        received: dict[ServerPhase, Mapping[str, object]] = {
            ServerPhase.KEYS: self._keys,
            ServerPhase.SHARES: self._ciphertexts,
            ServerPhase.MASKED: self._masked,
            ServerPhase.CHECK: self._signatures,
            ServerPhase.REVEAL: self._reveals,
        }
        return received.get(self.phase, {})

    @property
    def waiting_for(self) -> frozenset[str]:
        """The clients whose reply to the current round has not arrived."""
        if self.phase not in _EXPECTED:
            return frozenset()
        return self._expected - self._received().keys()

    def _sorted(self, ids: frozenset[str] | set[str]) -> list[str]:
        return sorted(ids, key=self._index.__getitem__)

    def _message(self, kind: str, **fields: Any) -> Message:
        return {"type": kind, "session": self.session, **fields}

    def _abort(self, exc: SecAggError) -> SecAggError:
        self.phase = ServerPhase.ABORTED
        return exc

    def _require(self, count: int, what: str) -> None:
        if count < self.threshold:
            raise self._abort(
                BelowThresholdError(f"{count} {what}, threshold {self.threshold}: aborted")
            )

    def start(self) -> dict[str, Message]:
        """Round 0: the ``secagg/setup`` message for every client in the roster."""
        if self._started:
            raise SecAggError("start() was already called")
        self._started = True
        self._expected = frozenset(self.roster)
        setup = self._message(
            SETUP,
            roster=list(self.roster),
            graph_seed=self.graph_seed,
            **self.config.as_fields(),
        )
        return {who: dict(setup) for who in self.roster}

    def receive(self, client_id: str, message: Mapping[str, Any]) -> bool:
        """Record one client reply; ``False`` if it is not one the current round waits for.

        Late, duplicate, stray and other-session messages are ignored (``False``).
        A reply of the right round with bad content raises :class:`MalformedMessageError`.
        """
        kind = _EXPECTED.get(self.phase)
        if (
            kind is None
            or not self._started
            or not isinstance(message, Mapping)
            or not _equals(message, "type", kind)
            or not _equals(message, "session", self.session)
            or not isinstance(client_id, str)
            or client_id not in self._expected
            or client_id in self._received()
        ):
            return False
        {
            ServerPhase.KEYS: self._on_keys,
            ServerPhase.SHARES: self._on_shares,
            ServerPhase.MASKED: self._on_masked,
            ServerPhase.CHECK: self._on_signed,
            ServerPhase.REVEAL: self._on_reveal,
        }[self.phase](client_id, message)
        return True

    def _on_keys(self, who: str, message: Mapping[str, Any]) -> None:
        c_pk, s_pk = _bytes(message, "c_pk", KEY_BYTES), _bytes(message, "s_pk", KEY_BYTES)
        self._keys[who] = (c_pk, s_pk)
        self._v_pks[who] = _bytes(message, "v_pk", KEY_BYTES)

    def _on_signed(self, who: str, message: Mapping[str, Any]) -> None:
        signature = _bytes(message, "signature", cc.SIGNATURE_BYTES)
        if not cc.verifies(self._v_pks[who], self.session, self._u3_bits, signature):
            raise MalformedMessageError(f"{who}'s signature of the survivor set does not verify")
        self._signatures[who] = signature

    def _on_shares(self, who: str, message: Mapping[str, Any]) -> None:
        ciphertexts = _bytes_map(message, "ciphertexts", _CIPHERTEXT_BYTES)
        peers = self._keys.keys() & self._graph.neighbours(who)
        if ciphertexts.keys() != peers:  # exactly its key list: pairwise masks stay symmetric
            raise MalformedMessageError(f"{who} did not send one ciphertext per neighbour")
        commitment = _bytes(message, "b_commitment", 32)
        self._ciphertexts[who], self._commitments[who] = ciphertexts, commitment

    def _on_masked(self, who: str, message: Mapping[str, Any]) -> None:
        y = message.get("masked")
        length = self.config.vector_length + 1  # the input and its check tag
        if not isinstance(y, np.ndarray) or y.dtype != np.uint64 or y.shape != (length,):
            raise MalformedMessageError(
                f"{who}: 'masked' must be a uint64 vector of length {length} "
                f"(the input's {self.config.vector_length} and the check tag)"
            )
        if self.config.modulus_bits < 64 and (y >> np.uint64(self.config.modulus_bits)).any():
            raise MalformedMessageError(f"{who}: 'masked' holds values >= 2**k")
        self._masked[who] = y.copy()

    def _on_reveal(self, who: str, message: Mapping[str, Any]) -> None:
        b_shares = _bytes_map(message, "b_shares", shamir.SHARE_BYTES)
        sk_shares = _bytes_map(message, "sk_shares", shamir.SHARE_BYTES)
        survivors, dropped = self._asked[who]
        if not (b_shares.keys() <= survivors and sk_shares.keys() <= dropped):
            raise MalformedMessageError(f"{who} revealed shares that were not asked for")
        self._reveals[who] = (b_shares, sk_shares)

    def advance(self) -> dict[str, Message]:
        """Close round 0, 1, 2 or 3 with the replies received; return the next round's messages.

        Raises
        ------
        BelowThresholdError
            Fewer than ``t`` clients replied; the server is aborted.
        """
        if not self._started or self.phase not in (
            ServerPhase.KEYS,
            ServerPhase.SHARES,
            ServerPhase.MASKED,
            ServerPhase.CHECK,
        ):
            raise SecAggError(f"advance() in phase {self.phase.value}")
        return {
            ServerPhase.KEYS: self._close_keys,
            ServerPhase.SHARES: self._close_shares,
            ServerPhase.MASKED: self._close_masked,
            ServerPhase.CHECK: self._close_check,
        }[self.phase]()

    def _close_keys(self) -> dict[str, Message]:
        u1 = frozenset(self._keys)
        self._require(len(u1), "clients advertised keys")
        out = {}
        for v in self._sorted(u1):
            peers = self._sorted(self._graph.neighbours(v) & u1)
            out[v] = self._message(
                KEY_LIST,
                c_pks={u: self._keys[u][0] for u in peers},
                s_pks={u: self._keys[u][1] for u in peers},
                v_pks={u: self._v_pks[u] for u in self._sorted(self._graph.ball(v) & u1)},
            )
        self.phase, self._expected = ServerPhase.SHARES, u1
        return out

    def _close_shares(self) -> dict[str, Message]:
        u2 = frozenset(self._ciphertexts)
        self._require(len(u2), "clients shared keys")
        inbox: dict[str, dict[str, bytes]] = {v: {} for v in u2}
        for u in self._sorted(u2):
            for v, ciphertext in self._ciphertexts[u].items():
                if v in inbox:
                    inbox[v][u] = ciphertext
        self._forwarded = {v: frozenset(box) for v, box in inbox.items()}
        self.phase, self._expected = ServerPhase.MASKED, u2
        return {v: self._message(COLLECT, ciphertexts=inbox[v]) for v in self._sorted(u2)}

    def _close_masked(self) -> dict[str, Message]:
        u3 = frozenset(self._masked)
        self._require(len(u3), "clients sent masked input")
        self._u3_bits = cc.encode_set(self.roster, u3)
        self.phase, self._expected = ServerPhase.CHECK, u3
        return {v: self._message(CHECK, survivors=self._u3_bits) for v in self._sorted(u3)}

    def _close_check(self) -> dict[str, Message]:
        u3, u4 = frozenset(self._masked), frozenset(self._signatures)
        self._require(len(u4), "clients signed the survivor set")
        out = {}
        for v in self._sorted(u4):
            partners = self._forwarded[v]
            survivors = (partners | {v}) & u3
            dropped = partners - u3
            self._asked[v] = (survivors, dropped)
            signers = self._sorted(self._graph.ball(v) & u4)
            out[v] = self._message(
                UNMASK,
                survivors=self._sorted(survivors),
                dropped=self._sorted(dropped),
                signatures={w: self._signatures[w] for w in signers},
            )
        self.phase, self._expected = ServerPhase.REVEAL, u4
        return out

    def _collect(self, owner: str, kind: int) -> dict[int, bytes]:
        shares = {
            self._index[v] + 1: reveal[kind][owner]
            for v, reveal in self._reveals.items()
            if owner in reveal[kind]
        }
        if len(shares) < self.threshold:
            what = "b (self mask)" if kind == 0 else "s (mask key)"
            raise self._abort(
                BelowThresholdError(
                    f"{len(shares)} share(s) of {what} of {owner}, threshold "
                    f"{self.threshold}: cannot unmask, aborted"
                )
            )
        return shares

    def _rebuild(self, shares: dict[int, bytes], owner: str) -> bytes:
        try:
            return shamir.combine(shares, self.threshold)
        except shamir.InvalidShareError as exc:
            raise self._abort(SecAggError(f"the shares of {owner} are inconsistent")) from exc

    def finish(self) -> AggregateResult:
        """Close round 3: rebuild the secrets, remove all masks, return the sum.

        Raises
        ------
        BelowThresholdError
            Too few shares for some secret; no sum is produced.
        SecAggError
            A rebuilt secret fails its commitment or public key check.
        FixedPointOverflowError
            The unmasked sum is outside the valid range.
        """
        if self.phase is not ServerPhase.REVEAL:
            raise SecAggError(f"finish() in phase {self.phase.value}")
        u3 = self._sorted(frozenset(self._masked))
        dropped = self._sorted(frozenset(self._ciphertexts) - frozenset(self._masked))
        b_shares = {u: self._collect(u, 0) for u in u3}
        sk_shares = {u: self._collect(u, 1) for u in dropped}
        cfg, length = self.config, self.config.vector_length + 1  # with the check tag
        total = np.zeros(length, dtype=np.uint64)
        for u in u3:
            total += self._masked[u]
            b = self._rebuild(b_shares[u], u)
            if not hmac.compare_digest(
                _commit(b, self.session, self._index[u]), self._commitments[u]
            ):
                raise self._abort(SecAggError(f"the rebuilt self-mask seed of {u} is wrong"))
            total -= prg.expand(b, length)
        for u in dropped:
            sk = self._rebuild(sk_shares[u], u)
            if crypto_scalarmult_base(sk) != self._keys[u][1]:
                raise self._abort(SecAggError(f"the rebuilt mask key of {u} is wrong"))
            i = self._index[u]
            for v in u3:
                if u not in self._forwarded[v]:
                    continue
                j = self._index[v]
                mask = _pair_mask(sk, self._keys[v][1], self.session, i, j, length)
                if i > j:  # v added +PRG(s_vu) because u > v
                    total -= mask
                else:
                    total += mask
        total &= np.uint64((1 << cfg.modulus_bits) - 1)
        total, tag = total[:-1].copy(), total[-1]
        with np.errstate(over="ignore"):  # sums modulo 2**64, by design
            expected = check_tag(total, self.session, cfg.modulus_bits) + np.uint64(len(u3) - 1)
        if tag != expected & np.uint64((1 << cfg.modulus_bits) - 1):
            raise self._abort(
                CheckTagError(
                    "the unmasked sum fails its check tag: a masked input of this round is not "
                    "the masking of an encoded input (garbage, a corrupted or stale vector); "
                    "no sum"
                )
            )
        try:
            values = fixedpoint.decode(
                total,
                n_summands=len(u3),
                scale_bits=cfg.scale_bits,
                clip=cfg.clip,
                modulus_bits=cfg.modulus_bits,
            )
        except fixedpoint.FixedPointOverflowError:
            self.phase = ServerPhase.ABORTED
            raise
        self.phase = ServerPhase.DONE
        return AggregateResult(total, values, tuple(u3), tuple(dropped))
