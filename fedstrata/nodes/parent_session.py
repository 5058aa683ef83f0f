"""A middle tier's membership of its parent's secure session.

Under secure aggregation a middle-tier aggregator is, towards its parent, a member
of the parent's session like a client is: it answers the session's setup with its
keys when the parent's model arrives, the session's per-member messages as they come,
and gives its subtree's sum as its masked input once its own round closed.
:class:`ParentMembership` keeps that membership for the round in progress; the
aggregator publishes the replies it returns.
"""

from __future__ import annotations

from typing import Any

from fedstrata import wire
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.nodes.events import Record
from fedstrata.nodes.secure import REFUSALS, SecureMember, SessionLedger, member_answer
from fedstrata.privacy.layout import Layout

__all__ = ["ParentMembership"]

Reply = tuple[dict[str, Any] | None, list[Record]]


class ParentMembership:
    """A node's membership of its parent's session in the current round."""

    def __init__(self, node_id: str, layout: Layout) -> None:
        self.node_id = node_id
        self.layout = layout
        #: The membership of the current round's session (None: none, or it ended).
        self.member: SecureMember | None = None
        #: (round, sub) of the parent's session it belongs to.
        self.key: tuple[int, int] = (-1, 0)
        #: The sessions it joined: one per round and sub (:class:`SessionLedger`).
        self.ledger = SessionLedger()

    def join(
        self, protocol: ProtocolConfig, env: wire.Envelope, layout: Layout | None = None
    ) -> Reply:
        """Answer the setup the parent's model ``env`` carries: the keys to send up.

        ``layout``: what this session sums (a setup stage's); None: :attr:`layout`,
        the plug-in's partial.
        """
        self.member = None
        fields = {"node": self.node_id, "round": env.round}
        setup = env.body.get("secagg")
        if setup is None:
            reason = "the parent asked for a plaintext round under secure aggregation"
            return None, [
                Record(
                    kind="dropped",
                    fields={**fields, "reason": reason, "category": "malformed"},
                )
            ]
        sub = int(env.body.get("sub", 0))
        screened = self.ledger.screen(self.node_id, env.round, sub, setup)
        if screened is not None:  # a reopened round: never mask one input twice
            return None, [screened]
        try:
            own = self.layout if layout is None else layout
            member = SecureMember(self.node_id, protocol, own, setup)
            reply = member.keys()
        except REFUSALS as exc:
            return None, [Record(kind="secure_refused", fields={**fields, "reason": str(exc)})]
        self.member, self.key = member, (env.round, sub)
        self.ledger.join(env.round, sub, member.session)
        return reply, []

    def answer(self, env: wire.Envelope) -> Reply:
        """A per-member message of the parent's session: the reply to send up, if any."""
        reply, records, stays = member_answer(self.node_id, self.member, self.key, env)
        if not stays:
            self.member = None
        return reply, list(records)

    def provide(self, partial: dict[str, Any], round_: int) -> Reply:
        """The subtree's sum as this member's masked input (``round_``: for the records)."""
        member, self.member = self.member, None
        fields = {"node": self.node_id, "round": round_}
        if member is None:
            reason = "no secure session with the parent this round; nothing forwarded"
            return None, [
                Record(kind="dropped", fields={**fields, "reason": reason, "category": "late"})
            ]
        try:
            reply = member.provide(partial, skip=("sub",))
        except REFUSALS as exc:
            return None, [Record(kind="secure_overflow", fields={**fields, "reason": str(exc)})]
        self.member = member  # it still answers the unmasking request
        return reply, []
