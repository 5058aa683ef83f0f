"""Secure aggregation in the node core: one SecAgg(+) session per aggregation round.

With ``protocol.secure`` on (``"secagg"`` or ``"secagg+"``), an aggregator never
sees a child's partial. Each round it collects, it runs one session of
:mod:`fedstrata.privacy.secagg` over the children it asked; the children's additive
partials travel as masked fixed-point vectors in the algorithm's
:class:`~fedstrata.privacy.layout.Layout`, and the aggregator gets their sum only.
A middle tier is a member of its parent's session in turn, with its own children's
sum as input, so the cloud learns only sums of fog sums.

Messages
--------
* The session's setup rides in the round's model body (``body["secagg"]``), so a
  round costs no extra broadcast.
* Members answer on the group's ``up`` topic with ``secagg`` envelopes.
* The aggregator's per-member messages (key lists, forwarded shares, unmasking
  requests) go to ``fs/{run}/{tier}/{group}/to/{member}``
  (:func:`~fedstrata.mqtt.member_topic`).

Each phase waits for every expected reply or the aggregator's deadline, whichever
comes first. Fewer than the threshold: the round fails (recorded), nothing is
decoded, and the next round opens a fresh session.

Parameters both sides derive
----------------------------
Members do not take the aggregator's word for the parameters: each computes the
:class:`~fedstrata.privacy.secagg.SecAggConfig` it accepts from its own protocol
settings and the roster size (:func:`group_config`), and refuses a setup that
differs (a lower threshold, say). The fixed-point range is the widest whose sum over
the roster cannot wrap modulo 2**64 (:func:`headroom_clip`); a member whose partial
exceeds it does not take part in the round and records why (never a wrapped sum).

A plug-in whose setup replies are sums (:meth:`~fedstrata.nodes.algorithm.Algorithm.
setup_layout`, the private setup) has its setup stages masked the same way. Not
masked: the models the root broadcasts, public to every member by design.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedstrata.errors import PrivacyError, ValidationError, WireError
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.nodes.events import Record
from fedstrata.privacy import secagg
from fedstrata.privacy.layout import Layout, flatten, unflatten

__all__ = [
    "REFUSALS",
    "STEPS",
    "SecureCollection",
    "SecureMember",
    "SessionLedger",
    "default_degree",
    "group_config",
    "headroom_clip",
    "holders",
    "member_answer",
    "session_seeds",
    "threshold_count",
]

_MODULUS_BITS = 64

#: What a session raises when a message or the parameters are refused: recorded, the
#: round goes on without that member (or fails below threshold), never a crash.
REFUSALS = (PrivacyError, WireError, ValidationError)

#: What a session's bytes are spent on: key adverts (the setup, the members' keys, the
#: key lists), shares (sent, then forwarded), the masked inputs (which stand in for
#: the plaintext partials), the consistency check (the survivor set and the members'
#: signatures of it) and the unmasking (requests with the signatures, revealed shares).
STEPS = ("keys", "shares", "masked", "consistency", "unmasking")
_STEP_OF = {
    secagg.SETUP: "keys",
    secagg.KEYS: "keys",
    secagg.KEY_LIST: "keys",
    secagg.SHARES: "shares",
    secagg.COLLECT: "shares",
    secagg.MASKED: "masked",
    secagg.CHECK: "consistency",
    secagg.SIGNED: "consistency",
    secagg.UNMASK: "unmasking",
    secagg.REVEAL: "unmasking",
}


def default_degree(n: int) -> int:
    """SecAgg+'s default neighbour count for ``n`` members: 2⌈log2 n⌉ (even), as Bell et al."""
    return 2 * max(1, math.ceil(math.log2(max(n, 2))))


def _degree(protocol: ProtocolConfig, n: int) -> int | None:
    if protocol.secure != "secagg+":
        return None
    return protocol.secure_neighbours or default_degree(n)


def holders(protocol: ProtocolConfig, n: int) -> int:
    """How many members hold shares of one member's secrets in a group of ``n``."""
    degree = _degree(protocol, n)
    return n if degree is None or degree >= n - 1 else degree + 1


def threshold_count(protocol: ProtocolConfig, n: int) -> int:
    """The threshold t in a group of ``n``: absolute, a fraction of the holders, or h//2+1."""
    h = holders(protocol, n)
    t = protocol.secure_threshold
    if t is None:
        return h // 2 + 1
    if isinstance(t, int):
        return t
    return max(h // 2 + 1, math.ceil(t * h - 1e-9))


def headroom_clip(n: int, scale_bits: int) -> float:
    """The widest per-member range [−clip, clip] whose sum over ``n`` cannot wrap mod 2**64."""
    q = ((1 << (_MODULUS_BITS - 1)) - 1) // n
    return math.ldexp(float(q) * (1.0 - 2.0**-40), -scale_bits)


def group_config(protocol: ProtocolConfig, n: int, length: int) -> secagg.SecAggConfig:
    """The SecAgg parameters of a group of ``n`` members sending vectors of ``length``."""
    t = protocol.secure_threshold
    threshold = None if t is None else threshold_count(protocol, n)
    return secagg.SecAggConfig(
        vector_length=length,
        clip=headroom_clip(n, protocol.secure_scale_bits),
        threshold=threshold,
        scale_bits=protocol.secure_scale_bits,
        modulus_bits=_MODULUS_BITS,
        degree=_degree(protocol, n),
    )


def session_seeds(run: str, node: str, round_: int, sub: int) -> tuple[bytes, bytes]:
    """A session id unique to (run, aggregator, round, sub), and the public graph seed.

    Keys and self-mask seeds are fresh random bytes every session; these two are
    public values, derived so that a simulated run is reproducible.
    """
    tag = f"{run}\x00{node}\x00{round_}\x00{sub}".encode()
    session = hashlib.blake2b(tag, digest_size=secagg.SESSION_BYTES, person=b"fs-session").digest()
    graph = hashlib.blake2b(tag, digest_size=32, person=b"fs-graph").digest()
    return session, graph


class SessionLedger:
    """The sessions a member joined, by round: it never masks one round's input twice.

    Two sessions over the same inputs with rosters one member apart give that member's
    partial as the difference of their sums, so a member joins one session per
    ``(round, sub)``. The honest protocol opens more than one session in a round only
    for a middle tier's local rounds (``period > 1``), whose ``sub`` rises 1, 2, ...
    with a new model each time; ``sub`` 0 is a round's only session. So a setup is
    refused when its round already had a session of sub 0 or of a sub as high. The
    same setup again (same round, sub and session: a QoS 1 redelivery) is a duplicate.
    """

    DUPLICATE = "duplicate"

    def __init__(self) -> None:
        self._joined: dict[int, tuple[int, bytes]] = {}

    def refusal(self, round_: int, sub: int, session: object) -> str | None:
        """Why a setup of ``(round_, sub)`` for ``session`` is refused; None: it may join."""
        prev = self._joined.get(round_)
        if prev is None:
            return None
        if prev == (sub, session):
            return self.DUPLICATE
        if prev[0] == 0 or sub <= prev[0]:
            return (
                f"a second secure session for round {round_} (sub {sub} after sub {prev[0]}): "
                "refused, the difference of two sums over one input could expose a member's"
            )
        return None

    def join(self, round_: int, sub: int, session: bytes) -> None:
        """Record that this member answered the setup of ``session`` (``round_``, ``sub``)."""
        self._joined[round_] = (sub, session)

    def screen(self, node: str, round_: int, sub: int, setup: object) -> Record | None:
        """The record of a refused or duplicate setup (None: the member may join)."""
        session = setup.get("session") if isinstance(setup, Mapping) else None
        why = self.refusal(round_, sub, session)
        fields = {"node": node, "round": round_}
        if why is None:
            return None
        if why == self.DUPLICATE:
            return Record(kind="duplicate", fields=fields)
        return Record(kind="secure_refused", fields={**fields, "reason": why})


class SecureCollection:
    """The aggregator's side of one round: a SecAgg server over the asked children.

    Parameters
    ----------
    roster
        The members asked this round (their order fixes their share ids).
    protocol
        The run's protocol settings (mode, threshold, neighbours, precision).
    layout
        The algorithm's summed fields.
    run, node, round_, sub
        Identify the session (see :func:`session_seeds`).
    """

    def __init__(
        self,
        roster: Sequence[str],
        protocol: ProtocolConfig,
        layout: Layout,
        *,
        run: str,
        node: str,
        round_: int,
        sub: int,
    ) -> None:
        self.layout = layout
        self.config = group_config(protocol, len(roster), layout.length)
        session, graph = session_seeds(run, node, round_, sub)
        self.server = secagg.SecAggServer(roster, self.config, session=session, graph_seed=graph)
        self.threshold = self.server.threshold
        # bytes by step, both directions: the members' replies as received, the
        # per-member messages as sent, the setup's share of the model broadcast
        self.bytes = dict.fromkeys(STEPS, 0)

    @property
    def phase(self) -> secagg.ServerPhase:
        """The replies the session collects now."""
        return self.server.phase

    def setup(self) -> dict[str, Any]:
        """The setup message (the same for every member), for the model body."""
        return next(iter(self.server.start().values()))

    def receive(self, sender: str, message: Mapping[str, Any], nbytes: int) -> bool:
        """Take one member's reply; False if the current phase does not wait for it.

        Raises :class:`~fedstrata.errors.WireError` for a reply of the right phase
        with bad content (the member is then left out of the phase).
        """
        taken = self.server.receive(sender, message)
        if taken:
            self.count(message, nbytes)
        return taken

    def count(self, message: Mapping[str, Any], nbytes: int) -> None:
        """Add a session message's bytes to its step (:data:`STEPS`)."""
        kind = message.get("type")
        self.bytes[_STEP_OF.get(kind, "keys") if isinstance(kind, str) else "keys"] += nbytes

    @property
    def complete(self) -> bool:
        """Whether every reply the current phase waits for has arrived."""
        return not self.server.waiting_for

    def advance(self) -> dict[str, dict[str, Any]] | dict[str, Any]:
        """Close the current phase: the next messages per member, or the summed partial.

        Raises a :class:`~fedstrata.errors.PrivacyError` (below threshold, a failed
        check, an out-of-range sum): the round produces no sum.
        """
        if self.server.phase is secagg.ServerPhase.REVEAL:
            result = self.server.finish()
            self.result = result
            return unflatten(result.values, self.layout)
        return self.server.advance()


class SecureMember:
    """A member's side of one session: a SecAgg client fed with the aggregator's messages.

    Built from the setup message in a model body; ``input`` may come later (a middle
    tier's own round is still running): a ``collect`` that arrives first is held.
    """

    def __init__(
        self,
        node_id: str,
        protocol: ProtocolConfig,
        layout: Layout,
        setup: Mapping[str, Any],
    ) -> None:
        if not isinstance(setup, Mapping):
            raise WireError("body field 'secagg' must be a map")
        roster = setup.get("roster")
        if not isinstance(roster, list) or not roster:
            raise WireError("secagg setup without a roster")
        self.layout = layout
        self.config = group_config(protocol, len(roster), layout.length)
        self.client = secagg.SecAggClient(node_id, self.config)
        session = setup.get("session")
        if not isinstance(session, bytes) or not all(isinstance(v, str) for v in roster):
            raise WireError("secagg setup needs a bytes session and a roster of node ids")
        self.session = session
        self.roster = tuple(roster)
        self._setup = setup
        self._held: Mapping[str, Any] | None = None
        self._handled: set[Any] = set()  # message types answered (or held) so far
        self.has_input = False

    def is_duplicate(self, message: Mapping[str, Any]) -> bool:
        """Whether this session's message of that type came before (a QoS 1 redelivery)."""
        kind, session = message.get("type"), message.get("session")
        if not isinstance(kind, str) or not isinstance(session, bytes):
            return False
        return session == self.session and kind in self._handled

    def keys(self) -> dict[str, Any]:
        """The reply to the setup (raises a PrivacyError if the parameters are refused)."""
        return self.client.handle(self._setup)

    def provide(
        self, partial: Mapping[str, Any], *, skip: Sequence[str] = ()
    ) -> dict[str, Any] | None:
        """Set this round's input; the masked reply if the ``collect`` already came.

        Raises :class:`~fedstrata.privacy.fixedpoint.FixedPointOverflowError` when a
        value lies outside the group's fixed-point range (the member then sends
        nothing: it is a dropout, never a wrapped sum).
        """
        from fedstrata.privacy.fixedpoint import FixedPointOverflowError

        vector = flatten(partial, self.layout, skip=skip)
        worst = float(np.max(np.abs(vector))) if vector.size else 0.0
        if worst > self.config.clip:
            raise FixedPointOverflowError(
                f"a value of magnitude {worst:.3g} exceeds the fixed-point range "
                f"±{self.config.clip:.3g} of a group of {len(self.roster)}"
            )
        self.client.set_input(vector)
        self.has_input = True
        held, self._held = self._held, None
        return None if held is None else self.client.handle(held)

    def handle(self, message: Mapping[str, Any]) -> dict[str, Any] | None:
        """The reply to one per-member message (None: a ``collect`` held for the input)."""
        kind = message.get("type")
        if not isinstance(kind, str) or not isinstance(message.get("session"), bytes):
            raise WireError("a secagg message needs a str 'type' and a bytes 'session'")
        self._handled.add(kind)
        if kind == secagg.COLLECT and not self.has_input:
            if message.get("session") != self.session:
                raise WireError("secagg message of another session")
            self._held = message
            return None
        return self.client.handle(message)


def member_answer(
    node: str,
    member: SecureMember | None,
    key: tuple[int, int],
    env: Any,
) -> tuple[dict[str, Any] | None, list[Record], bool]:
    """A member node's handling of one per-member message of its aggregator's session.

    Returns the reply to send (None: nothing now), the records to emit (``late``: no
    session or another round's; ``duplicate``; ``secure_refused`` with the reason) and
    whether the member stays in the session (a refusal is final).
    """
    if env.kind != "secagg":
        raise WireError(f"expected a secagg message, got {env.kind!r}")
    fields = {"node": node, "round": env.round}
    message = dict(env.body)
    sub = message.pop("sub", 0)
    if isinstance(sub, bool) or not isinstance(sub, int):
        raise WireError("body field 'sub' must be an int")
    if member is None or (env.round, sub) != key:
        return None, [Record(kind="late", fields=fields)], True
    if member.is_duplicate(message):
        return None, [Record(kind="duplicate", fields=fields)], True
    try:
        return member.handle(message), [], True
    except REFUSALS as exc:
        return None, [Record(kind="secure_refused", fields={**fields, "reason": str(exc)})], False
