"""Run a scenario in virtual time and write its records."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from fedstrata.algorithms.multiview import MultiViewModel, local_statistics, prepare_views
from fedstrata.analysis.metrics import evaluate
from fedstrata.analysis.records import plot_rounds, write_rounds, write_summary
from fedstrata.scenarios.build import Federation, build_federation
from fedstrata.scenarios.schema import Scenario

__all__ = ["evaluate_state", "run_scenario", "simulate"]


def evaluate_state(fed: Federation, state: Any, pooled: Any = None) -> dict[str, float]:
    """Metrics of a global state on the pooled data (an observer's view, not a protocol step)."""
    model: MultiViewModel = fed.model
    pv = pooled if pooled is not None else prepare_views(fed.dataset.views, model)
    batched = state.batched()
    labels = local_statistics(pv, batched, model).memberships[0].argmax(axis=1)
    return evaluate(fed.dataset.labels, labels)


def _final_labels(fed: Federation, state: Any) -> np.ndarray:
    """Each client's labels under the final global state, with its own δ (what it computes)."""
    labels = np.full(fed.dataset.n_samples, -1, dtype=np.int64)
    batched = state.batched()
    for c, pv in fed.prepared_clients().items():
        labels[fed.client_indices[c]] = (
            local_statistics(pv, batched, fed.model).memberships[0].argmax(axis=1)
        )
    return labels


def simulate(
    sc: Scenario, *, seed: int | None = None, events: bool = False, progress: Any = None
) -> tuple[Federation, dict[str, Any], list[dict[str, Any]]]:
    """Build and run ``sc``; return the federation, the summary and the per-round rows.

    ``progress(fed, virtual_time)`` is called every virtual second.
    """
    t0 = time.perf_counter()
    fed = build_federation(sc, seed=seed, record_events=events)
    sim = fed.sim
    sim.run(progress=None if progress is None else (lambda t: progress(fed, t)), progress_every=1.0)
    wall = time.perf_counter() - t0
    stats = sim.stats()
    pooled = prepare_views(fed.dataset.views, fed.model)
    rows: list[dict[str, Any]] = []
    root_result = sim.results.get(sc.topology.cloud_id)
    for rec in sim.records:
        f = rec["fields"]
        if rec["kind"] == "aggregate":
            rows.append(
                {
                    "bytes": sum(rec["wire_bytes"].values()),
                    "round": f["round"],
                    "tier": f["tier"],
                    "phase": f["phase"],
                    "sub": f["sub"],
                    "aggregators": 1,
                    "participants": f["participants"],
                    "expected": f["expected"],
                    "ok": f["ok"],
                    "virtual_time_s": round(rec["t"], 9),
                }
            )
        elif rec["kind"] == "round":
            metrics = evaluate_state(fed, f["state"], pooled) if f.get("state") is not None else {}
            for row in reversed(rows):  # attach the root's outcome to its aggregate row
                if row["tier"] == f["tier"] and row["round"] == f["round"]:
                    row.update(
                        iteration=f["iteration"],
                        objective=f.get("objective"),
                        ari=round(metrics.get("ari", float("nan")), 6) if metrics else None,
                        nmi=round(metrics.get("nmi", float("nan")), 6) if metrics else None,
                        acc=round(metrics.get("acc", float("nan")), 6) if metrics else None,
                    )
                    break
    rows = _merge_tier_rows(rows)
    last: dict[str, int] = {}
    for row in rows:  # traffic since the previous row of the same tier
        row["bytes_round"] = row["bytes"] - last.get(row["tier"], 0)
        last[row["tier"]] = row["bytes"]
    final_state = None if root_result is None else root_result.get("state")
    if final_state is None:
        metrics = {"acc": float("nan"), "nmi": float("nan"), "ari": float("nan")}
    else:
        metrics = evaluate(fed.dataset.labels, _final_labels(fed, final_state))
    iterations = 0 if root_result is None else int(root_result["iterations"])
    per_tier = {}
    for tier, row in stats["by_tier"].items():
        per_tier[tier] = {**row, "bytes_total": row["bytes_up"] + row["bytes_down"]}
    summary = {
        "scenario": sc.name,
        "seed": sc.seed if seed is None else seed,
        "rounds": iterations,
        "converged": bool(root_result and root_result.get("converged")),
        "bytes_up": stats["bytes"]["up"],
        "bytes_down": stats["bytes"]["down"],
        "bytes_total": stats["bytes"]["total"],
        "bytes_per_round": stats["bytes"]["total"] / iterations if iterations else None,
        "ack_bytes": stats["ack_bytes"],
        "messages": stats["messages"]["up"] + stats["messages"]["down"],
        "messages_dropped": stats["dropped"],
        "dropped_by_reason": stats["dropped_by_reason"],
        "retransmissions": stats["retransmissions"],
        "duplicates": stats["duplicates"],
        "virtual_time_s": stats["virtual_time"],
        "wall_time_s": round(wall, 3),
        "metrics": {k: float(v) for k, v in metrics.items()},
        "clients": len(fed.client_indices),
        "per_tier": per_tier,
        "failed_rounds": sum(
            1 for r in rows if r.get("tier") == "cloud" and r.get("phase") == "iter" and not r["ok"]
        ),
    }
    return fed, summary, rows


def _merge_tier_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (round, sub, tier, phase): sum participants over a tier's aggregators."""
    merged: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        key = (r["round"], r["sub"], r["tier"], r["phase"])
        if key not in merged:
            merged[key] = dict(r)
            continue
        m = merged[key]
        m["aggregators"] += 1
        m["participants"] += r["participants"]
        m["expected"] += r["expected"]
        m["ok"] = m["ok"] and r["ok"]
        m["virtual_time_s"] = max(m["virtual_time_s"], r["virtual_time_s"])
        m["bytes"] = max(m["bytes"], r["bytes"])
    return list(merged.values())


def run_scenario(
    sc: Scenario,
    out_dir: str | Path,
    *,
    seed: int | None = None,
    events: bool = False,
    plots: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Simulate ``sc`` and write summary.json, rounds.csv (and events.jsonl, rounds.png)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if progress:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            transient=True,
        ) as bar:
            task = bar.add_task(sc.name, total=sc.protocol.rounds, info="")

            def tick(fed: Federation, t: float) -> None:
                done = sum(1 for r in fed.sim.records if r["kind"] == "round")
                sent = fed.sim.engine.publishes
                bar.update(
                    task, completed=done, info=f"round {done}  t={t:,.1f}s  publishes={sent:,}"
                )

            fed, summary, rows = simulate(sc, seed=seed, events=events, progress=tick)
    else:
        fed, summary, rows = simulate(sc, seed=seed, events=events)
    write_summary(summary, out / "summary.json")
    write_rounds(rows, out / "rounds.csv")
    if events:
        fed.sim.write_events(out / "events.jsonl")
    if plots:
        plot_rounds(rows, out / "rounds.png", title=sc.name)
    return summary
