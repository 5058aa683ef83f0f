"""Scenario files, datasets and partitioners."""

# Registers the held-out data sets in datasets.DATASETS before any scenario module runs
# (real_sets imports datasets, never the other way round: no import cycle).
import fedstrata.scenarios.real_sets  # noqa: F401
