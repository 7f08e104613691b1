"""Progress reports from the trainer to the portal: best effort, never fatal."""

import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jobs.launcher import main, report_progress


class Recorder(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests.append(
            {"path": self.path, "headers": dict(self.headers), "body": json.loads(body)}
        )
        if self.server.delay:
            time.sleep(self.server.delay)
        self.send_response(self.server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        """Keep the test output quiet."""


@pytest.fixture
def portal():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.requests, server.status, server.delay = [], 202, 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def job_env(url, **extra):
    return {
        "MEDBAY_PORTAL_URL": url,
        "MEDBAY_JOB_TOKEN": "job-token.abc123",
        "SLURM_JOB_ID": "42",
        **extra,
    }


def test_a_progress_report_posts_json_with_the_job_token(portal):
    env = job_env(portal.url + "/", SLURM_RESTART_COUNT="2")
    assert report_progress(120, checkpoint_saved=True, env=env) is True
    (request,) = portal.requests
    assert request["path"] == "/api/v1/jobs/42/progress/"
    assert request["headers"]["Authorization"] == "Bearer job-token.abc123"
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["body"] == {"step": 120, "checkpoint_saved": True, "restart_count": 2}


def test_a_portal_error_is_reported_as_false_not_raised(portal, capsys):
    portal.status = 500
    assert report_progress(1, env=job_env(portal.url)) is False
    # In the job's error file, so the researcher can see why no progress shows.
    assert "progress report for step 1 not accepted: HTTP Error 500" in capsys.readouterr().err


def test_an_unreachable_portal_is_reported_as_false_not_raised():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    assert report_progress(1, env=job_env(f"http://127.0.0.1:{port}")) is False


def test_a_slow_portal_gives_up_after_a_short_timeout(portal, monkeypatch):
    monkeypatch.setattr("jobs.launcher.PROGRESS_TIMEOUT_S", 0.2)
    portal.delay = 2
    started = time.monotonic()
    assert report_progress(1, env=job_env(portal.url)) is False
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"MEDBAY_PORTAL_URL": "http://127.0.0.1:9", "SLURM_JOB_ID": "42"},
        {"MEDBAY_PORTAL_URL": "file:///etc/passwd", "MEDBAY_JOB_TOKEN": "t", "SLURM_JOB_ID": "1"},
        {"MEDBAY_PORTAL_URL": "http://127.0.0.1:9", "MEDBAY_JOB_TOKEN": "t"},
    ],
    ids=["nothing", "no-token", "not-http", "no-job"],
)
def test_without_portal_settings_nothing_is_sent(env):
    assert report_progress(1, env=env) is False


def test_the_progress_subcommand_posts_and_exits_zero(portal, monkeypatch):
    for name, value in job_env(portal.url).items():
        monkeypatch.setenv(name, value)
    assert main(["progress", "--step", "7", "--checkpoint"]) == 0
    assert portal.requests[0]["body"]["step"] == 7
    assert portal.requests[0]["body"]["checkpoint_saved"] is True


def test_the_progress_subcommand_exits_zero_when_the_portal_is_down():
    root = Path(__file__).resolve().parents[2]
    env = {"MEDBAY_PORTAL_URL": "http://127.0.0.1:9", "MEDBAY_JOB_TOKEN": "t" * 8}
    result = subprocess.run(
        [sys.executable, str(root / "jobs" / "launcher.py"), "progress", "--step", "3"],
        env={**env, "SLURM_JOB_ID": "42", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0
    assert "not delivered" in result.stderr
