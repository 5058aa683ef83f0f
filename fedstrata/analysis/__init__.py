"""Clustering metrics, run records, plots."""
