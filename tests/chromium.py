"""Render a local HTML page in headless Chromium and read the screenshot back as pixels.

Missing Chromium skips the test locally and fails it under CI (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

CHROMIUM = next(
    (p for p in ("/usr/bin/chromium", shutil.which("chromium")) if p and Path(p).exists()), None
)
"""The Chromium executable, or None."""


def screenshot(page: Path, shot: Path, width: int, height: int) -> np.ndarray:
    """The pixels (height, width, channels) of ``page`` rendered at ``width`` x ``height``."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI")
        pytest.skip("chromium is not installed")
    res = subprocess.run(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={shot}",
            f"--window-size={width},{height}",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.is_file(), res.stderr[-2000:]
    return np.asarray(mpimg.imread(shot))
