"""Check the growth of the simulated wire totals from shared to per-node ``up`` topics.

Children used to publish their updates on their group's shared ``fs/{run}/{tier}/{group}/up``;
they now publish on ``.../up/{node}``. Nothing else changes, so a scenario's wire total must
grow by exactly the sum, over every wire transmission of an update PUBLISH (the child to its
broker, the broker to the aggregator, retransmissions included), of ``len("/" + publisher)``
plus the growth of the packet's remaining-length varint where it crosses 128, 16384, ...
(the simulator does not count SUBSCRIBE packets, so the aggregators' filters ``up/+`` add
nothing here). Payload bytes must not change at all.

The prediction is made from the OLD tree's events only (its message sizes and publishers),
by its own varint arithmetic (no fedstrata size function), and compared with the totals of
the current tree::

    git archive <old commit> fedstrata | tar -x -C /tmp/fs_old
    python benchmarks/up_topic_delta.py --old /tmp/fs_old scenarios/papers/*.yaml

Each scenario runs twice (old and new tree, in subprocesses, events on); exit 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def varint_len(n: int) -> int:
    """Bytes of MQTT's variable-length encoding of ``n`` (7 bits per byte)."""
    size = 1
    while n >= 128:
        n //= 128
        size += 1
    return size


def grown(size: int, extra: int) -> int:
    """A PUBLISH packet of ``size`` bytes with ``extra`` more topic bytes: its new size."""
    # size = 1 (fixed header) + varint_len(rem) + rem: find rem
    for v in range(1, 5):
        rem = size - 1 - v
        if rem >= 0 and varint_len(rem) == v:
            return 1 + varint_len(rem + extra) + rem + extra
    raise ValueError(f"{size} is no PUBLISH packet size")


def _is_up(topic: str) -> bool:
    """Whether ``topic`` is an update topic, shared (``.../up``) or per node (``.../up/n``)."""
    parts = topic.split("/")
    return len(parts) >= 5 and parts[0] == "fs" and parts[4] == "up"


def dump(path: str) -> dict[str, Any]:
    """Simulate ``path`` (seed 0) with events; the totals and the update transmissions."""
    from fedstrata.scenarios.loader import parse_scenario
    from fedstrata.scenarios.run import simulate

    text = Path(path).read_text()
    sc = parse_scenario(text, file=path, base_dir=Path(path).parent)
    fed, summary, _ = simulate(sc, events=True)
    events = fed.sim.engine.events
    publisher: dict[int, str] = {}
    for ev in events:  # the child-to-broker hop names who published the message
        if ev["ev"] == "send" and ev["src"] in fed.sim.engine.nodes:
            publisher.setdefault(ev["mid"], ev["src"])
    ups = [
        (ev["bytes"], publisher[ev["mid"]], ev["topic"])
        for ev in events
        if ev["ev"] == "send" and ev["wire"] and _is_up(ev["topic"])
    ]
    return {
        "bytes_total": summary["bytes_total"],
        "payload_bytes": summary["payload_bytes"],
        "rounds": summary["rounds"],
        "status": summary["status"],
        "ups": ups,
    }


def run_in(tree: str | None, path: str) -> dict[str, Any]:
    """:func:`dump` in a subprocess importing fedstrata from ``tree`` (None: installed)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = tree
    out = subprocess.run(
        [sys.executable, __file__, "--dump", path],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def main() -> int:
    """Compare the old and new totals of each scenario with the predicted growth."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="+")
    ap.add_argument("--old", help="a tree holding the old fedstrata package")
    ap.add_argument("--dump", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dump:
        print(json.dumps(dump(args.scenarios[0])))
        return 0
    if not args.old:
        ap.error("--old is required")
    bad = 0
    for path in args.scenarios:
        old, new = run_in(args.old, path), run_in(None, path)
        assert all(topic.endswith("/up") for _, _, topic in old["ups"]), "old tree: shared up"
        predicted = sum(grown(size, len("/" + who)) - size for size, who, _ in old["ups"])
        delta = new["bytes_total"] - old["bytes_total"]
        same = (old["status"], old["rounds"], old["payload_bytes"]) == (
            new["status"],
            new["rounds"],
            new["payload_bytes"],
        )
        ok = delta == predicted and same and len(old["ups"]) == len(new["ups"])
        bad += not ok
        print(
            f"{Path(path).name}: {old['bytes_total']:,} -> {new['bytes_total']:,} "
            f"(+{delta:,}; predicted +{predicted:,} over {len(old['ups']):,} update "
            f"transmissions; payload {old['payload_bytes']} -> {new['payload_bytes']}; "
            f"{new['status']} after {new['rounds']}) {'ok' if ok else 'MISMATCH'}"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
