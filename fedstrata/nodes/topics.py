"""The topics an aggregator subscribes and publishes to, by name.

An aggregator talks on two groups: its own (its children publish up to it, it
broadcasts models and the run's configuration down) and, below the root, its
parent's (it reads the parent's models and configuration, and publishes its
subtree's partial up). :class:`AggregatorTopics` names each of them once.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedstrata.mqtt import (
    config_topic,
    down_topic,
    group_prefix,
    member_topic,
    up_filter,
    up_topic,
)
from fedstrata.nodes.config import Address

__all__ = ["AggregatorTopics", "ParentTopics"]


@dataclass(frozen=True)
class ParentTopics:
    """A middle tier's topics in its parent's group."""

    #: Its own update topic there.
    up: str
    #: The parent's model broadcasts.
    down: str
    #: The parent's configuration.
    config: str
    #: Its per-member topic in the parent's secure sessions (None: no secure aggregation).
    member: str | None


@dataclass(frozen=True)
class AggregatorTopics:
    """Every topic of one aggregator; ``parent`` is None at the root."""

    run: str
    tier: str
    node_id: str
    #: Its children's updates (a wildcard filter over ``up/<child>``).
    children_up: str
    #: Prefix of a child's update topic: what follows names the publisher.
    children_up_prefix: str
    #: Where it broadcasts models to its children.
    down: str
    #: Where it publishes the run's configuration to its children.
    config: str
    parent: ParentTopics | None

    @classmethod
    def of(
        cls, run: str, tier: str, node_id: str, parent: Address | None, *, secure: bool
    ) -> AggregatorTopics:
        """The topics of aggregator ``node_id`` of ``tier`` under ``parent`` in ``run``."""
        above = None
        if parent is not None:
            tier_p, group = parent.tier, parent.group
            above = ParentTopics(
                up=up_topic(run, tier_p, group, node_id),
                down=down_topic(run, tier_p, group),
                config=config_topic(run, tier_p, group),
                member=member_topic(run, tier_p, group, node_id) if secure else None,
            )
        return cls(
            run=run,
            tier=tier,
            node_id=node_id,
            children_up=up_filter(run, tier, node_id),
            # children publish on up/<child>: the topic names the publisher
            children_up_prefix=group_prefix(run, tier, node_id) + "up/",
            down=down_topic(run, tier, node_id),
            config=config_topic(run, tier, node_id),
            parent=above,
        )

    def member(self, child: str) -> str:
        """The per-member topic of ``child`` in this aggregator's secure sessions."""
        return member_topic(self.run, self.tier, self.node_id, child)
