"""The deep tests need PyTorch (the [deep] extra): skipped without it, except under CI."""

import os

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  (CI installs [deep]: a missing torch is a failure there)
else:
    pytest.importorskip("torch", reason="the [deep] extra is not installed")
