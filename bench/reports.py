"""Time to compute the managers' reports over months of history.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/medbay_bench_reports \\
        python bench/reports.py [--days 90] [--nodes 1024] [--jobs 50000] [--runs 3] [--fresh]
        [--raw]

The history is written once by a child process (so its memory does not count)
and reused while its size matches; the same child then brings the daily rollups
up to date (`rollup_history`, incremental: a no-op when they already are).
Prints {"days", "nodes", "jobs", "<report>_ms" (median of the runs) for every
report, "peak_rss_mb", "db", "rollup_s" (time the child spent rolling up, 0 when
nothing was due), "node_state_days" (rollup rows), "rollups" (whether the reports
read them)}. `--raw` times the reports from the raw rows alone, as before rollups.

    python bench/reports.py [--days ...] --prune DAYS

times retention of everything older than DAYS over that history (rolled back after
each run): whole month partitions dropped where they can be, then row by row only.
Prints {"prune_whole_months_s", "prune_row_by_row_s", "ratio", "dropped_months",
"prune_*_rows", ...}.

    python bench/reports.py --accounting [--accounting-jobs 1000000] [--runs 3]

imports that many finished jobs through `import_accounting` from `sacct --json`
pages (a day of jobs each) built from the recorded 22.05 sample
(tests/fixtures/slurm/22.05/accounting/), spread over a year, into an emptied
accounting table, then times the accounting report over that year by each
grouping. Building the pages is not counted; decoding and storing them is. Prints
{"jobs", "import_jobs_per_s", "import_s", "accounting_<group>_ms", "peak_rss_mb", "db"}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from urllib.parse import urlsplit

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/medbay_bench_reports"
CLUSTER = "bench-reports"


def ensure_database(url: str) -> None:
    """Create the benchmark's PostgreSQL database if it does not exist yet."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        return
    import psycopg

    name = parts.path.lstrip("/")
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as connection:
        found = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        if found.fetchone() is None:
            connection.execute(f'CREATE DATABASE "{name}"')


def generate(args) -> None:
    from _setup import django_setup

    django_setup()
    from django.db import connection

    from clusters.backends.simulated import SimulatedCluster
    from clusters.models import Cluster
    from demo.past import FIRST_JOB_ID, generate_history
    from jobs.models import Job
    from sync.cycle import apply_snapshot

    existing = Cluster.objects.filter(name=CLUSTER).first()
    if existing and not args.fresh:
        nodes = existing.nodes.count()
        jobs = Job.objects.filter(cluster=existing, slurm_id__gte=FIRST_JOB_ID).count()
        if nodes == args.nodes and jobs >= args.jobs * 0.9:
            return
    Cluster.objects.all().delete()
    cluster = Cluster.objects.create(name=CLUSTER)
    spare = max(1, args.nodes // 16)
    sim = SimulatedCluster.standard(
        train=args.nodes - 2 * spare, infer=spare, spare=spare, seed=args.seed, prefix="bench"
    )
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())
    started = time.perf_counter()
    stats = generate_history(cluster, args.days, seed=args.seed, jobs=args.jobs)
    print(f"generated {stats} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    from reports.partitions import ensure_all

    started = time.perf_counter()
    created = ensure_all()  # the year written into the past gets its month partitions
    print(f"{len(created)} partitions in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    # Fresh statistics, or the planner guesses a few thousand rows and sorts on disk.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def roll_up_all() -> float:
    """Brings every cluster's rollups up to today; returns the seconds it took."""
    from django.db import connection

    from clusters.models import Cluster
    from reports.rollups import roll_up

    started = time.perf_counter()
    days = sum(roll_up(cluster) for cluster in Cluster.objects.all())
    if days:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    took = time.perf_counter() - started
    print(f"rolled {days} cluster-days up in {took:.1f} s", file=sys.stderr)
    return took if days else 0.0


def measure(args) -> dict:
    from _setup import django_setup

    django_setup()
    from django.db import connection

    from reports.params import ReportForm

    form = ReportForm({"end": _today(), "start": _days_ago(args.days - 1), "group_by": "day"})
    assert form.is_valid(), form.errors
    query = form.query()
    from django.db import transaction

    from clusters.models import Cluster, Node, NodeStateDay
    from jobs.models import Job

    figures = {"days": args.days, "nodes": Node.objects.count(), "jobs": Job.objects.count()}
    figures["node_state_days"] = NodeStateDay.objects.count()
    with transaction.atomic():
        if args.raw:  # forget the rollups for this measurement only (rolled back below)
            Cluster.objects.update(history_rolled_until=None)
        figures["rollups"] = not args.raw
        _time_reports(args, query, figures)
        transaction.set_rollback(True)
    figures["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    figures["db"] = connection.vendor
    return figures


def _time_reports(args, query, figures: dict) -> None:
    from reports.catalog import REPORTS, compute

    for name in REPORTS:
        timings = []
        for _ in range(args.runs):
            started = time.perf_counter()
            compute(name, query)
            timings.append((time.perf_counter() - started) * 1000)
        figures[f"{name}_ms"] = round(statistics.median(timings), 1)


def _today() -> str:
    from django.utils import timezone

    return timezone.localdate().isoformat()


def _days_ago(days: int) -> str:
    from datetime import timedelta

    from django.utils import timezone

    return (timezone.localdate() - timedelta(days=days)).isoformat()


def accounting_benchmark(args) -> dict:
    from _setup import django_setup

    django_setup()
    from datetime import timedelta

    from accounting_pages import RecordedPages
    from django.db import connection
    from django.utils import timezone

    from clusters.models import Cluster
    from jobs.accounting import import_accounting
    from jobs.models import AccountingImport, AccountingJob
    from reports.accounting import GROUPS, usage
    from reports.params import ReportQuery

    cluster, _ = Cluster.objects.get_or_create(name=CLUSTER + "-accounting")
    AccountingJob.objects.filter(cluster=cluster).delete()
    AccountingImport.objects.filter(cluster=cluster).delete()
    days = 365
    until = timezone.now().replace(microsecond=0)
    since = until - timedelta(days=days)
    pages = RecordedPages(args.accounting_jobs, since, days)
    started = time.perf_counter()
    result = import_accounting(cluster, pages, since=since, until=until)
    import_s = time.perf_counter() - started - pages.building_s
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    figures = {
        "jobs": result.records,
        "import_jobs_per_s": round(result.records / import_s),
        "import_s": round(import_s, 1),
        "page_building_s": round(pages.building_s, 1),
    }
    query = ReportQuery(since.date(), until.date(), bucket="day", group="")
    for group in GROUPS:
        timings = []
        for _ in range(args.runs):
            started = time.perf_counter()
            usage(ReportQuery(query.start, query.end, bucket="day", group=group))
            timings.append((time.perf_counter() - started) * 1000)
        figures[f"accounting_{group}_ms"] = round(statistics.median(timings), 1)
    figures["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    figures["db"] = connection.vendor
    return figures


def prune_benchmark(args) -> dict:
    """Retention over the generated history: everything older than --prune days, first
    dropping whole month partitions where it can, then row by row only; each in a
    transaction rolled back, so both see the same rows."""
    from _setup import django_setup

    django_setup()
    from datetime import timedelta

    from django.db import connection, transaction
    from django.utils import timezone

    from reports.retention import prune

    cutoff = timezone.now() - timedelta(days=args.prune)
    figures: dict = {"prune_days": args.prune, "db": connection.vendor}
    for name, whole in (("whole_months", True), ("row_by_row", False)):
        with transaction.atomic():
            started = time.perf_counter()
            result = prune(cutoff, whole_months=whole)
            figures[f"prune_{name}_s"] = round(time.perf_counter() - started, 2)
            figures[f"prune_{name}_rows"] = sum(result.rows.values())
            if whole:
                figures["dropped_months"] = len(result.dropped)
            transaction.set_rollback(True)
    figures["ratio"] = round(figures["prune_whole_months_s"] / figures["prune_row_by_row_s"], 3)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fresh", action="store_true", help="rewrite the history")
    parser.add_argument("--raw", action="store_true", help="time the reports without rollups")
    parser.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--accounting", action="store_true", help="the accounting import")
    parser.add_argument("--accounting-jobs", type=int, default=1_000_000)
    parser.add_argument(
        "--prune", type=int, metavar="DAYS", help="time retention of DAYS instead of the reports"
    )
    args = parser.parse_args()
    os.environ.setdefault("DATABASE_URL", DEFAULT_URL)
    # bench/queue.py shadows the standard library's queue, which psycopg imports:
    # _setup loads the real one first (ensure_database below imports psycopg).
    import _setup  # noqa: F401

    if args.accounting:
        ensure_database(os.environ["DATABASE_URL"])
        print(json.dumps(accounting_benchmark(args)))
        return
    if args.generate_only:
        generate(args)
        print(json.dumps({"rollup_s": round(roll_up_all(), 1)}))
        return
    ensure_database(os.environ["DATABASE_URL"])
    child = [sys.executable, __file__, "--generate-only", *sys.argv[1:]]
    done = subprocess.run(child, check=True, stdout=subprocess.PIPE, text=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if args.prune is not None:
        print(json.dumps({**prune_benchmark(args), **figures}))
        return
    print(json.dumps({**measure(args), **figures}))


if __name__ == "__main__":
    main()
