"""A fault storm on a large simulated cluster, through the real ingest path and engine.

    python bench/storm.py [--nodes 12500] [--faulty 2000] [--within 10] [--cap 500]
                          [--engines 4] [--servers 2] [--senders 16] [--deadline 15]

On PostgreSQL (DATABASE_URL, default the `medbay_bench_scale_storm` database, created
if missing; every cluster in it is deleted first) and the Redis channel layer (REDIS_URL,
default redis://127.0.0.1:6379/0; empty for the in-memory layer). A simulated cluster
of --nodes 8-GPU nodes is synced into the database; then --faulty of its training nodes
each post one XID 79 ("fallen off the bus") with their own node token to
`POST /api/v1/health/events/` on --servers daphne processes, spread evenly over
--within seconds. Ingestion decides each incident after commit (the product's XID 79
default: replace the node automatically) behind the circuit breaker, whose cluster-wide
cap is --cap nodes (MEDBAY_BREAKER_MAX_NODES). --engines `manage.py run_engine`
processes (each with its own simulator of the same layout, MEDBAY_SIM_NODES) advance
the runs the breaker let through, claiming with SKIP LOCKED.

An incident is decided when it has a run (acting, or awaiting approval) or a breaker
refusal row with its reason. `decided_s` is the time from the first report until every
incident was decided; `decide_ms_p95` each incident's own time from its report to its
decision. A step's latency is the time from the moment it became due (its run was
created, or its previous step finished) until its result was recorded.

Prints {"incidents", "decided_s", "undecided", "breaker_exceeded",
"step_latency_ms_p95", ...}.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

from _setup import ROOT, percentile
from fanout import bench_database_url, start_workers

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/medbay_bench_scale_storm"
CLUSTER = "bench-storm"
PREFIX = "storm"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=12_500)
    parser.add_argument("--faulty", type=int, default=2_000, help="nodes reporting an XID 79")
    parser.add_argument("--within", type=float, default=10.0, help="seconds the reports span")
    parser.add_argument("--cap", type=int, default=500, help="breaker: nodes per window")
    parser.add_argument("--engines", type=int, default=4, help="run_engine processes")
    parser.add_argument("--servers", type=int, default=2, help="daphne processes")
    parser.add_argument("--senders", type=int, default=16, help="agent threads")
    parser.add_argument("--deadline", type=float, default=15.0, help="seconds to decide all")
    parser.add_argument("--runs-timeout", type=float, default=180.0, help="for runs to end")
    return parser.parse_args()


def configure(args) -> None:
    """Environment for this process and the servers and engines it starts."""
    os.environ.setdefault("DATABASE_URL", bench_database_url(DEFAULT_DATABASE_URL, None))
    os.environ["MEDBAY_BACKEND"] = os.environ["MEDBAY_FLEET"] = "simulated"
    os.environ["MEDBAY_SIM_NODES"] = str(args.nodes)
    os.environ["MEDBAY_SIM_PREFIX"] = PREFIX
    os.environ["MEDBAY_BREAKER_MAX_NODES"] = str(args.cap)
    # Live updates go through Redis, as in production: the engines' and servers' sends
    # cost what they would there.
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    sys.path.insert(0, str(ROOT))
    from _setup import django_setup

    django_setup()


def seed(args):
    """The cluster in the database, exactly as the engines' simulators lay it out."""
    from clusters.backends.simulated import SimulatedCluster
    from clusters.models import Cluster, Node
    from health.models import NodeToken, hash_token
    from sync.cycle import apply_snapshot

    Cluster.objects.all().delete()
    cluster = Cluster.objects.create(name=CLUSTER)
    sim = SimulatedCluster.sized(args.nodes, prefix=PREFIX)
    sim.fault_rate_per_gpu_day = 0
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())
    train = list(Node.objects.filter(cluster=cluster, partitions__name="train").order_by("name"))
    if args.faulty > len(train):
        raise SystemExit(f"--faulty {args.faulty} exceeds the {len(train)} training nodes")
    stride = len(train) / args.faulty
    faulty = [train[int(i * stride)] for i in range(args.faulty)]
    tokens = []
    rows = []
    for node in faulty:
        raw = f"mbn_storm_{node.pk}_{os.urandom(12).hex()}"
        tokens.append(raw)
        rows.append(NodeToken(node=node, token_hash=hash_token(raw), prefix=raw[4:12]))
    NodeToken.objects.bulk_create(rows, batch_size=1000)
    # Every run deletes the last run's 12,500 nodes and 100,000 GPUs and writes its own:
    # without a vacuum the dead rows piled up run after run (autovacuum had not caught
    # up after five), and each run was slower than the one before.
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM (ANALYZE)")
    return cluster, faulty, tokens


def xid_79(node, position: int, at: datetime) -> bytes:
    gpu = position % 8
    event = {
        "id": f"storm-{node.name}-{gpu}",
        "kind": "xid",
        "observed_at": at.isoformat(),
        "xid": 79,
        "pci": "",
        "gpu_index": gpu,
        "message": "GPU has fallen off the bus.",
        "data": {"raw": f"NVRM: Xid (PCI:0000:{gpu:02x}:00): 79, GPU has fallen off the bus."},
    }
    return json.dumps({"node": node.name, "events": [event]}).encode()


def send_storm(args, faulty, tokens, ports) -> tuple[float, list[float], float]:
    """Post each report at its slot; returns (start, per-report ms, seconds all took)."""
    start = time.monotonic() + 0.5
    slot = args.within / len(faulty)
    answers: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()

    def sender(k: int) -> None:
        connections = {}
        for i in range(k, len(faulty), args.senders):
            port = ports[i % len(ports)]
            connection = connections.get(port) or http.client.HTTPConnection(
                "127.0.0.1", port, timeout=120
            )
            connections[port] = connection
            wait = start + i * slot - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            body = xid_79(faulty[i], i, datetime.now(UTC))
            headers = {"Authorization": f"Bearer {tokens[i]}", "Content-Type": "application/json"}
            began = time.monotonic()
            connection.request("POST", "/api/v1/health/events/", body, headers)
            reply = connection.getresponse()
            payload = reply.read()
            with lock:
                answers.append((time.monotonic() - began) * 1000)
                if reply.status != 201:
                    failures.append(f"{reply.status}: {payload[:200]!r}")
        for connection in connections.values():
            connection.close()

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(args.senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(f"{len(failures)} reports refused, first: {failures[0]}")
    return start, answers, time.monotonic() - start


def decisions(cluster) -> dict[int, tuple[datetime, datetime | None]]:
    """Each incident of the storm: (reported at, decided at or None)."""
    from django.db.models import Min, OuterRef, Subquery

    from health.models import Incident
    from remediation.models import BreakerRefusal, Remediation

    run = Remediation.objects.filter(incident=OuterRef("pk")).order_by("created_at")
    refusal = BreakerRefusal.objects.filter(incident=OuterRef("pk")).order_by("at")
    rows = (
        Incident.objects.filter(node__cluster=cluster)
        .annotate(
            run_at=Subquery(run.values("created_at")[:1]),
            refused_at=Subquery(refusal.values("at")[:1]),
            first=Min("events__received_at"),
        )
        .values_list("pk", "first", "run_at", "refused_at")
    )
    return {
        pk: (received, min((t for t in (run_at, refused_at) if t), default=None))
        for pk, received, run_at, refused_at in rows
    }


def active_per_partition(cluster) -> dict[str, int]:
    from django.db.models import Count

    from remediation.models import Remediation
    from remediation.safety import DRAINING_ACTIONS
    from remediation.transitions import ACTIVE

    rows = (
        Remediation.objects.filter(
            node__cluster=cluster, action__in=DRAINING_ACTIONS, status__in=list(ACTIVE)
        )
        .values("node__partitions__name")
        .annotate(n=Count("node", distinct=True))
    )
    return {row["node__partitions__name"]: row["n"] for row in rows}


def watch_partitions(cluster, stop: threading.Event, peaks: dict) -> None:
    from django.db import connection

    while not stop.wait(0.5):
        for name, count in active_per_partition(cluster).items():
            peaks[name] = max(peaks.get(name, 0), count)
    connection.close()


def wait_for_runs(cluster, timeout: float) -> bool:
    from remediation.models import Remediation
    from remediation.transitions import ACTIVE

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Remediation.objects.filter(node__cluster=cluster, status__in=list(ACTIVE)).exists():
            return True
        time.sleep(0.5)
    return False


def step_latencies(cluster) -> list[float]:
    """Milliseconds from each step becoming due to its result being recorded."""
    from remediation.engine import DONE
    from remediation.models import Remediation, RemediationStep

    created = dict(
        Remediation.objects.filter(node__cluster=cluster).values_list("pk", "created_at")
    )
    latencies, due = [], dict(created)
    steps = RemediationStep.objects.filter(remediation__node__cluster=cluster).order_by(
        "remediation_id", "id"
    )
    for run_id, outcome, finished in steps.values_list("remediation_id", "outcome", "finished_at"):
        if finished is None:
            continue
        became_due = due.get(run_id)
        if became_due is not None:
            latencies.append((finished - became_due).total_seconds() * 1000)
        # After a wait (or a retry) the next attempt was due later than this: not counted.
        due[run_id] = finished if outcome in DONE else None
    return latencies


def breaker_exceeded(cluster, cap: int, peaks: dict) -> bool:
    from clusters.models import Partition
    from remediation.models import Remediation, Trigger
    from remediation.safety import DRAINING_ACTIONS, partition_cap

    automatic = Remediation.objects.filter(
        node__cluster=cluster, action__in=DRAINING_ACTIONS, dry_run=False
    ).exclude(trigger=Trigger.ADMIN)
    if automatic.values("node").distinct().count() > cap:
        return True
    for partition in Partition.objects.filter(cluster=cluster):
        if peaks.get(partition.name, 0) > partition_cap(partition.nodes.count()):
            return True
    return False


def start_engines(count: int, log) -> list[subprocess.Popen]:
    return [
        subprocess.Popen(
            [sys.executable, "manage.py", "run_engine", "--worker-id", f"storm-{n}"],
            cwd=ROOT,
            env=os.environ.copy(),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )  # fmt: skip
        for n in range(count)
    ]


def main() -> None:
    args = parse_args()
    configure(args)
    from django.conf import settings
    from django.db import connection

    from remediation.models import BreakerRefusal, Remediation
    from remediation.transitions import RunStatus

    seeded = time.monotonic()
    cluster, faulty, tokens = seed(args)
    seed_s = time.monotonic() - seeded
    log_path = f"/tmp/medbay-bench-storm-{os.getpid()}.log"
    log = open(log_path, "w")  # noqa: SIM115 (closed below, after the processes stop)
    engines = start_engines(args.engines, log)
    servers, ports = start_workers(args.servers, log)
    stop, peaks = threading.Event(), {}
    watcher = threading.Thread(target=watch_partitions, args=(cluster, stop, peaks))
    try:
        watcher.start()
        start, answers, send_s = send_storm(args, faulty, tokens, ports)
        deadline = time.monotonic() + max(args.deadline * 4, 60)
        while time.monotonic() < deadline:
            decided = decisions(cluster)
            if len(decided) >= len(faulty) and all(at for _, at in decided.values()):
                break
            time.sleep(0.25)
        runs_done = wait_for_runs(cluster, args.runs_timeout)
    finally:
        stop.set()
        for proc in [*engines, *servers]:
            proc.terminate()
        for proc in [*engines, *servers]:
            proc.wait(timeout=20)
        log.close()
    watcher.join()
    decided = decisions(cluster)
    first = min(received for received, _ in decided.values())
    done = [at for _, at in decided.values() if at]
    decided_s = (max(done) - first).total_seconds() if done else None
    decide_ms = [(at - received).total_seconds() * 1000 for received, at in decided.values() if at]
    steps = step_latencies(cluster)
    runs = Remediation.objects.filter(node__cluster=cluster)
    statuses = {s: runs.filter(status=s).count() for s in RunStatus.values}
    figures = {
        "incidents": len(decided),
        "decided_s": round(decided_s, 2) if decided_s is not None else None,
        "undecided": len(decided) - len(done) + max(0, len(faulty) - len(decided)),
        "breaker_exceeded": breaker_exceeded(cluster, args.cap, peaks),
        "step_latency_ms_p95": round(percentile(steps, 95), 1) if steps else None,
        "step_latency_ms_p50": round(percentile(steps, 50), 1) if steps else None,
        "steps": len(steps),
        "decide_ms_p95": round(percentile(decide_ms, 95), 1) if decide_ms else None,
        "report_ms_p95": round(percentile(answers, 95), 1),
        "reports_s": round(send_s, 2),
        "runs": {status: count for status, count in statuses.items() if count},
        "runs_finished": runs_done,
        "refused": BreakerRefusal.objects.filter(node__cluster=cluster).count(),
        "nodes": args.nodes,
        "faulty": args.faulty,
        "cap": args.cap,
        "engines": args.engines,
        "servers": args.servers,
        "seed_s": round(seed_s, 1),
        "db": connection.vendor,
        "layer": f"redis-{settings.CHANNEL_LAYER}" if settings.REDIS_URL else "memory",
        "log": log_path,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
