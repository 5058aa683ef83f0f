"""mypy on the packages that ``[tool.mypy]`` in pyproject.toml lists: clean, or falling.

Every target must be clean. A target with known errors can be listed in
:data:`KNOWN_ERRORS` with its count, which may not rise and must be lowered as it falls
(to 0 and out of the list), so the list only shrinks; today it is empty.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TARGETS: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
    "mypy"
]["files"]
"""What mypy checks (``[tool.mypy] files``): modules and packages of ``fedstrata``."""

# mypy errors per target known and still to fix: none (nodes/, plugins/ and protocols/
# had 7, 4 and 6 when the check came in). A number here may only fall; delete it at 0.
KNOWN_ERRORS: dict[str, int] = {}

_ERROR = re.compile(r"^(?P<path>[^:\s]+\.pyi?):\d+(?::\d+)?: error: ", re.MULTILINE)


def target_of(path: str) -> str:
    """The entry of :data:`TARGETS` that holds ``path`` (the path itself when none does)."""
    for target in TARGETS:
        if path == target or path.startswith(target.rstrip("/") + "/"):
            return target
    return path


def errors_by_target(output: str) -> Counter[str]:
    """mypy's error lines in ``output``, counted by target."""
    return Counter(target_of(m["path"]) for m in _ERROR.finditer(output))


def run_mypy() -> str:
    """mypy's report on :data:`TARGETS`, with the settings of pyproject.toml."""
    try:
        import mypy  # noqa: F401
    except ImportError as exc:  # pragma: no cover - a dev install has it
        raise AssertionError('mypy is not installed: pip install -e ".[dev]"') from exc
    res = subprocess.run(
        [sys.executable, "-m", "mypy"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    # 0: clean, 1: type errors (counted below), 2: mypy could not run (bad config, crash)
    assert res.returncode in (0, 1), f"mypy could not run:\n{res.stdout}\n{res.stderr}"
    return res.stdout


def test_mypy_is_clean_or_falling_on_every_target():
    output = run_mypy()
    found = errors_by_target(output)
    problems = []
    for target in sorted(set(found) | set(KNOWN_ERRORS)):
        known, now = KNOWN_ERRORS.get(target, 0), found.get(target, 0)
        if now > known:
            problems.append(f"{target}: {now} errors (allowed {known})")
        elif now < known:
            problems.append(f"{target}: {now} errors now: lower KNOWN_ERRORS to {now}")
    unknown = sorted(set(KNOWN_ERRORS) - set(TARGETS))
    problems += [f"{t}: listed in KNOWN_ERRORS but not in [tool.mypy] files" for t in unknown]
    assert not problems, "\n".join(problems) + "\n\nmypy says:\n" + output


def test_the_dev_extra_installs_mypy():
    # CI and the README install [dev]: the check above must find mypy there
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    dev = project["optional-dependencies"]["dev"]
    assert any(re.match(r"mypy\b", req) for req in dev), dev


def test_errors_are_counted_by_target():
    # the counter itself, on made-up output: notes and summaries are not errors
    out = (
        "fedstrata/nodes/client.py:3: error: Bad  [arg-type]\n"
        "fedstrata/nodes/client.py:3: note: See here\n"
        "fedstrata/wire.py:9:5: error: Worse  [return-value]\n"
        "fedstrata/sim/engine.py:1: error: Elsewhere  [misc]\n"
        "Found 3 errors in 3 files (checked 40 source files)\n"
    )
    assert errors_by_target(out) == {
        "fedstrata/nodes": 1,
        "fedstrata/wire.py": 1,
        "fedstrata/sim/engine.py": 1,
    }
