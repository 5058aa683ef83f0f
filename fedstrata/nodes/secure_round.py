"""The aggregator's side of one round's secure session: its phases and their deadlines.

Under secure aggregation an aggregator's round is a session with the children it
asked (:class:`~fedstrata.nodes.secure.SecureCollection`): the model broadcast carries
the session's setup, and the round then goes through its phases (keys, shares, masked
inputs, consistency check, reveal) before the unmasked sum closes it. :class:`SecureRound`
drives one such session for the aggregator: it opens it, takes the members' replies, closes each
phase into the next one's messages or into the round's
:class:`~fedstrata.nodes.strategy.Closing`, and times each phase within the round's
deadline. The aggregator publishes what it says and records the outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fedstrata.nodes.config import ProtocolConfig
from fedstrata.nodes.secure import REFUSALS, SecureCollection
from fedstrata.nodes.strategy import Closing
from fedstrata.privacy.layout import Layout
from fedstrata.privacy.secagg import ServerPhase

__all__ = ["Receipt", "SecureRound"]

#: The share of the deadline kept for each phase still to come.
PHASE_RESERVE = 0.1
_PHASES_AFTER = {
    ServerPhase.KEYS: 4,
    ServerPhase.SHARES: 3,
    ServerPhase.MASKED: 2,
    ServerPhase.CHECK: 1,
    ServerPhase.REVEAL: 0,
}


@dataclass(frozen=True)
class Receipt:
    """What a member's reply did: refused (why), late, or taken (a key; the phase full)."""

    refused: str = ""
    taken: bool = False
    key: bool = False
    complete: bool = False


class SecureRound:
    """One round's secure session, from the aggregator's side (module docstring).

    ``session`` is None when the session could not start (``failure`` says why, e.g.
    a sampled roster too small to hide anyone): the round then fails at its deadline.
    """

    def __init__(
        self,
        session: SecureCollection | None,
        failure: str,
        *,
        secure: str,
        start: float,
        deadline_s: float,
    ) -> None:
        self.session = session
        self.failure = failure
        self.secure = secure
        self.start = start
        self.deadline_s = deadline_s

    @classmethod
    def open(
        cls,
        roster: Sequence[str],
        protocol: ProtocolConfig,
        layout: Layout,
        *,
        node: str,
        round_: int,
        sub: int,
        start: float,
        deadline_s: float,
    ) -> tuple[SecureRound, dict[str, Any] | None]:
        """The round's session over ``roster``, and the setup its model broadcast carries."""
        try:
            session = SecureCollection(
                list(roster), protocol, layout, run=protocol.run, node=node, round_=round_, sub=sub
            )
            setup = session.setup()
        except REFUSALS as exc:  # e.g. a sampled roster too small to hide anyone
            session, setup, failure = None, None, str(exc)
        else:
            failure = ""
        own = cls(session, failure, secure=protocol.secure, start=start, deadline_s=deadline_s)
        return own, setup

    def receive(self, sender: str, body: dict[str, Any], nbytes: int) -> Receipt:
        """A member's reply (its ``sub`` already taken off) to the current phase."""
        session = self.session
        assert session is not None
        phase = session.phase
        try:
            taken = session.receive(sender, body, nbytes)
        except REFUSALS as exc:
            return Receipt(refused=str(exc))
        if not taken:
            return Receipt()
        return Receipt(taken=True, key=phase is ServerPhase.KEYS, complete=session.complete)

    def step(
        self, check: Callable[[dict[str, Any]], None], need: int
    ) -> Closing | dict[str, dict[str, Any]]:
        """Close the current phase: the next phase's messages by member, or the round's close.

        ``check`` validates the unmasked sum (the plug-in's ``check_partial``, or
        ``check_setup`` for a setup stage); ``need``: fresh replies the round needs.
        """
        session = self.session
        if session is None:
            reason = self.failure or "no secure session"
            return Closing(None, 0, need, {"secure_failure": reason})
        try:
            out = session.advance()
        except REFUSALS as exc:
            return Closing(None, 0, need, self.fields(str(exc)))
        if session.phase is ServerPhase.DONE:
            total = out
            try:
                check(total)
            except REFUSALS as exc:
                return Closing(None, 0, need, self.fields(str(exc)))
            fresh = len(session.result.survivors)
            return Closing(total, fresh, need, self.fields(""))
        return dict(out)

    def timer_delay(self, now: float) -> float:
        """Seconds from ``now`` to the current phase's deadline, within the round's.

        The round as a whole keeps its deadline: each phase may use all the time left
        but a reserve of a tenth of the deadline for each phase still to come. So a
        phase that waits on a slow member (a fog's own secure round, a client's
        computation) has nearly the whole deadline, and the round still closes in time.
        """
        assert self.session is not None
        remaining = _PHASES_AFTER[self.session.phase]
        end = self.start + self.deadline_s * (1.0 - PHASE_RESERVE * remaining)
        return max(0.0, end - now)

    def count(self, message: dict[str, Any], nbytes: int) -> None:
        """Count ``nbytes`` sent for ``message`` in the session's privacy bytes."""
        assert self.session is not None
        self.session.count(message, nbytes)

    def fields(self, failure: str) -> dict[str, Any]:
        """The round record's secure-aggregation fields."""
        session = self.session
        assert session is not None
        result = getattr(session, "result", None)
        return {
            "secure": self.secure,
            "secure_failure": failure,
            "recovered": 0 if result is None else len(result.dropped),
            **{f"privacy_bytes_{step}": n for step, n in session.bytes.items()},
        }
