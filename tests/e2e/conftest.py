"""A real portal (daphne subprocess) and a real Chromium, for the `browser` tests.

Chromium is Debian's (`.ci/browser` installs it); Playwright only drives it, so
`playwright install` is never needed. Outside CI the tests skip, with the
reason, when either is missing; with CI=true they fail instead.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.portal_server import PASSWORD, ROOT

# The real local Slurm, for the journeys that run on it (tests marked slurm).

# Playwright's assertions for the tests; without the package the fixtures skip, or fail
# under CI, saying what is missing.
try:
    from playwright.sync_api import expect
except ImportError:
    expect = None

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = ROOT / "test-artifacts"
START_TIMEOUT_S = 120


def require_browser() -> None:
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (apt-get install chromium, or run .ci/browser)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (.venv/bin/pip install playwright)")
    if missing:
        message = "browser tests need " + " and ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@dataclass
class Portal:
    """The running server: its URL and a way to change its cluster."""

    url: str
    process: subprocess.Popen
    lines: queue.Queue
    log: Path

    def command(self, op: str, *, timeout: float = 10, **fields) -> dict:
        """Send one command; returns what the portal answered with its ACK, if anything."""
        self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.process.stdin.flush()
        reply = self.next_line(timeout=timeout)
        head, _, payload = reply.partition(" ")
        assert head == "E2E-ACK", f"portal refused {op}: {reply}"
        return json.loads(payload) if payload else {}

    def next_line(self, timeout: float) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer from the portal; its log: {self.log}") from None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        if line.startswith("E2E-"):
            lines.put(line.strip())


@pytest.fixture(scope="session")
def portal(tmp_path_factory, request):
    require_browser()
    folder = tmp_path_factory.mktemp("e2e-portal")
    yield from launch_portal(
        request, folder, "tests/e2e/portal_server.py", MEDBAY_BACKEND="simulated"
    )


def launch_portal(request, folder: Path, script: str, *, port: int | None = None, **settings):
    """Start SCRIPT as a production-like portal (DEBUG off, SQLite in FOLDER), yield
    it once it listens, stop it afterwards."""
    port = port or free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("REDIS_URL", "DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    env.update(
        DATABASE_URL=f"sqlite:///{folder / 'portal.sqlite3'}",
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="127.0.0.1,localhost",
        SECURE_SSL_REDIRECT="false",
        SESSION_COOKIE_SECURE="false",
        CSRF_COOKIE_SECURE="false",
        PYTHONUNBUFFERED="1",
    )
    env.update(settings)  # a restarted portal passes its first one's SECRET_KEY
    log = folder / "portal.log"
    with log.open("w") as log_file:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / script), str(port)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
        )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True).start()
    server = Portal(f"http://127.0.0.1:{port}", process, lines, log)
    try:
        first = server.next_line(timeout=START_TIMEOUT_S)
        assert first == "E2E-READY", f"portal did not start: {first}\n{log.read_text()[-3000:]}"
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        if request.session.testsfailed:
            # The server's tracebacks explain a 500 in a screenshot; pytest's own
            # tmp folders are pruned after a few runs.
            ARTIFACTS.mkdir(exist_ok=True)
            shutil.copyfile(log, ARTIFACTS / f"{Path(script).stem}.log")


def slurm_portal_settings(port: int, **settings) -> dict:
    """A portal on the real local Slurm: its nodes, spares and jobs, synced every second."""
    return {
        "MEDBAY_BACKEND": "slurm",
        "MEDBAY_FLEET": "slurm-spares",
        "MEDBAY_PORTAL_URL": f"http://127.0.0.1:{port}",
        "MEDBAY_SYNC_INTERVAL_S": "1",
        **settings,
    }


def launch_slurm_portal(request, folder: Path, *, script="tests/e2e/slurm_portal_server.py",
                        port: int | None = None, **settings):  # fmt: skip
    """`launch_portal` on the real local Slurm (`slurm_portal_settings`)."""
    port = port or free_port()
    yield from launch_portal(
        request, folder, script, port=port, **slurm_portal_settings(port, **settings)
    )


@contextmanager
def job_workdir(prefix: str, *examples: str):
    """A folder every user may write in (the job runs as its researcher and writes its
    output there), with copies of the named files of examples/; removed afterwards
    unless MEDBAY_KEEP_WORKDIR is set (to read a failed journey's job output)."""
    path = Path(tempfile.mkdtemp(prefix=f"medbay-{prefix}-", dir="/tmp"))
    path.chmod(0o777)
    try:
        for name in examples:
            shutil.copy(ROOT / "examples" / name, path / name)
            (path / name).chmod(0o644)
        yield path
    finally:
        if not os.environ.get("MEDBAY_KEEP_WORKDIR"):
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def browser():
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, request):
    context = browser.new_context()
    tab = context.new_page()
    tab.set_default_timeout(10_000)
    yield tab
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in request.node.nodeid)
        tab.screenshot(path=str(ARTIFACTS / f"{safe}.png"), full_page=True)
    context.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # Keep each phase's report on the test item so `page` can see a failure.
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def log_in(page, portal: Portal, username: str, password: str = PASSWORD) -> None:
    page.goto(f"{portal.url}/login/")
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


# Set before the page loads; still there after a live update only if the page
# was not reloaded.
WATCH_SOCKET = """
window.__medbayNoReload = true;
document.addEventListener("htmx:wsOpen", () => { window.__medbayWsOpen = true; });
"""


def wait_for_socket(page) -> None:
    """Wait until the page's live websocket is open; needs WATCH_SOCKET as an init script.

    Pass wait_for_function a function, never an expression: Playwright polls an
    expression with eval, which the pages' Content-Security-Policy refuses."""
    page.wait_for_function("() => window.__medbayWsOpen === true")


@dataclass
class BrowserProblems:
    """Console errors, failed requests and error responses a page met."""

    errors: list[str]

    def assert_none(self) -> None:
        assert not self.errors, "the page met problems:\n" + "\n".join(self.errors)


def watch_for_problems(page) -> BrowserProblems:
    """Record every console error, failed request and 4xx/5xx answer from now on."""
    problems = BrowserProblems([])

    def on_console(message) -> None:
        if message.type == "error":
            problems.errors.append(f"console: {message.text}")

    def on_response(response) -> None:
        if response.status >= 400:
            problems.errors.append(f"{response.status} {response.url}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.errors.append(f"page error: {error}"))

    def on_request_failed(request) -> None:
        # Leaving a page aborts what it still had in flight (its live fetches):
        # the browser's own cancellation, not a failure anyone sees.
        if request.failure != "net::ERR_ABORTED":
            problems.errors.append(f"failed: {request.url} ({request.failure})")

    page.on("requestfailed", on_request_failed)
    page.on("response", on_response)
    return problems


# The synthetic past the report pages draw. The browser tests share one portal, and the
# history is generated once (a second call finds it and adds nothing), so every test
# that wants a past asks for this same one, whichever runs first.
REPORT_HISTORY = {"days": 3, "jobs": 40, "fault_rate": 0.05}


def report_history(portal) -> dict:
    """A few days of synthetic history, with faults often enough (per GPU and day) that
    jobs lose work and nodes are replaced, so every chart has something to draw."""
    return portal.command("history", timeout=60, **REPORT_HISTORY)
