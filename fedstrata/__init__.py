"""fedstrata: federated multi-view clustering over hierarchical edge-fog-cloud networks."""

__version__ = "0.1.0"
