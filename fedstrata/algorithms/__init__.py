"""Pure numpy multi-view clustering: client steps, sufficient statistics, server combine rules, estimators."""
