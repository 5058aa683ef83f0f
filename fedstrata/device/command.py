"""``fedstrata node --config node.yaml``: the command of one long-lived node on a device.

Exit codes: 0 the node finished its part of the run (whatever the run's status);
1 a bad config (every problem on its own ``file:line: path: reason`` line), a broker
that cannot be reached or was lost for good, or ``timeout_s`` passed (one
``error:`` line); 130 stopped by Ctrl-C or SIGTERM. ``--check`` checks the config and
the data files, prints what the node would do and exits (0 or 1) without contacting
the broker or writing anything.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["node_command"]


def _say(text: str, *, err: bool = False) -> None:
    typer.echo(text, err=err)


def _terminate_like_ctrl_c() -> Any:
    """While the config loads, SIGTERM ends the command as Ctrl-C does (exit 130).

    Returns the previous handler (``None`` outside the main thread: nothing set).
    """
    import threading

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, stop)


def _describe(cfg: Any) -> list[str]:
    """What ``--check`` prints about a checked config."""
    from fedstrata.device.build import scenario_digest

    ep = cfg.endpoint
    where = f"{cfg.role} of {cfg.parent}" if cfg.parent is not None else "root"
    login = f", user {ep.username}" if ep.username else ""
    login += ", password set" if ep.password else ""
    tls = ""
    if ep.tls:
        tls = f", TLS (CA {ep.ca_file or 'system'}" + (
            f", client certificate {ep.cert_file})" if ep.cert_file else ")"
        )
    lines = [
        f"{cfg.file}: ok",
        f"  node      {cfg.node_id} ({where}, tier {cfg.tier}), run id {cfg.run}",
        f"  scenario  {cfg.scenario_file} (name {cfg.scenario.name}, "
        f"hash {scenario_digest(cfg.scenario)[:12]})",
        f"  broker    {ep.url} (MQTT {'5' if cfg.mqtt_protocol == 5 else '3.1.1'}{login}{tls})",
        f"  views     feature counts {list(cfg.dims)} (from "
        f"{'view_dims' if cfg.dims_from == 'view_dims' else 'the scenario dataset'})",
    ]
    if cfg.role == "client":
        held = ", ".join(f"{g}: {p}" for g, p in zip(cfg.view_ids, cfg.data_files, strict=True))
        lines.append(f"  data      {cfg.n_samples} samples; views {held}")
    if cfg.seal is None:
        lines.append("  signing   NONE: insecure: true (messages unsigned, not checked)")
    else:
        lines.append("  signing   Ed25519, key files (unsigned and forged messages refused)")
    lines.append(f"  out       {cfg.out}")
    if cfg.timeout_s is not None:
        lines.append(f"  timeout   {cfg.timeout_s:g} s")
    return lines


def node_command(
    config: Annotated[
        Path,
        typer.Option("--config", metavar="NODE.yaml", help="The node's config file (YAML)."),
    ],
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Check the config and the data files, print what the node would do, and exit "
            "without contacting the broker or writing anything.",
        ),
    ] = False,
) -> None:
    """Run one long-lived node of a federation (client or aggregator) on this device.

    Exit 0 when the node finished its part of the run, 1 on a bad config, an
    unreachable broker or a timeout, 130 when stopped by Ctrl-C or SIGTERM.
    """
    previous = _terminate_like_ctrl_c()
    try:
        _node(config, check)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _node(config: Path, check: bool) -> None:
    from fedstrata.device.config import load_node_config
    from fedstrata.scenarios.schema import ScenarioErrors

    try:
        cfg = load_node_config(config)
    except ScenarioErrors as exc:
        for e in exc.errors:
            _say(e.located(), err=True)
        raise typer.Exit(1) from None
    for w in cfg.warnings:
        _say(f"warning: {w}", err=True)
    if check:
        for line in _describe(cfg):
            _say(line)
        return
    from fedstrata.device.node import run_node

    def connected() -> None:
        _say(f"{cfg.node_id} ({cfg.role}, run id {cfg.run}): connected to {cfg.endpoint.url}")

    outcome = run_node(cfg, command=["fedstrata", *sys.argv[1:]], on_connected=connected)
    rec = outcome.record
    if outcome.status == "finished":  # the others' warnings only say "no labels": see node.json
        for w in rec["warnings"][len(cfg.warnings) :]:
            _say(f"warning: {w}", err=True)
    if outcome.status in ("timed_out", "transport_failed"):
        _say(f"error: {outcome.reason}", err=True)
        raise typer.Exit(outcome.exit_code)
    _say(f"{cfg.node_id} ({rec['role']}, run id {cfg.run}): {outcome.status}: {outcome.reason}")
    t = rec["traffic"]
    _say(
        f"{t['publishes']:,} messages sent, {t['delivered']:,} received, "
        f"{t['packet_bytes_out'] + t['packet_bytes_in']:,} bytes, {t['reconnects']} reconnects, "
        f"wall {rec['wall_time_s']:.2f} s; records in {cfg.out}"
    )
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)
