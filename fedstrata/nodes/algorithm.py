"""The algorithm plug-in interface: what the nodes compute, apart from how they talk.

A federation's nodes are transport-agnostic state machines
(:class:`~fedstrata.nodes.client.ClientNode`,
:class:`~fedstrata.nodes.aggregator.AggregatorNode`) that move message *bodies*
(plain dicts of numpy arrays and scalars, msgpack-encoded by :mod:`fedstrata.wire`).
Everything about the clustering itself lives behind two small interfaces:

* :class:`Learner`, one per client: holds the local views, answers the setup round
  and every model with a body, and labels its samples with the final model;
* :class:`Algorithm`, shared by every aggregator: validates and combines the
  children's *partials*, turns the root's combined partial into the next global
  model, and writes/reads model bodies.

A partial is *additive* (:attr:`Algorithm.additive`) when combining is a plain sum of
its arrays and counts: such partials travel through any number of tiers, can be
staleness-weighted by the asynchronous protocols (:meth:`Algorithm.scale`) and can be
masked by secure aggregation. The multi-view family (HK-MVFC, MV-FCM, MVKM-ED) is
implemented in :mod:`fedstrata.plugins.multiview`; a new family registers a factory
with :func:`register_algorithm` and leaves the nodes untouched.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstrata.errors import NodeProtocolError

if TYPE_CHECKING:
    from fedstrata.privacy.layout import Layout

__all__ = [
    "Algorithm",
    "Learner",
    "Step",
    "algorithm_for",
    "register_algorithm",
    "unregister_algorithm",
]


@dataclass(frozen=True)
class Step:
    """The root's next global model from a combined partial.

    ``state`` is None when the combined partial cannot be solved (for example its sum
    overflowed); ``objective`` is the clustering objective J of the new model over the
    contributing samples ``n``; ``converged`` is the algorithm's own stopping test.
    ``info``: extra numbers for the root's round record (``rounds.csv`` shows the
    known ones, such as ``dp_held``).
    """

    state: Any | None
    objective: float
    converged: bool
    n: float
    info: dict[str, float] = field(default_factory=dict)


class Learner(ABC):
    """A client's half of an algorithm: it owns the local data, never the network."""

    #: Number of local samples (the client's weight in most rules).
    n_samples: int

    @abstractmethod
    def setup(self, request: dict[str, Any] | None = None) -> tuple[dict[str, Any], float]:
        """The body answering a setup round, and the flops it cost.

        ``request`` is what the root asked for in a later setup stage
        (:meth:`Algorithm.setup_request`); None in the first.
        """

    def configure(self, extras: dict[str, Any]) -> None:
        """Take the run's extras (:meth:`Algorithm.after_setup`), sent once per run.

        Called when the configuration arrives, before any model that needs it reaches
        :meth:`update` or :meth:`finish` (the client holds such a model until then);
        again if a new configuration replaces it. Raise
        :class:`~fedstrata.errors.WireError` to refuse malformed extras (the previous
        ones stay). The default ignores them: a plug-in without extras needs nothing.
        """
        return None

    @abstractmethod
    def update(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """The partial answering a model body (an ``iter`` round), and its flops."""

    @abstractmethod
    def finish(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """The client's result under the final model (``labels`` at least), and its flops."""


class Algorithm(ABC):
    """An aggregator's half of an algorithm, and the factory of its learners."""

    #: Name shown in records (``"hk-mvfc/sum"`` ...).
    name: str
    #: Whether partials combine by plain sums (see the module docstring).
    additive: bool
    #: Uplink compressions :meth:`compress` supports besides ``"none"``.
    compressions: tuple[str, ...] = ()

    # -- clients -----------------------------------------------------------------------

    @abstractmethod
    def learner(
        self,
        views: Sequence[np.ndarray],
        *,
        view_ids: Sequence[int],
        rng: np.random.Generator,
        node_id: str,
    ) -> Learner:
        """A learner over one client's views (``view_ids`` of the federation's views)."""

    def update_batch(
        self, learners: Sequence[Learner], body: dict[str, Any]
    ) -> list[tuple[dict[str, Any], float] | None]:
        """Several learners' :meth:`Learner.update` under one model body, in one call.

        A plug-in may compute many small clients' steps as one vectorized step (the
        simulator's cohorts, :class:`~fedstrata.nodes.cohort.Cohort`). Entry ``i`` is
        exactly what ``learners[i].update(body)`` would return, bit for bit, or None:
        that learner computes its own. The update must be a pure function of the
        body, the learner's data and its configuration (no random draws, no state a
        later step reads). The default batches nothing.
        """
        return [None] * len(learners)

    def setup_batch(
        self, learners: Sequence[Learner], body: dict[str, Any]
    ) -> list[tuple[dict[str, Any], float, Callable[[], bool]] | None]:
        """Several learners' :meth:`Learner.setup` replies to one setup model (no request).

        Entry ``i`` is ``(reply, flops, claim)``: ``reply`` and ``flops`` are exactly
        what ``learners[i].setup()`` would return, bit for bit, but the learner itself
        is left unchanged until the caller calls ``claim()``, which makes the change its
        own call would have made (its random draws) and returns True, or returns False
        when the learner changed since (it then computes its own). None: the learner
        computes its own. The default batches nothing.
        """
        return [None] * len(learners)

    def finish_batch(
        self, learners: Sequence[Learner], body: dict[str, Any]
    ) -> list[tuple[dict[str, Any], float] | None]:
        """Several learners' :meth:`Learner.finish` under one final model body, in one call.

        As :meth:`update_batch`, for the final model: entry ``i`` is exactly
        ``learners[i].finish(body)``, bit for bit, or None. The default batches nothing.
        """
        return [None] * len(learners)

    # -- the setup round ---------------------------------------------------------------

    @abstractmethod
    def needs_setup(self, fixed_init: bool) -> bool:
        """Whether the root opens with a setup round (given a fixed initial model or not)."""

    @abstractmethod
    def check_setup(self, body: dict[str, Any]) -> None:
        """Validate a setup reply; raise :class:`~fedstrata.errors.WireError`."""

    @abstractmethod
    def merge_setup(
        self, bodies: Sequence[dict[str, Any]], rng: np.random.Generator
    ) -> dict[str, Any]:
        """Merge validated setup replies into one (a middle tier forwards it upwards)."""

    def setup_request(self, total: dict[str, Any]) -> dict[str, Any] | None:
        """Root: after a setup stage closed on ``total``, the next stage's request.

        None (the default): the setup is complete and :meth:`after_setup` follows. A
        dict: the root opens another setup round whose broadcast carries it as
        ``request``, handed to each client's :meth:`Learner.setup` (a private setup
        asks for sums under public quantities that the first stage released).
        """
        return None

    def setup_layout(self, request: dict[str, Any] | None) -> Layout | None:
        """The summed fields of a setup stage's replies, or None: they are not summable.

        With a layout and secure aggregation on, the setup round is a secure session
        like any other round, and aggregators learn only the sum of the replies.
        """
        return None

    @abstractmethod
    def after_setup(
        self, merged: dict[str, Any], state: Any | None
    ) -> tuple[Any | None, dict[str, Any], bool]:
        """Root: from the merged setup, (initial state, extras, complete).

        ``state`` is the fixed initial model, if any. ``extras`` is what every later
        model needs but never changes (the heat-kernel references): opaque to the
        nodes, sent once per run as its configuration (:mod:`fedstrata.nodes.
        runconfig`), handed to each client's :meth:`Learner.configure` and to
        :meth:`model_body`/:meth:`at_iteration`; ``{}``: no configuration.
        ``complete`` is False when the setup must be repeated (a view nobody reported).
        """

    # -- rounds ------------------------------------------------------------------------

    @abstractmethod
    def check_partial(self, body: dict[str, Any]) -> None:
        """Validate a child's partial, decoding a compressed one in place."""

    @abstractmethod
    def combine(self, partials: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Combine validated partials into one (a sum when :attr:`additive`)."""

    def mix(self, old: dict[str, Any], new: dict[str, Any], weight: float) -> dict[str, Any]:
        """``(1 − weight)·old + weight·new`` (additive partials of one child only).

        The asynchronous protocols keep each child's share of the aggregate and move it
        towards the child's newest partial by a staleness weight; counts (samples,
        contributors) are the newest partial's.
        """
        raise NodeProtocolError(f"{self.name}: partials are not additive; they cannot be mixed")

    def compress(
        self, partial: dict[str, Any], scheme: str, *, bits: int, rng: np.random.Generator | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``partial`` compressed for the uplink, and ``rel_error``/``fallbacks`` of it."""
        raise NodeProtocolError(f"{self.name} has no uplink compression")

    def secure_layout(self) -> Layout:
        """The summed fields of a partial, in order: what secure aggregation masks.

        Only additive algorithms have one (:mod:`fedstrata.privacy.layout`); a member
        writes its partial as one vector of this layout and the aggregator reads the
        unmasked sum back with it.
        """
        raise NodeProtocolError(
            f"{self.name}: partials are not additive; secure aggregation cannot sum them"
        )

    @abstractmethod
    def contributors(self, partial: dict[str, Any]) -> int:
        """How many clients a (combined) partial stands for."""

    @abstractmethod
    def next_state(
        self,
        total: dict[str, Any],
        previous: Any,
        previous_objective: float,
        *,
        tol: float,
        relative: bool,
    ) -> Step:
        """The root's step: next global model from the combined partial of a round."""

    @abstractmethod
    def subtree_partial(self, state: Any, total: dict[str, Any]) -> dict[str, Any]:
        """A middle tier's forward after local periods (HierFAVG): its subtree model."""

    @abstractmethod
    def is_finite(self, state: Any) -> bool:
        """Whether every number of ``state`` is finite."""

    def parameter_stop_test(self, *, relative: bool) -> str:
        """What :meth:`next_state`'s stopping test compares under a parameter rule, in words.

        The root's stop reason reads "<this> fell below tol=...". Rule ``sum`` and
        ``tol_mode: per_sample`` compare the objective J (the nodes say so themselves);
        the parameter rules compare whatever the algorithm's own test does. The default
        names no equation; a plug-in overrides it with its own test's name.
        """
        return "the relative model change" if relative else "the model change"

    # -- model bodies ------------------------------------------------------------------

    def at_iteration(self, state: Any, iteration: int, extras: dict[str, Any]) -> Any:
        """The root's model as sent for iteration ``iteration`` (1-based).

        The identity unless the algorithm has an iteration schedule (MVKM-ED's β).
        """
        return state

    @abstractmethod
    def model_body(self, state: Any, extras: dict[str, Any]) -> dict[str, Any]:
        """Body fields of a global model.

        ``extras`` (from :meth:`after_setup`) travel separately, once, as the run's
        configuration: do not copy them into the body (every model would carry them).
        """

    @abstractmethod
    def read_model(self, body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """A middle tier's view of its parent's model body: (state, extras).

        The extras are those the body itself carries (``{}`` when they come with the
        run's configuration, which the node then uses).
        """

    # -- observers: what the records need, never called by the nodes --------------------

    def observer(
        self,
        views: Sequence[np.ndarray],
        view_ids: Sequence[int],
        references: Sequence[Any] | None = None,
    ) -> Callable[[Any], np.ndarray]:
        """A function giving the labels of ``views`` under a global state.

        Used by the runs to score each round's model on the pooled data and to label
        every client's samples under the final model. ``references``: per held view,
        the pooled per-feature statistics the clients were configured with (None: the
        views' own).
        """
        raise NodeProtocolError(f"{self.name} cannot label data outside a client")

    def labels_batch(
        self, observers: Sequence[Callable[[Any], np.ndarray]], state: Any
    ) -> list[np.ndarray]:
        """``[o(state) for o in observers]`` for observers this plug-in made.

        A plug-in may label many clients in one vectorized call; each entry must be
        its observer's own result, bit for bit. The default calls each in turn.
        """
        return [o(state) for o in observers]

    def state_arrays(self, state: Any) -> dict[str, np.ndarray]:
        """The global state's arrays by name, for ``model.npz``."""
        raise NodeProtocolError(f"{self.name} cannot export its state")


Factory = Callable[[Any, Any, Any], Algorithm]
_FACTORIES: list[tuple[type, Factory]] = []


def register_algorithm(model_type: type, factory: Factory) -> None:
    """Make :func:`algorithm_for` build ``factory(model, protocol, shape)`` for ``model_type``."""
    _FACTORIES.insert(0, (model_type, factory))


def unregister_algorithm(model_type: type) -> None:
    """Forget the factories registered for ``model_type`` (a test's plug-in, when it ends)."""
    _FACTORIES[:] = [(t, f) for t, f in _FACTORIES if t is not model_type]


def algorithm_for(model: Any, protocol: Any, shape: Any) -> Algorithm:
    """The registered algorithm plug-in for a model's hyper-parameters and a protocol.

    The core registers nothing itself: whatever builds nodes imports the composition
    root (:mod:`fedstrata.registry`) first, which registers the built-in families.
    """
    for model_type, factory in _FACTORIES:
        if isinstance(model, model_type):
            return factory(model, protocol, shape)
    raise NodeProtocolError(
        f"no algorithm plug-in registered for {type(model).__name__}: import "
        "fedstrata.registry, the composition root, first (it registers the built-in "
        "families), or register one with register_algorithm"
    )
