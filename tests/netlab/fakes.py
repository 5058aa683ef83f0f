"""A fake command runner for the lab: records what would run, answers the listing commands."""

from __future__ import annotations

import json


class FakeRunner:
    """Records every command; ``ip -j netns list`` and ``ip netns pids`` answer from state."""

    def __init__(self, namespaces=(), pids=None, fail_on=None):
        self.namespaces = list(namespaces)
        self.pids = dict(pids or {})
        self.calls: list[tuple[list[str], str | None]] = []
        self.fail_on = fail_on

    def __call__(self, argv, input=None):
        self.calls.append((list(argv), input))
        if self.fail_on and self.fail_on in argv:
            raise RuntimeError(f"refused: {argv}")
        if argv[:4] == ["ip", "-j", "netns", "list"]:
            return json.dumps([{"name": n} for n in self.namespaces]) if self.namespaces else ""
        if argv[:3] == ["ip", "netns", "pids"]:
            return "".join(f"{p}\n" for p in self.pids.get(argv[3], []))
        if argv[:3] == ["ip", "netns", "add"]:
            self.namespaces.append(argv[3])
        if argv[:3] == ["ip", "netns", "delete"]:
            self.namespaces.remove(argv[3])
        return ""

    def argvs(self):
        return [a for a, _ in self.calls]
