"""Load scenario files, reporting every problem with its file, line and field path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError as PydanticValidationError

from fedstrata.errors import ScenarioError
from fedstrata.scenarios.schema import Scenario

__all__ = ["ScenarioErrors", "load_scenario", "parse_scenario"]


class ScenarioErrors(ScenarioError):  # noqa: N818 - a ScenarioError holding several
    """Several located problems in one file; ``errors`` lists them, the message joins them."""

    def __init__(self, errors: list[ScenarioError]) -> None:
        self.errors = errors
        super().__init__("; ".join(e.located() for e in errors))

    def located(self) -> str:
        """All problems, one per line."""
        return "\n".join(e.located() for e in self.errors)


def _line_of(root: yaml.Node | None, path: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest node on ``path`` (the parent when a key is missing)."""
    node, line = root, None if root is None else root.start_mark.line + 1
    for part in path:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    nxt, line = value, key.start_mark.line + 1
                    break
            if nxt is None:
                return line
            node = nxt
        elif (
            isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value)
        ):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _located(reason: str, path: str, root: yaml.Node | None, file: str) -> ScenarioError:
    loc = tuple(int(p) if p.isdigit() else p for p in path.split(".")) if path else ()
    return ScenarioError(reason, file=file, line=_line_of(root, loc), path=path)


def _describe(err: dict[str, Any]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def parse_scenario(text: str, *, file: str = "<string>") -> Scenario:
    """Parse and validate scenario YAML text.

    Raises
    ------
    ScenarioErrors
        With every problem found, each with file, line and field path.

    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioErrors(
            [ScenarioError(f"not valid YAML: {problem}", file=file, line=line)]
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioErrors(
            [ScenarioError("a scenario must be a mapping of sections", file=file, line=1)]
        )
    try:
        return Scenario.model_validate(data)
    except PydanticValidationError as exc:
        errors = []
        for err in exc.errors():
            inner = (err.get("ctx") or {}).get("error")
            if isinstance(inner, ScenarioError):  # a cross-field check that knows its path
                errors.append(_located(inner.reason, inner.path, root, file))
                continue
            loc = tuple(
                p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))
            )
            path = ".".join(str(p) for p in loc)
            errors.append(
                ScenarioError(_describe(err), file=file, line=_line_of(root, loc), path=path)
            )
        raise ScenarioErrors(errors) from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file (see :func:`parse_scenario`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioErrors(
            [ScenarioError(f"cannot read file: {exc.strerror}", file=str(p))]
        ) from None
    except UnicodeDecodeError:
        raise ScenarioErrors([ScenarioError("file is not UTF-8 text", file=str(p))]) from None
    return parse_scenario(text, file=str(p))
