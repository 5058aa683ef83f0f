"""The import layers of ``fedstrata`` and the absence of import cycles.

Every module of ``fedstrata/`` is parsed with :mod:`ast`; every import counts, at any
depth (a lazy import inside a function is a dependency all the same), except those under
``if TYPE_CHECKING:``, which never run. An import ``from X import name`` is an edge to
the module ``X.name`` when that is a module, else to ``X``; importing a submodule does
not add an edge to its parent package's ``__init__``.

The layers, top to bottom (a module may import its own layer and any layer below it,
never one above; units separated by ``|`` never import each other)::

    fedstrata (the package root), cli, api, tracking    front ends
    scenarios, analysis, device                          applications
    sim | broker                                         transports: never each other
    registry                                             the composition root
    plugins | protocols                                  algorithm families, protocol kinds
    nodes                                                the sans-IO node core
    privacy | algorithms | wire_unpacked | mqtt          maths, crypto, in-process sizes, topics
    wire                                                 envelopes
    errors, settings, version                            shared leaves

(``tests/broker/test_boundaries.py`` adds stricter rules of its own for the MQTT side:
the broker package imports no algorithm, client or aggregator module, not even lazily.)

Two checks, each with an allowlist of what the tree held when the check was written
(issue 30) so that it can land while the code is restructured. An allowlisted edge is
"known, to remove": the test fails on any edge NOT in the list, and on a listed edge
that no longer exists (delete its line), so the lists only shrink.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "fedstrata"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("fedstrata", "cli", "api", "tracking"),
    ("scenarios", "analysis", "device", "netlab"),
    ("sim", "broker"),
    ("registry",),
    ("plugins", "protocols"),
    ("nodes",),
    ("privacy", "algorithms", "wire_unpacked", "mqtt"),
    ("wire",),
    ("errors", "settings", "version"),
)
"""Top to bottom; a unit is a subpackage or a top-level module of ``fedstrata``."""

APART: tuple[frozenset[str], ...] = (
    frozenset({"sim", "broker"}),
    frozenset({"plugins", "protocols"}),
    frozenset({"privacy", "algorithms", "wire_unpacked", "mqtt"}),
)
"""Units of one layer that must not import each other: the two transports; an algorithm
family and a protocol kind (each knows only the node core); the four leaves of maths,
crypto, in-process message sizes and topics (none imports another today: keep them
independent; the envelopes below them are theirs to use)."""

# Known upward imports (or imports between APART units), as (importer, imported): none.
# The restructuring of issue 30 removed the eight it started with (the node core's lazy
# imports of the composition root, nodes/config.py's of protocols, the package root's
# version read by scenarios.run and device.node). A new one is refused, not listed here.
KNOWN_VIOLATIONS: frozenset[tuple[str, str]] = frozenset()


# Known edges on an import cycle (both ends in one strongly connected component): none.
# The four cycles of 68 edges the restructuring started with (the node core with plug-ins
# and protocols; scenarios' build/preflight/loader/study with the API; schema and units;
# the deep family's training and methods) are broken. A new cycle fails the test.
KNOWN_CYCLE_EDGES: frozenset[tuple[str, str]] = frozenset()


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}
"""Every module of the package, by dotted name."""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node`` except the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.orelse:  # the else branch does run
                yield stmt
                yield from _walk(stmt)
            continue
        yield child
        yield from _walk(child)


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _owner(name: str) -> str | None:
    """The module of ``fedstrata`` that ``name`` is, or lies in (None outside the package)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_in(source: str, module: str, is_package: bool = False) -> set[str]:
    """The modules of ``fedstrata`` that ``source`` (the text of ``module``) imports."""
    found: set[str] = set()
    for node in _walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node, is_package)
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(t for t in map(_owner, targets) if t)
    found.discard(module)
    return found


def imports_of(module: str) -> set[str]:
    """The modules of ``fedstrata`` that ``module`` imports (lazy included, not TYPE_CHECKING)."""
    path = MODULES[module]
    return imports_in(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    return {m: imports_of(m) for m in MODULES}


def unit_of(module: str) -> str:
    """The layer unit of a module: its subpackage or top-level module under ``fedstrata``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


RANK: dict[str, int] = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def violations(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Edges that import a higher layer, or cross between :data:`APART` units."""
    bad = set()
    for src, dsts in graph.items():
        for dst in dsts:
            a, b = unit_of(src), unit_of(dst)
            apart = any(a in group and b in group for group in APART)
            if a != b and (RANK[b] < RANK[a] or apart):
                bad.add((src, dst))
    return bad


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        # recursion depth is bounded by the module count (~120)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found, key=lambda c: (-len(c), c))


def cycle_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Edges with both ends in one import cycle (each lies on some cycle)."""
    edges = set()
    for comp in strongly_connected(graph):
        members = set(comp)
        edges.update((a, b) for a in comp for b in graph[a] if b in members)
    return edges


def a_cycle_through(graph: dict[str, set[str]], edge: tuple[str, str]) -> list[str]:
    """One cycle closed by ``edge`` (a -> b ... -> a), to show in a failure."""
    a, b = edge
    paths = {b: [a, b]}
    todo = [b]
    while todo:
        v = todo.pop(0)
        if v == a:
            return paths[v]
        for w in sorted(graph[v]):
            if w not in paths:
                paths[w] = [*paths[v], w]
                todo.append(w)
    return [a, b]


def _lines(edges) -> str:
    return "\n".join(f"    ({a!r}, {b!r})," for a, b in sorted(edges))


def test_every_unit_has_a_layer():
    missing = sorted({unit_of(m) for m in MODULES} - set(RANK))
    assert not missing, f"add these to LAYERS in tests/test_layers.py: {missing}"


def test_no_new_upward_import():
    found = violations(import_graph())
    new = found - KNOWN_VIOLATIONS
    assert not new, (
        "upward imports (importer, imported) against the layers in tests/test_layers.py's "
        f"docstring; import downward, or move the code:\n{_lines(new)}"
    )


def test_known_upward_imports_are_still_there():
    gone = KNOWN_VIOLATIONS - violations(import_graph())
    assert not gone, (
        f"these known upward imports are gone: delete them from KNOWN_VIOLATIONS\n{_lines(gone)}"
    )


def test_no_new_import_cycle():
    graph = import_graph()
    new = cycle_edges(graph) - KNOWN_CYCLE_EDGES
    shown = "\n".join(" -> ".join(a_cycle_through(graph, e)) for e in sorted(new))
    assert not new, f"import edges that close a cycle (lazy imports count):\n{shown}"


def test_known_cycle_edges_still_close_a_cycle():
    gone = KNOWN_CYCLE_EDGES - cycle_edges(import_graph())
    assert not gone, (
        "these known cycle edges no longer close a cycle: delete them from "
        f"KNOWN_CYCLE_EDGES\n{_lines(gone)}"
    )


def test_the_checker_sees_lazy_and_relative_imports_but_not_type_checking():
    # the checker itself, on made-up sources: each rule above must be able to fail
    src = (
        "from typing import TYPE_CHECKING\n"
        "import numpy\n"
        "if TYPE_CHECKING:\n    from fedstrata import cli\n"
        "else:\n    from . import events\n"
        "def f():\n    from fedstrata.nodes import client, ClientNode\n"
        "    import fedstrata.wire as w\n"
    )
    assert imports_in(src, "fedstrata.nodes.bodies") == {
        "fedstrata.nodes.events",
        "fedstrata.nodes.client",
        "fedstrata.nodes",
        "fedstrata.wire",
    }
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set()}
    assert strongly_connected(graph) == [["a", "b"]]
    assert cycle_edges(graph) == {("a", "b"), ("b", "a")}
    assert a_cycle_through(graph, ("a", "b")) == ["a", "b", "a"]
    up = {"fedstrata.nodes.x": {"fedstrata.cli", "fedstrata.wire"}, "fedstrata.sim.y": set()}
    up["fedstrata.sim.y"] = {"fedstrata.broker.z", "fedstrata.nodes.x"}
    assert violations(up) == {
        ("fedstrata.nodes.x", "fedstrata.cli"),
        ("fedstrata.sim.y", "fedstrata.broker.z"),
    }
