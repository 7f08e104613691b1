"""Websocket fan-out: one node state change reaching many connected boards.

    python bench/fanout.py --clients 200 [--workers 1] [--rounds 3]

Starts daphne worker(s) on the Redis channel layer (CHANNEL_LAYER: lists, the
default, or pubsub), connects logged-in
websocket clients, changes one node and measures, per client, the time from the
change to the fragment's arrival. Uses PostgreSQL (the database is created when
missing) unless DATABASE_URL says otherwise or PostgreSQL is not running, because
SQLite serialises the connect-time queries of many sockets. Workers' stderr goes
to a log file named in the output. Prints {"clients", "workers", "rounds",
"delivered", "latency_ms_p50", "latency_ms_p95", "layer", "db", "worker_log"}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _setup import ROOT, django_setup, percentile, seed_cluster, session_cookie

BENCH_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/medbay_bench_fanout"
SQLITE_DATABASE_URL = "sqlite:////tmp/medbay-bench-fanout.sqlite3"


def bench_database_url(
    url: str = BENCH_DATABASE_URL, fallback: str | None = SQLITE_DATABASE_URL
) -> str:
    """PostgreSQL's bench database URL, the database created when missing; FALLBACK
    when PostgreSQL is down (None: fail)."""
    import psycopg
    from psycopg import sql

    name = url.rsplit("/", 1)[1]
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=3) as connection:
            exists = connection.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [name]
            ).fetchone()
            if not exists:
                connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.OperationalError:
        if fallback is None:
            raise
        return fallback
    return url


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def daphne_command(port: int) -> list[str]:
    return [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
            "portal.asgi:application"]  # fmt: skip


def start_workers(
    count: int, log, command: Callable[[int], list[str]] = daphne_command
) -> tuple[list[subprocess.Popen], list[int]]:
    """COUNT server processes, each COMMAND(port), once they all listen."""
    ports = [free_port() for _ in range(count)]
    procs = [
        subprocess.Popen(
            command(port),
            cwd=ROOT,
            env=os.environ.copy(),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        for port in ports
    ]
    deadline = time.monotonic() + 30
    for port in ports:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"daphne on port {port} did not start") from None
                time.sleep(0.2)
    return procs, ports


async def run_clients(urls: list[str], cookie: str, change, rounds: int) -> list[float]:
    import websockets

    sockets = []
    for index, url in enumerate(urls):
        origin = url.replace("ws://", "http://").split("/ws/")[0]
        sockets.append(
            await websockets.connect(
                url, additional_headers={"Cookie": cookie, "Origin": origin}, max_size=2**24
            )
        )
        if index % 100 == 99:
            await asyncio.sleep(0.05)
    latencies: list[float] = []
    for round_number in range(rounds):
        await asyncio.sleep(0.5)
        started = time.perf_counter()
        await asyncio.to_thread(change, round_number)
        received = await asyncio.gather(*(_first_message_at(ws) for ws in sockets))
        latencies.extend((at - started) * 1000 for at in received if at is not None)
    await asyncio.gather(*(ws.close() for ws in sockets))
    return latencies


async def _first_message_at(ws) -> float | None:
    try:
        await asyncio.wait_for(ws.recv(), timeout=15)
    except TimeoutError:
        return None
    return time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    if "DATABASE_URL" not in os.environ:
        os.environ["DATABASE_URL"] = bench_database_url()
    django_setup()

    from django.conf import settings
    from django.db import connection

    from sync.cycle import apply_snapshot

    cluster, sim = seed_cluster("bench-fanout", args.nodes)
    cookie = session_cookie("bench-watcher")
    target = sim.nodes()[0].name

    def change(round_number: int) -> None:
        if round_number % 2 == 0:
            sim.drain_node(target, f"medbay: fanout bench round {round_number}")
        else:
            sim.resume_node(target)
        apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())

    log_name = Path(tempfile.gettempdir()) / f"medbay-fanout-{os.getpid()}.log"
    with log_name.open("w") as log:
        procs, ports = start_workers(args.workers, log)
        try:
            urls = [
                f"ws://127.0.0.1:{ports[i % len(ports)]}/ws/live/?topics=board"
                for i in range(args.clients)
            ]
            latencies = asyncio.run(run_clients(urls, cookie, change, args.rounds))
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=10)
    delivered = len(latencies) / (args.clients * args.rounds)
    print(
        json.dumps(
            {
                "clients": args.clients,
                "workers": args.workers,
                "rounds": args.rounds,
                "delivered": round(delivered, 4),
                "latency_ms_p50": round(percentile(latencies, 50), 1) if latencies else None,
                "latency_ms_p95": round(percentile(latencies, 95), 1) if latencies else None,
                "layer": f"redis-{settings.CHANNEL_LAYER}" if settings.REDIS_URL else "memory",
                "db": connection.vendor,
                "worker_log": str(log_name),
            }
        )
    )


if __name__ == "__main__":
    main()
