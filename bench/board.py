"""Server time to render the node-health board; with --browser, Chromium's view of it.

    python bench/board.py --nodes 2048 [--runs 20]
    python bench/board.py --nodes 12500 --browser [--changes 20]

Runs on its own SQLite file unless DATABASE_URL says otherwise: the benchmark
deletes every cluster first, which must never hit the development database.
Above MEDBAY_BOARD_TILES_MAX nodes the board is the fleet view (a canvas drawn
from board/fleet.json), below it the cards; `view` says which was measured.
`html_bytes` is the page, `payload_bytes` the fleet view's JSON (0 for cards).

--browser also starts daphne on the Redis channel layer (REDIS_URL, default
redis://127.0.0.1:6379/0) and opens the board in the project's Chromium:
`first_paint_ms` is the first contentful paint, `interactive_ms` the time from
navigation until every GPU is drawn and the live socket is open (the page answers
a pointer and shows changes); `gpu_change_ms_p50/p95` the time from a GPU's change
in the database (then published as the portal publishes it) to the page having
painted it, over --changes changes.

Prints {"nodes", "gpus", "view", "render_ms_p50", "render_ms_p95", "html_bytes",
"payload_bytes", "payload_ms_p50", "queries", "db", ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from _setup import django_setup, percentile, seed_cluster

CHROMIUM = "/usr/bin/chromium"
QUIET_S = 1.0
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


def server_figures(client, runs: int) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    first = client.get("/")  # warm caches and the template loader
    fleet_view = b'id="fleet"' in first.content
    timings, payload_ms, payload_bytes = [], [], 0
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get("/")
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
        if fleet_view:
            started = time.perf_counter()
            payload = client.get("/board/fleet.json")
            payload_ms.append((time.perf_counter() - started) * 1000)
            payload_bytes = len(payload.content)
    with CaptureQueriesContext(connection) as queries:
        client.get("/")
    return {
        "view": "fleet" if fleet_view else "tiles",
        "render_ms_p50": round(percentile(timings, 50), 1),
        "render_ms_p95": round(percentile(timings, 95), 1),
        "html_bytes": len(first.content),
        "payload_bytes": payload_bytes,
        "payload_ms_p50": round(percentile(payload_ms, 50), 1) if payload_ms else None,
        "queries": len(queries),
    }


def browser_figures(args, cluster) -> dict:
    """Chromium on a real daphne: paint, interactive, and GPU changes applied."""
    from fanout import start_workers
    from ingest import session_cookie
    from live_browser import serve_command
    from playwright.sync_api import sync_playwright

    log = open(f"/tmp/medbay-bench-board-{os.getpid()}.log", "w")  # noqa: SIM115
    procs, ports = start_workers(1, log, serve_command)  # production's server, statics too
    # Playwright's sync API runs an event loop in this thread, so Django refuses its ORM
    # here unless told that this single-threaded use is safe (set after the server started).
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        name, _, value = session_cookie().partition("=")
        url = f"http://127.0.0.1:{ports[0]}/"
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = chromium.new_context(viewport={"width": 1400, "height": 900})
            context.add_cookies([{"name": name, "value": value, "url": url}])
            page = context.new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.add_init_script(WATCH)
            page.goto(url)
            try:
                page.wait_for_function("() => window.__benchInteractive", timeout=60_000)
            except Exception:
                page.screenshot(path="/tmp/medbay-bench-board-timeout.png")
                raise SystemExit(
                    f"the board never became interactive; console: {errors[:3]}"
                ) from None
            figures = page.evaluate(TIMINGS)
            changes = gpu_changes(page, cluster, args.changes)
            if args.screenshot:
                page.screenshot(path=args.screenshot)
            chromium.close()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
        log.close()
    if errors:
        raise SystemExit(f"console errors on the board: {errors[:3]}")
    return {
        "first_paint_ms": round(figures["paint"], 1),
        "interactive_ms": round(figures["interactive"], 1),
        "gpu_change_ms_p50": round(percentile(changes, 50), 1),
        "gpu_change_ms_p95": round(percentile(changes, 95), 1),
        "gpu_changes": len(changes),
    }


# Marks when the fleet is drawn with its socket open (or, for cards, the socket open).
WATCH = """
window.__benchApplied = [];
(() => {
  let drawn = false, open = false;
  const done = () => { if ((drawn || !document.getElementById("fleet")) && open
                           && !window.__benchInteractive) {
    window.__benchInteractive = performance.now(); } };
  document.addEventListener("medbay:fleet-drawn", () => { drawn = true; done(); });
  document.addEventListener("htmx:wsOpen", () => { open = true; done(); });
  document.addEventListener("medbay:fleet-applied", (event) => {
    window.__benchApplied.push([performance.timeOrigin + performance.now(), event.detail.nodes]);
  });
})();
"""
TIMINGS = """() => {
  const paint = performance.getEntriesByName("first-contentful-paint")[0];
  return {paint: paint ? paint.startTime : null, interactive: window.__benchInteractive};
}"""


def gpu_changes(page, cluster, count: int) -> list[float]:
    """Milliseconds from a GPU's change in the database until the page painted it."""
    from django.db import transaction
    from django.utils import timezone

    from clusters.live import publish_nodes
    from clusters.models import Gpu, GpuHealth, Node

    if not page.evaluate("() => !!document.getElementById('fleet')"):
        return []
    nodes = list(Node.objects.filter(cluster=cluster).order_by("name"))[::97][:count]
    latencies = []
    for number, node in enumerate(nodes):
        # One change at a time: the regions the last one re-rendered (counts, table) are
        # done first, so each figure is one change's, not a burst's.
        time.sleep(QUIET_S)
        page.evaluate("() => { window.__benchApplied = []; }")
        started = time.time() * 1000
        with transaction.atomic():
            Gpu.objects.filter(node=node, index=number % 8).update(
                health=GpuHealth.FAILED, health_reason="bench", health_changed_at=timezone.now()
            )
            transaction.on_commit(lambda pk=node.pk: publish_nodes([pk]))
        page.wait_for_function(
            "(name) => window.__benchApplied.some(([, nodes]) => nodes.includes(name))",
            arg=node.name,
            timeout=15_000,
        )
        applied = page.evaluate(
            "(name) => window.__benchApplied.find(([, n]) => n.includes(name))[0]", node.name
        )
        latencies.append(applied - started)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=2048)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--browser", action="store_true", help="also measure in Chromium")
    parser.add_argument("--changes", type=int, default=20, help="GPU changes (--browser)")
    parser.add_argument("--screenshot", default="", help="PNG of the board (--browser)")
    parser.add_argument("--reuse", action="store_true", help="keep a seeded cluster of this size")
    args = parser.parse_args()
    os.environ.setdefault("DATABASE_URL", "sqlite:////tmp/medbay-bench-board.sqlite3")
    if args.browser:
        os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    django_setup()

    from django.conf import settings
    from django.db import connection
    from django.test import Client

    from clusters.models import Cluster, Gpu, GpuHealth, Node
    from core.roles import Role
    from identity.accounts import create_user_with_role

    cluster = Cluster.objects.filter(name="bench-board").first()
    if not (args.reuse and cluster and Node.objects.filter(cluster=cluster).count() == args.nodes):
        Cluster.objects.all().delete()
        # Workload rounds as before up to 2,048 nodes; beyond, the scheduler's cost per
        # round would make seeding take longer than the benchmark.
        cluster, _ = seed_cluster("bench-board", args.nodes, rounds=min(args.nodes // 4, 512))
    Gpu.objects.filter(node__cluster=cluster, health_reason="bench").update(
        health=GpuHealth.HEALTHY, health_reason=""
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    user, _ = create_user_with_role("bench-viewer", Role.RESEARCHER)
    client = Client()
    client.force_login(user)
    figures = {
        "nodes": args.nodes,
        "gpus": Gpu.objects.filter(node__cluster__name="bench-board").count(),
        **server_figures(client, args.runs),
        "db": connection.vendor,
    }
    if args.browser:
        figures.update(browser_figures(args, cluster))
        figures["layer"] = "redis" if settings.REDIS_URL else "memory"
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
