"""Secure aggregation and differential privacy (sans-IO)."""
