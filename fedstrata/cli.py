"""The ``fedstrata`` command line: cluster, validate, run, compare, broker config.

Every :class:`~fedstrata.errors.FedstrataError` becomes one clear line on stderr
and a non-zero exit code; a Python traceback reaching a user is a bug.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console

from fedstrata.errors import FedstrataError

__all__ = ["app", "main"]

app = typer.Typer(
    name="fedstrata",
    help="Federated multi-view clustering over hierarchical edge-fog-cloud networks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click usage errors: "Usage: ...", "Error: ...", exit 2
)
err = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)
F = TypeVar("F", bound=Callable[..., Any])

# centralised baselines that are no federated plug-in: name -> (estimator, its options)
_BASELINES = {"concat-kmeans": ("fedstrata.algorithms:ConcatKMeans", frozenset({"n_init"}))}


def _estimators() -> dict[str, tuple[str, frozenset[str]]]:
    """What ``cluster`` fits: each plug-in's centralised estimators, then the baselines.

    Per name, the estimator (``module:Class``) and the ``cluster`` options it takes (an
    option given to one that does not take it is an error, never silently dropped).
    """
    import fedstrata.registry  # noqa: F401  (the composition root registers the plug-ins)
    from fedstrata.plugins.spec import algorithm_plugins

    found: dict[str, tuple[str, frozenset[str]]] = {}
    for plugin in algorithm_plugins():
        found.update(plugin.estimators)
    return {**found, **_BASELINES}


def _track_option() -> Any:
    """The ``--track`` option of run, sweep and study (a fresh one for each command)."""
    return typer.Option(
        [],
        "--track",
        metavar="KIND:TARGET",
        help="Also log each run (scenario, rounds, summary, record) to tensorboard:DIR or "
        "mlflow:URI (a folder is a local store); repeatable; needs the [tracking] extra.",
    )


class _Tracking:
    """The ``--track`` trackers of one command; a tracker that fails is reported at the end.

    Trackers read finished records (fedstrata.tracking), so a failing one never costs
    the run: the record is complete on disk whatever the tracker says.
    """

    def __init__(self, specs: list[str]) -> None:
        self.trackers: list[Any] = []
        self.failed: dict[str, str] = {}
        if specs:  # made before any run, so that a missing extra costs nothing
            from fedstrata.tracking import TrackingError, trackers_from_specs

            try:
                self.trackers = trackers_from_specs(specs)
            except TrackingError as exc:
                raise typer.BadParameter(str(exc), param_hint="'--track'") from None

    def _each(self, action: Callable[[Any], None]) -> None:
        for t in self.trackers:
            if t.spec in self.failed:
                continue
            try:
                action(t)
            except Exception as exc:  # a store that refuses, a full disk: said, not a crash
                self.failed[t.spec] = f"{type(exc).__name__}: {exc}"

    def log(self, folder: Path, collection: Path | None = None) -> None:
        """Log one finished record (of a sweep or study when ``collection`` is given)."""
        self._each(lambda t: t.log_record(folder, collection=collection))

    def finish(self, collection: Path | None = None, *, exit_on_failure: bool = True) -> None:
        """Log the collection's own tables, close every tracker, exit 1 if one failed."""
        if collection is not None:
            self._each(lambda t: t.log_collection(collection))
        self._each(lambda t: t.close())
        for spec, why in self.failed.items():
            err.print(
                f"error: --track {spec}: {why[:300]} (the record itself is complete)",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )
        if self.failed and exit_on_failure:
            raise typer.Exit(1)


def _fail(message: str, code: int = 1) -> typer.Exit:
    from rich.markup import escape  # a path or value with [brackets] is printed as is

    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _make_estimator(name: str, n_clusters: int, seed: int, **params: Any) -> Any:
    import importlib

    from fedstrata.errors import ValidationError
    from fedstrata.plugins.spec import plugin_for

    known = _estimators()
    if name not in known:
        if plugin_for(name) is not None:
            raise ValidationError(
                f"{name} runs only as a federation: write a scenario with algorithm.name: "
                f"{name} and use fedstrata run"
            )
        raise ValidationError(f"unknown algorithm {name!r}; choose one of {', '.join(known)}")
    module, _, attr = known[name][0].partition(":")
    return getattr(importlib.import_module(module), attr)(n_clusters, random_state=seed, **params)


@app.command()
def cluster(
    dataset: str = typer.Option("heat-kernel-synthetic", help="Dataset name."),
    algorithm: str = typer.Option(
        "hk-mvfc",
        help="An algorithm plug-in with a centralised estimator (hk-mvfc, mvfcm, mvkm-ed, the "
        "tensor family, ...) or concat-kmeans; an unknown name lists them all.",
    ),
    n_clusters: int = typer.Option(0, help="Number of clusters (default: the dataset's classes)."),
    seed: int = typer.Option(0, help="Random seed for data and fit."),
    kernel: str | None = typer.Option(None, help="hk-mvfc heat kernel: type1, type2, none."),
    center_update: str | None = typer.Option(
        None, help="hk-mvfc centre update: paper, exact, derivation."
    ),
    m: float | None = typer.Option(
        None, help="Fuzzifier (fuzzy methods; default: the algorithm's)."
    ),
    alpha: float | None = typer.Option(
        None, help="View-weight exponent (default: the algorithm's)."
    ),
    rank: int | None = typer.Option(None, help="PARAFAC2/CP rank (fedhk-parafac2, -mvc-person)."),
    n_init: int | None = typer.Option(None, help="Restarts (default: the algorithm's)."),
    preset: str | None = typer.Option(
        None,
        help="Named settings: paper or real-data (hk-mvfc and the tensor family; default: "
        "the algorithm's).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Cluster a dataset centrally and print ACC/NMI/ARI, objective, view weights and time."""
    from fedstrata.analysis.metrics import evaluate
    from fedstrata.scenarios.datasets import load_dataset

    options = dict(kernel=kernel, center_update=center_update, m=m, alpha=alpha, rank=rank)
    options.update(n_init=n_init, preset=preset)
    given = {k: v for k, v in options.items() if v is not None}
    entry = _estimators().get(algorithm)
    if entry is not None:
        takes = entry[1]
        refused = [k for k in given if k not in takes]
        if refused:
            raise _fail(
                f"{algorithm} does not take "
                + ", ".join("--" + k.replace("_", "-") for k in refused)
                + f" (it takes {', '.join('--' + k.replace('_', '-') for k in sorted(takes))})",
                2,
            )
    ds = load_dataset(dataset, random_state=seed)
    c = n_clusters or ds.n_clusters
    est = _make_estimator(algorithm, c, seed, **given)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(ds.views)
    elapsed = time.perf_counter() - t0
    scores = evaluate(ds.labels, est.labels_)
    result = {
        "dataset": ds.name,
        "n_samples": ds.n_samples,
        "n_views": ds.n_views,
        "algorithm": algorithm,
        "n_clusters": c,
        **{k: round(float(v), 6) for k, v in scores.items()},
        "objective": float(est.objective_),
        "n_iter": int(est.n_iter_),
        "view_weights": [round(float(v), 6) for v in getattr(est, "view_weights_", [])],
        "time_s": round(elapsed, 4),
        "warnings": [str(w.message) for w in caught],
    }
    if as_json:
        out.print_json(json.dumps(result))
        return
    out.print(f"[bold]{algorithm}[/] on {ds.name} (n={ds.n_samples}, views={ds.n_views}, c={c})")
    out.print(
        f"ACC {scores['acc']:.4f}   NMI {scores['nmi']:.4f}   ARI {scores['ari']:.4f}   "
        f"RI {scores['ri']:.4f}   purity {scores['purity']:.4f}"
    )
    out.print(f"objective {est.objective_:.6g}   iterations {est.n_iter_}   time {elapsed:.3f} s")
    if result["view_weights"]:
        out.print("view weights " + "  ".join(f"{v:.4f}" for v in result["view_weights"]))
    for w in result["warnings"]:
        out.print(f"[yellow]warning:[/] {w}")


@app.command()
def validate(
    files: list[Path] = typer.Argument(..., metavar="SCENARIO...", help="Scenario files."),
) -> None:
    """Check scenario files as run would; print one line per problem, exit 1 if any."""
    from fedstrata.scenarios.advice import scenario_warnings
    from fedstrata.scenarios.loader import ScenarioErrors, load_scenario

    bad = 0
    for f in files:
        try:
            sc = load_scenario(f)
        except ScenarioErrors as exc:
            bad += 1
            for e in exc.errors:
                err.print(e.located(), highlight=False, soft_wrap=True, markup=False)
            continue
        # warnings (a latency that looks like ms, a deadline no round can meet) keep exit 0
        for w in scenario_warnings(f, sc):
            err.print(w.located(), highlight=False, soft_wrap=True, markup=False)
        out.print(f"{f}: ok", highlight=False, markup=False)
    if bad:
        raise typer.Exit(1)


def _check_transport_options(
    transport: str,
    processes: int,
    no_batch: bool,
    emulate_links: bool,
    insecure: bool,
    keys_dir: Path | None,
) -> None:
    """Refuse ``fedstrata run`` options that the chosen transport does not have."""
    if transport not in ("sim", "mqtt"):
        raise typer.BadParameter(
            f"{transport!r} is not one of 'sim', 'mqtt'", param_hint="'--transport'"
        )
    if processes != 1 and transport != "mqtt":
        raise typer.BadParameter(
            "--processes needs --transport mqtt (the simulator runs in one process)",
            param_hint="'--processes'",
        )
    if no_batch and transport != "sim":
        raise typer.BadParameter(
            "--no-batch is for the simulator (--transport sim)", param_hint="'--no-batch'"
        )
    if emulate_links and transport != "mqtt":
        raise typer.BadParameter(
            "--emulate-links needs --transport mqtt (the simulator always models the links)",
            param_hint="'--emulate-links'",
        )
    for name, given in (("--insecure", insecure), ("--keys", keys_dir is not None)):
        if given and transport != "mqtt":  # the simulator signs as privacy.sign says
            raise typer.BadParameter(f"{name} needs --transport mqtt", param_hint=f"'{name}'")
    if insecure and keys_dir is not None:
        raise typer.BadParameter("--keys signs the run: drop --insecure", param_hint="'--keys'")


@app.command()
def run(
    scenario: Path = typer.Argument(..., metavar="SCENARIO", help="Scenario file (YAML)."),
    out_dir: Path | None = typer.Option(
        None, "--out", help="Output folder [default: runs/NAME, NAME the scenario's name]."
    ),
    seed: int | None = typer.Option(
        None, min=0, max=2**32 - 1, help="Override the scenario's seed."
    ),
    events: bool = typer.Option(False, "--events", help="Also write events.jsonl."),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write PNG plots."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace the record of another run in --out."
    ),
    transport: str = typer.Option(
        "sim",
        "--transport",
        help="sim: virtual time in the simulator; mqtt: the same nodes over a real MQTT broker.",
    ),
    broker: str | None = typer.Option(
        None,
        "--broker",
        metavar="mqtt://HOST:PORT",
        help="With --transport mqtt: the broker [default: a private Mosquitto on 127.0.0.1].",
    ),
    timeout: float = typer.Option(
        600.0, "--timeout", min=0.001, help="With --transport mqtt: wall-clock limit in seconds."
    ),
    processes: int = typer.Option(
        1,
        "--processes",
        min=1,
        max=256,
        help="With --transport mqtt: spread the nodes over this many processes.",
    ),
    emulate_links: bool = typer.Option(
        False,
        "--emulate-links",
        help="With --transport mqtt: delay and lose messages by the scenario's links, "
        "partitions and degradations (userspace).",
    ),
    run_id: str | None = typer.Option(
        None,
        "--run-id",
        help="With --transport mqtt: the run's topic level [default: NAME-<8 random hex>].",
    ),
    broker_ca: Path | None = typer.Option(
        None, "--broker-ca", help="With an mqtts:// broker: the CA file (PEM) to trust."
    ),
    broker_cert: Path | None = typer.Option(
        None, "--broker-cert", help="With an mqtts:// broker: a client certificate (PEM)."
    ),
    broker_key: Path | None = typer.Option(
        None, "--broker-key", help="With --broker-cert: its private key (PEM)."
    ),
    broker_user: str | None = typer.Option(
        None,
        "--broker-user",
        help="MQTT user name for every node; the password is read from "
        "$FEDSTRATA_BROKER_PASSWORD (never from the command line).",
    ),
    insecure: bool = typer.Option(
        False,
        "--insecure",
        help="With --transport mqtt: send the messages unsigned. By default a real run signs "
        "every message with fresh per-run keys; the record says insecure.",
    ),
    keys_dir: Path | None = typer.Option(
        None,
        "--keys",
        metavar="DIR",
        help="With --transport mqtt: sign with the key files `fedstrata keys` wrote in DIR "
        "instead of fresh per-run keys.",
    ),
    track: list[str] = _track_option(),
    no_batch: bool = typer.Option(
        False,
        "--no-batch",
        help="Simulator: every client computes its own step and every message is packed "
        "into its bytes (the reference path; the same record, slower) instead of each "
        "parent's children in one batched call and unsigned messages passed unpacked.",
    ),
) -> None:
    """Run a scenario (simulated, or over real MQTT); write its record (summary.json, ...)."""
    from fedstrata.scenarios.loader import ScenarioErrors, load_scenario
    from fedstrata.scenarios.run import run_scenario

    _check_transport_options(transport, processes, no_batch, emulate_links, insecure, keys_dir)
    tracking = _Tracking(track)
    endpoint = _endpoint_option(
        transport, broker, broker_ca, broker_cert, broker_key, broker_user, run_id
    )
    try:
        sc = load_scenario(scenario, seed=seed)
    except ScenarioErrors as exc:
        for e in exc.errors:
            err.print(e.located(), highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(1) from None
    if out_dir is None:
        out_dir = Path("runs") / sc.name
    _terminate_like_ctrl_c()
    if transport == "mqtt" and (events or sc.output.events):
        raise typer.BadParameter(
            "events.jsonl is written by the simulator only, not yet over MQTT "
            "(drop --events or set output.events: false)",
            param_hint="'--events'",
        )
    if transport == "mqtt":
        _run_mqtt(
            sc,
            out_dir,
            seed,
            endpoint,
            overwrite,
            timeout,
            plots and sc.output.plots,
            run_id,
            emulate_links,
            processes,
            not quiet,
            insecure,
            keys_dir,
        )
        tracking.log(out_dir)
        tracking.finish()
        return
    _acknowledge_ctrl_c()
    summary = run_scenario(
        sc,
        out_dir,
        seed=seed,
        events=events or sc.output.events,
        plots=plots and sc.output.plots,
        progress=not quiet,
        overwrite=overwrite,
        command=["fedstrata", *sys.argv[1:]],
        batch=not no_batch,
    )
    _print_warnings(summary)
    _print_outcome(
        sc.name,
        summary,
        out_dir,
        f"{summary['bytes_total']:,} bytes, {summary['messages']:,} messages "
        f"({summary['messages_dropped']:,} dropped), virtual {summary['virtual_time_s']:.6g} s, "
        f"wall {summary['wall_time_s']:.2f} s",
    )
    tracking.log(out_dir)
    tracking.finish()


def _endpoint_option(
    transport: str,
    broker: str | None,
    ca: Path | None,
    cert: Path | None,
    key: Path | None,
    user: str | None,
    run_id: str | None,
) -> Any:
    """The broker options of ``run`` as an Endpoint (``None``: a private broker)."""
    given = {
        "--broker": broker,
        "--broker-ca": ca,
        "--broker-cert": cert,
        "--broker-key": key,
        "--broker-user": user,
        "--run-id": run_id,
    }
    if transport != "mqtt":
        for name, value in given.items():
            if value is not None:
                raise typer.BadParameter(f"{name} needs --transport mqtt", param_hint=f"'{name}'")
        return None
    if run_id is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", run_id):
        raise typer.BadParameter(
            f"{run_id!r} must be 1-64 letters, digits, '.', '_' or '-'", param_hint="'--run-id'"
        )
    if broker is None:
        for name in ("--broker-ca", "--broker-cert", "--broker-key", "--broker-user"):
            if given[name] is not None:
                raise typer.BadParameter(f"{name} needs --broker", param_hint=f"'{name}'")
        return None
    from fedstrata.broker.endpoint import Endpoint
    from fedstrata.errors import ValidationError

    password = os.environ.get("FEDSTRATA_BROKER_PASSWORD") if user is not None else None
    try:
        return Endpoint.from_url(
            broker,
            ca_file=None if ca is None else str(ca),
            cert_file=None if cert is None else str(cert),
            key_file=None if key is None else str(key),
            username=user,
            password=password,
        )
    except ValidationError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--broker'") from None


def _run_mqtt(
    sc: Any,
    out_dir: Path,
    seed: int | None,
    broker: Any,
    overwrite: bool,
    timeout: float,
    plots: bool,
    run_id: str | None,
    emulate_links: bool,
    processes: int,
    progress: bool,
    insecure: bool = False,
    keys_dir: Path | None = None,
) -> None:
    """``fedstrata run --transport mqtt``: run over real MQTT and print the outcome."""
    from fedstrata.scenarios.run_mqtt import run_scenario_mqtt

    summary = run_scenario_mqtt(
        sc,
        out_dir,
        seed=seed,
        broker=broker,
        overwrite=overwrite,
        command=["fedstrata", *sys.argv[1:]],
        timeout_s=timeout,
        plots=plots,
        run_id=run_id,
        emulate_links=emulate_links,
        processes=processes,
        progress=progress,
        insecure=insecure,
        key_dir=keys_dir,
    )
    _print_warnings(summary)
    _print_outcome(
        sc.name,
        summary,
        out_dir,
        f"{summary['bytes_total']:,} bytes, {summary['messages']:,} messages over "
        f"{summary['broker']} (run id {summary['run_id']}), wall {summary['wall_time_s']:.2f} s",
    )


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


@app.command()
def study(
    file: Path = typer.Argument(..., metavar="STUDY", help="A study file (a scenario + study)."),
    out_dir: Path | None = typer.Option(
        None, "--out", help="Folder for the runs and study.csv [default: runs/<study name>]."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace the records of other runs in --out."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No line per run while it runs."),
    target_ari: float | None = typer.Option(
        None, "--target-ari", min=-1.0, max=1.0, help="Override the study's target_ari."
    ),
    track: list[str] = _track_option(),
) -> None:
    """Run a study's variants and seeds (simulated) and compare them in one table."""
    from fedstrata.analysis.records import OutputError
    from fedstrata.scenarios.loader import ScenarioErrors
    from fedstrata.scenarios.study import STUDY_COLUMNS, load_study, run_study

    tracking = _Tracking(track)
    try:
        st = load_study(file)
    except ScenarioErrors as exc:
        for e in exc.errors:
            err.print(e.located(), highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(1) from None
    if target_ari is not None:
        st = dataclasses.replace(st, target_ari=target_ari)
    if out_dir is None:
        out_dir = Path("runs") / file.stem
    _terminate_like_ctrl_c()

    def progress(name: str, seed: int) -> None:
        if not quiet:
            err.print(f"running {name} seed {seed}", highlight=False, markup=False)

    try:
        result = run_study(st, out_dir, overwrite=overwrite, progress=progress)
    except OutputError as exc:
        raise _fail(str(exc), 2) from None
    from rich.table import Table

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, int | float) and not isinstance(value, bool):
            if abs(value) >= 1e6:
                return f"{value / 1e6:.3g}M"
            if abs(value) >= 1e4:
                return f"{value / 1e3:.3g}k"
            return f"{value:.4g}" if isinstance(value, float) else str(value)
        return str(value)

    table = Table(show_edge=False, header_style="bold")  # a row per field: variants fit
    table.add_column("field", no_wrap=True)
    for row in result["rows"]:
        table.add_column(row["variant"], justify="right")
    for col in STUDY_COLUMNS[1:]:
        table.add_row(col, *(cell(row[col]) for row in result["rows"]))
    out.print(table)
    out.print(f"record: {out_dir}", highlight=False, markup=False)
    for r in result["runs"]:
        tracking.log(Path(r["path"]), out_dir)
    tracking.finish(out_dir)


@app.command()
def compare(
    runs: list[Path] = typer.Argument(
        ..., metavar="DIR", help="Two or more run folders (any transports)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
    target_ari: float = typer.Option(
        0.99,
        "--target-ari",
        min=-1.0,
        max=1.0,
        help="Time and bytes to the first root round with ARI >= this.",
    ),
    link_cost: str | None = typer.Option(
        None,
        "--link-cost",
        metavar="TIER=COST,...",
        help="Relative cost per byte of each tier's link for the energy proxy, "
        "e.g. edge=1.0,fog=0.3,cloud=0.1 [default: 1.0 for every tier].",
    ),
    plot: Path | None = typer.Option(
        None, "--plot", metavar="FILE.png", help="Also draw the metric vs time and vs bytes."
    ),
    metric: str = typer.Option("ari", "--metric", help="With --plot: ari, nmi, acc or objective."),
) -> None:
    """Compare run records (any transports) side by side, from their files alone."""
    from fedstrata.analysis.compare import (
        METRICS,
        NotARunFolderError,
        RecordError,
        compare_many,
        parse_link_cost,
        plot_comparison,
    )
    from fedstrata.errors import ValidationError

    if len(runs) < 2:
        raise typer.BadParameter("give at least two run folders", param_hint="'DIR...'")
    if metric not in METRICS:
        raise typer.BadParameter(
            f"{metric!r} is not one of {', '.join(METRICS)}", param_hint="'--metric'"
        )
    if plot is not None and plot.suffix.lower() != ".png":
        raise typer.BadParameter(f"{plot}: the plot is a PNG, name it *.png", param_hint="'--plot'")
    try:
        costs = parse_link_cost(link_cost)
    except ValidationError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--link-cost'") from None
    try:
        cmp = compare_many(runs, target_ari=target_ari, link_cost=costs)
    except NotARunFolderError as exc:
        raise _fail(str(exc), 2) from None
    except RecordError as exc:
        raise _fail(str(exc), 1) from None
    except ValidationError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--link-cost'") from None
    if plot is not None:
        try:
            plot_comparison(cmp, plot, metric=metric)
        except OSError as exc:
            raise _fail(f"--plot {plot}: cannot write ({exc.strerror or exc})", 2) from None
    if as_json:
        out.print_json(json.dumps(cmp, allow_nan=False))
        return
    _print_comparison(cmp)
    if plot is not None:
        out.print(f"plot: {plot}", highlight=False, markup=False)


def _print_comparison(cmp: dict[str, Any]) -> None:
    """The comparison as a table: a row per field, a column per run."""
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    names = [run["name"] for run in cmp["runs"]]
    for name, run in zip(names, cmp["runs"], strict=True):
        if name != run["path"]:  # the column names a folder given by a longer path
            out.print(f"{name}: {run['path']}", markup=False, highlight=False)
    lc = cmp["link_cost"]
    given = ", ".join(f"{t}={c:g}" for t, c in lc["tiers"].items())
    out.print(
        f"target: ARI >= {cmp['target_ari']:g}; energy_proxy = sum over tiers of bytes x "
        f"{lc['unit']} ({given + ', ' if given else ''}{lc['default']:g} for "
        f"{'other tiers' if given else 'every tier'})",
        markup=False,
        highlight=False,
    )
    table = Table(show_edge=False, header_style="bold")
    table.add_column("field", no_wrap=True)
    for name in names:
        table.add_column(Text(name), overflow="fold", max_width=20)
    table.add_column("", no_wrap=True)
    for row in cmp["rows"]:
        field, values = row["field"], row["values"]
        if field == "scenario_hash":  # 64 hex digits: the first 12 tell runs apart
            values = [v[:12] if isinstance(v, str) else v for v in values]
        if field == "energy_proxy":  # cost units, not bytes: two decimals at most
            values = [v if v is None else f"{v:,.2f}".rstrip("0").rstrip(".") for v in values]
        if field == "target":
            field = f"target (ari>={cmp['target_ari']:g})"
        cells = [Text(_cell(v)) for v in values]
        table.add_row(field, *cells, "" if row["same"] else "differs")
    lab = cmp["labels"]
    cells = [Text(f"{lab['runs'][0]['rows']:,} rows")]
    for r in lab["runs"][1:]:
        cells.append(Text(_label_cell(r)))
    same = all(r["identical"] for r in lab["runs"])
    table.add_row(f"labels.csv (vs {lab['reference']})", *cells, "" if same else "differs")
    if out.is_terminal:
        out.print(table)
        return
    wide = Console(soft_wrap=True, width=10_000)
    width = Measurement.get(wide, wide.options, table).maximum
    Console(soft_wrap=True, width=max(80, width)).print(table)


def _label_cell(r: dict[str, Any]) -> str:
    """One run's labels against the first's: up to renaming cluster ids, and as written."""
    raw, matched = r["raw_differing_rows"], r["differing_rows"]
    if raw == 0:
        return "identical"
    if matched is None:
        return f"{raw:,} rows differ (as written; too many clusters to match)"
    if matched == 0:
        return f"same clusters, ids renamed ({raw:,} rows differ as written)"
    return f"{matched:,} rows differ ({raw:,} as written)"


@app.command()
def keys(
    scenario: Path = typer.Argument(..., metavar="SCENARIO", help="The federation's scenario."),
    out_dir: Path = typer.Option(..., "--out", help="Folder for the key files (created)."),
    force: bool = typer.Option(False, "--force", help="Replace existing key files."),
) -> None:
    """Write a fresh Ed25519 key for every node of a scenario, and the public-key roster.

    ``DIR/NODE.key`` (mode 0600) goes to that node's device only; ``DIR/public-keys.json``
    goes to every device. Their node.yaml names both under ``signing``.
    """
    import json

    from fedstrata.privacy.signing import NodeKeys
    from fedstrata.scenarios.loader import ScenarioErrors, load_scenario
    from fedstrata.scenarios.wiring import wire_topology

    try:
        sc = load_scenario(scenario, preflight=False)
    except ScenarioErrors as exc:
        for e in exc.errors:
            err.print(e.located(), highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(1) from None
    wiring = wire_topology(sc)
    nodes = [n for _, group in wiring.tiers for n in group] + list(wiring.clients)
    roster = out_dir / "public-keys.json"
    clash = [p for p in [roster, *(out_dir / f"{n}.key" for n in nodes)] if p.exists()]
    if clash and not force:
        raise _fail(f"{clash[0]} exists (and {len(clash) - 1} more); use --force to replace")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        public = {}
        for n in nodes:
            k = NodeKeys.generate()
            k.save(out_dir / f"{n}.key", overwrite=force)
            public[n] = k.public_key.hex()
        roster.write_text(json.dumps(public, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot write keys to {out_dir}: {exc.strerror or exc}") from None
    out.print(
        f"{len(nodes)} keys in {out_dir} ({nodes[0]}.key ...) and {roster.name}; "
        "copy each key to its node only",
        highlight=False,
        markup=False,
    )


from fedstrata.device.command import node_command  # noqa: E402 - light: imports typer only

app.command("node")(node_command)

broker_app = typer.Typer(
    help="Broker helpers for real deployments.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(broker_app, name="broker")


@broker_app.command("config")
def broker_config(
    site: str = typer.Option(..., "--site", help="The site: the node id of its aggregator."),
    out_file: Path = typer.Option(..., "--out", help="The mosquitto.conf to write."),
    port: int = typer.Option(1883, "--port", min=1, max=65535, help="Listener port."),
    bind: str | None = typer.Option(None, "--bind", help="Listen on this address only."),
    scenario: Path | None = typer.Option(
        None, "--scenario", help="Scenario whose topology gives each node's parent (ACL)."
    ),
    tls_ca: Path | None = typer.Option(None, "--tls-ca", help="CA certificate (PEM)."),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="Server certificate (PEM)."),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="Server key (PEM)."),
    password_file: Path | None = typer.Option(
        None, "--password-file", help="A mosquitto_passwd file (user = node id)."
    ),
    bridge_to: str | None = typer.Option(
        None, "--bridge-to", metavar="HOST:PORT", help="Bridge this site to the cloud broker."
    ),
    bridge_run: str = typer.Option(
        "+", "--bridge-run", help="Bridge only this run id [default: any run]."
    ),
    monitor_user: str | None = typer.Option(
        None, "--monitor-user", help="A user allowed to read $SYS/# (broker counters)."
    ),
    pin_client_ids: bool | None = typer.Option(
        None,
        "--pin-client-ids/--no-pin-client-ids",
        help="Client id := user name (one session per user: nobody takes over another "
        "node's session) [default: on with --password-file or --tls-client-certs].",
    ),
    tls_client_certs: bool = typer.Option(
        False,
        "--tls-client-certs",
        help="Require a client certificate signed by --tls-ca; its Common Name (the node "
        "id) is the user name, instead of passwords.",
    ),
) -> None:
    """Write a Mosquitto config for one site, and its ACL file next to it (FILE.acl).

    The ACL holds every node of the site's subtree (the root's site: every node).
    """
    from fedstrata.broker.config import acl_text, bridge_text, mosquitto_conf
    from fedstrata.errors import ValidationError

    parents = tier_of = None
    cloud_id = None
    if scenario is not None:
        from fedstrata.scenarios.loader import ScenarioErrors, load_scenario
        from fedstrata.scenarios.wiring import wire_topology

        try:
            sc = load_scenario(scenario)
        except ScenarioErrors as exc:
            for e in exc.errors:
                err.print(e.located(), highlight=False, soft_wrap=True, markup=False)
            raise typer.Exit(1) from None
        wiring = wire_topology(sc)
        parents, tier_of = dict(wiring.parents), dict(wiring.tier_of)
        cloud_id = sc.topology.cloud_id
        if parents.get(site) != cloud_id:
            cloud_id = None  # not a fog site under the cloud: bridge the whole run
    acl_path = out_file.with_suffix(".acl")
    if acl_path == out_file:
        acl_path = out_file.with_name(out_file.name + ".acl")
    try:
        bridge = None
        if bridge_to is not None:
            bridge = bridge_text(site, bridge_to, run=bridge_run, cloud_id=cloud_id)
        conf = mosquitto_conf(
            site,
            port=port,
            bind=bind,
            acl_file=acl_path.resolve(),
            password_file=None if password_file is None else password_file.resolve(),
            tls_ca=None if tls_ca is None else tls_ca.resolve(),
            tls_cert=None if tls_cert is None else tls_cert.resolve(),
            tls_key=None if tls_key is None else tls_key.resolve(),
            bridge=bridge,
            pin_client_ids=pin_client_ids,
            client_cert_identity=tls_client_certs,
        )
        acl = acl_text(parents, tier_of, site=site, monitor_user=monitor_user)
    except ValidationError as exc:
        raise _fail(str(exc), 2) from None
    try:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        acl_path.write_text(acl, encoding="utf-8")
        out_file.write_text(conf, encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot write {out_file}: {exc}", 1) from None
    out.print(f"wrote {out_file} and {acl_path}", highlight=False, markup=False)
    if parents is None:
        err.print(
            "warning: no --scenario: the ACL has only the pattern rules, so no client "
            "may publish its updates yet",
            highlight=False,
            markup=False,
        )


def _print_outcome(name: str, summary: dict[str, Any], out_dir: Path, traffic: str) -> None:
    """Print how a run ended, its traffic line and metrics; exit 130 if interrupted."""
    m = summary["metrics"]
    out.print(
        f"[bold]{name}[/]: {summary['status']} after {summary['rounds']} rounds "
        f"({summary['reason']})",
        highlight=False,
    )
    out.print(traffic, highlight=False)
    if m["ari"] is None:
        out.print(f"metrics: none ({summary['metrics_reason']})", highlight=False)
    else:
        out.print(f"ACC {m['acc']:.4f}   NMI {m['nmi']:.4f}   ARI {m['ari']:.4f}", highlight=False)
    privacy = summary.get("privacy")
    if privacy is not None:
        out.print(_privacy_line(privacy), highlight=False, markup=False)
    crashed = summary.get("crashed") or []
    if crashed:  # nodes that crashed (faults, their own exceptions, dead worker processes)
        shown = "; ".join(f"{c['node']} at {c['t']:.3g} s: {c['reason']}" for c in crashed[:3])
        more = f"; {len(crashed) - 3} more in summary.json" if len(crashed) > 3 else ""
        out.print(f"crashed: {shown}{more}", highlight=False, markup=False)
    out.print(f"record: {out_dir}", highlight=False, markup=False)
    if summary["status"] == "interrupted":
        raise typer.Exit(130)


def _privacy_line(p: dict[str, Any]) -> str:
    """One line on the run's privacy: sessions, recovered dropouts, overhead, ε spent."""
    parts = []
    if p["protocol"] != "none":
        parts.append(
            f"{p['protocol']}: {p['sessions_unmasked']} sums unmasked, "
            f"{p['sessions_failed']} failed, {p['dropouts_recovered']} dropouts recovered, "
            f"{p['overhead_bytes']:,} bytes of overhead"
        )
    if p.get("signed"):
        rejected = sum(p["rejected"].values())
        parts.append(f"signed, keys {p.get('keys', 'derived')} ({rejected} messages rejected)")
    elif p.get("insecure"):
        rejected = sum(p.get("rejected", {}).values())
        parts.append(f"UNSIGNED (--insecure; {rejected} messages rejected)")
    if "epsilon_spent" in p:
        parts.append(f"ε spent {p['epsilon_spent']:.4g} of {p['epsilon']:g} (δ {p['delta']:g})")
        if p.get("held_mean"):
            parts.append(
                f"{p['held_mean']:.0%} of centre coordinates held back per round "
                "(their noisy denominators were within the noise)"
            )
    return "privacy: " + "; ".join(parts)


def _terminate_like_ctrl_c() -> None:
    """Let SIGTERM (a batch system's time limit, ``kill``) end a run as Ctrl-C does.

    The run then stops with status ``interrupted`` and a complete record, exit 130.
    """
    import signal

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def _acknowledge_ctrl_c() -> None:
    """Say at once that Ctrl-C was heard, then stop the simulation as before.

    The simulator ends the run at the next event and writes the record; this line
    answers the key press while that happens. A second Ctrl-C stops without a record.
    """
    import os
    import signal

    def heard(signum: int, frame: Any) -> None:
        os.write(2, b"\ninterrupted: writing the record (Ctrl-C again to stop without one)\n")
        signal.signal(signal.SIGINT, signal.default_int_handler)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, heard)


def _print_warnings(summary: dict[str, Any]) -> None:
    """Show the record's warnings on stderr, a line each (the first five)."""
    shown = summary.get("warnings") or []
    for w in shown[:5]:
        err.print(f"warning: {w}", highlight=False, markup=False)
    if len(shown) > 5:
        err.print(f"warning: ... {len(shown) - 5} more in summary.json", highlight=False)


def _version(value: bool) -> None:
    if value:
        from fedstrata import __version__

        out.print(f"fedstrata {__version__}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Federated multi-view clustering over hierarchical edge-fog-cloud networks."""


def _crash_report(exc: BaseException) -> str:
    """Write the full trace of an unexpected error to a file; return its path."""
    import tempfile
    import traceback

    fd, path = tempfile.mkstemp(prefix="fedstrata-crash-", suffix=".log")
    with open(fd, "w", encoding="utf-8") as fh:
        fh.write(f"fedstrata {' '.join(sys.argv[1:])}\n\n")
        traceback.print_exception(exc, file=fh)
    return path


# -- research workflow commands: each a thin wrapper over its own module --


@app.command()
def report(
    run_dir: Path = typer.Argument(
        ..., metavar="DIR", help="A run folder (fedstrata run --out) or a sweep folder."
    ),
) -> None:
    """Write DIR/report.html (self-contained) and DIR/report.md about a run or a sweep."""
    from fedstrata.analysis.report import NotARunRecordError, ReportError, write_report

    try:
        paths = write_report(run_dir)
    except NotARunRecordError as exc:
        raise _fail(str(exc), 2) from None
    except ReportError as exc:
        raise _fail(str(exc), 1) from None
    except OSError as exc:
        raise _fail(f"{run_dir}: cannot write the report ({exc.strerror or exc})", 2) from None
    out.print(f"report: {paths['html']}", highlight=False, markup=False)
    out.print(f"report: {paths['md']}", highlight=False, markup=False)


@app.command()
def init(
    path: Path = typer.Argument(
        Path("scenario.yaml"), metavar="PATH", help="File to write [default: scenario.yaml]."
    ),
    tiers: int = typer.Option(
        3, "--tiers", min=2, max=3, help="3: edge-fog-cloud (a fog tier); 2: a flat network."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite PATH if it exists."),
) -> None:
    """Write a commented starter scenario that validates and runs as written."""
    from fedstrata.scenarios.starter import StarterExistsError, write_starter

    try:
        written = write_starter(path, tiers, force=force)
    except StarterExistsError as exc:
        raise _fail(str(exc), 2) from None
    except OSError as exc:
        raise _fail(f"cannot write {path}: {exc.strerror or type(exc).__name__}", 2) from None
    out.print(
        f"wrote {written}; check it with: fedstrata validate {written}",
        highlight=False,
        markup=False,
    )


@app.command()
def schema(
    out_file: Path | None = typer.Option(
        None, "--out", help="Write the JSON Schema to this file instead of printing it."
    ),
) -> None:
    """Print the JSON Schema of scenario files, for completion and checks in editors.

    VS Code (Red Hat YAML extension): ``fedstrata schema --out scenario.schema.json``,
    then start the scenario file with the comment
    ``# yaml-language-server: $schema=scenario.schema.json`` (or map the schema to
    ``*.yaml`` under ``yaml.schemas`` in the settings).
    """
    from fedstrata.scenarios.loader import scenario_json_schema

    text = json.dumps(scenario_json_schema(), indent=2, ensure_ascii=False) + "\n"
    if out_file is None:
        sys.stdout.write(text)
        return
    try:
        out_file.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot write {out_file}: {exc.strerror or type(exc).__name__}", 2) from None
    out.print(f"wrote {out_file}", highlight=False, markup=False)


@app.command()
def sweep(
    scenario: Path = typer.Argument(..., metavar="SCENARIO", help="Scenario file (YAML)."),
    grid: list[str] = typer.Option(
        [],
        "--grid",
        metavar="KEY=V1,V2,...",
        help="A dotted scenario key and its values (YAML scalars); repeat for more keys.",
    ),
    repeats: int = typer.Option(
        1, "--repeats", min=1, max=10_000, help="Runs per cell; repeat r uses seed + r."
    ),
    jobs: int = typer.Option(1, "--jobs", min=1, max=512, help="Parallel processes."),
    out_dir: Path | None = typer.Option(
        None, "--out", help="Folder for runs/, results.csv, summary.csv [default: runs/sweep-NAME]."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace finished runs whose scenario has changed."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    ray_address: str | None = typer.Option(
        None,
        "--ray",
        metavar="ADDRESS",
        help="Run the cells as Ray tasks on this cluster (auto, HOST:PORT, ray://HOST:PORT); "
        "needs the [ray] extra, and fedstrata on the cluster.",
    ),
    track: list[str] = _track_option(),
) -> None:
    """Run a grid of scenario overrides x repeats (resumable) and tabulate mean and 95 % CI."""
    from fedstrata.analysis.records import OutputError
    from fedstrata.scenarios.loader import ScenarioErrors
    from fedstrata.scenarios.sweep import GridError, load_sweep, parse_grid, run_sweep

    tracking = _Tracking(track)
    if ray_address is not None and jobs != 1:
        raise typer.BadParameter(
            "--jobs does not apply with --ray (the cluster's CPUs set the parallelism)",
            param_hint="'--jobs'",
        )
    try:
        sw = load_sweep(scenario, parse_grid(grid), repeats)
    except GridError as exc:
        raise _fail(str(exc), 2) from None
    except ScenarioErrors as exc:
        for e in exc.errors:
            err.print(e.located(), highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(1) from None
    if out_dir is None:
        out_dir = Path("runs") / f"sweep-{sw.cells[0].scenario.name}"
    _terminate_like_ctrl_c()
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    bar = Progress(
        TextColumn("[bold]sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
    )
    task = bar.add_task("sweep", total=None, info="")

    def on_start(to_run: int, skipped: int) -> None:
        if skipped:
            out.print(f"skipped {skipped} finished runs", highlight=False, markup=False)
        bar.update(task, total=to_run)

    def on_done(row: dict[str, Any]) -> None:
        bar.update(task, advance=1, info=f"{row['cell']} rep {row['repeat']}: {row['status']}")
        if row["status"] not in ("error", "not_run"):  # streamed as each run finishes
            tracking.log(out_dir / "runs" / row["cell"] / f"rep-{row['repeat']}", out_dir)

    try:
        with bar:
            result = run_sweep(
                sw,
                out_dir,
                jobs=jobs,
                overwrite=overwrite,
                on_start=on_start,
                on_done=on_done,
                ray_address=ray_address,
            )
    except (OutputError, GridError) as exc:
        raise _fail(str(exc), 2) from None
    from rich.table import Table

    def ci(row: dict[str, Any], m: str) -> str:
        mean, low, high = row[f"{m}_mean"], row[f"{m}_ci_low"], row[f"{m}_ci_high"]
        if mean is None:
            return "-"
        return f"{mean:.3g}" if low is None else f"{mean:.3g} ± {(high - low) / 2:.2g}"

    table = Table(show_edge=False, header_style="bold")
    for key in sw.grid:
        table.add_column(key.rsplit(".", 1)[-1], no_wrap=True)
    for col in ("n", "ARI", "rounds", "bytes", "virtual s"):
        table.add_column(col, justify="right", no_wrap=True)
    for row in result.summary:
        metrics = ("ari", "rounds", "bytes_total", "virtual_time_s")
        table.add_row(
            *(_cell(row[k]) for k in sw.grid), str(row["n"]), *(ci(row, m) for m in metrics)
        )
    out.print(table)
    out.print(
        f"ran {result.ran}, skipped {result.skipped} finished runs; "
        f"{', '.join(result.files)} in {out_dir}",
        highlight=False,
        markup=False,
    )
    for line in result.errors[:5]:
        err.print(f"error: run failed: {line}", highlight=False, markup=False)
    if not result.interrupted:
        tracking.finish(out_dir)
    else:
        # the sweep's tables are logged when a later command completes it; the exit
        # code stays the interruption's
        tracking.finish(exit_on_failure=False)
    if result.interrupted:
        err.print("interrupted: run the same command again to resume", highlight=False)
        raise typer.Exit(130)
    if result.errors:
        raise typer.Exit(1)


def main() -> None:
    """Entry point of the ``fedstrata`` command.

    Exit codes: 0 done (whatever the run's status), 1 invalid scenario or a run
    that failed for a known reason (among them a file system that refused to write
    the record: full, read-only), 2 usage error (bad option, an output folder that
    cannot take the run, a name too long), 3 an unexpected internal error (a bug:
    the trace goes to a file), 130 interrupted.
    """
    from fedstrata.analysis.records import OutputError
    from fedstrata.errors import ScenarioError, ValidationError

    try:
        app(prog_name="fedstrata")  # standalone: typer/click print usage errors, exit 2
    except SystemExit:
        raise
    except (OutputError, ValidationError) as exc:
        err.print(f"error: {exc}", highlight=False, soft_wrap=True, markup=False)
        sys.exit(2)
    except FedstrataError as exc:
        located = exc.located() if isinstance(exc, ScenarioError) else str(exc)
        for line in located.splitlines():
            err.print(f"error: {line}", highlight=False, soft_wrap=True, markup=False)
        sys.exit(1)
    except KeyboardInterrupt:
        err.print("interrupted", highlight=False)
        sys.exit(130)
    except OSError as exc:
        from fedstrata.analysis.records import OUTPUT_ERRNOS, write_failure

        if exc.errno not in OUTPUT_ERRNOS:
            _internal_error(exc)
        # a file system that refuses a write (full, read-only, a name too long): the
        # user's to fix, not a bug
        err.print(f"error: {write_failure(exc)}", highlight=False, soft_wrap=True, markup=False)
        sys.exit(1)
    except Exception as exc:  # a bug: one line for the user, the trace in a file
        _internal_error(exc)


def _internal_error(exc: BaseException) -> None:
    """Say that ``exc`` is a bug in one line, write its trace to a file, exit 3."""
    try:
        where = _crash_report(exc)
    except OSError:
        where = "nowhere (could not write a file)"
    err.print(
        f"internal error: {type(exc).__name__}: {str(exc)[:200]} -- this is a bug in "
        f"fedstrata; full trace in {where}",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )
    sys.exit(3)
