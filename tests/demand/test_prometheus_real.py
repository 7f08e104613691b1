"""The inference load from Debian's real Prometheus server: it scrapes a serving
endpoint's latency, and the demand source reads it, or says why it cannot."""

from __future__ import annotations

import time

import pytest

from demand.models import Metric
from demand.sampling import sample
from demand.sources import PrometheusLoad
from tests.demand.prometheus_server import ready

pytestmark = pytest.mark.integration

LATENCY_QUERY = 'max(serve_p95_latency_ms{job="llm-serve"})'


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
