"""The edge client: holds local views, answers each round's model with an update.

Sans-IO: :meth:`ClientNode.handle` takes an event and returns effects.

A client subscribes to its parent's ``down`` topic (the models) and ``config`` topic
(the run's configuration, :mod:`fedstrata.nodes.runconfig`). A model that names a
configuration the client does not have yet is kept (the newest one) and answered as
soon as that configuration arrives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

import numpy as np

from fedstrata import wire
from fedstrata.errors import NodeProtocolError, WireError
from fedstrata.mqtt import config_topic, down_topic, member_topic, up_topic
from fedstrata.nodes.algorithm import Algorithm, algorithm_for
from fedstrata.nodes.bodies import check_body, dropped
from fedstrata.nodes.cohort import Cohort
from fedstrata.nodes.config import Address, ProtocolConfig
from fedstrata.nodes.decoding import SharedDecoder
from fedstrata.nodes.events import (
    Compute,
    Delivered,
    Effect,
    Event,
    Finished,
    PeerLost,
    Publish,
    Record,
    Started,
    Subscribe,
    TimerFired,
)
from fedstrata.nodes.runconfig import model_config, read_config
from fedstrata.nodes.sealing import PLAIN, Seal, client_routes, rejected
from fedstrata.nodes.secure import REFUSALS, SecureMember, SessionLedger, member_answer
from fedstrata.privacy.layout import Layout
from fedstrata.privacy.signing import AuthenticationError

__all__ = ["ClientNode", "ClientState"]


class ClientState(Enum):
    """Lifecycle of a client."""

    NEW = "new"
    RUNNING = "running"
    DONE = "done"
    ERROR = "error"


_COHORT_KEYS = (bytes, wire.Unpacked)  # payloads a cohort remembers (not bytearray, ...)


class ClientNode:
    """An edge client: answers each model it is asked about with its learner's partial.

    Parameters
    ----------
    node_id
        Unique id, also the envelope sender.
    parent
        The aggregator it reports to.
    views
        Its local data, validated (n, d_h) arrays, one per view it holds.
    model
        The algorithm's hyper-parameters (a
        :class:`~fedstrata.algorithms.multiview.MultiViewModel`): the plug-in is
        looked up with :func:`~fedstrata.nodes.algorithm.algorithm_for` unless
        ``algorithm`` is given.
    protocol
        Protocol settings.
    shape
        The sizes every message of the federation agrees with, opaque to the node:
        the plug-in's own (the multi-view family's
        :class:`~fedstrata.plugins.messages.Shape`), handed to
        :func:`~fedstrata.nodes.algorithm.algorithm_for` with ``model`` (as the
        aggregators are).
    seed
        Seed of its own random generator (local initialisation).
    view_ids
        Hybrid views: which of the federation's views ``views`` are. By default it
        holds all views.
    algorithm
        The algorithm plug-in (one instance can be shared by a federation's clients,
        with whatever the plug-in caches for them).
    decoder
        Decodes model messages once for a federation's clients (see
        :class:`~fedstrata.nodes.decoding.SharedDecoder`); None: the client decodes
        every payload itself.
    cohort
        Computes the step of its parent's children in one batched call (see
        :class:`~fedstrata.nodes.cohort.Cohort`); None: the client computes its own.
        Either way its partials are the same, bit for bit.
    """

    tier = "edge"

    def __init__(
        self,
        node_id: str,
        *,
        parent: Address,
        views: Sequence[np.ndarray],
        model: Any,
        shape: Any,
        protocol: ProtocolConfig,
        seed: int = 0,
        view_ids: Sequence[int] | None = None,
        algorithm: Algorithm | None = None,
        seal: Seal | None = None,
        decoder: SharedDecoder | None = None,
        cohort: Cohort | None = None,
    ) -> None:
        self.node_id = node_id
        self.parent = parent
        self.views = [np.asarray(v, dtype=np.float64) for v in views]
        self.model = model
        self.protocol = protocol
        self.view_ids = tuple(range(len(self.views))) if view_ids is None else tuple(view_ids)
        self.shape = shape
        self.algorithm = algorithm or algorithm_for(model, protocol, self.shape)
        self.rng = np.random.default_rng(seed)
        # qsgd's rounding draws from a child stream: self.rng's own draws stay as they were
        self._qrng = self.rng.spawn(1)[0] if protocol.compression == "qsgd" else None
        self.learner = self.algorithm.learner(
            self.views, view_ids=self.view_ids, rng=self.rng, node_id=node_id
        )
        # the seal checks the run, topic and sender of every message it decodes
        self._seal = (seal or PLAIN).bind(
            protocol.run, client_routes(protocol.run, parent, node_id)
        )
        self._decode = wire.decode if decoder is None else decoder.decode
        self.state = ClientState.NEW
        self._seen: set[tuple[int, int]] = set()
        self.result: dict[str, Any] | None = None
        self._up_topic = up_topic(protocol.run, parent.tier, parent.group, node_id)
        self._config_topic = config_topic(protocol.run, parent.tier, parent.group)
        self.config_id: str | None = None  # the run configuration the learner holds
        self._waiting: wire.Envelope | None = None  # a model whose configuration is due
        self._waiting_key: bytes | wire.Unpacked = b""  # its payload
        self._cohort = cohort
        if cohort is not None:
            cohort.join(self)
        # secure aggregation: the layout of its partials and this round's session
        self._layout = self.algorithm.secure_layout() if protocol.secure != "none" else None
        self._member: SecureMember | None = None
        self._member_key: tuple[int, int] = (-1, 0)
        self._ledger = SessionLedger()  # one session per round and sub: never one input twice
        self._member_topic = member_topic(protocol.run, parent.tier, parent.group, node_id)

    @property
    def n_samples(self) -> int:
        """Number of local samples."""
        return self.learner.n_samples

    def handle(self, event: Event) -> list[Effect]:
        """Consume one event and return the effects to carry out."""
        if self.state is ClientState.ERROR:
            raise NodeProtocolError(f"{type(event).__name__} not allowed in state ERROR")
        if isinstance(event, Started):
            if self.state is not ClientState.NEW:
                raise NodeProtocolError("Started not allowed after start")
            self.state = ClientState.RUNNING
            secure: list[Effect] = []
            if self._layout is not None:
                secure.append(Subscribe(pattern=self._member_topic, qos=self.protocol.qos))
            return [
                *secure,
                Subscribe(pattern=self._config_topic, qos=self.protocol.qos),
                Subscribe(
                    pattern=down_topic(self.protocol.run, self.parent.tier, self.parent.group),
                    qos=self.protocol.qos,
                ),
            ]
        if self.state is ClientState.NEW:
            raise NodeProtocolError(f"{type(event).__name__} not allowed before Started")
        if self.state is ClientState.DONE or isinstance(event, TimerFired | PeerLost):
            return []
        if isinstance(event, Delivered):
            try:
                env = self._seal.decode(event.payload, event.topic, self._decode)
            except AuthenticationError as exc:
                return [rejected(self.node_id, exc)]
            except WireError as exc:  # not an envelope at all
                return [dropped(self.node_id, str(exc), "garbage")]
            try:
                check_body(env)  # the body's declared schema, before anything reads it
                if event.topic == self._config_topic:
                    return self._on_config(env)
                if event.topic == self._member_topic:
                    return self._on_secagg(env)
                return self._on_model(env, event.payload)
            except WireError as exc:  # fails the schema, or the plug-in's readers
                return [dropped(self.node_id, str(exc), "malformed")]
        raise NodeProtocolError(f"unknown event {type(event).__name__}")

    # -- protocol ------------------------------------------------------------------

    def _publish(self, round_: int, body: dict[str, Any], kind: str = "update") -> Publish:
        env = wire.Envelope(
            kind=kind,
            run=self.protocol.run,
            round=round_,
            tier=self.tier,
            sender=self.node_id,
            body=body,
        )
        return Publish(
            topic=self._up_topic,
            payload=self._seal.encode(env, self._up_topic),
            qos=self.protocol.qos,
        )

    def _send_partial(self, round_: int, partial: dict[str, Any], scheme: str) -> list[Effect]:
        """Publish an update partial, compressed as asked (with a record of the error)."""
        if scheme == "none":
            return [self._publish(round_, partial)]
        bits = self.protocol.compression_bits
        rng = self._qrng
        if scheme == "qsgd" and rng is None:
            rng = self._qrng = self.rng.spawn(1)[0]
        body, info = self.algorithm.compress(partial, scheme, bits=bits, rng=rng)
        publish = self._publish(round_, body)
        fields = {
            "node": self.node_id,
            "round": round_,
            "sub": int(partial.get("sub", 0)),
            "scheme": body["compression"],
            "rel_error": info["rel_error"],
            "fallbacks": info["fallbacks"],
            "payload_bytes": len(publish.payload),
        }
        return [publish, Record(kind="compression", fields=fields)]

    def _asked(self, body: dict[str, Any]) -> bool:
        """Whether a model message asks this client to answer (no ``ask`` list: everyone)."""
        ask = body.get("ask")
        if ask is None:
            return True
        if not isinstance(ask, list):
            raise WireError("body field 'ask' must be a list of node ids")
        return self.node_id in ask

    def _on_config(self, env: wire.Envelope) -> list[Effect]:
        """Hand the run's configuration to the learner; answer a model that waited for it."""
        cid, extras = read_config(env)
        if cid == self.config_id:  # QoS 1 duplicate, retained replay, a relay restarted
            return [Record(kind="duplicate", fields={"node": self.node_id, "round": env.round})]
        self.learner.configure(extras)  # WireError: refused, the previous one stays
        self.config_id = cid
        waiting = self._waiting
        if waiting is None or model_config(waiting.body) != cid:
            return []
        self._waiting = None
        return self._answer(waiting, self._waiting_key)

    def _on_model(self, env: wire.Envelope, payload: bytes | wire.Unpacked) -> list[Effect]:
        if env.kind != "model":
            raise WireError(f"a client expects model messages, got {env.kind!r}")
        body = env.body
        phase = body.get("phase")
        sub = body.get("sub", 0)
        if not isinstance(sub, int):
            raise WireError("body field 'sub' must be an int")
        key = (env.round, sub)
        if key in self._seen:  # QoS 1 duplicate or retained replay
            return [Record(kind="duplicate", fields={"node": self.node_id, "round": env.round})]
        self._seen.add(key)
        if phase != "final":
            if phase not in ("setup", "iter"):
                raise WireError(f"unknown model phase {phase!r}")
            if not self._asked(body):
                return []
        cid = None if phase == "setup" else model_config(body)
        if cid is not None and cid != self.config_id:  # keep the newest until it comes
            if self._waiting is None or env.round >= self._waiting.round:
                self._waiting, self._waiting_key = env, payload
            return []
        return self._answer(env, payload)

    def _step(
        self, payload: bytes | wire.Unpacked, body: dict[str, Any]
    ) -> tuple[dict[str, Any], float]:
        """The learner's partial under ``body`` (from the cohort's batch when there is one)."""
        cohort = self._cohort_for(payload)
        return self.learner.update(body) if cohort is None else cohort.update(self, payload, body)

    def _cohort_for(self, payload: bytes | wire.Unpacked) -> Cohort | None:
        """The cohort, when there is one and ``payload`` (a model's) can key its batches."""
        if self._cohort is None or type(payload) not in _COHORT_KEYS or not payload:
            return None
        return self._cohort

    def _answer(self, env: wire.Envelope, payload: bytes | wire.Unpacked) -> list[Effect]:
        """Answer a model (asked, with its configuration in place) that came as ``payload``."""
        body = env.body
        phase = body["phase"]
        sub = body.get("sub", 0)
        if phase == "final":
            return self._finish(env.round, body, payload)
        if phase == "setup":
            return self._answer_setup(env, payload)
        if self._layout is not None:
            return self._answer_secure(env, self._layout, lambda: self._step(payload, body))
        partial, flops = self._step(payload, body)
        if sub:
            partial["sub"] = int(sub)
        scheme = body.get("compression", self.protocol.compression)
        if scheme not in ("none", "float32", "float16", "qsgd"):
            raise WireError(f"unknown compression {scheme!r} asked")
        return [Compute(flops=flops), *self._send_partial(env.round, partial, scheme)]

    # -- secure aggregation ------------------------------------------------------------

    def _answer_setup(
        self, env: wire.Envelope, payload: bytes | wire.Unpacked = b""
    ) -> list[Effect]:
        """Answer a setup stage: in a secure session when its replies are sums, else plain."""
        request = env.body.get("request")
        if request is not None and not isinstance(request, dict):
            raise WireError("body field 'request' must be a map")
        layout = None if self._layout is None else self.algorithm.setup_layout(request)

        def compute() -> tuple[dict[str, Any], float]:
            if request is not None:
                return self.learner.setup(request)
            cohort = self._cohort_for(payload)
            return self.learner.setup() if cohort is None else cohort.setup(self, payload, env.body)

        if layout is not None:
            return self._answer_secure(env, layout, compute)
        reply, flops = compute()
        return [Compute(flops=flops), self._publish(env.round, reply)]

    def _answer_secure(
        self,
        env: wire.Envelope,
        layout: Layout,
        compute: Callable[[], tuple[dict[str, Any], float]],
    ) -> list[Effect]:
        """Join the round's secure session: keys now, the masked partial when asked."""
        body = env.body
        fields = {"node": self.node_id, "round": env.round}
        setup = body.get("secagg")
        sub = int(body.get("sub", 0))
        screened = self._ledger.screen(self.node_id, env.round, sub, setup)
        if setup is not None and screened is not None:  # a reopened round: refused, silent
            return [screened]
        self._member = None
        if setup is None:  # never answer a secure run's round in the clear
            return [
                Record(
                    kind="dropped",
                    fields={
                        **fields,
                        "reason": "a plaintext round under secure aggregation",
                        "category": "malformed",
                    },
                )
            ]
        partial, flops = compute()  # only for a session it joins
        try:
            member = SecureMember(self.node_id, self.protocol, layout, setup)
            member.provide(partial, skip=("sub",))
            reply = member.keys()
        except REFUSALS as exc:  # refused parameters, out-of-range values: sit this one out
            return [
                Compute(flops=flops),
                Record(kind="secure_refused", fields={**fields, "reason": str(exc)}),
            ]
        self._member, self._member_key = member, (env.round, sub)
        self._ledger.join(env.round, sub, member.session)
        return [Compute(flops=flops), self._publish(env.round, {**reply, "sub": sub}, "secagg")]

    def _on_secagg(self, env: wire.Envelope) -> list[Effect]:
        """A per-member message of the aggregator's session: answer it."""
        reply, records, stays = member_answer(self.node_id, self._member, self._member_key, env)
        if not stays:
            self._member = None
        if reply is None:
            return [*records]
        round_, sub = self._member_key
        return [self._publish(round_, {**reply, "sub": sub}, "secagg")]

    def _finish(
        self, round_: int, body: dict[str, Any], payload: bytes | wire.Unpacked = b""
    ) -> list[Effect]:
        cohort = self._cohort_for(payload)
        if cohort is None:
            result, flops = self.learner.finish(body)
        else:
            result, flops = cohort.finish(self, payload, body)
        self.state = ClientState.DONE
        self.result = result
        return [
            Compute(flops=flops),
            Record(kind="client_done", fields={"node": self.node_id, "round": round_}),
            Finished(result=self.result),
        ]
