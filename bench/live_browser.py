"""Live updates in real browsers: 20 Chromium pages and a burst of 200 changes.

    python bench/live_browser.py [--pages 20] [--changes 200]

Starts the browser tests' portal (tests/e2e/portal_server.py: the simulator,
daphne, the in-memory channel layer, DEBUG off) and opens PAGES pages in
Debian's Chromium, a third each on the board, the event feed and the job
queue. It then makes CHANGES changes through the portal's own paths, as fast
as the portal takes them: XIDs through the agent's parser and ingest (feed),
jobs started by the simulator and reconciled by the sync (queue), and drains
(board). Every change carries a unique marker; each page records, with a
MutationObserver, when a marker of its kind appears in its DOM. Applied
latency is that moment minus the moment the change was committed. Prints
{"pages", "changes", "applied_ms_p50", "applied_ms_p95", "missed",
"console_errors"}; missed counts (page, change) pairs never shown within 15 s.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _setup import ROOT, percentile

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
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
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


def open_pages(browser, portal: Portal, count: int) -> list[tuple[str, object, list]]:
    pages = []
    for number in range(count):
        kind = KINDS[number % len(KINDS)]
        context = browser.new_context()
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m, errors=errors: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        page.goto(f"{portal.url}/login/")
        page.get_by_label("User name").fill("admin")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{portal.url}/")
        page.add_init_script(OBSERVER)
        page.goto(f"{portal.url}{PATHS[kind]}")
        page.wait_for_function(
            "() => document.getElementById('live-status')?.textContent === 'live'", timeout=30_000
        )
        pages.append((kind, page, errors))
    return pages


def make_changes(portal: Portal, count: int) -> dict[str, tuple[str, float]]:
    """marker -> (kind, committed at, ms since the epoch)."""
    nodes = [f"e2e-0{n}" for n in range(1, 5)]
    made = {}
    for number in range(count):
        kind = KINDS[number % len(KINDS)]
        marker = f"mk-{number}-x"
        node = nodes[number % len(nodes)]
        if kind == "feed":
            portal.command("xid", node=node, gpu=number % 8, xid=43, message=f"stopped {marker}")
        elif kind == "queue":
            portal.command("run_job", user="bob", name=marker, nodes=1, gpus=1)
        else:
            portal.command("drain", node=node, reason=marker)
        made[marker] = (kind, time.time() * 1000)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--changes", type=int, default=200)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    portal = Portal()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            pages = open_pages(browser, portal, args.pages)
            made = make_changes(portal, args.changes)
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
        portal.stop()
    print(
        json.dumps(
            {
                "pages": args.pages,
                "changes": args.changes,
                "applied_ms_p50": round(percentile(latencies, 50), 1) if latencies else None,
                "applied_ms_p95": round(percentile(latencies, 95), 1) if latencies else None,
                "missed": missed,
                "console_errors": errors,
            }
        )
    )


if __name__ == "__main__":
    main()
