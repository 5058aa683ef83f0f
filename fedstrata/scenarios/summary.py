"""One summary for every transport: the ``summary.json`` keys a run has wherever it ran.

A transport (the simulator, the MQTT runner, its worker pool) turns what happened
into a transport-neutral :class:`RunResult`: how the run ended
(:class:`Outcome`), the traffic (:class:`Volume`), the nodes' records and results,
the warnings, crashes and messages lost on the way, plus ``counters``: the keys
only that transport has (virtual time and retransmissions in the simulator; wall
time details, broker statistics and presence over MQTT). :func:`summarize` computes
everything else in one place: status, reason, metrics, rounds, bytes, ``per_tier``,
``dropped``, ``crashed``, ``failed_rounds``, personalization and privacy, and the
rows of ``rounds.csv``. See ``docs/records.md``.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstrata.analysis.metrics import evaluate
from fedstrata.analysis.records import aggregate_row
from fedstrata.nodes.aggregator import RunStatus
from fedstrata.scenarios.privacy_schema import DPBlockClips

if TYPE_CHECKING:  # types only: the summary needs no scenario code at run time
    from fedstrata.algorithms.multiview import State
    from fedstrata.nodes.config import ProtocolConfig
    from fedstrata.scenarios.build import Federation
    from fedstrata.scenarios.schema import Scenario

__all__ = [
    "CLIENT_COLUMNS",
    "DROP_RECORD_KINDS",
    "Outcome",
    "RunResult",
    "Volume",
    "count_warning",
    "dropped_report",
    "evaluate_state",
    "outcome_of",
    "personalization_report",
    "pooled_observer",
    "privacy_report",
    "round_rows",
    "summarize",
    "warning_lines",
]


@dataclass(frozen=True)
class Outcome:
    """How a run ended: its status and one-line reason, the last model and its rounds."""

    status: str
    reason: str
    final_state: State | None
    rounds: int


@dataclass(frozen=True)
class Volume:
    """A run's traffic: ``bytes_*``, ``payload_bytes``, ``ack_bytes``, ``messages``, tiers."""

    bytes_up: int
    bytes_down: int
    bytes_total: int
    payload_bytes: dict[str, int]
    ack_bytes: dict[str, int]
    messages: int
    per_tier: dict[str, dict[str, int]]


@dataclass
class RunResult:
    """What a run produced, in the terms every transport shares.

    Parameters
    ----------
    transport
        ``sim`` or ``mqtt``: the summary's ``transport``.
    outcome
        How the run ended (:func:`outcome_of`).
    root_finished
        Whether the root finished its protocol (else the metrics are those of the last
        global model it reached).
    volume
        The traffic.
    records
        The nodes' records, in time order.
    results
        Each finished node's result (clients' labels for personalization).
    warnings
        The ``warnings`` lines, in order.
    crashed
        The ``crashed`` entries (``node``, ``t``, ``reason``).
    network_drops
        Messages that never reached a node: tier → reason → count.
    wall_time_s
        Wall-clock seconds of the run.
    signing
        The signing fields of the ``privacy`` block (``None``: the simulator's).
    counters
        The summary keys only this transport has.
    """

    transport: str
    outcome: Outcome
    root_finished: bool
    volume: Volume
    records: list[dict[str, Any]]
    results: dict[str, Any]
    warnings: list[str]
    crashed: list[dict[str, Any]]
    network_drops: dict[str, dict[str, int]]
    wall_time_s: float
    signing: dict[str, Any] | None = None
    counters: dict[str, Any] = field(default_factory=dict)


def warning_lines(caught: dict[str, int]) -> list[str]:
    """Counted warnings as ``warnings`` lines: ``"text (xN)"`` when seen N > 1 times."""
    return [f"{k} (x{n})" if n > 1 else k for k, n in sorted(caught.items())]


def outcome_of(
    fed: Federation,
    root_result: dict[str, Any] | None,
    records: list[dict[str, Any]],
    *,
    interrupted: str | None,
    stalled: Callable[[], str],
) -> Outcome:
    """How a run ended, whatever happened to the root.

    The root's own result when it finished and the run was not ``interrupted`` (the
    reason when it was); else the last model the root reached (from ``records``) and
    status ``stalled`` with the transport's reason ``stalled()``.
    """
    if interrupted is None and root_result is not None:
        return Outcome(
            root_result["status"],
            root_result["reason"],
            root_result["state"],
            int(root_result["iterations"]),
        )
    state, rounds = records_outcome(fed, records)
    if interrupted is not None:
        return Outcome(RunStatus.INTERRUPTED.value, interrupted, state, rounds)
    return Outcome(RunStatus.STALLED.value, stalled(), state, rounds)


def summarize(fed: Federation, run: RunResult) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The summary of a run and the rows of its ``rounds.csv``.

    Also sets the federation's ``final_state``, ``final_labels`` and ``client_rows``
    (what the record writer puts in ``model.npz``, ``labels.csv`` and ``clients.csv``).
    """
    sc, o, v = fed.scenario, run.outcome, run.volume
    rows = round_rows(fed, pooled_observer(fed), run.records)
    status, reason, metrics, metrics_reason, labels = quality(
        fed, o.status, o.reason, o.final_state, root_finished=run.root_finished
    )
    summary: dict[str, Any] = {
        "status": status,
        "reason": reason,
        "converged": status == RunStatus.CONVERGED.value,
        "scenario": sc.name,
        "seed": sc.seed,
        "transport": run.transport,
        "rounds": o.rounds,
        "bytes_up": v.bytes_up,
        "bytes_down": v.bytes_down,
        "bytes_total": v.bytes_total,
        "bytes_per_round": v.bytes_total / o.rounds if o.rounds else None,
        "payload_bytes": v.payload_bytes,
        "ack_bytes": v.ack_bytes,
        "messages": v.messages,
        "wall_time_s": round(run.wall_time_s, 3),
        "metrics": metrics,
        "metrics_reason": metrics_reason,
        "clients": len(fed.client_indices),
        "per_tier": v.per_tier,
        "warnings": run.warnings,
        "failed_rounds": _failed_rounds(rows),
        "crashed": run.crashed,
        "dropped": dropped_report(run.records, fed.tiers, network=run.network_drops),
        **run.counters,
    }
    fed.final_state = o.final_state
    fed.final_labels = labels
    block, fed.client_rows = personalization_report(fed, run.results)
    if block is not None:
        summary["personalization"] = block
    privacy = privacy_report(sc, fed.protocol, o.rounds, run.records, run.signing)
    if privacy is not None:
        summary["privacy"] = privacy
    return summary, rows


_METRICS = ("acc", "nmi", "ari", "ri", "purity")


def evaluate_state(fed: Federation, state: Any, pooled: Any = None) -> dict[str, float]:
    """Metrics of a global state on the pooled data (an observer's view, not a protocol step).

    ``pooled``: the labelling function of :func:`pooled_observer` (built once per run).
    """
    if not fed.dataset.labelled:  # no ground truth (data.files without labels): no metrics
        return {}
    label = pooled if pooled is not None else pooled_observer(fed)
    return evaluate(fed.dataset.labels, label(state))


def pooled_observer(fed: Federation) -> Callable[[Any], np.ndarray]:
    """Labels of the pooled data under a global state (the data's own references)."""
    return fed.algorithm.observer(fed.dataset.views, tuple(range(fed.shape.n_views)))


_LABEL_CHUNK = 1024  # clients labelled together (their prepared data held at once)


def _final_labels(fed: Federation, state: Any) -> np.ndarray:
    """Each client's labels under the final global state, computed as the client does.

    In chunks of clients through the plug-in's ``labels_batch`` (one vectorized call
    where the plug-in has one: the same labels as each client's own observer).
    """
    labels = np.full(fed.dataset.n_samples, -1, dtype=np.int64)
    pairs = fed.client_observers()
    with np.errstate(all="ignore"):  # a degenerate model is reported by status, not warnings
        while chunk := list(itertools.islice(pairs, _LABEL_CHUNK)):
            out = fed.algorithm.labels_batch([label for _, label in chunk], state)
            for (c, _), got in zip(chunk, out, strict=True):
                labels[fed.client_indices[c]] = got
    return labels


def round_rows(
    fed: Federation, pooled: Any, records: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """rounds.csv rows from the run's records (the simulator's unless ``records`` is given).

    Shared by every transport: a record is ``{"t", "node", "kind", "fields",
    "wire_bytes"}`` with ``t`` the node's clock and ``wire_bytes`` the cumulative
    PUBLISH bytes per tier.
    """
    rows: list[dict[str, Any]] = []
    for rec in fed.sim.records if records is None else records:
        f = rec["fields"]
        if rec["kind"] == "aggregate":
            rows.append(aggregate_row(rec))
        elif rec["kind"] == "round":
            state = f.get("state")
            metrics: dict[str, float] = {}
            if state is not None and f.get("objective") is not None:
                with np.errstate(all="ignore"):
                    metrics = evaluate_state(fed, state, pooled)
            for row in reversed(rows):  # attach the root's outcome to its aggregate row
                if row["tier"] == f["tier"] and row["round"] == f["round"]:
                    if "dp_held" in f:
                        row["dp_held"] = round(float(f["dp_held"]), 6)
                    row.update(
                        iteration=f["iteration"],
                        objective=f.get("objective"),
                        n=f.get("n") if f.get("objective") is not None else None,
                        **{k: round(float(metrics[k]), 6) if metrics else None for k in _METRICS},
                    )
                    break
    rows = _merge_tier_rows(rows)
    last: dict[str, int] = {}
    for row in rows:  # traffic since the previous row of the same tier
        row["bytes_round"] = row["bytes"] - last.get(row["tier"], 0)
        last[row["tier"]] = row["bytes"]
    return rows


def _last_model(
    fed: Federation, records: list[dict[str, Any]] | None = None
) -> tuple[State | None, int]:
    """The last global model the root reached (from its records) and its round."""
    state, it = None, 0
    for rec in fed.sim.records if records is None else records:
        if rec["node"] != fed.scenario.topology.cloud_id:
            continue
        f = rec["fields"]
        if rec["kind"] == "init":
            state, it = f["state"], 0
        elif rec["kind"] == "round" and f.get("objective") is not None:
            state, it = f["state"], int(f["iteration"])
    return state, it


def records_outcome(fed: Federation, records: list[dict[str, Any]]) -> tuple[State | None, int]:
    """The last model the root reached and its rounds, from the records alone."""
    root_id = fed.scenario.topology.cloud_id
    state, _ = _last_model(fed, records)
    rounds = max(
        (
            int(r["fields"]["iteration"])
            for r in records
            if r["node"] == root_id and r["kind"] in ("round", "setup_failed")
        ),
        default=0,
    )
    return state, rounds


def count_warning(caught: dict[str, int], category: type, message: Any) -> None:
    """Count one warning under its category and its first 200 characters."""
    key = f"{category.__name__}: {str(message)[:200]}"
    caught[key] = caught.get(key, 0) + 1


def _degenerate(labels: np.ndarray, n_clusters: int) -> str | None:
    """A reason if the final model is degenerate (every sample in one cluster)."""
    used = np.unique(labels[labels >= 0])
    if n_clusters >= 2 and labels.size >= 2 and used.size <= 1:
        return f"degenerate model: every sample falls in one cluster of {n_clusters}"
    return None


def quality(
    fed: Federation, status: str, reason: str, final_state: State | None, *, root_finished: bool
) -> tuple[str, str, dict[str, float | None], str | None, np.ndarray | None]:
    """Labels and metrics of the final model; a degenerate "converged" model is "diverged".

    Returns ``(status, reason, metrics, metrics_reason, labels)``; shared by every
    transport.
    """
    metrics: dict[str, float | None] = dict.fromkeys(_METRICS)
    metrics_reason: str | None = "no model: the setup round never completed"
    labels = None
    if final_state is not None:
        labels = _final_labels(fed, final_state)
        if fed.dataset.labelled:
            metrics = {k: float(v) for k, v in evaluate(fed.dataset.labels, labels).items()}
            metrics_reason = None
        else:
            metrics_reason = "no labels: data.files names no label file (nothing to score)"
        degenerate = _degenerate(labels, fed.model.n_clusters)
        if degenerate is not None and status == RunStatus.CONVERGED.value:
            status, reason = RunStatus.DIVERGED.value, degenerate
        stopped = status in (RunStatus.STALLED.value, RunStatus.INTERRUPTED.value)
        if stopped and not root_finished and fed.dataset.labelled:
            metrics_reason = "metrics of the last global model the root reached"
    return status, reason, metrics, metrics_reason, labels


#: Record kinds a node emits for a message it did not take, and the reason they count
#: under when the record has neither ``category`` nor ``reason``.
DROP_RECORD_KINDS = {
    "dropped": "dropped",
    "rejected": "rejected",
    "duplicate": "duplicate",
    "late": "late",
}


#: Longest reason key of the ``dropped`` block (free-text reasons are cut there).
_REASON_KEY_MAX = 80


def _drop_key(kind: str, fields: dict[str, Any]) -> str:
    """The reason a node's drop record counts under: its category, else its reason."""
    key = fields.get("category")
    if not isinstance(key, str) or not key:
        key = DROP_RECORD_KINDS[kind] if kind in ("duplicate", "late") else fields.get("reason")
    if not isinstance(key, str) or not key:
        key = DROP_RECORD_KINDS[kind]
    key = " ".join(key.split())
    return key if len(key) <= _REASON_KEY_MAX else key[: _REASON_KEY_MAX - 3] + "..."


def dropped_report(
    records: Sequence[dict[str, Any]],
    tiers: dict[str, str],
    *,
    network: dict[str, dict[str, int]] | None = None,
) -> dict[str, Any]:
    """The ``dropped`` block of a run's summary: messages that were not taken, by reason.

    Two sources, counted per tier of the node that lost or refused the message:

    * ``nodes``: what the nodes refused, from their ``dropped``, ``rejected``,
      ``duplicate`` and ``late`` records, under the record's ``category`` when it
      has one (``garbage``, ``malformed``, ``unsigned``, ``forged``,
      ``unknown_sender``, ``wrong_run``, ``wrong_topic``, ``replay``, ``late``,
      ``duplicate``), else its ``reason`` (cut to 80 characters), else its kind;
    * ``network``: what never reached a node (``network``: tier → reason → count):
      the simulator's drop reasons (``loss``, ``outage``, ``offline``, ``crashed``,
      ``finished``, ``dropout``, ``max_retries``) or an emulated link's ``loss``.

    ``by_reason`` and ``per_tier`` add both up; ``total`` is their sum. The same on
    every transport: see ``docs/records.md``.
    """
    nodes: dict[str, dict[str, int]] = {}
    for rec in records:
        kind = rec["kind"]
        if kind not in DROP_RECORD_KINDS:
            continue
        f = rec["fields"]
        tier = tiers.get(str(f.get("node", rec["node"])), tiers.get(rec["node"], "unknown"))
        row = nodes.setdefault(tier, {})
        key = _drop_key(kind, f)
        row[key] = row.get(key, 0) + 1
    per_tier: dict[str, dict[str, int]] = {}
    for source in (nodes, network or {}):
        for tier, counts in source.items():
            row = per_tier.setdefault(tier, {})
            for key, n in counts.items():
                row[key] = row.get(key, 0) + n
    by_reason: Counter[str] = Counter()
    for counts in per_tier.values():
        by_reason.update(counts)

    def total(source: dict[str, dict[str, int]]) -> int:
        return sum(n for counts in source.values() for n in counts.values())

    return {
        "total": sum(by_reason.values()),
        "by_reason": dict(sorted(by_reason.items())),
        "per_tier": {t: dict(sorted(c.items())) for t, c in sorted(per_tier.items())},
        "refused_by_nodes": total(nodes),
        "lost_in_network": total(network or {}),
    }


def privacy_report(
    sc: Scenario,
    protocol: ProtocolConfig,
    rounds: int,
    records: Sequence[dict[str, Any]] = (),
    signing: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The ``privacy`` block of a run's summary (None with privacy off).

    Secure aggregation (from the aggregators' ``aggregate`` records, so the same for
    every transport): ``protocol``, ``sessions_unmasked`` and ``sessions_failed``
    (one session per aggregator per round), ``rounds_unmasked``/``rounds_failed``
    (the root's), ``dropouts_recovered`` (members whose masks were removed after
    they vanished), ``members_refused`` (members that sat a round out: refused
    parameters, values out of range), ``overhead_bytes`` (key adverts, shares and
    unmasking: what secure aggregation adds) and ``masked_bytes`` (the masked inputs,
    which replace the plaintext partials), split ``per_tier`` by step (the sessions'
    messages as received and sent by the tier's aggregators, the setup counted in the
    model broadcasts). All of them are part of ``payload_bytes``.

    Signing: ``signed``, and ``keys``, where the keys came from: ``"derived from the
    scenario seed (simulation only)"`` (the simulator, with ``privacy.sign``: anyone
    who knows the seed knows them), ``"per-run random"`` or ``"key files"`` (a run
    over a real broker, signed by default); ``"insecure": true`` marks a real run
    left unsigned on purpose (``--insecure``). ``signing`` gives these fields for a
    run over a real broker (default: the simulator's). ``rejected`` counts the
    messages nodes refused, by reason (``unsigned``, ``forged``, ``unknown_sender``,
    ``replay``, ``wrong_run``, ``wrong_topic``, ``wrong_sender``); each signed message
    carries 64 bytes more.

    ``held_mean``: the mean share of centre coordinates the root kept at their
    previous value because the summed denominator was within the noise (1.0: the
    noisy rounds moved no centre; the model is the initialisation's).

    Differential privacy: one accountant (RDP) for the whole pipeline. Every setup
    stage the root opened is a release by each client (the private setup's moments
    and cells; a repeated stage counts again), and so is every root round.
    ``phases`` reports each phase's own ε and ``epsilon_spent`` their composition,
    which stays within ``epsilon`` when the run made the releases it planned
    (``fedstrata.scenarios.build.dp_releases``). Under ``unit: client`` the rounds'
    ε is client-level and the total is sample-level (client-level implies it).
    """
    dp, mode = sc.privacy.dp, sc.privacy.secure_aggregation
    if signing is None:
        from fedstrata.nodes.sealing import RunKeys

        signing = {"signed": sc.privacy.sign}
        if sc.privacy.sign:
            signing["keys"] = RunKeys.DERIVED
    signed, insecure = bool(signing["signed"]), bool(signing.get("insecure"))
    if dp is None and mode == "none" and not signed and not insecure:
        return None
    block: dict[str, Any] = {"protocol": mode, **signing}
    if mode != "none":
        block.update(_secure_report(sc, records))
    if signed or insecure:
        rejected = Counter(r["fields"]["reason"] for r in records if r["kind"] == "rejected")
        block["rejected"] = dict(sorted(rejected.items()))
    if dp is None:
        return block
    block.update(_dp_report(sc, protocol, records, rounds))
    return block


def _dp_report(
    sc: Scenario, protocol: ProtocolConfig, records: Sequence[dict[str, Any]], rounds: int
) -> dict[str, Any]:
    """The DP fields of the privacy block: one accountant, per phase and in total."""
    dp, mode = sc.privacy.dp, sc.privacy.secure_aggregation
    assert dp is not None
    held = [
        float(r["fields"]["dp_held"])
        for r in records
        if r["kind"] == "round" and "dp_held" in r["fields"]
    ]
    # the noise the nodes were configured with (protocol_config: one budget, the schedule)
    z = protocol.dp_noise
    schedule = protocol.dp_schedule
    root = sc.topology.cloud_id
    setups = sum(
        1
        for r in records
        if r["kind"] == "aggregate"
        and r["fields"].get("phase") == "setup"
        and r["fields"].get("node") == root
    )
    phases = {"setup": _accountant(dp.delta), "rounds": _accountant(dp.delta)}
    total = _accountant(dp.delta)
    for acc in (phases["setup"], total):  # every setup stage the clients answered
        if setups:
            acc.spend(z, count=setups)
    for acc in (phases["rounds"], total):
        if schedule:
            for t in range(rounds):
                acc.spend(schedule[min(t, len(schedule) - 1)])
        elif rounds > 0:
            acc.spend(z, count=rounds)
    shares = protocol.dp_shares
    clip = dp.clip.model_dump() if isinstance(dp.clip, DPBlockClips) else dp.clip
    return {
        "mechanism": "gaussian",
        "unit": dp.unit,
        "noise": "local" if mode == "none" else "distributed",
        "noise_shares": shares,
        "accountant": "rdp",
        "epsilon": dp.epsilon,
        "delta": dp.delta,
        "clip": clip,
        "radius": dp.radius if dp.unit == "sample" else None,
        "schedule": dp.schedule,
        "noise_multiplier": round(z, 9)
        if not schedule
        else [round(schedule[0], 9), round(schedule[-1], 9)],
        "releases": setups + rounds,
        "phases": {
            name: {"releases": acc.releases, "epsilon": _spent(acc)} for name, acc in phases.items()
        },
        "epsilon_spent": _spent(total),
        "held_mean": round(float(np.mean(held)), 6) if held else None,
    }


def _accountant(delta: float) -> Any:
    from fedstrata.privacy.dp import Accountant

    return Accountant(delta)


def _spent(acc: Any) -> float:
    """ε of an accountant, 0 before any release."""
    return round(acc.epsilon(), 9) if acc.releases else 0.0


def _secure_report(sc: Scenario, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    from fedstrata.nodes.secure import STEPS

    root = sc.topology.cloud_id
    tiers: dict[str, dict[str, int]] = {}
    out = {
        "sessions_unmasked": 0,
        "sessions_failed": 0,
        "rounds_unmasked": 0,
        "rounds_failed": 0,
        "dropouts_recovered": 0,
        "members_refused": 0,
    }
    for rec in records:
        if rec["kind"] in ("secure_refused", "secure_overflow"):
            out["members_refused"] += 1
            continue
        f = rec["fields"]
        if rec["kind"] != "aggregate" or "secure_failure" not in f:
            continue
        failed = bool(f["secure_failure"])
        row = tiers.setdefault(
            f["tier"],
            {"sessions": 0, "failed": 0, "recovered": 0, **dict.fromkeys(STEPS, 0)},
        )
        row["sessions"] += 1
        row["failed"] += failed
        row["recovered"] += int(f.get("recovered", 0))
        for step in STEPS:
            row[step] += int(f.get(f"privacy_bytes_{step}", 0))
        out["sessions_failed" if failed else "sessions_unmasked"] += 1
        if f["node"] == root:
            out["rounds_failed" if failed else "rounds_unmasked"] += 1
        out["dropouts_recovered"] += int(f.get("recovered", 0))
    out["per_tier"] = dict(sorted(tiers.items()))
    out["masked_bytes"] = sum(t["masked"] for t in tiers.values())
    out["overhead_bytes"] = sum(t[s] for t in tiers.values() for s in STEPS if s != "masked")
    return out


#: Columns of clients.csv (personalization on): per-client metrics of both models.
CLIENT_COLUMNS = (
    "client",
    "samples",
    "gamma",
    "rho",
    *(f"{k}_{which}" for which in ("global", "personal") for k in ("ari", "nmi", "acc")),
)


def personalization_report(
    fed: Federation, results: dict[str, Any]
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Per-client metrics of the global and the personalized labels, and their summary.

    ``results`` are the clients' own results (``labels``, ``personal_labels``): what
    each client computed, on either transport. Clients that never finished are left
    out and counted. None when personalization is off.
    """
    if fed.protocol.personal_iters is None:
        return None, []
    truth = fed.dataset.labels
    rows: list[dict[str, Any]] = []
    for c, idx in fed.client_indices.items():
        res = results.get(c)
        if not isinstance(res, dict) or "personal_labels" not in res:
            continue
        row: dict[str, Any] = {"client": c, "samples": int(idx.size)}
        row["gamma"], row["rho"] = res["personal_mixing"]
        for which, key in (("global", "labels"), ("personal", "personal_labels")):
            m = evaluate(truth[idx], res[key])
            for k in ("ari", "nmi", "acc"):
                row[f"{k}_{which}"] = round(float(m[k]), 6)
        rows.append(row)
    block: dict[str, Any] = {
        "local_iters": fed.protocol.personal_iters,
        "clients_reported": len(rows),
        "clients_missing": len(fed.client_indices) - len(rows),
    }
    for which in ("global", "personal"):
        for k in ("acc", "nmi"):
            vals = [r[f"{k}_{which}"] for r in rows]
            block[f"{k}_{which}_mean"] = round(float(np.mean(vals)), 6) if vals else None
            block[f"{k}_{which}_min"] = round(float(np.min(vals)), 6) if vals else None
    block["clients_better_acc"] = sum(r["acc_personal"] > r["acc_global"] for r in rows)
    block["clients_worse_acc"] = sum(r["acc_personal"] < r["acc_global"] for r in rows)
    return block, rows


def _failed_rounds(rows: list[dict[str, Any]]) -> int:
    """Root rounds after setup that closed below quorum."""
    return sum(
        1 for r in rows if r.get("tier") == "cloud" and r.get("phase") == "iter" and not r["ok"]
    )


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
        for key in ("secure_failed", "dropouts_recovered", "privacy_bytes"):
            if key in r:
                m[key] = m.get(key, 0) + r[key]
        if r.get("secure_failure") and not m.get("secure_failure"):
            m["secure_failure"] = r["secure_failure"]  # the first reason of the tier's row
    return list(merged.values())
