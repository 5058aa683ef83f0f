"""The scenario corpus, through the installed ``fedstrata`` command.

Every file of ``corpus/bad`` must make ``fedstrata validate`` and ``fedstrata run`` exit
1 with exactly the lines of ``corpus/bad/expected.txt`` on stderr (``file:line: path:
reason``) and no traceback; every file of ``corpus/good`` and ``scenarios/`` must
validate. ``validate`` runs once over all files (it accepts several); ``run`` starts a
process per file, so by default it runs a sample covering every family of rules, in
parallel; set ``FEDSTRATA_CORPUS_FULL=1`` to run all of them (a few minutes).
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.extras import has

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
ROOT = HERE.parents[1]
MIB = 1024 * 1024

RUN_SAMPLE = {  # one file per family of rules: each `fedstrata run` costs a second of imports
    "empty.yaml",
    "duplicate-section.yaml",
    "billion-laughs.yaml",
    "deep-list.yaml",
    "nul-byte.yaml",
    "not-utf8.yaml",
    "two-documents.yaml",
    "rounds-bool.yaml",
    "tol-inf.yaml",
    "clients-billion.yaml",
    "seed-negative.yaml",
    "name-with-slash.yaml",
    "cloud-id-is-a-client.yaml",
    "unknown-dataset-parameter.yaml",
    "secure-aggregation.yaml",
    "availability-trace.yaml",
    "latency-trace-garbage.yaml",
    "fraction-too-small.yaml",
    "fog-without-children.yaml",
    "algorithm-mvkm-ed.yaml",
    "fmcsc-rounds-too-few.yaml",
    "several-problems.yaml",
    "missing-file",
    "directory",
}


def _expected() -> dict[str, list[str]]:
    """``expected.txt``: file name -> its lines."""
    out: dict[str, list[str]] = {}
    name = None
    for line in (CORPUS / "bad" / "expected.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        header = re.fullmatch(r"\[(.+?)\]", line)
        if header:
            name = header.group(1)
            out[name] = []
            continue
        if name is not None:
            out[name].append(line)
    return out


EXPECTED = _expected()
BAD = sorted(p.name for p in (CORPUS / "bad").glob("*.yaml"))


def _exe() -> str:
    exe = shutil.which("fedstrata")
    if exe is None:
        pytest.fail("the fedstrata command is not on PATH: pip install -e '.[dev]'")
    return exe


def _cli(*args: str, cwd: Path = CORPUS) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "NO_COLOR": "1"}
    return subprocess.run(
        [_exe(), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=300,
        env=env,
    )


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _diff(want: list[str], got: list[str]) -> str:
    return "\n".join(difflib.unified_diff(want, got, "expected", "stderr", lineterm=""))


def test_every_bad_file_has_expected_lines():
    assert len(BAD) >= 60
    missing = [f for f in BAD if f not in EXPECTED]
    assert not missing, f"no expected lines for {missing}"
    assert not set(EXPECTED) - set(BAD), "expected.txt names files that do not exist"


def _special_files(folder: Path) -> dict[str, tuple[str, list[str]]]:
    """Cases that cannot live in the repository: key -> (path argument, expected lines)."""
    big = folder / "big.yaml"
    big.write_bytes(b"#" * (MIB + 1))
    directory = folder / "directory.yaml"
    directory.mkdir(exist_ok=True)
    missing = folder / "missing.yaml"
    cases = {
        "missing-file": (str(missing), [f"{missing}: cannot read file: no such file"]),
        "directory": (str(directory), [f"{directory}: cannot read file: it is a directory"]),
        "too-large": (str(big), [f"{big}: larger than 1024 KiB; a scenario is small"]),
    }
    if hasattr(os, "mkfifo"):
        fifo = folder / "fifo.yaml"
        if not fifo.exists():
            os.mkfifo(fifo)
        cases["fifo"] = (str(fifo), [f"{fifo}: cannot read file: not a regular file"])
    return cases


def test_validate_rejects_the_bad_corpus_with_exact_lines():
    files = [f for f in BAD if f in EXPECTED]
    res = _cli("validate", *(f"bad/{f}" for f in files))
    want = [ln.replace("{file}", f"bad/{f}") for f in files for ln in EXPECTED[f]]
    assert "Traceback" not in res.stderr + res.stdout
    assert res.returncode == 1, res.stderr[-2000:]
    assert res.stdout == ""
    got, deep = _split_missing_extra(_lines(res.stderr))
    if not has("torch"):  # some deep file names the extra; no other file does
        assert deep
        assert set(deep) <= {f"bad/{f}" for f in files if "fmcsc" in f or "efd-mvc" in f}
    assert got == want, _diff(want, got)


def _split_missing_extra(lines: list[str]) -> tuple[list[str], list[str]]:
    """The lines without those naming the missing [deep] extra, and the files those name.

    Without PyTorch every deep file gets that one line more (test_deep_schema checks its
    words); the lines about the file's own problems are the same either way.
    """
    deep = [ln for ln in lines if "needs PyTorch, the [deep] extra" in ln]
    return [ln for ln in lines if ln not in deep], sorted(ln.split(":")[0] for ln in deep)


def test_validate_rejects_unreadable_files(tmp_path):
    cases = _special_files(tmp_path)
    res = _cli("validate", *(arg for arg, _ in cases.values()))
    want = [ln for _, lines in cases.values() for ln in lines]
    assert "Traceback" not in res.stderr + res.stdout
    assert res.returncode == 1
    assert _lines(res.stderr) == want, _diff(want, _lines(res.stderr))


def test_good_files_validate():
    good = sorted(str(p) for p in (CORPUS / "good").glob("*.yaml"))
    if not has("torch"):  # a deep file is refused there (test_deep_schema checks how)
        good = [f for f in good if "fmcsc" not in f and "efd-mvc" not in f]
    examples = sorted(str(p) for p in (ROOT / "scenarios").glob("*.yaml"))
    assert len(good) >= 3 and len(examples) >= 3
    res = _cli("validate", *good, *examples, cwd=Path("/"))  # traces found next to the file
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert _lines(res.stdout) == [f"{f}: ok" for f in [*good, *examples]]


def _run_one(arg: str, out: Path) -> subprocess.CompletedProcess[str]:
    return _cli("run", arg, "--out", str(out), "--quiet", "--no-plots")


@pytest.fixture(scope="module")
def run_results(tmp_path_factory):
    """``fedstrata run`` on the selected bad files, several processes at a time."""
    tmp = tmp_path_factory.mktemp("corpus-run")
    special = _special_files(tmp)
    full = os.environ.get("FEDSTRATA_CORPUS_FULL") == "1"
    jobs: dict[str, tuple[str, list[str]]] = {}
    for f in BAD:
        if f in EXPECTED and (full or f in RUN_SAMPLE):
            jobs[f] = (f"bad/{f}", [ln.replace("{file}", f"bad/{f}") for ln in EXPECTED[f]])
    for key, case in special.items():
        if full or key in RUN_SAMPLE:
            jobs[key] = case
    workers = max(2, min(8, (os.cpu_count() or 2) * 2))
    with ThreadPoolExecutor(workers) as pool:
        futures = {
            key: pool.submit(_run_one, arg, tmp / f"out-{i}")
            for i, (key, (arg, _)) in enumerate(jobs.items())
        }
        return {key: (jobs[key][1], fut.result(), tmp) for key, fut in futures.items()}


_SPECIAL = ("missing-file", "directory", "too-large", "fifo")
#: The files `run` is checked on: a sample by default (each `fedstrata run` pays its
#: start-up), every one with FEDSTRATA_CORPUS_FULL=1. `validate` always sees them all.
RUN_CASES = [
    case
    for case in [*BAD, *_SPECIAL]
    if os.environ.get("FEDSTRATA_CORPUS_FULL") == "1" or case in RUN_SAMPLE
]


@pytest.mark.parametrize("case", RUN_CASES)
def test_run_rejects_like_validate(case, run_results):
    want, res, _ = run_results[case]
    assert "Traceback" not in res.stderr + res.stdout
    assert res.returncode == 1, (res.returncode, res.stderr[-2000:])
    got, _ = _split_missing_extra(_lines(res.stderr))
    assert got == want, _diff(want, got)


def test_validate_bomb_is_fast_and_short():
    """The alias bomb, the deep nestings and a billion clients: one short line each, quickly."""
    names = ["billion-laughs.yaml", "deep-list.yaml", "deep-mapping.yaml", "clients-billion.yaml"]
    code = (
        "import time, tracemalloc, sys\n"
        "from fedstrata.scenarios.loader import load_scenario, ScenarioErrors\n"
        "tracemalloc.start()\n"
        "for f in sys.argv[1:]:\n"
        "    t = time.process_time()\n"
        "    try:\n"
        "        load_scenario(f)\n"
        "    except ScenarioErrors as e:\n"
        "        assert len(e.errors) == 1 and len(e.located()) < 300, e.located()\n"
        "    assert time.process_time() - t < 5, f  # CPU seconds: load does not count\n"
        "assert tracemalloc.get_traced_memory()[1] < 64 * 2**20\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, *(str(CORPUS / "bad" / n) for n in names)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
