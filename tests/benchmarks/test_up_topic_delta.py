"""benchmarks/up_topic_delta.py: its own PUBLISH arithmetic agrees with fedstrata.mqtt's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from fedstrata.mqtt import publish_packet_size

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location(
        "up_topic_delta", ROOT / "benchmarks" / "up_topic_delta.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["up_topic_delta"] = module
    spec.loader.exec_module(module)
    return module


delta = _load()


@pytest.mark.parametrize("qos", [0, 1])
def test_growing_a_topic_matches_the_packet_size_across_varint_steps(qos):
    shared = "fs/r/cloud/cloud/up"
    # payloads around the remaining-length steps 128 and 16,384, where the varint grows
    for payload in [*range(90, 130), *range(16_330, 16_380), 0, 5_000]:
        for node in ("c", "client-0", "a-much-longer-node-name-17"):
            old = publish_packet_size(shared, payload, qos)
            new = publish_packet_size(f"{shared}/{node}", payload, qos)
            assert delta.grown(old, len("/" + node)) == new, (payload, node)


def test_only_update_topics_count():
    assert delta._is_up("fs/r/fog/fog-0/up") and delta._is_up("fs/r/fog/fog-0/up/client-3")
    for topic in ("fs/r/fog/fog-0/down", "fs/r/fog/fog-0/to/up", "fs/r/presence/up", "x/up"):
        assert not delta._is_up(topic), topic
