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

from fedstrata.plugins.spec import AlgorithmSettings, Capabilities, algorithm_plugins
from fedstrata.scenarios.datasets import DATASETS
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
    return re.sub(r"(Spec|Settings)$", "", model.__name__)


def _table(model: type[BaseModel]) -> list[str]:
    """One row per key of ``model``: key, accepted values, default, notes."""
    lines = ["| key | values | default | notes |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        key = field.alias or name
        values = _type_text(field.annotation)
        lines.append(f"| `{key}` | {values} | {_default_text(field)} | {_description(field)} |")
    return lines


def _algorithms() -> list[str]:
    """Each registered algorithm's keys, from its plug-in's settings model."""
    lines: list[str] = []
    for plugin in algorithm_plugins():
        for model in plugin.settings:
            names = ", ".join(f"`{n}`" for n in model.names())
            lines += [f"### name: {names} ({plugin.family})", ""]
            shared = [
                c
                for c in model.__mro__[1:]
                if isinstance(c, type) and issubclass(c, AlgorithmSettings)
                if c is not AlgorithmSettings
            ]
            for cls in (model, *shared):
                lines += [inspect.cleandoc(cls.__doc__ or ""), ""]
            lines += [_capabilities_text(plugin.capabilities_of(model.names()[0])), ""]
            lines += [*_table(model), ""]
    return lines


def _capabilities_text(caps: Capabilities) -> str:
    """What ``validate`` lets an algorithm run with, from its declared capabilities."""

    def yes(flag: bool) -> str:
        return "yes" if flag else "no"

    def listed(values: tuple[str, ...] | None) -> str:
        return "any" if values is None else ", ".join(f"`{v}`" for v in values)

    parts = [
        f"rule {listed(caps.rules)}",
        f"kernel_scope {listed(caps.kernel_scopes)}",
        f"kind {listed(caps.protocol_kinds)}",
        f"compression {listed(('none', *caps.compressions))}",
        f"additive partials {yes(caps.additive)}",
        f"secure aggregation {yes(caps.secure_aggregation)}",
        f"differential privacy {yes(caps.dp)}",
        f"personalization {yes(caps.personalization)}",
        f"hybrid views {yes(caps.hybrid_views)}",
        f"tier periods > 1 {yes(caps.tier_periods)}",
    ]
    extras = "".join(f"; needs {e.what}" for e in caps.extras)
    return "Runs with: " + "; ".join(parts) + extras + "."


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


def _datasets() -> list[str]:
    """One row per registered dataset: its name, its loader's summary, its parameters."""
    lines = [
        "## `data.dataset` names",
        "",
        "The datasets a scenario can name (:data:`~fedstrata.scenarios.datasets.DATASETS`),",
        "with the keys ``data.params`` takes (``random_state`` comes from ``seed``).",
        "",
        "| dataset | what | `params` (default) |",
        "|---|---|---|",
    ]
    for name, loader in sorted(DATASETS.items()):
        summary = inspect.cleandoc(loader.__doc__ or "").split("\n")[0]
        params = [
            f"`{p.name}` (`{p.default!r}`)"
            for p in inspect.signature(loader).parameters.values()
            if p.name != "random_state" and p.default is not inspect.Parameter.empty
        ]
        lines.append(f"| `{name}` | {summary} | {', '.join(params) or 'none'} |")
    return [*lines, ""]


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
        if model is AlgorithmSettings:  # one table per registered algorithm instead
            lines += _algorithms()
            continue
        lines += ["| key | values | default | notes |", "|---|---|---|---|"]
        known = getattr(model, "known_fields", None)  # keys of a section's variants too
        for name, field in (known() if callable(known) else model.model_fields).items():
            key = field.alias or name
            values = _type_text(field.annotation)
            lines.append(f"| `{key}` | {values} | {_default_text(field)} | {_description(field)} |")
            queue += [m for m in _models_in(field.annotation) if m not in seen]
        lines.append("")
    return "\n".join(lines + _datasets())


if __name__ == "__main__":
    print(scenario_reference(), end="")
