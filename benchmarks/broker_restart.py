"""A broker restart mid-run: how many seconds does it cost, with and without re-publish?

A flat federation (3 clients) runs over a real Mosquitto with persistence off (the
broker forgets every session and message it held); ``--at`` seconds into the run the
broker is stopped (SIGTERM) and started again on the same port ``--down`` seconds
later. The root's rounds give the timeline: ``lost`` is the longest pause between two
consecutive root rounds minus the median pause (what the restart cost on top of a
normal round), against the broker's own downtime. Each configuration runs
``--trials`` times: with the runners' re-publish after a reconnect (the default) and
without it (the behaviour before: a message the broker lost costs a round deadline).

    python benchmarks/broker_restart.py [--trials 3] [--deadline 20] [--down 2] [--at 2]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import threading
import time
from typing import Any

from fedstrata.broker.launcher import PrivateBroker
from fedstrata.scenarios import run_mqtt
from fedstrata.scenarios.loader import parse_scenario

SCENARIO = """
name: restart
seed: 1
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 40}}, partition: {{kind: iid}}}}
topology: {{clients: {{count: 3}}}}
algorithm: {{name: hk-mvfc, n_clusters: 4, center_update: exact}}
protocol: {{rule: sum, rounds: {rounds}, tol: 0.0, deadline_s: {deadline}}}
"""


def _restart_later(broker: PrivateBroker, at: float, down: float, out: dict[str, float]) -> None:
    time.sleep(at)
    t0 = time.monotonic()
    broker.stop()
    time.sleep(down)
    broker.start()
    out["outage_s"] = time.monotonic() - t0


def trial(rounds: int, deadline: float, at: float, down: float, republish: bool) -> dict[str, Any]:
    """One run with a broker restart; the timeline figures."""
    sc = parse_scenario(SCENARIO.format(rounds=rounds, deadline=deadline))
    broker = PrivateBroker(persistence=False).start()
    original = run_mqtt._make_runners

    def make(*args: Any, **kwargs: Any) -> Any:
        log, runners = original(*args, **kwargs)
        for r in runners.values():
            r.republish = republish
            r.backoff_max_s = 1.0  # reconnect attempts at most 1.5 s apart
        return log, runners

    run_mqtt._make_runners = make
    outage: dict[str, float] = {}
    thread = threading.Thread(target=_restart_later, args=(broker, at, down, outage))
    try:
        thread.start()
        _, summary, rows = run_mqtt.mqtt_run(
            sc, broker.host, broker.port, timeout_s=600, sys_stats=False, insecure=True
        )
        thread.join()
    finally:
        run_mqtt._make_runners = original
        broker.close()
    times = [r["virtual_time_s"] for r in rows if r["tier"] == "cloud" and r["phase"] == "iter"]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    worst = max(gaps) if gaps else 0.0
    i = gaps.index(worst) if gaps else 0
    median = statistics.median(gaps) if gaps else 0.0
    return {
        "status": summary["status"],
        "rounds": summary["rounds"],
        "wall_s": summary["wall_time_s"],
        "outage_s": outage.get("outage_s", float("nan")),
        "pause_at_s": times[i] if times else None,
        "pause_s": worst,
        "lost_s": worst - median,
        "republished": summary.get("republished"),
        "reconnects": {t: row["reconnects"] for t, row in summary["per_tier"].items()},
    }


def main() -> None:
    """Run the trials and print one line per run and a summary per configuration."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--deadline", type=float, default=20.0)
    ap.add_argument("--down", type=float, default=2.0)
    ap.add_argument("--at", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=1500)
    args = ap.parse_args()
    for republish in (True, False):
        lost = []
        for k in range(args.trials):
            res = trial(args.rounds, args.deadline, args.at, args.down, republish)
            lost.append(res["lost_s"])
            print(
                f"republish={republish!s:5} trial {k}: {res['status']} after {res['rounds']} "
                f"rounds, wall {res['wall_s']:.2f} s; broker down {res['outage_s']:.2f} s; "
                f"longest pause {res['pause_s']:.2f} s at {res['pause_at_s']:.2f} s "
                f"(lost {res['lost_s']:.2f} s); republished {res['republished']}; "
                f"reconnects {res['reconnects']}",
                flush=True,
            )
        print(
            f"republish={republish}: lost per restart (s) min {min(lost):.2f} "
            f"median {statistics.median(lost):.2f} max {max(lost):.2f} "
            f"(round deadline {args.deadline:g} s, broker down {args.down:g} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
