import pytest

from fedstrata.errors import ValidationError
from fedstrata.netlab.compare import network_added, quantiles, read_rounds, round_durations


def test_round_durations_from_the_root_rows(tmp_path):
    path = tmp_path / "rounds.csv"
    path.write_text(
        "round,tier,phase,virtual_time_s\n"
        "0,fog,setup,0.20\n0,cloud,setup,0.25\n"
        "1,fog,iter,0.40\n1,cloud,iter,0.50\n"
        "2,fog,iter,0.60\n2,cloud,iter,1.25\n"
    )
    assert round_durations(read_rounds(path)) == pytest.approx([0.25, 0.75])
    assert round_durations(read_rounds(path), "fog") == pytest.approx([0.2, 0.2])


def test_a_repeated_round_counts_its_last_close():
    rows = [
        {"round": "0", "tier": "cloud", "virtual_time_s": "1.0"},
        {"round": "0", "tier": "cloud", "virtual_time_s": "3.0"},
        {"round": "1", "tier": "cloud", "virtual_time_s": "3.5"},
    ]
    assert round_durations(rows) == pytest.approx([0.5])


def test_network_added_pairs_rounds_and_quantiles():
    assert network_added([0.3, 0.5], [0.1, 0.1]) == pytest.approx([0.2, 0.4])
    with pytest.raises(ValidationError, match="3 rounds against 2"):
        network_added([1, 2, 3], [1, 2])
    med, p90 = quantiles([0.0, 0.1, 0.2, 0.3, 1.0])
    assert med == pytest.approx(0.2) and p90 == pytest.approx(0.72)
    assert all(x != x for x in quantiles([]))  # nan
