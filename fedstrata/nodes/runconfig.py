"""The run's configuration message: an algorithm's extras, sent once instead of per model.

After the setup round the root's algorithm may return *extras* (:meth:`Algorithm.
after_setup`): fields every later model depends on but that never change, such as
the pooled heat-kernel references. The nodes treat them as opaque. The root
publishes them once, **retained**, on its group's ``config`` topic
(:func:`fedstrata.mqtt.config_topic`); each middle tier relays them to its own
``config`` topic; a client subscribes to its parent's. Model bodies carry only the
short :func:`config_id` of the extras they need (body field ``config``), so a child
that gets a model before the matching configuration keeps the model and answers once
the configuration arrives; a late or restarted child gets the retained configuration
when it subscribes.

The message is an envelope of kind ``control``::

    {"kind": "control", "round": <version of the first model needing it>, ...,
     "body": {"config": <id>, "extras": {...}}}
"""

from __future__ import annotations

import hashlib
from typing import Any

from fedstrata import wire
from fedstrata.errors import WireError

__all__ = ["CONFIG_FIELD", "config_id", "config_payload", "model_config", "read_config"]

#: Model body field naming the configuration a model needs (node-core field).
CONFIG_FIELD = "config"


def config_id(extras: dict[str, Any]) -> str:
    """A short id of ``extras``: 16 hex digits of a BLAKE2b hash of their wire encoding.

    The encoding is canonical (:func:`fedstrata.wire.encode`), so every process and
    every relay computes the same id for the same extras.
    """
    env = wire.Envelope(kind="control", run="config", round=0, tier="-", sender="-", body=extras)
    return hashlib.blake2b(wire.encode(env), digest_size=8).hexdigest()


def config_payload(
    *, run: str, round_: int, tier: str, sender: str, cid: str, extras: dict[str, Any]
) -> bytes:
    """The encoded configuration message."""
    env = wire.Envelope(
        kind="control",
        run=run,
        round=round_,
        tier=tier,
        sender=sender,
        body={CONFIG_FIELD: cid, "extras": extras},
    )
    return wire.encode(env)


def read_config(env: wire.Envelope) -> tuple[str, dict[str, Any]]:
    """``(id, extras)`` of a received configuration message; WireError if it is not one.

    The id must be the hash of the extras it comes with, so an id in a model body
    always stands for exactly these extras.
    """
    if env.kind != "control":
        raise WireError(f"expected a configuration (kind 'control'), got {env.kind!r}")
    cid, extras = env.body.get(CONFIG_FIELD), env.body.get("extras")
    if not isinstance(cid, str) or not isinstance(extras, dict):
        raise WireError("a configuration needs a str 'config' id and an 'extras' map")
    if config_id(extras) != cid:
        raise WireError(f"configuration {cid!r} does not match its extras")
    return cid, extras


def model_config(body: dict[str, Any]) -> str | None:
    """The configuration id a model body needs (None: none)."""
    cid = body.get(CONFIG_FIELD)
    if cid is not None and not isinstance(cid, str):
        raise WireError(f"body field {CONFIG_FIELD!r} must be a str")
    return cid
