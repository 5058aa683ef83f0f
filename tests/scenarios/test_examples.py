"""Every example scenario runs and ends as its header comment says it will."""

import re
from pathlib import Path

import pytest

from fedstrata.scenarios.loader import load_scenario
from fedstrata.scenarios.run import simulate

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))
EXPECTED = re.compile(r"^# Expected \(seed 0\): status (\w+) after (\d+) rounds", re.M)


def test_there_are_examples():
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_ends_as_documented(path):
    match = EXPECTED.search(path.read_text())
    assert match, f"{path.name} has no '# Expected (seed 0): status ... after N rounds' line"
    status, rounds = match.group(1), int(match.group(2))
    _, summary, _ = simulate(load_scenario(path))
    assert (summary["status"], summary["rounds"]) == (status, rounds), summary["reason"]
    # every example clusters its data well, whatever its network does
    assert summary["metrics"]["ari"] >= 0.97
