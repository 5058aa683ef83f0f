"""Scenario files, datasets and partitioners."""
