"""Live updates in real browsers: 20 Chromium pages and a burst of 200 changes.

    python bench/live_browser.py [--pages 20] [--changes 200] [--workers 0]

By default the pages are served by the browser tests' portal (one process:
simulator, daphne, the in-memory layer, SQLite) and changed over its stdin.
With `--workers N` they are served as in production by N `manage.py serve
--no-sync` processes on the Redis channel layer and PostgreSQL (the database
is created when missing), and this process makes the changes, as the Slurm
sync and the agents' ingest do. Either way the changes go through the
product's own paths on a simulated cluster: XIDs through the agent's parser
and the real ingest (feed), jobs started by the simulator and reconciled by
the sync (queue), and drains (board). PAGES
pages in Debian's Chromium, a third each on the board, the event feed and the
job queue, spread over the workers. Every change carries a unique marker;
each page records, with a MutationObserver, when a marker of its kind appears
in its DOM. Applied latency is that moment minus the moment the change was
committed. Prints {"pages", "changes", "workers", "applied_ms_p50",
"applied_ms_p95", "missed", "console_errors"}; missed counts (page, change)
pairs never shown within 15 s.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _setup import ROOT, django_setup, percentile
from fanout import bench_database_url, free_port, start_workers

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "e2e-known-password-42"  # tests/e2e/portal_server.py's users
BENCH_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/medbay_bench_live"
KINDS = ("board", "feed", "queue")
PATHS = {"board": "/", "feed": "/health/events/", "queue": "/jobs/"}
SETTLE_S = 15
# Records when each marker first shows in the page, in wall-clock milliseconds.
OBSERVER = """
window.__seen = {};
const note = (html) => {
  for (const marker of html.match(/mk-\\d+-x/g) || []) {
    if (!(marker in window.__seen)) window.__seen[marker] = Date.now();
  }
};
// Only what changed is read: scanning the whole page on every mutation would
// make the benchmark measure itself.
new MutationObserver((records) => {
  for (const record of records) {
    for (const node of record.addedNodes) {
      if (node.nodeType === 1) note(node.outerHTML);
    }
    if (record.type === "attributes" && record.target.nodeType === 1) {
      note(record.target.getAttribute(record.attributeName) || "");
    }
  }
}).observe(document, {subtree: true, childList: true, attributes: true});
"""


class Lines:
    """The portal's E2E- lines, waited for one by one (bench/queue.py hides stdlib queue)."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._ready = threading.Condition()

    def put(self, line: str) -> None:
        with self._ready:
            self._lines.append(line)
            self._ready.notify()

    def get(self, timeout: float) -> str:
        with self._ready:
            if not self._ready.wait_for(lambda: self._lines, timeout=timeout):
                raise SystemExit("no answer from the portal")
            return self._lines.pop(0)


class Portal:
    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="medbay-bench-live-"))
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
        env.update(
            DATABASE_URL=f"sqlite:///{self.folder / 'portal.sqlite3'}",
            DEBUG="false",
            SECRET_KEY=secrets.token_urlsafe(50),
            ALLOWED_HOSTS="127.0.0.1,localhost",
            SECURE_SSL_REDIRECT="false",
            SESSION_COOKIE_SECURE="false",
            CSRF_COOKIE_SECURE="false",
            MEDBAY_BACKEND="simulated",
            PYTHONUNBUFFERED="1",
        )
        self.log = self.folder / "portal.log"
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/e2e/portal_server.py"), str(self.port)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("w"),
            text=True,
        )
        self.lines = Lines()
        threading.Thread(target=self._pump, daemon=True).start()
        first = self.lines.get(timeout=120)
        if first != "E2E-READY":
            raise SystemExit(f"portal did not start: {first}; see {self.log}")
        self.url = f"http://127.0.0.1:{self.port}"

    def _pump(self) -> None:
        for line in self.process.stdout:
            if line.startswith("E2E-"):
                self.lines.put(line.strip())

    def command(self, op: str, **fields) -> dict:
        self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.process.stdin.flush()
        head, _, payload = self.lines.get(timeout=30).partition(" ")
        if head != "E2E-ACK":
            raise SystemExit(f"portal refused {op}: {head} {payload}")
        return json.loads(payload) if payload else {}

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


class Cluster:
    """The production-like set-up: daphne workers on Redis, changes made from here."""

    def __init__(self, workers: int) -> None:
        os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
        os.environ.setdefault("DATABASE_URL", bench_database_url(BENCH_DATABASE_URL, fallback=None))
        django_setup()
        from django.utils import timezone

        from clusters.backends import registry
        from clusters.backends.simulated import SimulatedCluster
        from clusters.models import Cluster as ClusterRow
        from core.roles import Role
        from identity.accounts import create_user_with_role
        from sync.cycle import apply_snapshot

        self.sim = SimulatedCluster.standard(
            train=4, infer=1, spare=1, seed=3, prefix="bl", start=timezone.now()
        )
        self.sim.fault_rate_per_gpu_day = 0
        registry.use(self.sim)
        ClusterRow.objects.all().delete()  # a new simulator knows nothing of the last run
        self.cluster = ClusterRow.objects.create(name="bench-live", backend="simulated")
        apply_snapshot(self.cluster, self.sim.partitions(), self.sim.nodes(), self.sim.jobs())
        create_user_with_role("admin", Role.ADMIN, PASSWORD)
        self.log = Path(tempfile.mkdtemp(prefix="medbay-bench-live-")) / "workers.log"
        self.procs, ports = start_workers(workers, self.log.open("w"), serve_command)
        self.urls = [f"http://127.0.0.1:{port}" for port in ports]
        self.nodes = [f"bl-0{n}" for n in range(1, 5)]

    def change(self, kind: str, number: int, marker: str) -> None:
        from django.utils import timezone

        from clusters.backends.base import JobSubmission
        from clusters.backends.simulated import SimFault
        from demo.simulation import record_gpu_fault
        from sync.cycle import apply_snapshot

        node = self.nodes[number % len(self.nodes)]
        if kind == "feed":
            fault = SimFault(node, number % 8, 43, timezone.now(), f"stopped {marker}")
            record_gpu_fault(self.cluster, fault)
            return
        if kind == "queue":
            script = (
                f"#!/bin/bash\n#SBATCH --job-name={marker}\n#SBATCH --partition=train\n"
                "#SBATCH --nodes=1\n#SBATCH --gres=gpu:1\nsrun train.py\n"
            )
            self.sim.submit_job(JobSubmission(script=script, user="bob"))
        else:
            self.sim.drain_node(node, marker)
        apply_snapshot(self.cluster, self.sim.partitions(), self.sim.nodes(), self.sim.jobs())

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
            proc.wait(timeout=10)


class SingleProcess:
    """`--workers 0`: the browser tests' portal, changed over its stdin."""

    def __init__(self) -> None:
        self.portal = Portal()
        self.urls = [self.portal.url]
        self.nodes = [f"e2e-0{n}" for n in range(1, 5)]

    def change(self, kind: str, number: int, marker: str) -> None:
        node = self.nodes[number % len(self.nodes)]
        if kind == "feed":
            self.portal.command(
                "xid", node=node, gpu=number % 8, xid=43, message=f"stopped {marker}"
            )
        elif kind == "queue":
            self.portal.command("run_job", user="bob", name=marker, nodes=1, gpus=1)
        else:
            self.portal.command("drain", node=node, reason=marker)

    def stop(self) -> None:
        self.portal.stop()


def serve_command(port: int) -> list[str]:
    # What production's medbay-web units run: daphne serving the static files too.
    return [
        sys.executable,
        "manage.py",
        "serve",
        "--no-sync",
        "--no-engine",
        "--addr",
        f"127.0.0.1:{port}",
    ]


def open_pages(browser, urls: list[str], count: int) -> list[tuple[str, object, list]]:
    pages = []
    for number in range(count):
        kind = KINDS[number % len(KINDS)]
        url = urls[number % len(urls)]
        context = browser.new_context()
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m, errors=errors: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        page.goto(f"{url}/login/")
        page.get_by_label("User name").fill("admin")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{url}/")
        page.add_init_script(OBSERVER)
        page.goto(f"{url}{PATHS[kind]}")
        page.wait_for_function(
            "() => document.getElementById('live-status')?.textContent === 'live'", timeout=30_000
        )
        pages.append((kind, page, errors))
    return pages


def make_changes(target, count: int) -> dict[str, tuple[str, float]]:
    """marker -> (kind, committed at, ms since the epoch)."""
    made = {}
    for number in range(count):
        kind = KINDS[number % len(KINDS)]
        marker = f"mk-{number}-x"
        target.change(kind, number, marker)
        made[marker] = (kind, time.time() * 1000)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    target = Cluster(args.workers) if args.workers else SingleProcess()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            pages = open_pages(browser, target.urls, args.pages)
            # On a thread of its own: Playwright's sync API runs a loop on this one,
            # where Django refuses database calls.
            made = {}
            thread = threading.Thread(
                target=lambda: made.update(make_changes(target, args.changes))
            )
            thread.start()
            thread.join()
            deadline = time.monotonic() + SETTLE_S
            latencies, missed, by_kind = [], 0, {kind: [] for kind in KINDS}
            for kind, page, _errors in pages:
                wanted = [m for m, (k, _) in made.items() if k == kind]
                while time.monotonic() < deadline:
                    seen = page.evaluate("window.__seen")
                    if all(m in seen for m in wanted):
                        break
                    page.wait_for_timeout(200)
                seen = page.evaluate("window.__seen")
                for marker in wanted:
                    if marker in seen:
                        latencies.append(max(0.0, seen[marker] - made[marker][1]))
                        by_kind[kind].append(latencies[-1])
                    else:
                        missed += 1
            errors = sum(len(errors) for _, _, errors in pages)
            for kind, values in by_kind.items():
                if values:
                    print(
                        f"{kind}: p50 {percentile(values, 50):.0f} ms, p95 "
                        f"{percentile(values, 95):.0f} ms",
                        file=sys.stderr,
                    )
            for kind, _page, page_errors in pages:
                for error in page_errors[:3]:
                    print(f"{kind}: {error}", file=sys.stderr)
            browser.close()
    finally:
        target.stop()
    print(
        json.dumps(
            {
                "pages": args.pages,
                "changes": args.changes,
                "workers": args.workers,
                "applied_ms_p50": round(percentile(latencies, 50), 1) if latencies else None,
                "applied_ms_p95": round(percentile(latencies, 95), 1) if latencies else None,
                "missed": missed,
                "console_errors": errors,
            }
        )
    )


if __name__ == "__main__":
    main()
