"""Debian's real `prometheus` server for the tests, scraping a serving endpoint whose
p95 latency the test sets (tests/demand/test_prometheus_real.py,
tests/demand/test_demand_on_slurm.py)."""

from __future__ import annotations

import subprocess
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests
import yaml

from tests.e2e.conftest import free_port
from tests.portal.prometheus_tools import require_tool

SERVING_JOB = "llm-serve"


class Serving:
    """An inference server's /metrics: its p95 latency, which the test changes."""

    def __init__(self) -> None:
        self.p95_ms = 412.0
        serving = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = (
                    f"# TYPE serve_p95_latency_ms gauge\nserve_p95_latency_ms {serving.p95_ms}\n"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{host}:{port}"


@contextmanager
def running_prometheus(folder):
    """Prometheus scraping a Serving every second, its data under FOLDER; yields
    (its URL, the Serving) and stops both."""
    binary = require_tool("prometheus")
    serving = Serving()
    port = free_port()
    config = folder / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s"},
                "scrape_configs": [
                    {"job_name": SERVING_JOB, "static_configs": [{"targets": [serving.address]}]}
                ],
            }
        )
    )
    log = (folder / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://127.0.0.1:{port}", serving
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
        serving.httpd.shutdown()
        serving.httpd.server_close()


def ready(url: str) -> bool:
    try:
        return requests.get(f"{url}/-/ready", timeout=2).status_code == 200
    except requests.RequestException:
        return False
