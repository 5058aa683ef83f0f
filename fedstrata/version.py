"""The installed fedstrata's version (a leaf: any layer may read it)."""

__version__ = "0.1.0"
