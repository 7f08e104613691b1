"""Sustained agent ingestion through the real HTTP endpoint, against a bare insert.

    python bench/ingest.py [--senders 4] [--batches 25] [--batch-size 500] [--workers 1]
                           [--nodes 128] [--under-load [--board-worker]]

Starts daphne worker(s) on PostgreSQL (DATABASE_URL, default the `medbay_bench_ingest`
database, created if missing), then several senders, each with its own node token,
post batches of distinct XID events to `POST /api/v1/health/events/` as fast as the
portal accepts them. The floors, measured in the same run on the same rows built
beforehand, one transaction per batch: a bare COPY (the one the ingestion uses;
`ratio` is to it) and a bare `HealthEvent.objects.bulk_create` (`ratio_to_insert`).
`--under-load` also times `GET /` (the board, as a logged-in user) while it ingests:
on the same server, or with `--board-worker` on a daphne process of its own, as
deploy/README.md sends agents' reports to processes of their own.

Prints {"events_per_s", "raw_copy_events_per_s", "ratio", "raw_insert_events_per_s",
"ratio_to_insert", "db", ...}.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import threading
import time
import urllib.parse
import uuid
from datetime import UTC, datetime, timedelta

from _setup import django_setup, percentile, seed_cluster, session_cookie
from fanout import start_workers

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/medbay_bench_ingest"
HGX_BUS_IDS = ("0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00",
               "0000:9a:00", "0000:ab:00", "0000:ba:00", "0000:db:00")  # fmt: skip
# A field-like mix: mostly warnings and informational XIDs, some critical ones.
XID_MIX = ((13, "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address"),
           (31, "Ch 0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS faulted"),
           (43, "Ch 00000008"),
           (94, "Contained ECC error."),
           (48, "An uncorrectable double bit error (DBE) has been detected on GPU"),
           (63, "Row Remapper: New row marked for remapping, reset gpu to activate."))  # fmt: skip


def ensure_database(url: str) -> None:
    """CREATE DATABASE for a postgres:// URL when it does not exist yet."""
    parts = urllib.parse.urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        return
    import psycopg

    name = parts.path.lstrip("/")
    admin = urllib.parse.urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as connection:
        exists = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if exists.fetchone() is None:
            connection.execute(f'CREATE DATABASE "{name}"')


def make_events(run: str, sender: int, batch: int, size: int, start: datetime) -> list[dict]:
    """`size` distinct XID events, shaped like the agent's, so none folds into another."""
    events = []
    for position in range(size):
        xid, text = XID_MIX[position % len(XID_MIX)]
        pci = HGX_BUS_IDS[position % len(HGX_BUS_IDS)]
        pid = 100_000 + batch * size + position
        raw = f"NVRM: Xid (PCI:{pci}): {xid}, pid={pid}, name=python, {text}"
        events.append(
            {
                "id": f"{run}-{sender}-{batch}-{position}",
                "kind": "xid",
                "observed_at": (
                    start + timedelta(microseconds=batch * size + position)
                ).isoformat(),
                "xid": xid,
                "pci": pci,
                "gpu_index": None,
                "pid": pid,
                "process": "python",
                "message": f"pid={pid}, name=python, {text}",
                "data": {"raw": raw, "channel": None, "gpu_uuid": None},
            }
        )
    return events


def post_batches(port: int, token: str, bodies: list[bytes], results: list) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    accepted = 0
    for body in bodies:
        connection.request("POST", "/api/v1/health/events/", body, headers)
        reply = connection.getresponse()
        payload = reply.read()
        if reply.status != 201:
            raise SystemExit(f"ingest answered {reply.status}: {payload[:300]!r}")
        accepted += json.loads(payload)["accepted"]
    connection.close()
    results.append(accepted)


def time_board(port: int, cookie: str, stop: threading.Event, timings: list[float]) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while not stop.is_set():
        started = time.perf_counter()
        connection.request("GET", "/", headers={"Cookie": cookie})
        reply = connection.getresponse()
        reply.read()
        if reply.status != 200:
            raise SystemExit(f"board answered {reply.status}")
        timings.append((time.perf_counter() - started) * 1000)


def ingest_over_http(
    args, nodes, ports: list[int], board_port: int, batches: list[list[list[dict]]]
):
    """Events per second through the endpoint, and board timings when under load."""
    from health.models import NodeToken

    tokens = [NodeToken.issue(node)[1] for node in nodes]
    bodies = [
        [json.dumps({"node": node.name, "events": batch}).encode() for batch in sender_batches]
        for node, sender_batches in zip(nodes, batches, strict=True)
    ]
    warm = [[body] for body in (sender[0] for sender in bodies)]
    for index, body in enumerate(warm):
        post_batches(ports[index % len(ports)], tokens[index], body, [])
    accepted: list[int] = []
    senders = [
        threading.Thread(
            target=post_batches, args=(ports[i % len(ports)], tokens[i], bodies[i][1:], accepted)
        )
        for i in range(len(nodes))
    ]
    stop, board_ms = threading.Event(), []
    watcher = threading.Thread(
        target=time_board, args=(board_port, session_cookie("bench-ingest-viewer"), stop, board_ms)
    )
    if args.under_load:
        watcher.start()
    started = time.perf_counter()
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    elapsed = time.perf_counter() - started
    stop.set()
    if args.under_load:
        watcher.join()
    expected = len(nodes) * (args.batches - 1) * args.batch_size
    if sum(accepted) != expected:
        raise SystemExit(f"accepted {sum(accepted)} of {expected} events")
    return expected / elapsed, board_ms


def raw_insert(nodes, batches: list[list[list[dict]]], *, copy: bool = False) -> float:
    """Events per second for a bare bulk_create (or, with COPY, the COPY the ingestion
    itself uses) of the same rows, a transaction per batch, rows built beforehand."""
    from django.db import transaction

    from health.ingest import copy_rows
    from health.models import HealthEvent

    gpu_of = {pci: index for index, pci in enumerate(HGX_BUS_IDS)}
    now = datetime.now(UTC)
    prepared = [
        [[_row(HealthEvent, node, event, gpu_of, now) for event in batch] for batch in batches_]
        for node, batches_ in zip(nodes, batches, strict=True)
    ]
    HealthEvent.objects.filter(node__in=nodes).delete()
    store = copy_rows if copy else HealthEvent.objects.bulk_create
    count = 0
    started = time.perf_counter()
    for sender_rows in prepared:
        for rows in sender_rows:
            with transaction.atomic():
                store(rows)
            count += len(rows)
    return count / (time.perf_counter() - started)


def _row(model, node, event: dict, gpu_of: dict, now: datetime):
    observed = datetime.fromisoformat(event["observed_at"])
    severity = "critical" if event["xid"] == 48 else "warning"
    return model(
        node=node, kind="xid", xid=event["xid"], gpu_index=gpu_of[event["pci"]],
        pci=event["pci"], severity=severity, message=event["message"],
        data={**event["data"], "pid": event["pid"], "process": event["process"]},
        observed_at=observed, last_observed_at=observed, received_at=now,
        fold_key=hashlib.sha256(event["id"].encode()).hexdigest(),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--batches", type=int, default=25, help="per sender, one for warm-up")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--workers", type=int, default=1, help="daphne processes")
    parser.add_argument("--nodes", type=int, default=128, help="cluster size (board size)")
    parser.add_argument("--under-load", action="store_true")
    parser.add_argument("--board-worker", action="store_true", help="board on its own process")
    args = parser.parse_args()
    os.environ.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
    ensure_database(os.environ["DATABASE_URL"])
    django_setup()

    from django.db import connection

    from clusters.models import Node

    cluster, _ = seed_cluster("bench-ingest", max(args.nodes, args.senders))
    nodes = list(Node.objects.filter(cluster=cluster).order_by("name")[: args.senders])
    run, start = uuid.uuid4().hex[:8], datetime.now(UTC) - timedelta(minutes=10)
    batches = [
        [make_events(run, s, b, args.batch_size, start) for b in range(args.batches)]
        for s in range(args.senders)
    ]
    log = open(os.devnull, "w")  # noqa: SIM115 (closed below, after the workers stop)
    procs, ports = start_workers(args.workers + int(args.board_worker), log)
    board_port = ports[-1] if args.board_worker else ports[0]
    if args.board_worker:
        ports = ports[:-1]
    try:
        events_per_s, board_ms = ingest_over_http(args, nodes, ports, board_port, batches)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
        log.close()
    raw_per_s = raw_insert(nodes, batches)
    copy_per_s = raw_insert(nodes, batches, copy=True)
    figures = {
        "events_per_s": round(events_per_s),
        "raw_insert_events_per_s": round(raw_per_s),
        "raw_copy_events_per_s": round(copy_per_s),
        # The issue's floor is a bare COPY of the same rows; the bulk INSERT is kept
        # for comparison with earlier runs.
        "ratio": round(events_per_s / copy_per_s, 3),
        "ratio_to_insert": round(events_per_s / raw_per_s, 3),
        "db": connection.vendor,
        "senders": args.senders,
        "batch_size": args.batch_size,
        "workers": args.workers,
    }
    if args.under_load:
        figures["board_render_ms_p95_under_load"] = (
            round(percentile(board_ms, 95), 1) if board_ms else None
        )
        figures["board_renders"] = len(board_ms)
        figures["board_worker"] = "own" if args.board_worker else "shared"
        figures["nodes"] = args.nodes
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
