"""Run records: the files of a run folder, the same for simulated and real runs.

A run folder holds ``scenario.yaml`` (the resolved scenario), ``summary.json``,
``rounds.csv``, ``labels.csv``, ``model.npz`` (when a model exists), plots and, on
request, ``events.jsonl``. Every file is written atomically (a temporary file in
the same folder, then :func:`os.replace`), and ``summary.json`` is written last, so
a folder with a summary holds a complete record and a killed run never leaves a
half-written file. The fields and their invariants are documented in
``docs/records.md``.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedstrata.errors import FedstrataError

__all__ = [
    "OUTPUT_ERRNOS",
    "RECORD_FILES",
    "ROUND_COLUMNS",
    "OutputError",
    "RecordStage",
    "RecordWriteError",
    "aggregate_row",
    "atomic_write",
    "plot_rounds",
    "prepare_run_dir",
    "write_failure",
    "write_labels",
    "write_model",
    "write_rounds",
    "write_summary",
    "write_table",
]

#: Columns of rounds.csv, one row per round (and sub-round) and tier. ``bytes`` is the
#: cumulative PUBLISH bytes on the wire when the tier's last aggregation of that round
#: closed, ``bytes_round`` the traffic since the tier's previous row.
ROUND_COLUMNS = (
    "round",
    "iteration",
    "tier",
    "phase",
    "sub",
    "aggregators",
    "participants",
    "expected",
    "ok",
    "bytes",
    "bytes_round",
    "virtual_time_s",
    "objective",
    "ari",
    "nmi",
    "acc",
    *(
        PROTOCOL_COLUMNS := (
            "staleness_max",
            "staleness_mean",
            "stale_used",
            "plan_quorum",
            "plan_compression",
            "plan_cost",
            "net_delay_median_s",
            "net_delay_p90_s",
            "net_loss_mean",
            "net_children_seen",
            "kernel_scale_min",
        )
    ),
    *(
        PRIVACY_COLUMNS := (
            "secure_failed",
            "secure_failure",
            "dropouts_recovered",
            "privacy_bytes",
            "dp_held",
        )
    ),
    # the root's rounds: samples whose statistics the round combined (J/n, the per-sample
    # objective of tol_mode: per_sample and plateau, is objective / n)
    "n",
)

#: Every file a run may write into its folder; ``--overwrite`` replaces only these.
RECORD_FILES = (
    "scenario.yaml",
    "summary.json",
    "rounds.csv",
    "labels.csv",
    "clients.csv",
    "model.npz",
    "rounds.png",
    "events.jsonl",
    "crash.log",
    # what `fedstrata report` adds (fedstrata.analysis.report.IMAGES)
    "report.html",
    "report.md",
    "report-topology.png",
    "report-progress.png",
    "report-bytes.png",
    "report-timeline.png",
)


class OutputError(FedstrataError):
    """The output folder cannot take this run (a file, unwritable, or another run)."""


class RecordWriteError(FedstrataError, OSError):
    """A record file could not be written (disk full, read-only file system, ...).

    One line naming the file and the system's reason; the earlier record in the
    folder, if any, is left as it was (see :class:`RecordStage`). An ``OSError`` too,
    so that the callers that catch those keep doing so.
    """


#: ``errno`` values of a file system that refuses a write: one-line errors, never a
#: crash trace (``fedstrata.cli.main``).
OUTPUT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "ENOSPC",
        "EDQUOT",
        "EROFS",
        "EACCES",
        "EPERM",
        "ENAMETOOLONG",
        "ENOTDIR",
        "EISDIR",
        "EEXIST",
        "ENOENT",
        "EIO",
        "EFBIG",
        "EMFILE",
        "ENFILE",
        "ELOOP",
        "EXDEV",
    )
    if hasattr(errno, name)
)


def write_failure(exc: OSError, path: str | Path | None = None) -> RecordWriteError:
    """The one-line :class:`RecordWriteError` of an ``OSError`` raised writing ``path``."""
    where = exc.filename if path is None and exc.filename else path
    reason = exc.strerror or type(exc).__name__
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        reason += " (free some space and run again)"
    return RecordWriteError(f"cannot write {where}: {reason}")


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w") -> Iterator[Any]:
    """Open a temporary file next to ``path``; on success, move it over ``path``.

    On any error the temporary file is removed and ``path`` is left as it was.
    ``mode`` is ``"w"`` (UTF-8 text, Unix line ends) or ``"wb"``.
    """
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:40]}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise write_failure(exc, path) from None
    try:
        if "b" in mode:
            fh = os.fdopen(fd, mode)
        else:
            fh = os.fdopen(fd, mode, encoding="utf-8", newline="\n")
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # a full or read-only disk: one line, nothing half-written
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise write_failure(exc, path) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _check_finite(obj: Any, where: str = "summary") -> None:
    """Raise ValueError naming the first non-finite float (strict JSON has no NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"{where} is {obj}: record null and a reason instead")
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            _check_finite(v, f"{where}.{k}")
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            _check_finite(v, f"{where}[{i}]")


def write_summary(summary: Mapping[str, Any], path: str | Path) -> None:
    """Write ``summary.json`` atomically (strict JSON, sorted keys, 2-space indent).

    Raises
    ------
    ValueError
        If a value is NaN or infinite (naming its key): a metric that cannot be
        computed must be ``None`` with a reason.

    """
    _check_finite(summary)
    text = json.dumps(summary, indent=2, sort_keys=True, allow_nan=False) + "\n"
    with atomic_write(path) as fh:
        fh.write(text)


def write_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], path: str | Path
) -> None:
    """Write a CSV file with ``columns`` (missing values left empty), atomically."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if row.get(k) is None else row[k]) for k in columns})
    with atomic_write(path) as fh:
        fh.write(buf.getvalue())


def write_rounds(rows: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    """Write ``rounds.csv`` with :data:`ROUND_COLUMNS` (missing values left empty)."""
    write_table(rows, ROUND_COLUMNS, path)


def write_labels(
    clients: Sequence[str],
    indices: Sequence[np.ndarray],
    labels: np.ndarray | None,
    path: str | Path,
) -> None:
    """Write ``labels.csv``: ``client,index,label``, one row per sample.

    Rows follow the clients' order, then ascending sample index (the index into
    the scenario's dataset). With ``labels=None`` (no model) the label column is
    empty.
    """
    with atomic_write(path) as fh:
        fh.write("client,index,label\n")
        chunk: list[str] = []  # written in chunks: a million clients' rows never in one string
        for client, idx in zip(clients, indices, strict=True):
            order = np.sort(np.asarray(idx))
            if labels is None:
                chunk.extend(f"{client},{i},\n" for i in order.tolist())
            else:
                lab = labels[order].tolist()
                chunk.extend(
                    f"{client},{i},{y}\n" for i, y in zip(order.tolist(), lab, strict=True)
                )
            if len(chunk) >= _LABEL_CHUNK:
                fh.write("".join(chunk))
                chunk.clear()
        fh.write("".join(chunk))


#: Rows of ``labels.csv`` gathered before each write.
_LABEL_CHUNK = 65536


def write_model(arrays: Mapping[str, np.ndarray], path: str | Path) -> None:
    """Write ``model.npz`` atomically (uncompressed, no pickled objects)."""
    with atomic_write(path, "wb") as fh:
        np.savez(fh, **{k: np.asarray(v) for k, v in arrays.items()})


def _record_identity(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


#: The longest name of one path component on common file systems (ext4, XFS, APFS).
NAME_MAX = 255


def prepare_run_dir(
    out: str | Path,
    *,
    scenario_hash: str,
    seed: int,
    overwrite: bool = False,
    keep_old: bool = False,
) -> Path:
    """Make ``out`` ready for a run and return it.

    With ``keep_old`` the checks are made but nothing is deleted: the caller writes
    the new record through a :class:`RecordStage`, which replaces the old files only
    once every new one was written.

    A missing folder is created. An empty folder, or one holding the record of the
    same run (same scenario hash and seed), is reused. A folder holding anything
    else is refused unless ``overwrite``: then the record files of
    :data:`RECORD_FILES` are removed first, so old and new files never mix. Files
    that are not run records are never deleted: such a folder is refused even
    with ``overwrite``.

    Raises
    ------
    OutputError
        With one line saying what is wrong and what to do.

    """
    folder = Path(out)
    long = [part for part in folder.parts if len(os.fsencode(part)) > NAME_MAX]
    if long:
        raise OutputError(
            f"--out: the name {long[0][:40]}... is {len(os.fsencode(long[0]))} bytes long; "
            f"a folder name may have at most {NAME_MAX}"
        )
    try:
        if folder.exists() and not folder.is_dir():
            raise OutputError(f"--out {folder}: is a file, not a folder")
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(
            f"--out {folder}: cannot create the folder ({exc.strerror or exc})"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"--out {folder}: the folder is not writable")
    present = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    if not present:
        return folder
    foreign = [name for name in present if name not in RECORD_FILES]
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise OutputError(
            f"--out {folder}: the folder holds files that are not a fedstrata run "
            f"({shown}); choose another folder"
        )
    old = _record_identity(folder)
    same = old is not None and (old.get("scenario_hash"), old.get("seed")) == (
        scenario_hash,
        seed,
    )
    if not (same or overwrite):
        what = "another run" if old is not None else "an incomplete run"
        raise OutputError(
            f"--out {folder}: the folder holds {what}; pass --overwrite to replace it "
            "or choose another folder"
        )
    if keep_old:
        return folder
    for name in present:
        with contextlib.suppress(FileNotFoundError):
            (folder / name).unlink()
    return folder


class RecordStage:
    """Write a run's record beside the old one, then put it in place in one step.

    The files are written into a hidden folder inside ``folder``
    (``.fedstrata-stage-*``, ignored by :func:`prepare_run_dir`); :meth:`commit`
    removes the old record's ``summary.json`` first (a folder without one is an
    incomplete run), then the old record files the new record does not have, then
    moves the new files in, ``summary.json`` last. A failure before the commit (a
    full disk, a read-only file system, an interrupted write) leaves the earlier
    record untouched and no partial one: :meth:`abort` removes the stage. The stages
    of runs killed before their commit are removed when the next one starts.

    Raises
    ------
    RecordWriteError
        If the stage cannot be created (the folder is not writable).
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        # the stages of runs killed before their commit (SIGKILL, power loss)
        for old in self.folder.glob(".fedstrata-stage-*"):
            shutil.rmtree(old, ignore_errors=True)
        try:
            self.dir = Path(tempfile.mkdtemp(prefix=".fedstrata-stage-", dir=self.folder))
        except OSError as exc:
            raise write_failure(exc, self.folder) from None

    def commit(self, files: Sequence[str]) -> None:
        """Replace the folder's record by the staged ``files`` (``summary.json`` last)."""
        names = [n for n in files if n != "summary.json"]
        last = ["summary.json"] if "summary.json" in files else []
        try:
            with contextlib.suppress(FileNotFoundError):
                (self.folder / "summary.json").unlink()
            for name in RECORD_FILES:
                if name not in files:
                    with contextlib.suppress(FileNotFoundError):
                        (self.folder / name).unlink()
            for name in [*names, *last]:
                os.replace(self.dir / name, self.folder / name)
        except OSError as exc:
            raise write_failure(exc, self.folder) from None
        self.abort()

    def abort(self) -> None:
        """Remove the stage and whatever was written into it."""
        shutil.rmtree(self.dir, ignore_errors=True)


def _no_offset(axis: Any) -> None:
    """Plain tick labels on ``axis``: no ``+8.841e1`` offset, no ``1e6`` multiplier."""
    from matplotlib.ticker import ScalarFormatter

    fmt = ScalarFormatter(useOffset=False)
    fmt.set_scientific(False)
    axis.set_major_formatter(fmt)


def _fit_limits(ax: Any, values: Sequence[float], *, floor: float = 0.02) -> None:
    """Fit the y-axis to ``values`` (NaN ignored) with a margin of at least ``floor``."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return
    lo, hi = min(finite), max(finite)
    pad = max((hi - lo) * 0.1, floor / 2)
    top = hi + pad if hi > 1.0 else min(hi + pad, 1.0 + pad / 4)  # scores end at 1
    ax.set_ylim(lo - pad, top)


def plot_rounds(
    rows: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    title: str = "",
    final: tuple[float, int] | None = None,
) -> Any:
    """Plot objective, ARI/NMI and cumulative bytes per root round into one PNG.

    ``final`` is ``(virtual_time_s, bytes_total)`` of ``summary.json`` at the end
    of the run: the traffic panel's last point is that total (the final broadcast
    included). ``title`` (the caller passes ``"NAME: status"``) heads the figure.
    No axis uses offset notation; ARI and NMI differ in marker and line style, and
    the quality panel's y-axis fits the data (so 0.997 and 0.996 stay apart).

    Returns the :class:`matplotlib.figure.Figure` (not attached to pyplot) after
    writing it atomically to ``path``, for callers and tests that inspect it.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    root = [
        r
        for r in rows
        if r.get("tier") == "cloud" and r.get("phase") == "iter" and r.get("objective") is not None
    ]
    fig = Figure(figsize=(13, 3.8))
    axes = fig.subplots(1, 3)
    it = [r["iteration"] for r in root]
    axes[0].plot(it, [r["objective"] for r in root], marker="o", ms=4, color="tab:blue")
    axes[0].set(xlabel="round", ylabel="objective J", title="objective J per round")
    quality = (("ari", "ARI", "o", "-", "tab:orange"), ("nmi", "NMI", "s", "--", "tab:green"))
    shown: list[float] = []
    for key, label, marker, style, color in quality:
        ys = [math.nan if r.get(key) is None else float(r[key]) for r in root]
        shown += ys
        axes[1].plot(
            it,
            ys,
            marker=marker,
            ls=style,
            ms=6 if marker == "o" else 4,
            mfc="none" if marker == "o" else color,
            color=color,
            label=label,
            gid=f"quality-{key}",
        )
    axes[1].set(xlabel="round", ylabel="score (1 = the true classes)", title="clustering quality")
    _fit_limits(axes[1], shown)
    if root:
        axes[1].legend(loc="best")
    # cumulative traffic: the root's rows (setup included), then the run's end
    traffic = [
        r
        for r in rows
        if r.get("tier") == "cloud"
        and r.get("bytes") is not None
        and r.get("virtual_time_s") is not None
    ]
    t = [float(r["virtual_time_s"]) for r in traffic]
    b = [float(r["bytes"]) for r in traffic]
    if final is not None and final[0] is not None and final[1] is not None:
        t, b = [*t, float(final[0])], [*b, float(final[1])]
    axes[2].plot(t, b, marker="o", ms=4, color="tab:purple", gid="bytes")
    if final is not None and final[1] is not None and t:
        axes[2].annotate(
            f"{int(final[1]):,} B total",
            (t[-1], b[-1]),
            textcoords="offset points",
            xytext=(-4, -14),
            ha="right",
            fontsize="small",
        )
    axes[2].set(xlabel="time (s)", ylabel="bytes on the wire (cumulative)", title="traffic")
    for ax in axes:
        _no_offset(ax.xaxis)
        _no_offset(ax.yaxis)
        ax.grid(alpha=0.3)
    for ax in axes[:2]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
    if not root:
        axes[0].text(0.5, 0.5, "no completed round", ha="center", transform=axes[0].transAxes)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, dpi=110, format="png")
    return fig


def aggregate_row(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The ``rounds.csv`` row of one ``aggregate`` record (any transport).

    ``rec`` is ``{"t", "node", "kind", "fields", "wire_bytes"}``: ``t`` the node's
    clock, ``wire_bytes`` the cumulative PUBLISH bytes per tier when it closed.
    """
    f = rec["fields"]
    return {
        "round": f["round"],
        "tier": f["tier"],
        "phase": f["phase"],
        "sub": f["sub"],
        "aggregators": 1,
        "participants": f["participants"],
        "expected": f["expected"],
        "ok": f["ok"],
        "bytes": sum(rec["wire_bytes"].values()),
        "virtual_time_s": round(rec["t"], 9),
        **{k: f[k] for k in PROTOCOL_COLUMNS if k in f},
        **_privacy_cells(f),
    }


def _privacy_cells(f: Mapping[str, Any]) -> dict[str, Any]:
    """Secure aggregation's cells of a round: failed sessions, why, recoveries, bytes."""
    if "secure_failure" not in f:
        return {}
    return {
        "secure_failed": int(bool(f["secure_failure"])),
        "secure_failure": f["secure_failure"],
        "dropouts_recovered": int(f.get("recovered", 0)),
        "privacy_bytes": sum(
            int(f.get(f"privacy_bytes_{step}", 0))
            for step in ("keys", "shares", "consistency", "unmasking")
        ),
    }
