"""`manage.py serve` answers a static path that is missing or outside the static root with a 404.

Seen: `/static/nonexist.css` was a 500 (the site's 404 page needs the request's
user, which no middleware sets for a static path), and `/static/../manage.py` a
500 with SuspiciousFileOperation's traceback in the log. The real server
process is started, as `make demo` and the README's quick start run it.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60
MISSING_OR_OUTSIDE = [
    "/static/nonexist.css",
    "/static/css/nonexist.css",
    "/static/../manage.py",
    "/static/%2e%2e/manage.py",
    "/static/..%2fmanage.py",
    "/static/css/../../manage.py",
    "/static//etc/passwd",
    "/static/",
    "/static/css/",
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(port: int, raw_path: str, header: str = "Content-Type") -> tuple[int, str]:
    """GET the path exactly as written: no client folds `..` before the server sees it;
    the answer's status and HEADER."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", raw_path)
        response = connection.getresponse()
        return response.status, response.getheader(header, "")
    finally:
        connection.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")
    log_path = folder / "serve.log"
    port = _free_port()
    env = {
        **os.environ,
        "DEBUG": "false",
        "SECRET_KEY": "static-files-test-key",
        "ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_URL": f"sqlite:///{folder / 'portal.sqlite3'}",
        "MEDBAY_BACKEND": "simulated",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("REDIS_URL", None)
    command = [sys.executable, "manage.py", "serve", "--addr", f"127.0.0.1:{port}"]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*command, "--no-engine", "--no-sync"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_until_listening(process, port, log_path)
        yield port, log_path
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _wait_until_listening(process, port: int, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"serve exited:\n{log_path.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"serve did not listen within {START_TIMEOUT_S}s")


def test_a_static_file_that_exists_is_served(served):
    port, _ = served

    status, content_type = _get(port, "/static/css/medbay.css")

    assert status == 200
    assert content_type.startswith("text/css")


def test_a_vendored_file_is_kept_a_year_and_the_portals_own_files_are_asked_for_again(served):
    port, _ = served

    assert _get(port, "/static/vendor/plotly-basic-4.1.1.min.js", "Cache-Control") == (
        200,
        "public, max-age=31536000, immutable",
    )
    assert _get(port, "/static/css/medbay.css", "Cache-Control") == (200, "no-cache")
    assert _get(port, "/static/js/reports.js", "Cache-Control") == (200, "no-cache")


def test_every_vendored_file_names_its_version_so_a_year_of_caching_is_safe():
    from portal.server import cache_control

    for path in (REPO / "static" / "vendor").iterdir():
        assert cache_control(f"vendor/{path.name}").endswith("immutable"), (
            f"static/vendor/{path.name} has no version in its name: a browser would keep "
            "an old copy after an upgrade; name it NAME-VERSION.EXT"
        )


@pytest.mark.parametrize("path", MISSING_OR_OUTSIDE)
def test_a_static_path_missing_or_outside_the_root_is_a_404_never_a_500(served, path):
    port, _ = served

    status, content_type = _get(port, path)

    assert status == 404, path
    assert content_type.startswith("text/html")


def test_no_static_path_leaves_a_traceback_in_the_log(served):
    port, log_path = served
    for path in MISSING_OR_OUTSIDE:
        _get(port, path)

    log = log_path.read_text()

    assert "Traceback" not in log
    assert "SuspiciousFileOperation" not in log
