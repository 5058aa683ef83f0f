"""A client of tests/broker/test_secure_mqtt.py that is SIGKILLed after its masked input.

Run as ``python -m tests.broker.secure_victim INDEX HOST PORT`` from the repository
root. It prints ``ready`` once connected, and ``masked`` once its masked input is published, then the process kills
itself with SIGKILL half a second later (time for the QoS 1 publish to reach the
broker); from that moment it handles no event, so it never answers the unmasking
round however fast the others are.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading

import fedstrata.registry  # noqa: F401  (the composition root: registers plug-ins and kinds)
from fedstrata import wire
from fedstrata.algorithms.multiview import MultiViewModel
from fedstrata.broker.runner import NodeRunner
from fedstrata.nodes.client import ClientNode
from fedstrata.nodes.config import Address
from fedstrata.nodes.events import Publish, Started
from fedstrata.privacy import secagg
from tests.nodes.test_secure_aggregation import SHAPE, protocol, views


class Victim:
    def __init__(self, node: ClientNode) -> None:
        self.node = node
        self.node_id = node.node_id
        self.dead = False

    def handle(self, event):
        if self.dead:  # from the masked input on, it answers nothing (the kill is coming)
            return []
        effects = self.node.handle(event)
        if isinstance(event, Started):  # connected: the test may start the root now
            print("ready", flush=True)
        for e in effects:
            if isinstance(e, Publish) and wire.decode(e.payload).body.get("type") == secagg.MASKED:
                self.dead = True
                print("masked", flush=True)
                threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
        return effects


def main() -> None:
    i, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    node = ClientNode(
        f"client-{i}",
        parent=Address("cloud", "cloud"),
        views=views(i),
        model=MultiViewModel(3),
        shape=SHAPE,
        protocol=protocol("secagg"),
        seed=i,
    )
    asyncio.run(NodeRunner(Victim(node), host, port, client_id=f"victim-{i}").run())


if __name__ == "__main__":
    main()
