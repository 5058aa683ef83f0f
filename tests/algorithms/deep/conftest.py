"""The deep tests need PyTorch (the [deep] extra): skipped without it, except under CI."""

from tests.extras import require

require("torch")
