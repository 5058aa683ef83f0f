"""The ``data`` section of a scenario: which dataset, how it is split, which views.

``dataset`` names a registered generator or reader (:mod:`fedstrata.scenarios.
datasets`) whose parameters ``params`` are checked against its signature and the bounds
below; ``files`` reads one's own data instead; ``partition`` splits the samples among
the clients; ``views`` gives hybrid-view ratios.
"""

from __future__ import annotations

import inspect
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError

from fedstrata.errors import ScenarioError
from fedstrata.scenarios.datasets import DATASETS
from fedstrata.scenarios.fields import Probability
from fedstrata.scenarios.show import clip, describe_error, show
from fedstrata.settings import ScenarioErrors
from fedstrata.settings import Strict as _Strict

MAX_SAMPLES = 2_000_000
"""Most samples a scenario's dataset may have (``data.params`` are bounded to keep it)."""

DATASET_PARAM_BOUNDS: dict[str, dict[str, tuple[int, int]]] = {
    "heat-kernel-synthetic": {"n_per_cluster": (1, MAX_SAMPLES // 4)},
}
"""Inclusive integer ranges of dataset parameters (``data.params``), by dataset."""


class PartitionSpec(_Strict):
    """How samples are split over clients.

    ``alpha`` (``0 < alpha <= 1e6``) is the Dirichlet concentration of ``dirichlet``
    (required) and ``quantity`` (default 1); ``fractions`` (one per client, each > 0,
    summing to 1) belong to ``stratified`` only. Every client must get at least one
    sample.
    """

    kind: Literal["iid", "dirichlet", "quantity", "stratified", "paper"] = "iid"
    alpha: Annotated[float, Field(gt=0.0, le=1e6)] | None = Field(None, description="(0, 1e6]")
    fractions: list[Probability] | None = None

    @model_validator(mode="after")
    def _used(self) -> PartitionSpec:
        errors = []
        if self.alpha is not None and self.kind not in ("dirichlet", "quantity"):
            errors.append(
                ScenarioError(
                    f"not used by kind {self.kind!r} (only dirichlet and quantity take alpha)",
                    path="data.partition.alpha",
                )
            )
        if self.fractions is not None and self.kind != "stratified":
            errors.append(
                ScenarioError(
                    f"not used by kind {self.kind!r} (only stratified takes fractions)",
                    path="data.partition.fractions",
                )
            )
        if self.kind == "dirichlet" and self.alpha is None:
            errors.append(
                ScenarioError(
                    "kind 'dirichlet' needs alpha (the concentration, > 0)",
                    path="data.partition.alpha",
                )
            )
        if errors:
            raise ScenarioErrors(errors)
        return self


@cache
def _param_adapter(dataset: str, param: str) -> TypeAdapter[Any] | None:
    """A strict validator for one keyword of a dataset loader, from its signature."""
    sig = inspect.signature(DATASETS[dataset], eval_str=True)
    ann = sig.parameters[param].annotation
    if ann is inspect.Parameter.empty:
        return None
    return TypeAdapter(ann, config=ConfigDict(strict=True, allow_inf_nan=False))


def _dataset_params(dataset: str) -> dict[str, inspect.Parameter]:
    sig = inspect.signature(DATASETS[dataset])
    return {
        k: p
        for k, p in sig.parameters.items()
        if k != "random_state"
        and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    }


MAX_VIEW_FILES = 64
"""Most view files under ``data.files.views``."""


class DataFile(_Strict):
    """One data file: ``path`` and, for an ``.npz`` archive of several arrays, ``key``.

    A relative ``path`` is read from the scenario file's folder. The formats are
    those of ``fedstrata node`` (``.npz``, ``.csv``) and ``.parquet`` (with pyarrow).
    """

    path: str = Field(description="a .npz, .csv or .parquet file")
    key: str | None = Field(None, description="the array of an .npz archive")


class DataFilesSpec(_Strict):
    """Your own data: one file per view and a label file, row ``i`` of each is sample ``i``.

    Each item of ``views`` and ``labels`` is a path or ``{path, key}``. A view file
    holds an ``(n_samples, n_features)`` table of finite numbers: ``.npz`` (``key``
    names the array when the archive holds several), ``.csv`` (a header line is
    skipped) or ``.parquet`` (every column a feature; needs pyarrow). The optional
    label file holds one whole number per sample (an ``.npz`` array may be 1-D);
    without it a run has no ACC/NMI/ARI and the label-based partitions (``dirichlet``,
    ``stratified``, ``paper``) and ``protocol.personalization`` are refused. Every
    file is read by ``fedstrata validate``, which names the file and where in it a
    problem is.
    """

    views: Annotated[
        list[str | DataFile],
        Field(min_length=1, max_length=MAX_VIEW_FILES, description=f"1 .. {MAX_VIEW_FILES}"),
    ]
    labels: str | DataFile | None = None


def _resolve(path: str, base: Path | None) -> Path:
    p = Path(path)
    return p if base is None or p.is_absolute() else base / p


def _check_files(files: DataFilesSpec, base: Path | None) -> DataFilesSpec:
    """Read every file of ``files``; return it with absolute paths, or raise located errors.

    Errors are at ``data.files.views.<i>.path`` (``.key`` for a missing array,
    without ``.path`` when the item is a bare path), ``data.files.labels...``.
    """
    from fedstrata.device.data import DataFileError
    from fedstrata.scenarios.datasets import load_files

    def item(entry: str | DataFile) -> tuple[str, str | None]:
        return (entry, None) if isinstance(entry, str) else (entry.path, entry.key)

    def where(prefix: str, entry: str | DataFile, field: str) -> str:
        return prefix if isinstance(entry, str) else f"{prefix}.{field}"

    entries = [("data.files.views." + str(i), e) for i, e in enumerate(files.views)]
    if files.labels is not None:
        entries.append(("data.files.labels", files.labels))
    for prefix, entry in entries:
        path, _ = item(entry)
        if not path or "\x00" in path:
            raise ScenarioErrors(
                [
                    ScenarioError(
                        f"must be a file name, got {show(path)}", path=where(prefix, entry, "path")
                    )
                ]
            )
    resolved = [(str(_resolve(p, base)), k) for p, k in map(item, files.views)]
    label_item = None
    if files.labels is not None:
        lp, lk = item(files.labels)
        label_item = (str(_resolve(lp, base)), lk)
    try:
        load_files(resolved, label_item)
    except DataFileError as exc:
        h = getattr(exc, "view", None)
        prefix, entry = entries[-1] if h is None else entries[h]
        shown, _ = item(entry)
        rel = ""  # where a relative path was looked for, when it was not found
        if exc.reason == "does not exist" and base is not None and not Path(shown).is_absolute():
            rel = " (relative to the scenario file)"
        msg = f"{show(shown)}{rel} {exc.reason}" if exc.field == "path" else exc.reason
        raise ScenarioErrors([ScenarioError(msg, path=where(prefix, entry, exc.field))]) from None

    def absolute(entry: str | DataFile) -> str | DataFile:
        path, key = item(entry)
        full = str(_resolve(path, base).absolute())
        return full if isinstance(entry, str) else DataFile(path=full, key=key)

    return DataFilesSpec(
        views=[absolute(e) for e in files.views],
        labels=None if files.labels is None else absolute(files.labels),
    )


class DataSpec(_Strict):
    """Dataset, its parameters, the partition and the hybrid view assignment.

    ``dataset`` is a key of :data:`~fedstrata.scenarios.datasets.DATASETS`; ``params``
    are keyword arguments of its loader, checked against the loader's signature and
    types (``random_state`` comes from ``seed``) and against
    :data:`DATASET_PARAM_BOUNDS` (``heat-kernel-synthetic``: ``n_per_cluster`` in
    ``1 .. 500000``). ``files`` reads your own views and labels from files instead
    (:class:`DataFilesSpec`; then neither ``dataset`` nor ``params`` is given); every
    ``partition`` kind applies to them as to a built-in dataset. ``views`` gives the
    shares of full-view (``all``, > 0), partial-view (``some``) and single-view
    (``single``) clients, summing to 1.
    """

    dataset: str = "heat-kernel-synthetic"
    params: dict[str, Any] = Field(default_factory=dict)
    files: DataFilesSpec | None = None
    partition: PartitionSpec = PartitionSpec()
    views: dict[Literal["all", "some", "single"], Probability] | None = None

    @field_validator("files")
    @classmethod
    def _read_files(cls, value: DataFilesSpec | None, info: ValidationInfo) -> DataFilesSpec | None:
        if value is None:
            return value
        base = (info.context or {}).get("base_dir")
        return _check_files(value, None if base is None else Path(base))

    @field_validator("dataset")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in DATASETS:
            raise ValueError(
                f"unknown dataset {show(value)}; known datasets: {', '.join(sorted(DATASETS))}"
            )
        return value

    @model_validator(mode="after")
    def _params(self) -> DataSpec:
        if self.files is not None:
            clash = [k for k in ("dataset", "params") if k in self.model_fields_set]
            if clash:
                raise ScenarioErrors(
                    [
                        ScenarioError(
                            "data.files gives the data: remove this (or files)", path=f"data.{k}"
                        )
                        for k in clash
                    ]
                )
            return self
        allowed = _dataset_params(self.dataset)
        bounds = DATASET_PARAM_BOUNDS.get(self.dataset, {})
        errors = []
        for key, value in self.params.items():
            path = f"data.params.{clip(str(key))}"
            if key == "random_state":
                errors.append(
                    ScenarioError("is set from the scenario's seed; remove it", path=path)
                )
                continue
            if key not in allowed:
                takes = ", ".join(allowed) or "no parameters"
                errors.append(
                    ScenarioError(
                        f"unknown parameter of dataset {self.dataset!r} (it takes {takes})",
                        path=path,
                    )
                )
                continue
            adapter = _param_adapter(self.dataset, key)
            if adapter is not None:
                try:
                    adapter.validate_python(value)
                except PydanticValidationError as exc:
                    errors.append(ScenarioError(describe_error(exc.errors()[0]), path=path))
                    continue
            if key in bounds:
                low, high = bounds[key]
                if value < low:
                    errors.append(ScenarioError(f"must be >= {low}, got {show(value)}", path=path))
                elif value > high:
                    errors.append(
                        ScenarioError(
                            f"must be <= {high} (at most {MAX_SAMPLES} samples), got {show(value)}",
                            path=path,
                        )
                    )
        if errors:
            raise ScenarioErrors(errors)
        return self
