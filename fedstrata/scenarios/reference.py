"""The scenario file reference, generated from the schema itself.

Every section of a scenario file is a pydantic model of :mod:`fedstrata.scenarios.schema`;
this module walks them from :class:`~fedstrata.scenarios.schema.Scenario` down and writes
one table per section (key, accepted values, default) under the model's own docstring,
so the reference cannot drift from what ``fedstrata validate`` accepts.

    python -m fedstrata.scenarios.reference > docs/scenario-reference.md
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from typing import Any, Literal, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from fedstrata.scenarios.schema import Scenario

__all__ = ["scenario_reference"]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation refers to (through unions, lists, dicts)."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        out += _models_in(arg)
    return out


def _type_text(annotation: Any) -> str:
    """A reader's rendering of a field's type: literals as choices, models by section."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        base, *meta = args
        text = _type_text(base)
        bounds = [m.description for m in meta if isinstance(m, FieldInfo) and m.description]
        return f"{text} ({bounds[0]})" if bounds else text
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        parts = [_type_text(a) for a in args if a is not type(None)]
        text = " or ".join(dict.fromkeys(parts))
        return text + (" or null" if type(None) in args else "")
    if origin in (list, tuple):
        inner = ", ".join(_type_text(a) for a in args if a is not Ellipsis)
        return f"list of {inner}"
    if origin is dict:
        return f"map of {_type_text(args[0])} to {_type_text(args[1])}"
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return f"section `{_section_name(annotation)}`"
    name = getattr(annotation, "__name__", str(annotation))
    return {"int": "integer", "float": "number", "str": "string", "bool": "true/false"}.get(
        name, name
    )


def _section_name(model: type[BaseModel]) -> str:
    return re.sub(r"Spec$", "", model.__name__)


def _default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "see its section"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)) and not value:
        return "empty"
    return f"`{value}`"


def _description(field: FieldInfo) -> str:
    """A field's own description, unless it only repeats the bounds shown with the type."""
    text = field.description or ""
    return "" if re.fullmatch(r"[\[(].*[\])]|\d.*", text) else text


def scenario_reference() -> str:
    """The markdown reference of every section and key of a scenario file."""
    lines = [
        "# Scenario file reference",
        "",
        "Generated from the schema (`python -m fedstrata.scenarios.reference`): every key",
        "`fedstrata validate` accepts, its values and its default. Sections nest as the",
        "`section` types say; `Scenario` is the file itself.",
        "",
    ]
    seen: set[type[BaseModel]] = set()
    queue: list[type[BaseModel]] = [Scenario]
    while queue:
        model = queue.pop(0)
        if model in seen:
            continue
        seen.add(model)
        lines += [f"## `{_section_name(model)}`", ""]
        doc = inspect.cleandoc(model.__doc__ or "")
        if doc:
            lines += [doc, ""]
        lines += ["| key | values | default | notes |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            key = field.alias or name
            values = _type_text(field.annotation)
            lines.append(f"| `{key}` | {values} | {_default_text(field)} | {_description(field)} |")
            queue += [m for m in _models_in(field.annotation) if m not in seen]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(scenario_reference(), end="")
