"""Clients that answer the same model together: one batched step for a parent's children.

In a simulation every child of an aggregator receives the same model payload, each at
its own virtual instant. A :class:`Cohort`, made once per parent by the builder and
handed to its clients, computes the step of every member that will answer that
payload the first time one of them asks (:meth:`~fedstrata.nodes.algorithm.Algorithm.
update_batch`, one vectorized call) and hands each member its own partial when its
turn comes. Nothing observable changes: a member's partial is bit for bit the one its
own :meth:`~fedstrata.nodes.algorithm.Learner.update` gives, its flops and its
message are its own, and when it answers is decided by the simulation as before. The
setup replies and the final model's labels are batched the same way
(:meth:`Cohort.setup`, :meth:`Cohort.finish`; a batched setup reply changes its
member's learner only when the member takes it).

Members the plug-in does not batch, a member whose configuration changed since the
batch, and a payload the cohort no longer remembers are computed on the member's own
path, which stays the reference.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

from fedstrata.nodes.algorithm import Algorithm, Learner
from fedstrata.wire import Unpacked

__all__ = ["Cohort", "CohortMember"]


_Batch = tuple[dict[str, tuple[Learner, str | None, Any]], set[str]]
"""One payload's batch: results by node id (learner, configuration, result), ids computed."""


class CohortMember(Protocol):
    """What a cohort reads of a client: its id, learner and configuration."""

    node_id: str
    learner: Learner
    config_id: str | None


class Cohort:
    """The batched client step of one parent's children (see the module docstring).

    Parameters
    ----------
    algorithm
        The plug-in the members share (its :meth:`~fedstrata.nodes.algorithm.
        Algorithm.update_batch` does the work).
    entries
        Model payloads remembered at once (older batches are forgotten: a member that
        comes later computes its own step).
    """

    def __init__(self, algorithm: Algorithm, *, entries: int = 4) -> None:
        self.algorithm = algorithm
        self.entries = entries
        self._members: dict[str, CohortMember] = {}
        # (update, finish or setup, payload) -> its batch
        self._batches: dict[tuple[str, bytes | Unpacked], _Batch] = {}
        self._lock = threading.Lock()  # an in-process MQTT run's clients may share one
        self.batched = 0  # steps handed out from a batch
        self.own = 0  # steps members computed on their own path

    def __reduce__(self) -> tuple[Any, ...]:
        """A copy (a pickled node) starts empty: members join again when they answer."""
        return _new_cohort, (self.algorithm, self.entries)

    def join(self, member: CohortMember) -> None:
        """Add ``member`` (a client built or restarted under this parent)."""
        with self._lock:
            self._members[member.node_id] = member

    def update(
        self, member: CohortMember, key: bytes | Unpacked, body: dict[str, Any]
    ) -> tuple[dict[str, Any], float]:
        """``member.learner.update(body)``, from the batch of payload ``key`` when it has one.

        ``key`` is the model message's payload: members answering the same bytes (the
        same :class:`~fedstrata.wire.Unpacked` message) get the same body.
        """
        return self._take("update", member, key, body)

    def finish(
        self, member: CohortMember, key: bytes | Unpacked, body: dict[str, Any]
    ) -> tuple[dict[str, Any], float]:
        """``member.learner.finish(body)`` under the final model, batched as :meth:`update`."""
        return self._take("finish", member, key, body)

    def setup(
        self, member: CohortMember, key: bytes | Unpacked, body: dict[str, Any]
    ) -> tuple[dict[str, Any], float]:
        """``member.learner.setup()`` for the setup model ``key``, batched as :meth:`update`.

        A batched reply is taken only if its claim holds (the learner's generator is
        still where the batch found it: see
        :meth:`~fedstrata.nodes.algorithm.Algorithm.setup_batch`).
        """
        return self._take("setup", member, key, body)

    def _take(
        self, kind: str, member: CohortMember, key: bytes | Unpacked, body: dict[str, Any]
    ) -> tuple[dict[str, Any], float]:
        with self._lock:
            if self._members.get(member.node_id) is not member:
                self._members[member.node_id] = member
            batch = self._batches.get((kind, key))
            if batch is None:
                batch = self._batches[kind, key] = self._new_batch()
            if member.node_id not in batch[1]:
                self._compute(kind, member, batch, body)  # those configured since
            entry = batch[0].pop(member.node_id, None)
        if entry is not None:
            learner, config, result = entry
            if (
                learner is member.learner
                and config == member.config_id
                and (kind != "setup" or result[2]())
            ):
                self.batched += 1
                return result[0], result[1]
        self.own += 1
        if kind == "setup":
            return member.learner.setup()
        own = member.learner.update if kind == "update" else member.learner.finish
        return own(body)

    def _new_batch(self) -> _Batch:
        """An empty batch (results by node id, ids computed), the oldest one forgotten."""
        if len(self._batches) >= self.entries:
            del self._batches[next(iter(self._batches))]
        return {}, set()

    def _compute(
        self,
        kind: str,
        member: CohortMember,
        batch: _Batch,
        body: dict[str, Any],
    ) -> None:
        """Add every member not computed yet, asked by ``body``, to ``batch``.

        Only members with ``member``'s configuration: the others' models wait for theirs.
        """
        results, done = batch
        ask = body.get("ask")
        asked = set(ask) if isinstance(ask, list) else None
        chosen = [
            m
            for m in self._members.values()
            if m.config_id == member.config_id
            and m.node_id not in done
            and (asked is None or m.node_id in asked)
        ]
        learners = [m.learner for m in chosen]
        a = self.algorithm
        out: Sequence[Any]
        try:
            if kind == "update":
                out = a.update_batch(learners, body)
            elif kind == "finish":
                out = a.finish_batch(learners, body)
            else:
                out = a.setup_batch(learners, body)
        except Exception:  # the members' own steps raise (or not) as they always did
            out = [None] * len(chosen)
        for m, r in zip(chosen, out, strict=True):
            done.add(m.node_id)
            if r is not None:
                results[m.node_id] = (m.learner, m.config_id, r)


def _new_cohort(algorithm: Algorithm, entries: int) -> Cohort:
    """An empty cohort with these settings (what a copy of one starts as)."""
    return Cohort(algorithm, entries=entries)
