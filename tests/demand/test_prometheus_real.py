"""The inference load from Debian's real Prometheus server: it scrapes a serving
endpoint's latency, and the demand source reads it, or says why it cannot."""

from __future__ import annotations

import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
import yaml

from demand.models import Metric
from demand.sampling import sample
from demand.sources import PrometheusLoad
from tests.e2e.conftest import free_port
from tests.portal.prometheus_tools import require_tool

pytestmark = pytest.mark.integration

LATENCY_QUERY = 'max(serve_p95_latency_ms{job="llm-serve"})'


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


@pytest.fixture
def prometheus(tmp_path):
    binary = require_tool("prometheus")
    serving = Serving()
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s"},
                "scrape_configs": [
                    {"job_name": "llm-serve", "static_configs": [{"targets": [serving.address]}]}
                ],
            }
        )
    )
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        yield url, serving
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
        serving.httpd.shutdown()


def load_row(cluster, url: str, query: str):
    (row,) = sample(cluster, None, None, sources=[PrometheusLoad(url, query, "latency_ms")])
    assert row.metric == Metric.INFERENCE_LOAD
    return row


def until(check, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def ready(url: str) -> bool:
    try:
        return requests.get(f"{url}/-/ready", timeout=2).status_code == 200
    except requests.RequestException:
        return False


@pytest.mark.django_db
def test_the_load_prometheus_scraped_is_read_and_a_broken_query_says_it_does_not_parse(
    prometheus, cluster
):
    url, serving = prometheus
    until(lambda: ready(url), "Prometheus to be ready")

    row = until(
        lambda: (found := load_row(cluster, url, LATENCY_QUERY)).value is not None and found,
        "the first scrape",
    )
    assert row.value == 412.0

    serving.p95_ms = 180.5
    until(lambda: load_row(cluster, url, LATENCY_QUERY).value == 180.5, "the next scrape")

    broken = load_row(cluster, url, "max(serve_p95_latency_ms{job=)")
    assert broken.value is None
    assert broken.missing.startswith("the PromQL query does not parse")

    empty = load_row(cluster, url, 'max(serve_p95_latency_ms{job="nobody"})')
    assert empty.value is None and "returned no series" in empty.missing
