"""Server time to render the node-health board.

    python bench/board.py --nodes 2048 [--runs 20]

Runs on its own SQLite file unless DATABASE_URL says otherwise: the benchmark
deletes every cluster first, which must never hit the development database.
Prints {"nodes", "gpus", "render_ms_p50", "render_ms_p95", "queries", "db"}.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from _setup import django_setup, percentile, seed_cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=2048)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("DATABASE_URL", "sqlite:////tmp/medbay-bench-board.sqlite3")
    django_setup()

    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from clusters.models import Cluster, Gpu
    from portal.accounts import create_user_with_role
    from portal.roles import Role

    Cluster.objects.all().delete()
    seed_cluster("bench-board", args.nodes)
    user, _ = create_user_with_role("bench-viewer", Role.RESEARCHER)
    client = Client()
    client.force_login(user)
    client.get("/")  # warm caches and the template loader
    timings = []
    for _ in range(args.runs):
        started = time.perf_counter()
        response = client.get("/")
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    with CaptureQueriesContext(connection) as queries:
        client.get("/")
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "gpus": Gpu.objects.filter(node__cluster__name="bench-board").count(),
                "render_ms_p50": round(percentile(timings, 50), 1),
                "render_ms_p95": round(percentile(timings, 95), 1),
                "queries": len(queries),
                "db": connection.vendor,
            }
        )
    )


if __name__ == "__main__":
    main()
