"""Server time to render a page of the job queue over 10,000 jobs.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/medbay_bench_queue \\
        python bench/queue.py [--jobs 10000] [--runs 5]

Runs on its own PostgreSQL database unless DATABASE_URL says otherwise: the
benchmark deletes every cluster first. Renders pages, sorts and filters as a
researcher (with Slurm's PrivateData=jobs, so other users' rows are masked)
and as an admin, first over 100 jobs and then over --jobs, and checks that
each request ran as many queries both times. Prints {"jobs", "page_ms_p50",
"page_ms_p95", "queries", "queries_constant", "db"}.
"""

from __future__ import annotations

import sys

# This file's name shadows the standard library's `queue` (psycopg and asyncio
# import it) while bench/ is sys.path[0]: load the real one first, then put bench/ back.
_bench_dir = sys.path.pop(0)
import queue  # noqa: E402, F401, I001

sys.path.insert(0, _bench_dir)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402

from _setup import django_setup, percentile  # noqa: E402

from reports import ensure_database  # noqa: E402

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/medbay_bench_queue"
CLUSTER = "bench-queue"
RESEARCHER = "bench-alice"
PAGES = (
    "/jobs/",
    "/jobs/?page=2",
    "/jobs/?page=100",
    "/jobs/?page=99999",
    "/jobs/?sort=gpu_hours",
    "/jobs/?sort=name&order=asc&page=7",
    "/jobs/?sort=user&order=desc",
    "/jobs/?sort=submitted&page=50",
    "/jobs/?sort=restarts",
    "/jobs/?state=RUNNING&sort=gpus",
    "/jobs/?state=ACTIVE&partition=train&page=3",
    "/jobs/?q=llama&sort=submitted",
    f"/jobs/?user={RESEARCHER}&sort=gpu_hours",
)
STATES = ("PENDING", "RUNNING", "COMPLETED", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
MODELS = ("llama-70b", "llama-8b", "mixtral", "resnet", "vit-h", "whisper", "sdxl")


def seed_jobs(cluster, first: int, count: int) -> None:
    from jobs.models import Job

    now = datetime.now(UTC)
    jobs = []
    for n in range(first, first + count):
        state = STATES[n % len(STATES)]
        submit = now - timedelta(minutes=(first + count - n) * 3)
        started = submit + timedelta(minutes=n % 40) if state != "PENDING" else None
        ended = (
            started + timedelta(hours=1 + n % 9) if state not in ("PENDING", "RUNNING") else None
        )
        jobs.append(
            Job(
                cluster=cluster, slurm_id=n, user=RESEARCHER if n % 10 == 3 else f"user{n % 41}",
                name=f"{MODELS[n % len(MODELS)]}-run-{n}", account=f"acct{n % 7}",
                partition=("train", "train", "infer", "spare")[n % 4], state=state,
                reason="Priority" if state == "PENDING" else "", node_count=1 + n % 4,
                gpus=8 * (1 + n % 4), submit_at=submit, start_at=started, end_at=ended,
                restart_count=n % 5 if n % 3 == 0 else 0, script="#!/bin/bash\n" + "x" * 400,
            )
        )  # fmt: skip
    Job.objects.bulk_create(jobs, batch_size=2000)


def measure(clients: dict, runs: int) -> tuple[list[float], dict[tuple[str, str], int]]:
    """Milliseconds of every request, and the queries each page took for each client."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    timings, queries = [], {}
    for role, client in clients.items():
        for page in PAGES:
            assert client.get(page).status_code == 200, page  # warm: templates, PrivateData
            for _ in range(runs):
                started = time.perf_counter()
                response = client.get(page)
                timings.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, page
            with CaptureQueriesContext(connection) as captured:
                client.get(page)
            queries[(role, page)] = len(captured)
    return timings, queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("DATABASE_URL", DEFAULT_URL)
    ensure_database(os.environ["DATABASE_URL"])
    django_setup()

    from django.core.cache import cache
    from django.db import connection
    from django.test import Client

    from clusters.backends import registry
    from clusters.backends.simulated import SimulatedCluster
    from clusters.models import Cluster
    from core.roles import Role
    from identity.accounts import create_user_with_role
    from jobs.models import Job

    simulator = SimulatedCluster.standard(train=4, infer=1, spare=1, seed=1)
    simulator.private_data_kinds = frozenset({"jobs"})
    registry.use(simulator)
    cache.clear()
    Cluster.objects.all().delete()
    cluster = Cluster.objects.create(name=CLUSTER)
    clients = {}
    for role, username in ((Role.RESEARCHER, RESEARCHER), (Role.ADMIN, "bench-admin")):
        user, _ = create_user_with_role(username, role)
        clients[role.value] = Client()
        clients[role.value].force_login(user)

    seed_jobs(cluster, 1, 100)
    _, small = measure(clients, runs=1)
    seed_jobs(cluster, 101, args.jobs - 100)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE") if connection.vendor == "postgresql" else None
    timings, large = measure(clients, args.runs)
    for key in sorted(key for key in large if large[key] != small[key]):
        print(f"queries grew for {key}: {small[key]} -> {large[key]}", file=sys.stderr)
    print(
        json.dumps(
            {
                "jobs": Job.objects.filter(cluster=cluster).count(),
                "page_ms_p50": round(percentile(timings, 50), 1),
                "page_ms_p95": round(percentile(timings, 95), 1),
                "queries": max(large.values()),
                "queries_constant": small == large
                and all(large[(role, page)] == large[(role, "/jobs/")] for role, page in large),
                "db": connection.vendor,
            }
        )
    )


if __name__ == "__main__":
    main()
