"""The suite's own policy files stay true to the tree."""

from tests.conftest import HERE, SLOW_MODULES


def test_every_slow_module_exists():
    # a renamed module must not silently drop out of the slow set (and into the quick one)
    missing = [p for p in SLOW_MODULES if not (HERE / p).exists()]
    assert not missing, f"SLOW_MODULES names what does not exist: {missing}"
