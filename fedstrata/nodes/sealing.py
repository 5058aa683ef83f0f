"""What a node accepts off the wire, and signed envelopes (``privacy.sign``).

A :class:`Seal` sits where a node encodes and decodes envelopes. Every node binds
its seal to its run and to the topics it listens to (:meth:`Seal.bind`, with
:func:`client_routes` or :func:`aggregator_routes`): for each topic, which senders
may publish there and which message kinds it carries. A received envelope is then
checked, signed or not, and rejected with a reason when

1. its ``run`` is not the node's run (``wrong_run``: a message of another run, a
   stale retained message of an earlier run with the same topics),
2. the topic is not one the node listens to, or does not carry this kind
   (``wrong_topic``), or
3. its sender may not publish on that topic (``wrong_sender``): on an aggregator's
   ``up`` topic only its children, on its ``down``, ``config`` and ``to/<member>``
   topics only the aggregator itself, on ``fs/<run>/presence/<node>`` only
   ``<node>`` (:func:`presence_routes`, for whoever listens there; nodes do not).

With keys (:class:`~fedstrata.privacy.signing.NodeKeys`) every payload is
``Ed25519 signature (64 bytes) || envelope``, the signature covering
``CONTEXT || len(topic) || topic || envelope``
(:func:`~fedstrata.privacy.signing.signed_context`): the run, the topic, the sender,
the round and the body. A received payload is then accepted only if, in this order,

1. it is not a bare envelope (``unsigned``),
2. its run is the node's (``wrong_run``),
3. its sender has a registered public key (``unknown_sender``),
4. the topic and sender checks above pass (``wrong_topic``, ``wrong_sender``),
5. the signature verifies with the sender's key for the topic it arrived on
   (``forged``: any changed byte, another node's key, a sender field rewritten, a
   message re-published on another topic), and
6. the :class:`~fedstrata.privacy.signing.ReplayGuard` has not seen a later round
   of that sender and kind, nor another message for the same slot (``replay``: an
   old round sent again). The very same message again (a QoS 1 redelivery, a
   retained message after a reconnect) passes: the node counts it as a duplicate.

A rejection is an :class:`~fedstrata.privacy.signing.AuthenticationError` (a
``WireError``): the nodes record it as ``rejected`` with its reason (one of
:data:`~fedstrata.privacy.signing.REASONS`) and drop the message.

Keys (:class:`RunKeys`): a simulation derives them from the scenario's seed
(reproducible, and only as secret as the seed, which is public: they protect
nothing outside a simulation); a run over a real broker generates fresh ones per
run, or reads the key files that ``fedstrata keys`` writes; on devices
(``fedstrata node``) each node reads its own key file and the roster of every
node's public key.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from fedstrata import wire
from fedstrata.errors import ValidationError, WireError
from fedstrata.mqtt import config_topic, down_topic, member_topic, presence_topic, up_topic
from fedstrata.nodes.config import Address
from fedstrata.nodes.events import Record
from fedstrata.privacy.signing import (
    SIGNATURE_BYTES,
    AuthenticationError,
    NodeKeys,
    ReplayGuard,
    Verifier,
)
from fedstrata.wire_unpacked import encode_unpacked

__all__ = [
    "PLAIN",
    "Route",
    "RunKeys",
    "Seal",
    "aggregator_routes",
    "client_routes",
    "load_roster",
    "presence_routes",
    "rejected",
]


@dataclass(frozen=True)
class Route:
    """Who may publish on one topic a node listens to, and what kinds of message.

    Parameters
    ----------
    senders
        The node ids that may publish there.
    kinds
        The envelope kinds the topic carries.
    """

    senders: frozenset[str]
    kinds: frozenset[str]


def client_routes(run: str, parent: Address, node_id: str) -> dict[str, Route]:
    """The topics a child of ``parent`` listens to: only the parent speaks there.

    Its parent's ``down`` (models), ``config`` (the run's configuration) and
    ``to/<node_id>`` (secure aggregation's messages for this member) topics. A
    middle-tier aggregator is such a child of its own parent too.
    """
    only = frozenset({parent.group})
    return {
        down_topic(run, parent.tier, parent.group): Route(only, frozenset({"model"})),
        config_topic(run, parent.tier, parent.group): Route(only, frozenset({"control"})),
        member_topic(run, parent.tier, parent.group, node_id): Route(only, frozenset({"secagg"})),
    }


def aggregator_routes(
    run: str, tier: str, node_id: str, children: Iterable[str], parent: Address | None
) -> dict[str, Route]:
    """The topics an aggregator listens to, and who may speak on each.

    Its ``up`` topic, where only its children speak, and (below a parent) its
    parent's topics as in :func:`client_routes`.
    """
    # one up topic per child, where only that child speaks
    kinds = frozenset({"update", "secagg"})
    routes = {up_topic(run, tier, node_id, c): Route(frozenset({c}), kinds) for c in children}
    if parent is not None:
        routes.update(client_routes(run, parent, node_id))
    return routes


def presence_routes(run: str, nodes: Iterable[str]) -> dict[str, Route]:
    """Presence topics ``fs/<run>/presence/<node>``: only ``<node>`` speaks on its own."""
    return {presence_topic(run, n): Route(frozenset({n}), frozenset({"presence"})) for n in nodes}


class Seal:
    """Check, encode/sign and verify/decode envelopes for one node.

    Parameters
    ----------
    keys
        The node's signing keys; ``None`` with ``public_keys`` ``None``: no signing.
    public_keys
        Node id → Ed25519 public key of every node it may hear from, or a
        :class:`~fedstrata.privacy.signing.Verifier` of them (shared by the seals of
        one run, so that a run of N nodes builds N keys, not N²).
    run, routes
        The node's run id and the topics it listens to (see :meth:`bind`); ``None``:
        no run and topic checks (a seal not yet bound to a node).
    in_process
        Messages go to receivers in the same process that never read their bytes (the
        simulator): unsigned envelopes are then :class:`~fedstrata.wire.Unpacked`, of
        the exact size and decoded form of their bytes, and never packed. Signed
        envelopes are always packed: the signature covers the bytes.

    Attributes
    ----------
    counts
        ``Counter`` of ``"accepted"`` and of every rejection reason.
    """

    def __init__(
        self,
        keys: NodeKeys | None = None,
        public_keys: Mapping[str, bytes] | Verifier | None = None,
        *,
        run: str | None = None,
        routes: Mapping[str, Route] | None = None,
        in_process: bool = False,
    ) -> None:
        if (keys is None) != (public_keys is None):
            raise ValueError("signing needs both the node's keys and the public keys")
        if (run is None) != (routes is None):
            raise ValueError("a seal is bound to both a run and its routes, or to neither")
        self.keys = keys
        if public_keys is None or isinstance(public_keys, Verifier):
            self.verifier = public_keys
        else:
            self.verifier = Verifier(public_keys)
        self.run = run
        self.routes = None if routes is None else dict(routes)
        self.in_process = in_process
        self.guard = ReplayGuard()
        self.counts: Counter[str] = Counter()
        # signatures accepted in each sender's latest round of a kind: a transport
        # duplicate (QoS 1 redelivery, a retained message again) carries the same
        # deterministic Ed25519 signature and is the node's to count, not a replay
        self._accepted: dict[tuple[str, str], tuple[int, dict[str, bytes]]] = {}

    @property
    def public_keys(self) -> Verifier | None:
        """The verifier of the public keys (``None`` without signing)."""
        return self.verifier

    def bind(self, run: str, routes: Mapping[str, Route]) -> Seal:
        """A seal with these keys, for a node of run ``run`` listening on ``routes``.

        A new seal, with an empty replay memory: nodes call it once when built.
        """
        if not isinstance(run, str) or not run:
            raise ValidationError(f"run must be a non-empty str, got {run!r}")
        return Seal(self.keys, self.verifier, run=run, routes=routes, in_process=self.in_process)

    def fresh(self) -> Seal:
        """The same keys and routes with an empty replay memory (a node restarted)."""
        return Seal(
            self.keys, self.verifier, run=self.run, routes=self.routes, in_process=self.in_process
        )

    @property
    def signing(self) -> bool:
        """Whether messages are signed and verified."""
        return self.keys is not None

    def wrap(self, payload: bytes, topic: str) -> bytes:
        """An encoded envelope as sent on ``topic``: signed when signing is on."""
        return payload if self.keys is None else self.keys.sign(payload, topic)

    def encode(self, env: wire.Envelope, topic: str) -> bytes | wire.Unpacked:
        """``wire.encode(env)`` as sent on ``topic``, signed when signing is on.

        In process and unsigned: :func:`~fedstrata.wire_unpacked.encode_unpacked` (the
        same size and the same decoded message, never packed).
        """
        if self.in_process and self.keys is None:
            return encode_unpacked(env)
        return self.wrap(wire.encode(env), topic)

    def _reject(self, reason: str, sender: str, detail: str) -> AuthenticationError:
        self.counts[reason] += 1
        return AuthenticationError(reason, sender, detail)

    def _check(self, env: wire.Envelope, topic: str) -> None:
        """The run, topic and sender checks (nothing for a seal not bound to a node)."""
        if self.routes is None:
            return
        route = self.routes.get(topic)
        if route is None or env.kind not in route.kinds:
            raise self._reject("wrong_topic", env.sender, f"a {env.kind!r} message on {topic}")
        if env.sender not in route.senders:
            raise self._reject("wrong_sender", env.sender, f"may not publish on {topic}")

    def _check_run(self, env: wire.Envelope) -> None:
        if self.run is not None and env.run != self.run:
            raise self._reject("wrong_run", env.sender, f"run {env.run!r}, not {self.run!r}")

    def _signed(
        self, data: bytes | wire.Unpacked, parse: Callable[[bytes | wire.Unpacked], wire.Envelope]
    ) -> bytes:
        """``data`` as a signed payload's bytes; a bare envelope is refused (``unsigned``)."""
        try:
            bare = parse(data)
        except WireError:
            bare = None
        if bare is not None:
            raise self._reject("unsigned", bare.sender, "a bare envelope")
        assert not isinstance(data, wire.Unpacked)  # it always parses: refused above
        return data

    def decode(
        self,
        data: bytes | wire.Unpacked,
        topic: str,
        parse: Callable[[bytes | wire.Unpacked], wire.Envelope] = wire.decode,
    ) -> wire.Envelope:
        """The envelope of a payload received on ``topic``.

        Raises WireError (malformed) or AuthenticationError (rejected, with its reason;
        see the module docstring for the order of the checks).
        """
        if not isinstance(topic, str):
            raise TypeError(f"topic must be the str the message arrived on, got {topic!r}")
        if self.verifier is None:
            env = parse(data)
            self._check_run(env)
            self._check(env, topic)
            self.counts["accepted"] += 1
            return env
        data = self._signed(data, parse)
        env = parse(data[SIGNATURE_BYTES:])  # who it claims to be from, to pick the key
        self._check_run(env)
        if env.sender not in self.verifier:
            raise self._reject("unknown_sender", env.sender, "no public key")
        self._check(env, topic)
        try:
            self.verifier.verify(data, env.sender, topic)
        except AuthenticationError as exc:
            self.counts[exc.reason] += 1
            raise
        body = env.body
        sub = f"{body.get('phase', '')}/{body.get('type', '')}/{body.get('sub', 0)}"
        signature = bytes(data[:SIGNATURE_BYTES])
        key = (env.sender, env.kind)
        try:
            self.guard.admit(env.sender, env.kind, env.round, sub)
        except AuthenticationError:
            seen = self._accepted.get(key)
            if seen is not None and seen[0] == env.round and seen[1].get(sub) == signature:
                self.counts["accepted"] += 1
                return env  # the same message again: a duplicate, not a replay
            self.counts["replay"] += 1
            raise
        seen = self._accepted.get(key)
        if seen is None or seen[0] != env.round:
            seen = self._accepted[key] = (env.round, {})
        seen[1][sub] = signature
        self.counts["accepted"] += 1
        return env


def rejected(node: str, exc: AuthenticationError) -> Record:
    """The record of a message a node refused: ``rejected`` with the reason."""
    return Record(
        kind="rejected", fields={"node": node, "reason": exc.reason, "sender": exc.sender}
    )


#: The seal of a node that does not sign (bound to each node's run and topics).
PLAIN = Seal()


def load_roster(path: str | Path) -> dict[str, bytes]:
    """A public-key roster (``fedstrata keys``): a JSON object of node id to 64 hex digits."""
    source = Path(path)
    data = json.loads(source.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{source.name} must be a JSON object of node id to public key")
    out: dict[str, bytes] = {}
    for node, text in data.items():
        if not isinstance(text, str) or len(text) != 64:
            raise ValueError(f"the public key of {node!r} must be 64 hex digits")
        out[node] = bytes.fromhex(text)
    return out


@dataclass(frozen=True)
class RunKeys:
    """The signing keys of every node of one run, and where they come from.

    ``seeds`` (node id → 32-byte seed) is plain data, so that a run's keys can be
    handed to its worker processes. ``source`` is what the run's record says:
    :attr:`GENERATED`, :attr:`FILES` or :attr:`DERIVED`.
    """

    seeds: Mapping[str, bytes] = field(repr=False)
    source: str

    #: Fresh keys from the operating system's random generator, for this run only.
    GENERATED: ClassVar[str] = "per-run random"
    #: Key files written by ``fedstrata keys``.
    FILES: ClassVar[str] = "key files"
    #: :meth:`NodeKeys.derived` from the scenario's seed: anyone who knows the seed
    #: knows the keys, so they are for simulations only.
    DERIVED: ClassVar[str] = "derived from the scenario seed (simulation only)"

    @classmethod
    def generate(cls, nodes: Iterable[str]) -> RunKeys:
        """Fresh random keys for ``nodes`` (:meth:`NodeKeys.generate`)."""
        return cls({n: NodeKeys.generate().seed for n in nodes}, cls.GENERATED)

    @classmethod
    def derived(cls, seed: int, nodes: Iterable[str]) -> RunKeys:
        """The reproducible keys of a simulation (:meth:`NodeKeys.derived`)."""
        return cls({n: NodeKeys.derived(seed, n).seed for n in nodes}, cls.DERIVED)

    @classmethod
    def load(cls, folder: str | Path, nodes: Iterable[str]) -> RunKeys:
        """Read ``folder/<node>.key`` of every node (``fedstrata keys``).

        Each key is checked against the roster ``folder/public-keys.json``.

        Raises
        ------
        KeyFileError, ValueError, OSError
            A key file that is missing, malformed or readable by others, a roster
            that is not one, or a key that is not the roster's.
        """
        base = Path(folder)
        roster = load_roster(base / "public-keys.json")
        seeds: dict[str, bytes] = {}
        for n in nodes:
            k = NodeKeys.load(base / f"{n}.key")
            if roster.get(n) != k.public_key:
                raise ValueError(f"{n}.key is not {n}'s key in public-keys.json")
            seeds[n] = k.seed
        return cls(seeds, cls.FILES)

    def seals(self, nodes: Iterable[str] | None = None) -> dict[str, Seal]:
        """A signing seal for each of ``nodes`` (default: every node with a key)."""
        keys = {n: NodeKeys(s) for n, s in self.seeds.items()}
        verifier = Verifier({n: k.public_key for n, k in keys.items()})
        return {n: Seal(keys[n], verifier) for n in (self.seeds if nodes is None else nodes)}
