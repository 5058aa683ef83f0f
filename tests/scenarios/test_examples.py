"""Every example scenario runs and ends as its header comment says it will."""

import re
from pathlib import Path

import pytest
import yaml

from fedstrata.scenarios.loader import load_scenario, parse_scenario
from fedstrata.scenarios.run import simulate

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))
EXPECTED = re.compile(r"^# Expected \(seed 0\): status (\w+) after (\d+) rounds", re.M)
#: The final ARI the header promises: the first "ARI x.yyy" of the Expected comment.
ARI = re.compile(r"\bARI (\d\.\d+)")


def expected_ari(text: str, start: int) -> tuple[float, float]:
    """The ARI promised after ``start`` and half a unit of its last shown digit."""
    comment = text[start:].split("\n\n")[0]
    comment = "\n".join(line for line in comment.splitlines() if line.startswith("#"))
    match = ARI.search(comment)
    assert match, "the Expected comment names no 'ARI x.yyy'"
    digits = len(match.group(1).split(".")[1])
    return float(match.group(1)), 0.5 * 10**-digits + 1e-9


def test_there_are_examples():
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_ends_as_documented(path):
    text = path.read_text()
    match = EXPECTED.search(text)
    assert match, f"{path.name} has no '# Expected (seed 0): status ... after N rounds' line"
    status, rounds = match.group(1), int(match.group(2))
    ari, tolerance = expected_ari(text, match.start())
    _, summary, _ = simulate(load_scenario(path))
    assert (summary["status"], summary["rounds"]) == (status, rounds), summary["reason"]
    # the quality the header promises (on the hard data of faults-mfeat it is well below 1)
    assert summary["metrics"]["ari"] == pytest.approx(ari, abs=tolerance)


def test_a_fault_example_loses_quality_to_its_faults():
    """faults-mfeat.yaml: the same file without dropout and loss clusters better."""
    path = EXAMPLES[0].parent / "faults-mfeat.yaml"
    data = yaml.safe_load(path.read_text())
    data["faults"]["dropout"] = 0.0
    data["topology"]["clients"]["link"]["loss"] = 0.0
    _, faulty, _ = simulate(load_scenario(path))
    _, ideal, _ = simulate(parse_scenario(yaml.safe_dump(data)))
    assert ideal["messages_dropped"] == 0 < faulty["messages_dropped"]
    assert ideal["metrics"]["ari"] > faulty["metrics"]["ari"] + 0.05
