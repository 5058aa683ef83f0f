"""Load scenario files, reporting every problem with its file, line and field path.

:func:`load_scenario` is the one entry point of ``fedstrata validate`` and
``fedstrata run``: it reads the file, parses it with a hardened YAML loader,
validates it against :mod:`~fedstrata.scenarios.schema` and runs the pre-flight
checks of :mod:`~fedstrata.scenarios.preflight`. Every problem becomes a
:class:`~fedstrata.errors.ScenarioError` with file, 1-based line and dotted field path
(``file:line: path: reason``), collected into one :class:`ScenarioErrors`; no other
exception escapes.

Hostile input is refused before it costs memory or time: files over
:data:`MAX_FILE_BYTES`, non-UTF-8 bytes, control characters, nesting deeper than
:data:`MAX_DEPTH`, documents expanding (aliases included) to more than
:data:`MAX_NODES` values, and values longer than :data:`MAX_SCALAR_CHARS`
characters. Duplicate keys are errors (YAML would silently keep the last one).
Numbers such as ``1e-6`` are floats (YAML 1.2), not strings.
"""

from __future__ import annotations

import copy
import os
import re
import stat
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from fedstrata.errors import ScenarioError
from fedstrata.scenarios.preflight import preflight as run_preflight
from fedstrata.scenarios.schema import Scenario, ScenarioErrors, clip, describe_error, show

__all__ = [
    "MAX_DEPTH",
    "MAX_ERRORS",
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "MAX_SCALAR_CHARS",
    "ScenarioErrors",
    "load_scenario",
    "parse_scenario",
    "scenario_json_schema",
]

MAX_FILE_BYTES = 1024 * 1024
"""Largest scenario file read, in bytes (1 MiB)."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists."""
MAX_NODES = 10_000
"""Most values (scalars, lists, mappings) in a document, each alias counted at full size."""
MAX_SCALAR_CHARS = 4096
"""Longest single value, in characters."""
MAX_ERRORS = 20
"""Most problems reported for one file; the rest are summarised in one more line."""

_NON_PRINTABLE = yaml.reader.Reader.NON_PRINTABLE
_FLOAT_12 = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
_MERGE = "tag:yaml.org,2002:merge"


class _Limit(yaml.MarkedYAMLError):
    """A document that exceeds a size limit, at the mark where it did."""

    def __init__(self, reason: str, mark: yaml.Mark) -> None:
        super().__init__(problem=reason, problem_mark=mark)


class _Loader(yaml.SafeLoader):
    """SafeLoader that bounds nesting and alias expansion while composing.

    ``_nodes`` counts every node composed, an alias counting the full size of what it
    refers to, so a "billion laughs" document is refused after :data:`MAX_NODES`
    values instead of being expanded later by whoever walks the data.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0
        self._sizes: dict[str, int] = {}
        self._open: set[str] = set()
        self.last_node: yaml.Node | None = None

    def _count(self, n: int, mark: yaml.Mark) -> None:
        self._nodes += n
        if self._nodes > MAX_NODES:
            raise _Limit(
                f"the document expands to more than {MAX_NODES} values (aliases counted in "
                "full); a scenario is much smaller",
                mark,
            )

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open:
                raise _Limit(
                    f"alias *{clip(str(event.anchor))} refers to a value that contains it",
                    event.start_mark,
                )
            self._count(self._sizes.get(event.anchor, 1), event.start_mark)
            return super().compose_node(parent, index)
        collection = isinstance(event, yaml.CollectionStartEvent)
        if collection:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise _Limit(f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        before = self._nodes
        self._count(1, event.start_mark)
        anchor = event.anchor
        if anchor is not None:
            self._open.add(anchor)
        node = super().compose_node(parent, index)
        if anchor is not None:
            self._open.discard(anchor)
            self._sizes[anchor] = self._nodes - before
        if collection:
            self._depth -= 1
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        self.last_node = node
        return super().construct_object(node, deep)


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789"))


# ------------------------------------------------------------------------------ locating


_Index = dict[int, dict[str, tuple[yaml.Node, int]]]


def _mark_of(
    root: yaml.Node | None, path: tuple[Any, ...], index: _Index | None = None
) -> yaml.Mark | None:
    """Start mark of the deepest node (or key) on ``path`` (the parent when a key is missing).

    A repeated key resolves to its last occurrence, the one YAML keeps. ``index``
    caches each mapping's keys across calls (many errors in one big mapping). The
    mark's ``name`` is the file the node was read from (a base file, after ``extends``).
    """
    index = {} if index is None else index
    node, mark = root, None if root is None else root.start_mark
    for part in path:
        if isinstance(node, yaml.MappingNode):
            keys = index.get(id(node))
            if keys is None:
                keys = {
                    key.value: (value, key.start_mark)
                    for key, value in node.value
                    if isinstance(key, yaml.ScalarNode)
                }
                index[id(node)] = keys
            hit = keys.get(str(part))
            if hit is None:
                return mark
            node, mark = hit
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(part, int)
            and 0 <= part < len(node.value)
        ):
            node = node.value[part]
            mark = node.start_mark
        else:
            return mark
    return mark


def _line_of(
    root: yaml.Node | None, path: tuple[Any, ...], index: _Index | None = None
) -> int | None:
    """1-based line of the deepest node on ``path`` (see :func:`_mark_of`)."""
    mark = _mark_of(root, path, index)
    return None if mark is None else mark.line + 1


def _where(
    root: yaml.Node | None, path: tuple[Any, ...], file: str, index: _Index | None = None
) -> tuple[str, int | None]:
    """File and 1-based line of ``path``: the base file's when the value came from it."""
    mark = _mark_of(root, path, index)
    if mark is None:
        return file, None
    return (mark.name or file), mark.line + 1


#: Key names whose values are never shown in an error line, in any file: a word of
#: the key (split at ``_``, ``-`` and case changes) is one of these.
SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "pass",
        "pwd",
        "secret",
        "token",
        "apikey",
        "credential",
        "credentials",
        "auth",
        "cookie",
        "private",
    }
)
#: Suffixes of keys that say where a secret lives (a file, a variable), not the secret.
_WHERE = ("file", "path", "dir", "env", "var")


def _secret_key(name: str) -> bool:
    """Whether ``name`` is named like a secret (``password``, ``api_token``, ``apiKey``)."""
    words = [w.lower() for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", name) if w]
    if not words or words[-1] in _WHERE:
        return False
    joined = "".join(words)
    return any(w in SECRET_WORDS for w in words) or joined.endswith("apikey")


#: What an error line says instead of a value it must not show.
HIDDEN = "(value not shown)"


def _hidden(loc: tuple[Any, ...], where: str, file: str) -> str | None:
    """Which values an error at ``loc`` must not show: the rule for secrets.

    ``"all"`` when a key on the path is named like a secret (:data:`SECRET_WORDS`), in
    any file; ``"strings"`` when the value was read from another file than the
    scenario itself (a base file reached by ``extends`` may be any file: a secrets
    file, a key): numbers, booleans and null are settings and are shown, text is
    not; ``None`` (show) otherwise. The error still names the key and the
    ``file:line`` of the value.
    """
    if any(isinstance(p, str) and _secret_key(p) for p in loc):
        return "all"
    return "strings" if where != file else None


#: Tags of the YAML scalars that are settings, not text (shown from base files).
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool", "null"))


def _scalars(node: yaml.Node | None, which: str, limit: int = 64) -> list[str]:
    """The scalar texts under ``node`` that ``which`` hides (at most ``limit``), longest first."""
    found: list[str] = []
    stack = [node]
    while stack and len(found) < limit:
        n = stack.pop()
        if isinstance(n, yaml.ScalarNode):
            if n.value and (which == "all" or n.tag not in _PLAIN_TAGS):
                found.append(str(n.value))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
        elif isinstance(n, yaml.MappingNode):
            stack.extend(v for pair in n.value for v in pair)
    return sorted(set(found), key=len, reverse=True)


def _node_at(root: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    """The node at ``loc`` (the last occurrence of a repeated key), or ``None``."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            hits = [v for k, v in node.value if isinstance(k, yaml.ScalarNode)]
            keys = [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode)]
            if str(part) not in keys:
                return None
            node = hits[len(keys) - 1 - keys[::-1].index(str(part))]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if not 0 <= part < len(node.value):
                return None
            node = node.value[part]
        else:
            return None
    return node


def _hide_values(reason: str, texts: list[str]) -> str:
    """``reason`` with every rendering of ``texts`` replaced by :data:`HIDDEN`."""
    for text in texts:
        for shown in (show(text), repr(text), text):
            # a value of one or two characters ("1", "a") would hide random letters
            if len(shown) >= 3 and shown in reason:
                reason = reason.replace(shown, HIDDEN)
    return reason


def _located(reason: str, path: str, root: yaml.Node | None, file: str) -> ScenarioError:
    loc = tuple(int(p) if p.isdigit() else p for p in path.split(".")) if path else ()
    where, line = _where(root, loc, file)
    which = _hidden(loc, where, file)
    if which is not None:
        reason = _hide_values(reason, _scalars(_node_at(root, loc), which))
    return ScenarioError(reason, file=where, line=line, path=path)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside a field annotation (``X``, ``X | None``, ``list[X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _fields_of(model: type[BaseModel]) -> dict[str, Any]:
    """The keys a section takes: its fields, or its ``known_fields()`` if it has one.

    A section declares ``known_fields`` where its variants bring keys of their own (the
    protocol kinds' keys sit flat under ``protocol:``).
    """
    known = getattr(model, "known_fields", None)
    return dict(known()) if callable(known) else dict(model.model_fields)


def _model_at(loc: tuple[Any, ...], top: type[BaseModel] = Scenario) -> type[BaseModel] | None:
    """The pydantic model at ``loc`` below the document model ``top``."""
    cls: type[BaseModel] | None = top
    for part in loc:
        if isinstance(part, int):
            continue  # a list entry has the list's item model
        field = None if cls is None else _fields_of(cls).get(part)
        if field is None:
            return None
        cls = _model_in(field.annotation)
    return cls


def _pydantic_errors(
    exc: PydanticValidationError,
    root: yaml.Node | None,
    file: str,
    top: type[BaseModel] = Scenario,
) -> list[ScenarioError]:
    """Located errors of validating the document ``root`` of ``file`` as ``top``."""
    errors: list[ScenarioError] = []
    index: _Index = {}
    for err in exc.errors(include_url=False):
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, ScenarioErrors):  # cross-field checks that know their paths
            errors.extend(_located(e.reason, e.path, root, file) for e in inner.errors)
            continue
        if isinstance(inner, ScenarioError):
            errors.append(_located(inner.reason, inner.path, root, file))
            continue
        loc = tuple(
            p
            for p in err["loc"]
            if not (isinstance(p, str) and (p.startswith("function-") or p == "[key]"))
        )
        reason = describe_error(err)
        where, line = _where(root, loc, file, index)
        which = _hidden(loc, where, file)
        if which is not None:
            texts = _scalars(_node_at(root, loc), which)
            value = err.get("input")
            plain = value is None or isinstance(value, bool | int | float)
            if which == "all" or not plain:
                got = show(value)
                if f"got {got}" in reason:
                    reason = reason.replace(f"got {got}", f"got {HIDDEN}")
                if isinstance(value, str | int | float) and not isinstance(value, bool):
                    texts.insert(0, str(value))
            reason = _hide_values(reason, texts)
        if err["type"] == "extra_forbidden":
            model = _model_at(loc[:-1], top)
            if model is not None:
                reason = f"unknown key; known keys: {', '.join(_fields_of(model))}"
        elif err["loc"] and err["loc"][-1] == "[key]":
            reason = f"bad key: {reason}"
        path = ".".join(clip(str(p)) for p in loc)
        errors.append(ScenarioError(reason, file=where, line=line, path=path))
    return errors


def _printable(text: str) -> str:
    """Escape what would break a one-line message (line breaks, control characters)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _finish(errors: list[ScenarioError], *, cap: bool = True) -> ScenarioErrors:
    """Sort by line, make each one printable line, drop repeats, cap at :data:`MAX_ERRORS`."""
    seen: set[tuple[Any, ...]] = set()
    unique = []
    clean = [
        ScenarioError(_printable(e.reason), file=e.file, line=e.line, path=_printable(e.path))
        if not (e.reason.isprintable() and e.path.isprintable())
        else e
        for e in errors
    ]
    files = list(dict.fromkeys(e.file for e in clean))  # base files (extends) after
    for e in sorted(clean, key=lambda e: (files.index(e.file), e.line or 0)):
        key = (e.line, e.path, e.reason)
        if key not in seen:
            seen.add(key)
            unique.append(e)
    if cap and len(unique) > MAX_ERRORS:
        rest = unique[MAX_ERRORS:]
        unique = unique[:MAX_ERRORS]
        unique.append(
            ScenarioError(
                f"{len(rest)} more problems not shown; fix the ones above first",
                file=rest[0].file,
                line=rest[0].line,
            )
        )
    return ScenarioErrors(unique)


# ------------------------------------------------------------------------------ parsing


def _yaml_error(exc: yaml.YAMLError, file: str) -> ScenarioError:
    mark = getattr(exc, "problem_mark", None)
    line = None if mark is None else mark.line + 1
    problem = str(getattr(exc, "problem", None) or exc)
    if isinstance(exc, _Limit):
        return ScenarioError(problem, file=file, line=line)
    context = str(getattr(exc, "context", None) or "")
    if "duplicate anchor" in context:
        first = getattr(exc, "context_mark", None)
        where = "" if first is None else f" (first defined on line {first.line + 1})"
        anchor = context.removeprefix("found duplicate anchor ").split(";")[0]
        return ScenarioError(
            f"not valid YAML: anchor {clip(anchor)} is defined twice{where}", file=file, line=line
        )
    if "single document" in context:
        return ScenarioError(
            "not valid YAML: a scenario file holds one document; remove the second '---'",
            file=file,
            line=line,
        )
    return ScenarioError(f"not valid YAML: {clip(problem, 200)}", file=file, line=line)


def _check_text(text: str, file: str) -> None:
    if len(text) > MAX_FILE_BYTES:
        raise ScenarioErrors(
            [
                ScenarioError(
                    f"larger than {MAX_FILE_BYTES // 1024} KiB; a scenario is small", file=file
                )
            ]
        )
    bad = _NON_PRINTABLE.search(text)
    if bad is not None:
        start = bad.start()
        line = text.count("\n", 0, start) + 1
        column = start - (text.rfind("\n", 0, start) + 1) + 1
        char = bad.group()
        raise ScenarioErrors(
            [
                ScenarioError(
                    f"control character U+{ord(char):04X} at column {column}; remove it "
                    "(YAML allows only printable text, tabs and line breaks)",
                    file=file,
                    line=line,
                )
            ]
        )


def _scan(root: yaml.Node, loader: _Loader, file: str) -> tuple[list[ScenarioError], bool]:
    """Duplicate keys and over-long values in the composed tree; True when values are too long."""
    errors: list[ScenarioError] = []
    too_long = False
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, tuple[str, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if len(node.value) > MAX_SCALAR_CHARS:
                too_long = True
                errors.append(
                    ScenarioError(
                        f"value is {len(node.value)} characters long; at most "
                        f"{MAX_SCALAR_CHARS} are allowed",
                        file=file,
                        line=node.start_mark.line + 1,
                        path=".".join(path),
                    )
                )
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((child, (*path, str(i))) for i, child in enumerate(node.value))
            continue
        first: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                continue  # merged keys may be overridden: that is what `<<` is for
            name = clip(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            stack.append((key_node, path))
            stack.append((value_node, (*path, name)))
            if not isinstance(key_node, yaml.ScalarNode) or len(key_node.value) > MAX_SCALAR_CHARS:
                continue
            try:
                key = loader.construct_object(key_node, deep=True)
                ident = (type(key), key)
                hash(ident)
            except Exception:  # unhashable or unreadable keys are reported when constructing
                continue
            line = key_node.start_mark.line + 1
            if ident in first:
                errors.append(
                    ScenarioError(
                        f"duplicate key (first given on line {first[ident]})",
                        file=file,
                        line=line,
                        path=".".join((*path, name)),
                    )
                )
            else:
                first[ident] = line
    return errors, too_long


def _compose(text: str, file: str) -> tuple[Any, yaml.Node | None, list[ScenarioError]]:
    """Parse YAML text into data and its node tree, with the scan's problems."""
    _check_text(text, file)
    loader = _Loader(text)
    loader.name = file  # marks carry the file: errors in a base file point there
    try:
        try:
            root = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise ScenarioErrors([_yaml_error(exc, file)]) from None
        except RecursionError:  # cannot happen below MAX_DEPTH; kept as a last guard
            raise ScenarioErrors(
                [ScenarioError(f"nested deeper than {MAX_DEPTH} levels", file=file, line=1)]
            ) from None
        if root is None:
            raise ScenarioErrors([ScenarioError("empty scenario", file=file, line=1)])
        problems, too_long = _scan(root, loader, file)
        if too_long:
            raise _finish(problems)
        try:
            data = loader.construct_document(root)
        except yaml.YAMLError as exc:
            raise ScenarioErrors([*problems, _yaml_error(exc, file)]) from None
        except Exception:  # e.g. an explicit tag on a value that does not fit it
            node = loader.last_node or root
            what = repr(clip(node.value)) if isinstance(node, yaml.ScalarNode) else "this value"
            tag = str(node.tag).replace("tag:yaml.org,2002:", "!!")
            raise _finish(
                [
                    *problems,
                    ScenarioError(
                        f"cannot read {what} as {clip(tag)}",
                        file=file,
                        line=node.start_mark.line + 1,
                    ),
                ]
            ) from None
    finally:
        loader.dispose()
    return data, root, problems


# ------------------------------------------------------------------------------ extends


MAX_EXTENDS = 16
"""Longest chain of ``extends`` (a file extending a file extending ...)."""


def merge_documents(base: Any, over: Any) -> Any:
    """``over`` merged into ``base``: mappings key by key (deeply), anything else replaced.

    How ``extends:`` and a study's variants override a scenario document.
    """
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge_documents(base.get(k), v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def _merge_nodes(base: yaml.Node, over: yaml.Node) -> yaml.Node:
    """The node tree of ``merge_documents(base data, over data)``, marks kept per file."""
    if not (isinstance(base, yaml.MappingNode) and isinstance(over, yaml.MappingNode)):
        return over
    pairs = list(base.value)
    at = {k.value: i for i, (k, _) in enumerate(pairs) if isinstance(k, yaml.ScalarNode)}
    for key, value in over.value:
        i = at.get(key.value) if isinstance(key, yaml.ScalarNode) else None
        if i is None:
            pairs.append((key, value))
        else:
            pairs[i] = (key, _merge_nodes(pairs[i][1], value))
    return yaml.MappingNode(over.tag, pairs, over.start_mark, over.end_mark, over.flow_style)


def _extends_error(reason: str, root: yaml.Node, file: str) -> ScenarioErrors:
    return ScenarioErrors([_located(reason, "extends", root, file)])


def _compose_extending(
    text: str, file: str, folder: Path | None, chain: tuple[Path, ...] = ()
) -> tuple[Any, yaml.Node | None, list[ScenarioError], list[str]]:
    """:func:`_compose` with ``extends:`` resolved: the base files merged under this one.

    ``folder`` is where a relative ``extends`` path is read from (None: the current
    directory); ``chain`` the resolved files being loaded, to detect cycles. Returns
    the merged data (without ``extends``), its node tree (each node marked with the file
    it came from), the scan's problems of every file, and the files, this one first.
    """
    data, root, problems = _compose(text, file)
    if not isinstance(data, dict) or "extends" not in data or root is None:
        return data, root, problems, [file]
    ext = data.pop("extends")
    if not isinstance(ext, str) or not ext.strip() or "\x00" in ext:
        raise _extends_error(
            f"must be the name of a scenario file (relative to this one), got {show(ext)}",
            root,
            file,
        )
    target = Path(ext)
    if not target.is_absolute() and folder is not None:
        target = folder / target
    shown = ext if Path(ext).is_absolute() else os.path.join(os.path.dirname(file), ext)
    try:
        exists = target.exists()
        resolved = target.resolve()
    except (OSError, RuntimeError):
        exists, resolved = False, target
    if not exists:
        raise _extends_error(f"no such file {clip(repr(ext))}", root, file)
    if resolved in chain:
        names = [*(p.name for p in chain[chain.index(resolved) :]), resolved.name]
        raise _extends_error(
            f"files extend each other in a cycle: {clip(' -> '.join(names), 200)}", root, file
        )
    if len(chain) >= MAX_EXTENDS:
        raise _extends_error(f"more than {MAX_EXTENDS} files extend each other", root, file)
    base_text = _read(target, shown)
    base_data, base_root, base_problems, files = _compose_extending(
        base_text, shown, resolved.parent, (*chain, resolved)
    )
    if base_data is None or base_root is None:
        raise ScenarioErrors(
            [*problems, *base_problems, ScenarioError("empty scenario", file=shown, line=1)]
        )
    if not isinstance(base_data, dict):
        line = base_root.start_mark.line + 1
        raise ScenarioErrors(
            [ScenarioError("a scenario must be a mapping of sections", file=shown, line=line)]
        )
    own = yaml.MappingNode(
        root.tag,
        [
            (k, v)
            for k, v in root.value
            if not (isinstance(k, yaml.ScalarNode) and k.value == "extends")
        ],
        root.start_mark,
        root.end_mark,
    )
    merged = _merge_nodes(base_root, own)
    return merge_documents(base_data, data), merged, [*problems, *base_problems], [file, *files]


def _by_file(errors: list[ScenarioError], files: list[str]) -> list[ScenarioError]:
    """``errors`` of the extending file first, then of its bases, in ``files`` order."""
    rank = {f: i for i, f in enumerate(files)}
    return sorted(errors, key=lambda e: rank.get(e.file or "", len(files)))


def _parse(text: str, file: str, base_dir: str | Path | None) -> tuple[Scenario, yaml.Node | None]:
    folder = None if base_dir is None else Path(base_dir)
    start = (
        () if folder is None or file.startswith("<") else ((folder / Path(file).name).resolve(),)
    )
    data, root, problems, files = _compose_extending(text, file, folder, start)
    if data is None:
        raise ScenarioErrors([*problems, ScenarioError("empty scenario", file=file, line=1)])
    if not isinstance(data, dict):
        line = 1 if root is None else root.start_mark.line + 1
        raise ScenarioErrors(
            [
                *problems,
                ScenarioError("a scenario must be a mapping of sections", file=file, line=line),
            ]
        )
    context = {"base_dir": None if base_dir is None else str(base_dir)}
    try:
        sc = Scenario.model_validate(data, context=context)
    except PydanticValidationError as exc:
        raise _finish(_by_file([*problems, *_pydantic_errors(exc, root, file)], files)) from None
    if problems:
        raise _finish(_by_file(problems, files))
    return sc, root


def parse_scenario(
    text: str, *, file: str = "<string>", base_dir: str | Path | None = None
) -> Scenario:
    """Parse and validate scenario YAML text (the schema only, no pre-flight checks).

    Parameters
    ----------
    text
        The YAML text.
    file
        The name used in messages.
    base_dir
        Folder against which relative file names (latency traces) are resolved;
        None means the current directory.

    Returns
    -------
    Scenario
        The validated scenario.

    Raises
    ------
    ScenarioErrors
        With every problem found, each with file, line and field path.

    """
    try:
        return _parse(text, file, base_dir)[0]
    except ScenarioErrors as exc:  # already capped where many problems are collected
        raise _finish(exc.errors, cap=False) from None
    except Exception as exc:  # a bug, but never a traceback for the user
        raise ScenarioErrors([_unexpected(exc, file)]) from None


def _unexpected(exc: BaseException, file: str, path: str = "") -> ScenarioError:
    return ScenarioError(
        f"internal error while checking the scenario ({type(exc).__name__}: "
        f"{clip(str(exc))}); please report it",
        file=file,
        line=1,
        path=path,
    )


def _read(p: Path, file: str) -> str:
    def fail(reason: str, line: int | None = None) -> ScenarioErrors:
        return ScenarioErrors([ScenarioError(reason, file=file, line=line)])

    try:
        st = p.stat()
    except FileNotFoundError:
        raise fail("cannot read file: no such file") from None
    except OSError as exc:
        raise fail(f"cannot read file: {exc.strerror or type(exc).__name__}") from None
    if stat.S_ISDIR(st.st_mode):
        raise fail("cannot read file: it is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise fail("cannot read file: not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise fail(f"larger than {MAX_FILE_BYTES // 1024} KiB; a scenario is small")
    try:
        with p.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise fail(f"cannot read file: {exc.strerror or type(exc).__name__}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise fail(f"larger than {MAX_FILE_BYTES // 1024} KiB; a scenario is small")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise fail(
            f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {column}", line
        ) from None


def load_scenario(path: str | Path, *, preflight: bool = True, seed: int | None = None) -> Scenario:
    """Read, validate and (by default) pre-flight check a scenario file.

    This is what ``fedstrata validate`` and ``fedstrata run`` call: a file it accepts
    runs, and every problem it finds is reported at once.

    Parameters
    ----------
    path
        The scenario file. Relative latency trace paths in it are read from its folder
        and stored resolved in the returned scenario.
    preflight
        Also build the data and check what only a run would find
        (:func:`fedstrata.scenarios.preflight.preflight`): clients without samples,
        missing dataset files, more clusters than samples, aggregators without
        children, unreadable traces, algorithms the simulator does not run.
    seed
        Run the pre-flight checks with this seed instead of the scenario's (what
        ``fedstrata run --seed`` will use: a Dirichlet split depends on it). The
        returned scenario keeps its own seed.

    Returns
    -------
    Scenario
        The validated scenario.

    Raises
    ------
    ScenarioErrors
        The only exception raised: ``.errors`` lists every problem, each with file,
        1-based line (when the file could be read) and dotted field path; print them
        with ``e.located()``, one per line.

    """
    file = str(path)
    root: yaml.Node | None = None
    try:
        p = Path(path)
        sc, root = _parse(_read(p, file), file, p.absolute().parent)
        if preflight:
            try:
                run_preflight(sc, seed=seed)
            except ScenarioError as exc:
                found = exc.errors if isinstance(exc, ScenarioErrors) else [exc]
                raise _finish([_located(e.reason, e.path, root, file) for e in found]) from None
        return sc
    except ScenarioErrors as exc:  # already capped where many problems are collected
        raise _finish(exc.errors, cap=False) from None
    except Exception as exc:  # a bug, but never a traceback for the user
        raise ScenarioErrors([_unexpected(exc, file)]) from None


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file, for completion and checks in editors.

    It is :meth:`Scenario.model_json_schema` (validation mode: values with units such
    as ``40ms`` are offered next to plain numbers) plus the loader's ``extends`` key.
    ``fedstrata schema --out scenario.schema.json`` writes it; VS Code's YAML extension
    uses it for a file that starts with
    ``# yaml-language-server: $schema=scenario.schema.json``.

    Returns
    -------
    dict
        A JSON-serialisable JSON Schema (draft 2020-12).

    """
    out = Scenario.model_json_schema()
    out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    out.setdefault("title", "fedstrata scenario")
    link = out.get("$defs", {}).get("LinkSpec", {}).get("properties", {})
    seconds = out.get("$defs", {}).get("LatencySpec", {}).get("properties", {}).get("value")
    for key in ("latency", "jitter"):  # a number of seconds or "40ms" is a constant latency
        if key in link and seconds is not None:
            options = [o for o in seconds.get("anyOf", []) if o.get("type") != "null"]
            ref = {"$ref": "#/$defs/LatencySpec"}
            link[key] = {
                **{k: v for k, v in link[key].items() if k not in ("$ref", "anyOf")},
                "anyOf": [*options, ref, *([{"type": "null"}] if key == "jitter" else [])],
            }
    privacy = out.get("$defs", {}).get("PrivacySpec", {}).get("properties", {})
    secure = privacy.get("secure_aggregation")
    if secure is not None and "enum" in secure:  # true/false/null: secagg/none/none
        rest = {k: v for k, v in secure.items() if k not in ("enum", "type")}
        choices = {"type": "string", "enum": secure["enum"]}
        privacy["secure_aggregation"] = {
            **rest,
            "anyOf": [choices, {"type": "boolean"}, {"type": "null"}],
        }
    props = out.setdefault("properties", {})
    props["extends"] = {
        "type": "string",
        "title": "Extends",
        "description": "A scenario file (path relative to this one) whose keys this file "
        "overrides: mappings merge recursively, lists and values replace.",
    }
    return out
