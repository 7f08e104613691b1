"""How right the engine's judgement is: a fault log replayed, node-level actions scored.

    python bench/precision.py [--nodes 256] [--window 3]

On PostgreSQL (DATABASE_URL, default the `medbay_bench_precision` database, created if
missing; SQLite when PostgreSQL is down). A simulated cluster of --nodes 8-GPU nodes is
synced, a topology file puts every 16 training nodes under a leaf switch and every 32
in a rack, and each case's fault log is replayed through the real ingest path (agents'
batches, one per node and burst), after which the engine's sweep decides what was held.
The grouping windows are --window seconds, so that a case takes seconds, not minutes.

A node-level action is a run that acts on one node (replace, reboot, reset, restart
jobs, drain, quarantine), except the drains of a suspected shared part (the part's own
action) and a run cancelled because its fault cleared before it acted. Ground truth
says which GPUs are really bad: an action on a bad GPU's node is right (one each), any
other node-level action is false.

Prints {"precision", "recall", "false_node_actions", "missed_bad_gpus", "cases",
"decision_ms_p95", "incidents", "nodes"}.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta

from _setup import ROOT, percentile
from fanout import bench_database_url

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/medbay_bench_precision"
CLUSTER = "bench-precision"
LEAF, RACK = 16, 32
_ids = itertools.count(1)


@dataclass
class Case:
    """A fault log and its truth: the nodes whose GPU is really bad."""

    name: str
    bursts: list[list[tuple[str, dict]]]  # bursts in order; each (node, event) ...
    bad: set[str] = field(default_factory=set)
    check_policy: bool = False


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--window", type=float, default=3.0, help="grouping windows (s)")
    return parser.parse_args()


def configure(args) -> None:
    os.environ.setdefault("DATABASE_URL", bench_database_url(DEFAULT_DATABASE_URL))
    os.environ["MEDBAY_JOB_FAULT_WINDOW_S"] = str(args.window)
    os.environ["MEDBAY_PART_FAULT_WINDOW_S"] = str(args.window)
    os.environ.setdefault("REDIS_URL", "")
    sys.path.insert(0, str(ROOT))
    from _setup import django_setup

    django_setup()


def seed(nodes: int):
    from clusters.backends import registry
    from clusters.backends.simulated import SimulatedCluster
    from clusters.models import Cluster
    from sync.cycle import apply_snapshot

    Cluster.objects.filter(name=CLUSTER).delete()
    cluster = Cluster.objects.create(name=CLUSTER, backend="simulated")
    spare = max(2, nodes // 32)
    sim = SimulatedCluster.standard(train=nodes - 2 * spare, infer=spare, spare=spare, seed=5)
    sim.fault_rate_per_gpu_day = 0
    registry.use(sim)
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())
    train = sorted(info.name for info in sim.nodes() if "train" in info.partitions)
    return cluster, train


def topology(train: list[str]) -> str:
    lines = [f"SwitchName=leaf{i // LEAF} Nodes={','.join(train[i:i + LEAF])}"
             for i in range(0, len(train), LEAF)]  # fmt: skip
    lines += [f"Rack=r{i // RACK} Nodes={','.join(train[i:i + RACK])}"
              for i in range(0, len(train), RACK)]  # fmt: skip
    path = os.path.join(tempfile.mkdtemp(prefix="medbay-precision-"), "topology.conf")
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


def xid(node: str, code: int, gpu: int, at) -> tuple[str, dict]:
    event = {"id": f"p-{next(_ids)}", "kind": "xid", "xid": code, "gpu_index": gpu,
             "message": f"Xid {code}", "observed_at": at.isoformat()}  # fmt: skip
    return node, event


def check(node: str, name: str, status: str, at) -> tuple[str, dict]:
    event = {"id": f"p-{next(_ids)}", "kind": "check", "check": name, "status": status,
             "gpu_index": 0, "message": f"{name} {status}",
             "observed_at": at.isoformat()}  # fmt: skip
    return node, event


def cases(train: list[str], now) -> list[Case]:
    every_gpu = range(8)
    job4, job64 = train[200 % len(train) : 200 % len(train) + 4], train[:64]
    leaf = train[LEAF : 2 * LEAF]
    rack = train[2 * RACK : 3 * RACK] if len(train) >= 3 * RACK else train[-RACK:]
    old = now - timedelta(hours=3)
    return [
        Case("job_crash_4_nodes", [[xid(n, 13, g, now) for n in job4 for g in every_gpu]]),
        Case("job_crash_64_nodes", [[xid(n, 13, g, now) for n in job64 for g in every_gpu]]),
        Case("leaf_switch_down_16_nodes", [[xid(n, 79, 0, now) for n in leaf]]),
        Case("rack_power_blip", [[xid(n, 79, g, now) for n in rack for g in every_gpu]]),
        Case("one_bad_gpu", [[xid(train[-1], 79, 3, now)]], bad={train[-1]}),
        Case(
            "flapping_gpu",
            [[xid(train[-2], 48, 2, old + timedelta(minutes=40 * k))] for k in range(4)],
            bad={train[-2]},
        ),
        Case(
            "xid_45_storm_solo",
            [
                [xid(n, 45, 1, old + timedelta(minutes=6 * k)) for n in train[-6:-3]]
                for k in range(30)
            ],
        ),  # fmt: skip
        Case(
            "xid_45_storm_after_79",
            [[xid(train[-7], 79, 5, now)], *[[xid(train[-7], 45, 5, now)] for _ in range(30)]],
            bad={train[-7]},
        ),
        Case(
            "check_fails_then_passes",
            [[check(train[-8], "nvlink", "fail", now)], [check(train[-8], "nvlink", "pass", now)]],
            check_policy=True,
        ),
        Case(
            "xid_79_then_45_on_the_jobs_other_nodes",
            [[xid(job4[0], 79, 1, now)], [xid(n, 45, 1, now) for n in job4[1:]]],
            bad={job4[0]},
        ),
    ]


def clear(cluster) -> None:
    from health.models import FaultGroup, HealthEvent, Incident, ReceivedEventId
    from jobs.models import Job
    from remediation.models import BreakerTrip, Policy, Remediation

    Remediation.objects.filter(node__cluster=cluster).delete()
    BreakerTrip.objects.all().delete()
    HealthEvent.objects.filter(node__cluster=cluster).delete()
    Incident.objects.filter(node__cluster=cluster).delete()
    FaultGroup.objects.filter(cluster=cluster).delete()
    ReceivedEventId.objects.filter(node__cluster=cluster).delete()
    Job.objects.filter(cluster=cluster, name="precision").delete()
    Policy.objects.filter(check_name="nvlink").delete()


def jobs_for(cluster, case: Case, train: list[str]) -> None:
    """The running multi-node jobs the job cases crash (rows as the sync writes them)."""
    from django.utils import timezone

    from clusters.models import Node
    from jobs.models import Job, JobState

    groups = {"job_crash_4_nodes": 4, "job_crash_64_nodes": 64,
              "xid_79_then_45_on_the_jobs_other_nodes": 4}  # fmt: skip
    if case.name not in groups:
        return
    names = sorted({node for burst in case.bursts for node, _ in burst})
    if case.name.startswith("xid_79"):
        names = names[: groups[case.name]]
    job = Job.objects.create(
        cluster=cluster, slurm_id=900_000 + next(_ids), name="precision", user="alice",
        state=JobState.RUNNING, node_count=len(names), node_names=names, gpus=8 * len(names),
        start_at=timezone.now() - timedelta(hours=1),
    )  # fmt: skip
    job.nodes.set(Node.objects.filter(cluster=cluster, name__in=names))


def replay(cluster, case: Case, window: float) -> list[float]:
    """Each burst as the agents send it (one batch per node); returns the decision time
    per incident of each batch, in ms."""
    from clusters.models import Node
    from health.ingest import ingest, validate_batch
    from remediation import admission
    from remediation.models import Action, Mode, Policy

    if case.check_policy:
        Policy.objects.create(check_name="nvlink", action=Action.DRAIN, mode=Mode.APPROVAL)
    nodes = {node.name: node for node in Node.objects.filter(cluster=cluster)}
    timings = []
    for burst in case.bursts:
        per_node: dict[str, list[dict]] = {}
        for name, event in burst:
            per_node.setdefault(name, []).append(event)
        for name, events in per_node.items():
            batch = validate_batch({"node": name, "events": events})
            started = time.perf_counter()
            result = ingest(nodes[name], batch.events)  # decides after its commit
            if result.changed_incident_ids:
                elapsed = (time.perf_counter() - started) * 1000
                timings += [elapsed / len(result.changed_incident_ids)] * len(
                    result.changed_incident_ids
                )
    time.sleep(window * 1.2)  # the holds run out: the engine's sweep decides them
    while admission.decide_due():
        pass
    return timings


def node_actions(cluster) -> Counter:
    """node -> node-level actions taken (see the module's docstring)."""
    from remediation.models import Remediation
    from remediation.safety import PART_KEY
    from remediation.transitions import RunStatus

    acted = Counter()
    for run in Remediation.objects.filter(node__cluster=cluster).select_related("node"):
        if run.action == "notify" or PART_KEY in (run.context or {}):
            continue
        if run.status == RunStatus.CANCELLED and "cleared" in (run.message or ""):
            continue
        acted[run.node.name] += 1
    return acted


def main() -> None:
    args = parse_args()
    configure(args)
    from django.conf import settings
    from django.utils import timezone

    cluster, train = seed(args.nodes)
    settings.MEDBAY_TOPOLOGY_FILES = [topology(train)]
    results, timings = {}, []
    right = false = missed = bad_total = incidents = 0
    for index in range(len(cases(train, timezone.now()))):
        # Each case's log is stamped as it is replayed (agents report as faults happen),
        # so the cases are built again for each: building them costs nothing to speak of.
        case = cases(train, timezone.now())[index]
        clear(cluster)
        jobs_for(cluster, case, train)
        timings += replay(cluster, case, args.window)
        acted = node_actions(cluster)
        case_right = sum(1 for node in case.bad if acted.get(node))
        case_false = sum(acted.values()) - case_right
        case_missed = len(case.bad) - case_right
        right, false, missed = right + case_right, false + case_false, missed + case_missed
        bad_total += len(case.bad)
        from health.models import FaultGroup, Incident

        incidents += Incident.objects.filter(node__cluster=cluster).count()
        results[case.name] = {
            "node_actions": sum(acted.values()),
            "false": case_false,
            "missed": case_missed,
            "groups": list(
                FaultGroup.objects.filter(cluster=cluster).values_list("kind", flat=True)
            ),
        }
    clear(cluster)
    figures = {
        "nodes": args.nodes,
        "precision": round(right / (right + false), 3) if right + false else 1.0,
        "recall": round(right / bad_total, 3) if bad_total else 1.0,
        "false_node_actions": false,
        "missed_bad_gpus": missed,
        "incidents": incidents,
        "decision_ms_p95": round(percentile(timings, 95), 2) if timings else None,
        "cases": results,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
