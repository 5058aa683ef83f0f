"""The aggregator, usable at any tier (fog or cloud), as a sans-IO state machine.

Root (no parent): broadcasts the model of each round on its ``down`` topic
(retained), collects its children's partial updates on ``up`` until all arrived or
the deadline fires, combines them and decides to go on or stop. The algorithm's
extras from the setup round go out once, retained, on its ``config`` topic
(:mod:`fedstrata.nodes.runconfig`); models name them by id.

Middle tier (has a parent): relays the parent's model to its children, and the
parent's configuration to its own ``config`` topic, sums their
partials and forwards one partial upwards. With ``period = k > 1`` it runs k
aggregation rounds with its own children per parent round (HierFAVG; FedHK-MVFC paper
§7.3, Eq. 136-137) and forwards its subtree model as an n-weighted parameter update.

Rounds never hang: a deadline ends every collection. Below the quorum the round
fails (recorded); the root still counts it towards its round limit, so a run always
terminates. Duplicates, late and foreign updates are counted and dropped.

The root ends the run with a status (:class:`RunStatus`) and a one-line reason:
``converged`` (the stopping test held, or J/n reached a plateau), ``round_limit``,
``stalled`` (``patience`` consecutive rounds below quorum) or ``diverged`` (a round
produced a non-finite model: the run stops at once and keeps the last finite model).
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Sequence
from enum import Enum
from typing import Any

import numpy as np

from fedstrata import wire
from fedstrata.errors import NodeProtocolError, WireError
from fedstrata.nodes.algorithm import Algorithm, algorithm_for
from fedstrata.nodes.bodies import check_body, dropped
from fedstrata.nodes.config import Address, ProtocolConfig
from fedstrata.nodes.events import (
    CancelTimer,
    Delivered,
    Effect,
    Event,
    Finished,
    PeerLost,
    Publish,
    Record,
    SetTimer,
    Started,
    Subscribe,
    TimerFired,
)
from fedstrata.nodes.parent_session import ParentMembership
from fedstrata.nodes.runconfig import (
    CONFIG_FIELD,
    config_id,
    config_payload,
    model_config,
    read_config,
)
from fedstrata.nodes.sealing import PLAIN, Seal, aggregator_routes, rejected
from fedstrata.nodes.secure_round import SecureRound
from fedstrata.nodes.setup_rounds import SetupRounds
from fedstrata.nodes.stopping import RunStatus, StopRules
from fedstrata.nodes.strategy import Closing, Contribution, Placement, Strategy, strategy_for
from fedstrata.nodes.topics import AggregatorTopics
from fedstrata.privacy.layout import Layout
from fedstrata.privacy.signing import AuthenticationError

__all__ = ["AggregatorNode", "AggregatorState", "RunStatus"]

_DEADLINE = "deadline"


class AggregatorState(Enum):
    """Lifecycle of an aggregator."""

    NEW = "new"
    WAITING = "waiting"  # middle tier: for the parent's next model
    COLLECTING = "collecting"
    DONE = "done"
    ERROR = "error"


class AggregatorNode:
    """Aggregator at any tier.

    Parameters
    ----------
    node_id
        Unique id; also its topic group.
    tier
        Tier name (``"fog"``, ``"cloud"``, ...).
    children
        Ids of the nodes that report to it.
    parent
        Its parent's address, or None for the root.
    model, shape
        The algorithm's hyper-parameters and message sizes (opaque to the node: the
        plug-in's own, e.g. :class:`~fedstrata.plugins.messages.Shape`); the plug-in
        is looked up
        with :func:`~fedstrata.nodes.algorithm.algorithm_for` unless ``algorithm`` is
        given.
    protocol
        Protocol settings; ``protocol.kind`` picks the strategy unless ``strategy``
        is given.
    deadline_s
        How long to collect after broadcasting a model.
    quorum
        Fraction of the wanted children needed for a round to count.
    period
        Middle tier only: aggregation rounds with its children per parent round.
    init_state
        Root only: a fixed initial state (otherwise taken from the setup round:
        the initialisation of the client with the most samples).
    algorithm, strategy
        The algorithm plug-in and the protocol strategy (built from ``model`` and
        ``protocol`` when omitted).
    clients_below
        Whether its children are edge clients (client sampling applies there).
    """

    def __init__(
        self,
        node_id: str,
        *,
        tier: str,
        children: Sequence[str],
        parent: Address | None,
        model: Any,
        shape: Any,
        protocol: ProtocolConfig,
        deadline_s: float,
        quorum: float = 1.0,
        period: int = 1,
        init_state: Any | None = None,
        algorithm: Algorithm | None = None,
        strategy: Strategy | None = None,
        clients_below: bool = True,
        seal: Seal | None = None,
    ) -> None:
        if not children:
            raise NodeProtocolError(f"aggregator {node_id} has no children")
        if not 0.0 <= quorum <= 1.0:
            raise NodeProtocolError(f"quorum must lie in [0, 1], got {quorum}")
        if period < 1 or (period > 1 and parent is None):
            raise NodeProtocolError("period > 1 is for middle tiers only")
        self.node_id = node_id
        self.tier = tier
        self.children = frozenset(children)
        self.parent = parent
        self.model = model
        self.shape = shape
        self.protocol = protocol
        self.deadline_s = deadline_s
        self.quorum = quorum
        self.need = max(1, math.ceil(quorum * len(self.children)))
        self.period = period
        self.algorithm = algorithm or algorithm_for(model, protocol, shape)
        seed = zlib.crc32(node_id.encode())
        self.strategy = strategy or strategy_for(
            protocol,
            Placement(
                children=tuple(sorted(self.children)),
                quorum=quorum,
                seed=seed,
                root=parent is None,
                deadline_s=deadline_s,
                clients_below=clients_below,
                compressions=tuple(self.algorithm.compressions),
            ),
        )
        self.clients_below = clients_below
        # the seal checks the run, topic and sender of every message it decodes
        self._seal = (seal or PLAIN).bind(
            protocol.run, aggregator_routes(protocol.run, tier, node_id, children, parent)
        )
        if not self.algorithm.additive and self.strategy.needs_additive:
            raise NodeProtocolError(
                f"protocol kind {self.strategy.kind!r} mixes additive partials; "
                f"{self.algorithm.name} is not additive"
            )
        self._setup = SetupRounds(sorted(self.children), quorum=quorum, seed=seed)
        # root: the request of the setup stage in progress (None: the first stage)
        self._setup_request: dict[str, Any] | None = None
        self.state = AggregatorState.NEW
        self.global_state = init_state
        self._fixed_init = init_state is not None
        self.extras: dict[str, Any] = {}
        self.config_id: str | None = None  # id of the configuration (extras) in force
        self._waiting: wire.Envelope | None = None  # period > 1: a model awaiting its config
        self.round = -1  # envelope round (model version) being collected
        self.sub = 0
        self.phase = ""
        self.iterations = 0
        self.stop = StopRules(protocol, self.algorithm)  # the root's stopping tests
        self._seen_updates: set[tuple[str, int, int]] = set()
        self._got = 0  # valid replies in the round being collected
        self._seen_models: set[tuple[int, int]] = set()
        self._now = 0.0
        self._last_need = self.need
        self.result: dict[str, Any] | None = None
        self._rng = np.random.default_rng(seed)
        # secure aggregation: this round's session with the children, and this node's
        # membership of its parent's session (middle tier)
        self._layout = self.algorithm.secure_layout() if protocol.secure != "none" else None
        self._secure: SecureRound | None = None  # this round's session (secure rounds)
        # a middle tier's membership of its parent's session (secure aggregation)
        self._parent_session = (
            None
            if parent is None or self._layout is None
            else ParentMembership(node_id, self._layout)
        )
        self.topics = AggregatorTopics.of(
            protocol.run, tier, node_id, parent, secure=self._layout is not None
        )

    @property
    def protocol(self) -> ProtocolConfig:
        """The protocol settings (replacing them reaches the stopping rules too)."""
        return self._protocol

    @protocol.setter
    def protocol(self, value: ProtocolConfig) -> None:
        self._protocol = value
        if "stop" in self.__dict__:
            self.stop.protocol = value

    @property
    def converged(self) -> bool:
        """Whether the root's last successful round met the convergence test."""
        return self.stop.converged

    @property
    def is_root(self) -> bool:
        """Whether this aggregator has no parent."""
        return self.parent is None

    @property
    def refs(self) -> dict[str, Any] | None:
        """The algorithm's extras after setup (the run's configuration; None before)."""
        return self.extras or None

    @property
    def received(self) -> frozenset[str]:
        """Children whose reply the round being collected holds (synchronous rounds)."""
        return self._rounds().received

    def _rounds(self) -> Strategy:
        return self._setup.rounds if self.phase == "setup" else self.strategy

    # -- entry point -----------------------------------------------------------------

    def handle(self, event: Event) -> list[Effect]:
        """Consume one event and return the effects to carry out."""
        if self.state is AggregatorState.ERROR:
            raise NodeProtocolError(f"{type(event).__name__} not allowed in state ERROR")
        self._now = event.now
        if isinstance(event, Started):
            return self._on_started()
        if self.state is AggregatorState.NEW:
            raise NodeProtocolError(f"{type(event).__name__} not allowed before Started")
        if self.state is AggregatorState.DONE:
            return []
        if isinstance(event, TimerFired):
            return self._on_deadline() if event.name == _DEADLINE else []
        if isinstance(event, PeerLost):
            return [Record(kind="peer_lost", fields={"node": self.node_id, "peer": event.node_id})]
        if isinstance(event, Delivered):
            return self._on_delivered(event)
        raise NodeProtocolError(f"unknown event {type(event).__name__}")

    def _on_started(self) -> list[Effect]:
        """Subscribe; the root opens its first round, a middle tier waits for its parent."""
        if self.state is not AggregatorState.NEW:
            raise NodeProtocolError("Started not allowed after start")
        subs: list[Effect] = [Subscribe(pattern=self.topics.children_up, qos=self.protocol.qos)]
        if self.is_root:
            return subs + self._start()
        above = self.topics.parent
        assert above is not None
        self.state = AggregatorState.WAITING
        if above.member is not None:
            subs.append(Subscribe(pattern=above.member, qos=self.protocol.qos))
        return [
            *subs,
            Subscribe(pattern=above.config, qos=self.protocol.qos),
            Subscribe(pattern=above.down, qos=self.protocol.qos),
        ]

    def _on_delivered(self, event: Delivered) -> list[Effect]:
        """A message: unsealed, its body checked, then routed by the topic it came on."""
        try:
            env = self._seal.decode(event.payload, event.topic)
        except AuthenticationError as exc:
            return [rejected(self.node_id, exc)]
        except WireError as exc:  # not an envelope at all
            return [dropped(self.node_id, str(exc), "garbage")]
        try:
            check_body(env)  # the body's declared schema, before anything reads it
            if event.topic.startswith(self.topics.children_up_prefix):
                return self._on_update(env, len(event.payload))
            above = self.topics.parent
            if above is not None and event.topic == above.config:
                return self._on_parent_config(env)
            if above is not None and event.topic == above.member:
                return self._on_parent_secagg(env)
            return self._on_parent_model(env)
        except WireError as exc:  # fails the schema, or the plug-in's readers
            return [dropped(self.node_id, str(exc), "malformed")]

    # -- broadcasting ----------------------------------------------------------------

    def _model_body(self, phase: str, state: Any | None, sub: int = 0) -> dict[str, Any]:
        body: dict[str, Any] = {"phase": phase}
        if sub:
            body["sub"] = sub
        if phase == "setup" and self._setup_request is not None:
            body["request"] = self._setup_request
        if state is not None:
            if self.is_root and phase == "iter":  # the schedule of the iteration it is for
                state = self.algorithm.at_iteration(state, self.stop.successes + 1, self.extras)
            body.update(self.algorithm.model_body(state, {} if phase == "setup" else self.extras))
            if phase != "setup" and self.config_id is not None:
                body[CONFIG_FIELD] = self.config_id
        return body

    def _publish_config(self, round_: int) -> Publish:
        """The configuration in force, retained on this group's ``config`` topic."""
        assert self.config_id is not None
        payload = config_payload(
            run=self.protocol.run,
            round_=round_,
            tier=self.tier,
            sender=self.node_id,
            cid=self.config_id,
            extras=self.extras,
        )
        return Publish(
            topic=self.topics.config,
            payload=self._seal.wrap(payload, self.topics.config),
            qos=self.protocol.qos,
            retain=True,
        )

    def _broadcast(
        self, round_: int, body: dict[str, Any], *, collect: bool = True
    ) -> list[Effect]:
        if collect:
            self.round = round_
            self.sub = int(body.get("sub", 0))
            self.phase = str(body["phase"])
            self._got = 0
            if self.phase == "setup":
                self._setup.opened(round_)
            ask, extra = self._rounds().open(round_, self._now)
            body = {k: v for k, v in body.items() if k not in ("ask", "secagg")}
            body.update(extra)
            if ask is not None:
                body["ask"] = ask
            self.state = AggregatorState.COLLECTING
            self._secure = None
            layout = self._round_layout(body)
            if layout is not None:
                self._secure, setup = SecureRound.open(
                    sorted(self.children) if ask is None else ask,
                    self.protocol,
                    layout,
                    node=self.node_id,
                    round_=round_,
                    sub=self.sub,
                    start=self._now,
                    deadline_s=self.deadline_s,
                )
                if setup is not None:
                    body["secagg"] = setup
        else:
            body = {k: v for k, v in body.items() if k != "secagg"}
        env = wire.Envelope(
            kind="model",
            run=self.protocol.run,
            round=round_,
            tier=self.tier,
            sender=self.node_id,
            body=body,
        )
        payload = self._seal.encode(env, self.topics.down)
        if collect and self._session_open():  # the setup's share of the broadcast
            plain = {k: v for k, v in body.items() if k != "secagg"}
            bare = dataclasses.replace(env, body=plain)
            extra_bytes = len(wire.encode(env)) - len(wire.encode(bare))
            assert self._secure is not None
            self._secure.count(body["secagg"], extra_bytes * len(self.children))
        effects: list[Effect] = [
            Publish(topic=self.topics.down, payload=payload, qos=self.protocol.qos, retain=True)
        ]
        if collect:
            timer = self._phase_timer() if self._session_open() else None
            effects.append(timer or SetTimer(name=_DEADLINE, delay_s=self.deadline_s))
        return effects

    def _round_layout(self, body: dict[str, Any]) -> Layout | None:
        """What this round's secure session sums (None: no session).

        The plug-in's partial layout in a model round; in a setup round the layout of
        the setup stage the body asks for, when the plug-in's setup replies are sums
        (a private setup), else none: the setup then travels in the clear.
        """
        if self._layout is None:
            return None
        if self.phase != "setup":
            return self._layout
        return self.algorithm.setup_layout(body.get("request"))

    def _start(self) -> list[Effect]:
        if self.algorithm.needs_setup(self._fixed_init):
            return self._broadcast(0, self._model_body("setup", None))
        return self._broadcast(1, self._model_body("iter", self.global_state))

    # -- collecting ------------------------------------------------------------------

    def _on_update(self, env: wire.Envelope, nbytes: int) -> list[Effect]:
        fields = {"node": self.node_id, "sender": env.sender, "round": env.round}
        if env.kind not in ("update", "secagg"):
            raise WireError(f"expected an update on {self.topics.children_up}, got {env.kind!r}")
        if env.sender not in self.children:
            return [Record(kind="foreign", fields=fields)]
        if env.kind == "secagg" or self._session_open():
            return self._on_secagg_reply(env, nbytes, fields)
        sub = env.body.get("sub", 0)
        staleness = self.round - env.round
        rounds = self._rounds()
        if (
            self.state is not AggregatorState.COLLECTING
            or sub != self.sub
            or not rounds.accepts(staleness)
        ):
            if 0 <= env.round <= self.round:
                rounds.observe_late(env.sender, env.round, self._now, nbytes)
            return [Record(kind="late", fields=fields)]
        key = (env.sender, env.round, sub if isinstance(sub, int) else -1)
        if key in self._seen_updates:
            return [Record(kind="duplicate", fields=fields)]
        body = env.body
        if self._setup.was_setup(env.round) != (self.phase == "setup"):  # e.g. setup, late
            return [Record(kind="late", fields=fields)]
        if self.phase == "setup":
            self.algorithm.check_setup(body)
        else:
            self.algorithm.check_partial(body)  # once, before it can poison a sum
        self._seen_updates.add(key)
        self._got += 1
        done = rounds.offer(Contribution(env.sender, body, env.round, staleness, self._now, nbytes))
        if done:
            return [CancelTimer(name=_DEADLINE), *self._close(deadline=False)]
        return []

    def _on_deadline(self) -> list[Effect]:
        if self.state is not AggregatorState.COLLECTING:
            return []
        if self._secure is not None:
            return self._secure_step()
        return self._close(deadline=True)

    # -- secure aggregation (aggregator side) -------------------------------------------

    def _session_open(self) -> bool:
        """Whether the round being collected runs a secure session that started."""
        return self._secure is not None and self._secure.session is not None

    def _on_secagg_reply(
        self, env: wire.Envelope, nbytes: int, fields: dict[str, Any]
    ) -> list[Effect]:
        """A member's reply in this round's secure session (plain updates are refused)."""
        if env.kind != "secagg":  # never sum a plaintext partial into a masked round
            return [
                Record(
                    kind="dropped",
                    fields={
                        **fields,
                        "reason": "plaintext update in a secure round",
                        "category": "malformed",
                    },
                )
            ]
        body = dict(env.body)
        sub = body.pop("sub", 0)
        if (
            self._secure is None
            or self._secure.session is None
            or self.state is not AggregatorState.COLLECTING
            or env.round != self.round
            or sub != self.sub
        ):
            return [Record(kind="late", fields=fields)]
        got = self._secure.receive(env.sender, body, nbytes)
        if got.refused:
            return [
                Record(
                    kind="dropped",
                    fields={**fields, "reason": got.refused, "category": "malformed"},
                )
            ]
        if not got.taken:
            return [Record(kind="late", fields=fields)]
        if got.key:
            self._got += 1
        if got.complete:
            return [CancelTimer(name=_DEADLINE), *self._secure_step()]
        return []

    def _secure_step(self) -> list[Effect]:
        """Close the session's current phase: send the next one, or close the round."""
        need = self._rounds().round_need()
        if need is None:
            need = self.need
        if self._secure is None:
            return self._closed(Closing(None, 0, need, {"secure_failure": "no secure session"}))
        a = self.algorithm
        out = self._secure.step(a.check_setup if self.phase == "setup" else a.check_partial, need)
        if isinstance(out, Closing):
            return self._closed(out)
        effects: list[Effect] = [self._publish_member(m, message) for m, message in out.items()]
        return [*effects, self._phase_timer()]

    def _phase_timer(self) -> SetTimer:
        """The current secure phase's deadline (:meth:`SecureRound.timer_delay`)."""
        assert self._secure is not None
        return SetTimer(name=_DEADLINE, delay_s=self._secure.timer_delay(self._now))

    def _publish_member(self, member: str, message: dict[str, Any]) -> Publish:
        env = wire.Envelope(
            kind="secagg",
            run=self.protocol.run,
            round=self.round,
            tier=self.tier,
            sender=self.node_id,
            body={**message, "sub": self.sub},
        )
        topic = self.topics.member(member)
        payload = self._seal.encode(env, topic)
        assert self._secure is not None
        self._secure.count(message, len(payload))
        return Publish(topic=topic, payload=payload, qos=self.protocol.qos)

    def _close(self, *, deadline: bool) -> list[Effect]:
        rounds = self._rounds()
        if self.phase == "setup":
            closing = self._setup.close(self.algorithm, self._rng, self.need)
        else:
            with np.errstate(all="ignore"):  # overflow is detected later, not warned about
                try:
                    closing = rounds.close(self.algorithm, deadline=deadline)
                except WireError:
                    closing = Closing(None, self._got, 1)
        return self._closed(closing)

    def _closed(self, closing: Closing) -> list[Effect]:
        """Record a closed round and go on (root: step the model; middle: forward)."""
        rounds = self._rounds()
        self._secure = None
        fields = {
            "node": self.node_id,
            "tier": self.tier,
            "round": self.round,
            "sub": self.sub,
            "phase": self.phase,
            "participants": closing.fresh,
            "expected": len(rounds.asked),
            "ok": closing.ok,
            **closing.fields,
        }
        self._last_need = closing.need
        head: list[Effect] = [Record(kind="aggregate", fields=fields)]
        if self.is_root:
            return head + self._root_close(closing)
        return head + self._middle_close(closing)

    # -- root ------------------------------------------------------------------------

    def _root_close(self, closing: Closing) -> list[Effect]:
        if self.phase == "setup":
            return self._root_after_setup(closing)
        self.iterations += 1
        prev = self.global_state
        assert prev is not None
        ok = closing.ok
        record: dict[str, Any] = {
            "round": self.round,
            "iteration": self.iterations,
            "tier": self.tier,
            "ok": ok,
        }
        step = None
        if ok:
            assert closing.total is not None
            try:
                with np.errstate(all="ignore"):  # overflow is detected below, not warned about
                    step = self.algorithm.next_state(
                        closing.total,
                        prev,
                        self.stop.prev_objective,
                        tol=self.protocol.tol,
                        relative=self.protocol.tol_mode == "relative",
                    )
            except WireError as exc:  # well-formed partials the model cannot take
                ok = False  # (e.g. another phase's): the round fails, recorded
                record.update(ok=False, failure=str(exc))
        if ok:
            assert closing.total is not None
            assert step is not None
            self.stop.succeeded()
            total = closing.total
            new, J = step.state, step.objective
            record.update(participants=self.algorithm.contributors(total), n=total["n"])
            record.update(step.info)
            if new is None or not (self.algorithm.is_finite(new) and math.isfinite(J)):
                record.update(converged=False, state=prev, diverged=True)
                return [
                    Record(kind="round", fields=record),
                    *self._root_finish(
                        RunStatus.DIVERGED,
                        f"round {self.iterations} produced a non-finite model; stopped with "
                        f"the model of round {self.iterations - 1}",
                    ),
                ]
            # settled: e.g. async, every child counted once
            self.stop.stepped(J, step.n, step.converged, settled=self.strategy.settled())
            self.global_state = new
            record.update(objective=J)
        else:
            self.stop.failed()
        # the model as it is used: with the schedule of the iteration that fitted it
        shown = self.algorithm.at_iteration(
            self.global_state, max(self.stop.successes, 1), self.extras
        )
        record.update(converged=self.stop.converged, state=shown)
        effects: list[Effect] = [Record(kind="round", fields=record)]
        end = self.stop.end(self.iterations, self._stall_reason)
        if end is not None:
            return effects + self._root_finish(*end)
        return effects + self._broadcast(
            self.round + 1, self._model_body("iter", self.global_state)
        )

    def _stall_reason(self) -> str:
        what = "setup round" if self.phase == "setup" else "round"
        rounds = self._rounds()
        return (
            f"{self.stop.failed_streak} consecutive {what}s below quorum: the last heard from "
            f"{self._got} of {len(rounds.asked)} children within its "
            f"{self.deadline_s:g} s deadline, {self._last_need} needed"
        )

    def _root_after_setup(self, closing: Closing) -> list[Effect]:
        ok = closing.ok
        if ok:
            assert closing.total is not None
            request = self.algorithm.setup_request(closing.total)
            if request is not None:  # another stage, under what this one released
                self._setup_request = request
                self.stop.failed_streak = 0
                return self._broadcast(self.round + 1, self._model_body("setup", None))
            state, extras, complete = self.algorithm.after_setup(
                closing.total, self.global_state if self._fixed_init else None
            )
            self.extras = extras
            ok = complete  # e.g. a view nobody reported: wait for a setup that covers all
            if not complete:
                self._setup_request = None  # start the staged setup over
            if state is not None:
                self.global_state = state
        if not ok or self.global_state is None:
            self.iterations += 1  # a failed setup counts against the limit: always terminate
            self.stop.failed()
            head: list[Effect] = [
                Record(
                    kind="setup_failed",
                    fields={"node": self.node_id, "iteration": self.iterations},
                )
            ]
            if self.stop.exhausted(self.iterations):
                reason = (
                    self._stall_reason()
                    if not ok
                    else "the setup rounds reached quorum but never gathered "
                    f"{self.shape.n_clusters} initial centres"
                )
                return [
                    *head,
                    Record(kind="failed", fields={"node": self.node_id, "reason": reason}),
                    *self._root_finish(RunStatus.STALLED, reason),
                ]
            return head + self._broadcast(self.round + 1, self._model_body("setup", None))
        self.stop.failed_streak = 0
        config: list[Effect] = []
        if self.extras:  # sent once, before the first model that needs it
            self.config_id = config_id(self.extras)
            config.append(self._publish_config(self.round + 1))
        return [
            Record(kind="init", fields={"node": self.node_id, "state": self.global_state}),
            *config,
            *self._broadcast(self.round + 1, self._model_body("iter", self.global_state)),
        ]

    def _root_finish(self, status: RunStatus, reason: str) -> list[Effect]:
        self.state = AggregatorState.DONE
        if self.global_state is not None:  # the final model: with the scale it was fitted at
            self.global_state = self.algorithm.at_iteration(
                self.global_state, max(self.stop.successes, 1), self.extras
            )
        self.result = {
            "state": self.global_state,
            "iterations": self.iterations,
            "converged": status is RunStatus.CONVERGED,
            "status": status.value,
            "reason": reason,
        }
        final: list[Effect] = []
        if self.global_state is not None:  # no model, nothing to broadcast
            final = self._broadcast(
                self.round + 1, self._model_body("final", self.global_state), collect=False
            )
        return [
            *final,
            Record(
                kind="finished",
                fields={
                    "node": self.node_id,
                    "iterations": self.iterations,
                    "converged": status is RunStatus.CONVERGED,
                    "status": status.value,
                    "reason": reason,
                },
            ),
            Finished(result=self.result),
        ]

    # -- middle tier -----------------------------------------------------------------

    def _on_parent_config(self, env: wire.Envelope) -> list[Effect]:
        """Take the parent's configuration and relay it to this group (retained)."""
        cid, extras = read_config(env)
        if cid == self.config_id:
            return [Record(kind="duplicate", fields={"node": self.node_id, "round": env.round})]
        self.config_id, self.extras = cid, extras
        effects: list[Effect] = [self._publish_config(env.round)]
        waiting = self._waiting
        if waiting is not None and model_config(waiting.body) == cid:
            self._waiting = None
            effects += self._take_parent_model(waiting)
        return effects

    def _on_parent_model(self, env: wire.Envelope) -> list[Effect]:
        if env.kind != "model":
            raise WireError(f"expected a model from the parent, got {env.kind!r}")
        body = env.body
        sub = body.get("sub", 0)
        key = (env.round, sub if isinstance(sub, int) else -1)
        if key in self._seen_models:
            return [Record(kind="duplicate", fields={"node": self.node_id, "round": env.round})]
        self._seen_models.add(key)
        return self._take_parent_model(env)

    def _take_parent_model(self, env: wire.Envelope) -> list[Effect]:
        body = env.body
        phase = body.get("phase")
        if phase == "final":
            self.state = AggregatorState.DONE
            return [*self._broadcast(env.round, body, collect=False), Finished(result=None)]
        if phase not in ("setup", "iter"):
            raise WireError(f"unknown model phase {phase!r}")
        ask = body.get("ask")
        if ask is not None and (not isinstance(ask, list) or self.node_id not in ask):
            if not isinstance(ask, list):
                raise WireError("body field 'ask' must be a list of node ids")
            return []  # the parent asked others this time
        if phase == "iter" and self.period > 1:
            cid = model_config(body)
            if cid is not None and cid != self.config_id:  # its own models need the extras
                if self._waiting is None or env.round >= self._waiting.round:
                    self._waiting = env
                return []
        self._plan_quorum(body.get("quorum") if phase == "iter" else None)
        joined = self._join_parent_session(env) if phase == "iter" or "secagg" in body else []
        if phase == "setup" or self.period == 1:
            return [*joined, CancelTimer(name=_DEADLINE), *self._broadcast(env.round, body)]
        self.global_state, extras = self.algorithm.read_model(body)
        if self.config_id is None:  # extras in the body itself (a plug-in's own choice)
            self.extras = extras
        down = self._model_body("iter", self.global_state, sub=1)
        if "compression" in body:
            down["compression"] = body["compression"]
        return [*joined, CancelTimer(name=_DEADLINE), *self._broadcast(env.round, down)]

    # -- secure aggregation (member of the parent's session) ---------------------------

    def _join_parent_session(self, env: wire.Envelope) -> list[Effect]:
        """Answer the setup of the parent's session; this round's sum will be the input."""
        if self._parent_session is None:
            return []
        setup = env.body.get("phase") == "setup"
        layout = self.algorithm.setup_layout(env.body.get("request")) if setup else self._layout
        if layout is None:
            return []
        return self._up_secagg(self._parent_session.join(self.protocol, env, layout))

    def _on_parent_secagg(self, env: wire.Envelope) -> list[Effect]:
        """A per-member message of the parent's session."""
        assert self._parent_session is not None  # its topic is subscribed only then
        return self._up_secagg(self._parent_session.answer(env))

    def _up_secagg(self, got: tuple[dict[str, Any] | None, list[Record]]) -> list[Effect]:
        """The records of a membership step, or its reply published up."""
        reply, records = got
        return [*records] if reply is None else [self._publish_secagg_up(reply)]

    def _publish_secagg_up(self, reply: dict[str, Any]) -> Publish:
        above = self.topics.parent
        assert above is not None
        assert self._parent_session is not None
        round_, sub = self._parent_session.key
        env = wire.Envelope(
            kind="secagg",
            run=self.protocol.run,
            round=round_,
            tier=self.tier,
            sender=self.node_id,
            body={**reply, "sub": sub},
        )
        return Publish(
            topic=above.up,
            payload=self._seal.encode(env, above.up),
            qos=self.protocol.qos,
        )

    def _forward(self, partial: dict[str, Any]) -> list[Effect]:
        """Send a partial up: in the clear, or as this member's masked input."""
        if self._parent_session is None:
            return [self._publish_up(partial)]
        return self._up_secagg(self._parent_session.provide(partial, self.round))

    def _plan_quorum(self, quorum: Any) -> None:
        """Close this round's collection at a quorum the parent planned (adaptive root)."""
        if quorum is not None and (
            isinstance(quorum, bool) or not isinstance(quorum, int | float) or not 0 < quorum <= 1
        ):
            raise WireError(f"body field 'quorum' must lie in (0, 1], got {quorum!r}")
        self.strategy.plan_quorum(None if quorum is None else float(quorum))

    def _publish_up(self, body: dict[str, Any]) -> Publish:
        above = self.topics.parent
        assert above is not None
        env = wire.Envelope(
            kind="update",
            run=self.protocol.run,
            round=self.round,
            tier=self.tier,
            sender=self.node_id,
            body=body,
        )
        return Publish(
            topic=above.up,
            payload=self._seal.encode(env, above.up),
            qos=self.protocol.qos,
        )

    def _middle_close(self, closing: Closing) -> list[Effect]:
        self.state = AggregatorState.WAITING
        if not closing.ok:
            return []  # the parent's deadline copes; nothing partial is forwarded below quorum
        total = closing.total
        assert total is not None
        if self.phase == "setup":  # a private setup's sum goes up masked, as a round's
            joined = self._parent_session is not None and self._parent_session.member is not None
            return self._forward(total) if joined else [self._publish_up(total)]
        overflow = Record(
            kind="dropped",
            fields={
                "node": self.node_id,
                "reason": "the children's partials sum to a non-finite value; nothing forwarded",
                "category": "malformed",
            },
        )
        with np.errstate(all="ignore"):  # overflow is detected, not warned about
            if self.period == 1:
                try:
                    self.algorithm.check_partial(total)
                except WireError:
                    return [overflow]
                return self._forward(total)
            prev = self.global_state
            assert prev is not None
            try:
                step = self.algorithm.next_state(total, prev, math.inf, tol=0.0, relative=False)
            except WireError as exc:  # well-formed partials the model cannot take
                return [
                    Record(
                        kind="dropped",
                        fields={
                            "node": self.node_id,
                            "reason": f"{exc}; nothing forwarded",
                            "category": "malformed",
                        },
                    )
                ]
        new = step.state
        if new is None or not self.algorithm.is_finite(new):
            return [overflow]
        self.global_state = new
        if self.sub < self.period:
            return self._broadcast(
                self.round, self._model_body("iter", self.global_state, sub=self.sub + 1)
            )
        partial = self.algorithm.subtree_partial(self.global_state, total)
        self.sub = 0
        return self._forward(partial)
