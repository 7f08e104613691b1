"""GPUs following demand: a simulated week, the static split against the default policy.

    python bench/capacity.py [--nodes 1024] [--days 7] [--seed 1]

Plain Python (demand.simulation; no database, no Slurm). One seeded week drives both
runs: a daily inference curve with a peak 3x the trough and a bursty training queue
(jobs of 1-16 nodes offering 64% of the fleet's node-hours). The static split sizes
the inference pool for the week's highest load at 80% of the 300 ms p95 target and
gives training the rest; the policy run starts from that split and calls
demand.rules.decide with the default policy every simulated minute.

Prints {"utilization_static_pct", "utilization_policy_pct", "utilization_gain_points",
"queue_wait_p50_s", "queue_wait_p95_s", "queue_wait_p50_s_static",
"queue_wait_p95_s_static", "slo_minutes_static", "slo_minutes_policy",
"moves_per_node_day", "decision_ms_p95", ...} (queue waits count jobs still waiting
at the week's end with their wait so far).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from _setup import ROOT


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    sys.path.insert(0, str(ROOT))
    from demand.simulation import WeekConfig, compare

    started = time.perf_counter()
    config = WeekConfig(nodes=args.nodes, days=args.days, seed=args.seed)
    runs = compare(config)
    static, policy = runs["static"], runs["policy"]
    split = runs["static_inference_nodes"]
    figures = {
        "nodes": args.nodes,
        "days": args.days,
        "seed": args.seed,
        "static_inference_nodes": split,
        "static_training_nodes": args.nodes - split,
        "utilization_static_pct": static.utilization_pct,
        "utilization_policy_pct": policy.utilization_pct,
        "utilization_gain_points": round(policy.utilization_pct - static.utilization_pct, 1),
        "queue_wait_p50_s": policy.queue_wait_p50_s,
        "queue_wait_p95_s": policy.queue_wait_p95_s,
        "queue_wait_p50_s_static": static.queue_wait_p50_s,
        "queue_wait_p95_s_static": static.queue_wait_p95_s,
        "slo_minutes_static": static.slo_minutes,
        "slo_minutes_policy": policy.slo_minutes,
        "moves_per_node_day": policy.moves_per_node_day,
        "moves": policy.moves,
        "decision_ms_p95": policy.decision_ms_p95,
        "policy_inference_nodes_min": policy.inference_nodes_min,
        "policy_inference_nodes_max": policy.inference_nodes_max,
        "jobs": len(runs["week"].jobs),
        "jobs_waiting_at_end_static": static.jobs_waiting_at_end,
        "jobs_waiting_at_end_policy": policy.jobs_waiting_at_end,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
