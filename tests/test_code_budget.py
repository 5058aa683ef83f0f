"""Budgets that keep ``fedstrata`` readable: function complexity and module size.

Complexity is McCabe's, as ruff's C901 rule measures it, with a budget of
:data:`MAX_COMPLEXITY` per function. Module size is counted in lines, with a budget of
:data:`MAX_LINES` per module.

Both are ratchets. The functions and modules over budget in the tree of issue 30 are
listed below with their measure then: a new function or module over budget fails, a
listed function may not become more complex, a listed module may not grow by more than
:data:`GROWTH_MARGIN` lines, and one that comes within budget (or is gone) must leave the
list, so the lists only shrink. Split a function or a module rather than raise a number.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "fedstrata"

MAX_COMPLEXITY = 10
"""McCabe complexity allowed to a new function (ruff C901, ``max-complexity``)."""

MAX_LINES = 700
"""Lines allowed to a new module."""

GROWTH_MARGIN = 25
"""Lines a listed module may grow by before it must be split instead."""

# Functions over MAX_COMPLEXITY in the tree of issue 30: "path::Qualified.name": complexity.
# Known, to split; delete a line once the function is within budget or gone.
KNOWN_COMPLEX: dict[str, int] = {
    "fedstrata/algorithms/multiview.py::local_statistics": 12,
    "fedstrata/algorithms/tensor/federated.py::tensor_federated_fit": 22,
    "fedstrata/algorithms/tensor/model.py::TensorModel.__post_init__": 15,
    "fedstrata/algorithms/tensor/model.py::TensorModel._check_ranks": 12,
    "fedstrata/analysis/compare.py::load_device_record": 15,
    "fedstrata/analysis/compare.py::plot_comparison": 11,
    "fedstrata/analysis/report.py::_read_record": 13,
    "fedstrata/analysis/report.py::_topology_figure": 13,
    "fedstrata/analysis/report.py::write_report": 15,
    "fedstrata/broker/config.py::acl_text": 13,
    "fedstrata/broker/config.py::mosquitto_conf": 12,
    "fedstrata/broker/runner.py::NodeRunner._dispatch": 14,
    "fedstrata/broker/runner.py::NodeRunner._drain": 18,
    "fedstrata/broker/runner.py::NodeRunner._session": 12,
    "fedstrata/cli.py::compare": 12,
    "fedstrata/cli.py::study": 16,
    "fedstrata/cli.py::sweep": 20,
    "fedstrata/device/command.py::_node": 11,
    "fedstrata/device/config.py::_load": 24,
    "fedstrata/device/config.py::_password": 11,
    "fedstrata/device/data.py::_read_csv": 14,
    "fedstrata/device/data.py::_read_npz": 13,
    "fedstrata/mqtt.py::TopicTree.match": 19,
    "fedstrata/nodes/aggregator.py::AggregatorNode._take_parent_model": 11,
    "fedstrata/nodes/bodies.py::_check_value": 30,
    "fedstrata/nodes/client.py::ClientNode.handle": 13,
    "fedstrata/nodes/config.py::ProtocolConfig.__post_init__": 19,
    "fedstrata/plugins/messages.py::decompress_partial": 14,
    "fedstrata/privacy/secagg.py::SecAggServer.finish": 11,
    "fedstrata/protocols/staleness.py::StalenessBuffer.add": 11,
    "fedstrata/scenarios/loader.py::_pydantic_errors": 11,
    "fedstrata/scenarios/loader.py::_scan": 11,
    "fedstrata/scenarios/wiring.py::split_samples": 11,
    "fedstrata/scenarios/data_schema.py::DataSpec._params": 12,
    "fedstrata/scenarios/show.py::describe_error": 11,
    "fedstrata/scenarios/show.py::show": 11,
    "fedstrata/scenarios/sweep.py::_run_sweep": 16,
    "fedstrata/scenarios/sweep.py::sweep_from_data": 14,
    "fedstrata/sim/engine.py::Engine._apply": 12,
    "fedstrata/sim/engine.py::Engine._arrive_broker": 12,
    "fedstrata/sim/engine.py::Engine._send": 12,
    "fedstrata/sim/engine.py::Engine.fanout": 11,
    "fedstrata/sim/faults.py::MarkovAvailability.is_online": 12,
    "fedstrata/sim/kernel.py::Simulation.add_node": 12,
    "fedstrata/sim/log.py::check_invariants": 17,
    "fedstrata/wire.py::Envelope.__post_init__": 11,
    "fedstrata/wire.py::_normalize": 17,
}

# Modules over MAX_LINES in the tree of issue 30: path: lines. Known, to split; delete a
# line once the module is within budget or gone.
KNOWN_LARGE: dict[str, int] = {
    "fedstrata/analysis/compare.py": 833,
    "fedstrata/analysis/report.py": 1036,
    "fedstrata/api.py": 913,
    "fedstrata/broker/runner.py": 844,
    "fedstrata/cli.py": 1255,
    "fedstrata/device/config.py": 751,
    "fedstrata/nodes/aggregator.py": 917,
    "fedstrata/plugins/multiview.py": 808,
    "fedstrata/privacy/secagg.py": 1063,
    "fedstrata/scenarios/datasets.py": 911,
    "fedstrata/scenarios/loader.py": 857,
    "fedstrata/scenarios/schema.py": 1079,
    "fedstrata/scenarios/sweep.py": 851,
    "fedstrata/sim/engine.py": 797,
}


def _qualnames(path: Path) -> dict[int, str]:
    """Line of each ``def`` in a file -> its qualified name (``Class.method``, ``f.inner``)."""
    names: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    names[child.lineno] = name
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return names


def complex_functions(target: Path = PKG) -> dict[str, int]:
    """``"path::Qual.name"`` -> complexity of every function over budget, as ruff measures it."""
    res = subprocess.run(
        [
            *(sys.executable, "-m", "ruff", "check", str(target)),
            *("--select", "C901", "--config", f"lint.mccabe.max-complexity={MAX_COMPLEXITY}"),
            *("--output-format", "json", "--no-cache", "--exit-zero"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert res.returncode == 0, f"ruff failed:\n{res.stderr}"
    found: dict[str, int] = {}
    for item in json.loads(res.stdout):
        path = Path(item["filename"])
        # the message reads "`name` is too complex (N > MAX)"
        complexity = int(item["message"].rsplit("(", 1)[1].split(" ", 1)[0])
        qual = _qualnames(path)[item["location"]["row"]]
        key = f"{path.relative_to(target.parent).as_posix()}::{qual}"
        found[key] = max(found.get(key, 0), complexity)
    return found


@cache
def _complex_in_package() -> dict[str, int]:
    return complex_functions()


def large_modules(target: Path = PKG) -> dict[str, int]:
    """Path -> lines of every module over :data:`MAX_LINES`."""
    sizes = {
        p.relative_to(target.parent).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
        for p in sorted(target.rglob("*.py"))
    }
    return {p: n for p, n in sizes.items() if n > MAX_LINES}


def test_no_new_function_over_the_complexity_budget():
    new = {k: c for k, c in _complex_in_package().items() if k not in KNOWN_COMPLEX}
    assert not new, (
        f"functions over complexity {MAX_COMPLEXITY} (ruff C901); split them:\n"
        + "\n".join(f"    {k}: {c}" for k, c in sorted(new.items()))
    )


def test_no_listed_function_grew_more_complex():
    found = _complex_in_package()
    grown = {k: (KNOWN_COMPLEX[k], c) for k, c in found.items() if c > KNOWN_COMPLEX.get(k, c)}
    assert not grown, "functions more complex than their budget (listed -> now); split them:\n" + (
        "\n".join(f"    {k}: {a} -> {b}" for k, (a, b) in sorted(grown.items()))
    )


def test_listed_functions_are_still_over_budget():
    gone = sorted(set(KNOWN_COMPLEX) - set(_complex_in_package()))
    assert not gone, (
        "these functions are within budget or gone: delete them from KNOWN_COMPLEX\n"
        + "\n".join(f"    {k}" for k in gone)
    )


def test_no_new_module_over_the_size_budget():
    new = {p: n for p, n in large_modules().items() if p not in KNOWN_LARGE}
    assert not new, f"modules over {MAX_LINES} lines; split them:\n" + "\n".join(
        f"    {p}: {n}" for p, n in sorted(new.items())
    )


def test_no_listed_module_grew_past_its_margin():
    found = large_modules()
    grown = {p: n for p, n in found.items() if p in KNOWN_LARGE}
    grown = {p: n for p, n in grown.items() if n > KNOWN_LARGE[p] + GROWTH_MARGIN}
    assert not grown, (
        f"modules grown more than {GROWTH_MARGIN} lines past their listed size; split them:\n"
        + "\n".join(f"    {p}: {KNOWN_LARGE[p]} -> {n}" for p, n in sorted(grown.items()))
    )


def test_listed_modules_are_still_over_budget():
    gone = sorted(set(KNOWN_LARGE) - set(large_modules()))
    assert not gone, (
        f"these modules are within {MAX_LINES} lines or gone: delete them from KNOWN_LARGE\n"
        + "\n".join(f"    {p}" for p in gone)
    )


def test_the_measures_see_what_they_should(tmp_path):
    # the checkers themselves, on a made-up package: each budget must be able to fail
    branches = "".join(f"        if x == {i}:\n            return {i}\n" for i in range(12))
    (tmp_path / "m.py").write_text(
        f"class A:\n    def f(self, x):\n{branches}        return -1\n\n\ndef g():\n    return 0\n"
    )
    (tmp_path / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    found = complex_functions(tmp_path)
    assert list(found.values()) == [13], found
    assert next(iter(found)).endswith("m.py::A.f")
    assert [Path(p).name for p in large_modules(tmp_path)] == ["big.py"]
