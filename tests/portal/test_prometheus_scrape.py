"""A real Prometheus scrapes a portal on the simulator while an XID storm plays; every
alert expression and every dashboard query is then evaluated through its HTTP API."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import free_port, launch_portal
from tests.portal.prometheus_tools import DASHBOARD, RULES, require_tool

pytestmark = pytest.mark.integration

STORM_NODES = [f"e2e-{n:02d}" for n in range(1, 7)]
# The breaker's default limits (10 % of a partition, at least 2 nodes) let two of the
# storm's nodes be replaced and refuse the rest: both figures and the breaker's alert.
ADMITTED = 2
WAIT_S = 60
# What Grafana puts in the dashboard's queries, as it would for a short range.
GRAFANA_VARIABLES = {
    "$cluster": ".*",
    "$node": ".*",
    "$__rate_interval": "15s",
    "$__interval": "5s",
    "$__range": "10m",
}


@pytest.fixture
def portal(request, tmp_path):
    # A stand-in `sinfo`, so that one real Slurm CLI command is counted by the portal.
    tools = tmp_path / "bin"
    tools.mkdir()
    sinfo = tools / "sinfo"
    sinfo.write_text("#!/bin/sh\necho 'slurm 22.05.8'\n")
    sinfo.chmod(sinfo.stat().st_mode | stat.S_IEXEC)
    yield from launch_portal(
        request,
        tmp_path,
        "tests/portal/metrics_portal_server.py",
        MEDBAY_BACKEND="simulated",
        PATH=f"{tools}{os.pathsep}{os.environ['PATH']}",
    )


@pytest.fixture
def prometheus(portal, tmp_path):
    binary = require_tool("prometheus")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [RULES],
                "scrape_configs": [
                    {
                        "job_name": "medbay",
                        "static_configs": [{"targets": [portal.url.removeprefix("http://")]}],
                    }
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
        wait_for(lambda: _get(f"{url}/-/ready", raw=True), "Prometheus to be ready")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def _get(url: str, raw: bool = False):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body = response.read()
    except OSError:
        return None
    return body if raw else json.loads(body)


def query(prometheus: str, expr: str) -> dict:
    answer = _get(f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert answer is not None, f"Prometheus refused {expr!r}"
    assert answer["status"] == "success", (expr, answer)
    return answer["data"]


def value(prometheus: str, expr: str) -> float | None:
    result = query(prometheus, expr)["result"]
    return float(result[0]["value"][1]) if result else None


def wait_for(predicate, what: str, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def play_storm(portal) -> None:
    portal.command("slurm_version")
    for node in STORM_NODES:
        job = portal.command("run_job", nodes=1, gpus=8, name=f"train-{node}")
        assert job["state"] == "RUNNING", job
    for node in STORM_NODES:
        portal.command("xid", node=node, xid=79, message="GPU has fallen off the bus.")


def alert_expressions() -> dict[str, str]:
    with open(RULES) as file:
        groups = yaml.safe_load(file)["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def answering(expr: str) -> str:
    """EXPR with every comparison returning 0 or 1 instead of filtering (the rules use
    only >, >= and ==; label matchers use = and =~)."""
    return re.sub(r"(>=|==|>)", r"\1 bool", expr)


def panel_queries() -> dict[str, str]:
    with open(DASHBOARD) as file:
        board = json.load(file)
    queries = {}
    for panel in board["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
                expr = expr.replace(name, GRAFANA_VARIABLES[name])
            queries[f"{panel['title']} / {target['legendFormat']}"] = expr
    return queries


def test_prometheus_scrapes_the_storm_and_every_alert_and_panel_query_answers(
    portal, prometheus, tmp_path
):
    wait_for(lambda: value(prometheus, 'up{job="medbay"}') == 1, "the first scrape")
    play_storm(portal)
    wait_for(
        lambda: (
            (value(prometheus, "sum(medbay_fault_to_job_running_seconds_count)") or 0) >= ADMITTED
        ),
        "jobs requeued by the storm's runs to run again",
    )
    time.sleep(3)  # a few more scrapes: rate() needs two samples after the change

    for alert, expr in alert_expressions().items():
        query(prometheus, expr)  # valid PromQL, evaluated by the server
        # An alert's expression returns series only while it fires; with each comparison
        # made a `bool` one it returns them firing or not (1 or 0), so it must return some.
        assert query(prometheus, answering(expr))["result"], f"{alert}: no series"
        for name in set(re.findall(r"\bmedbay_[a-z_]+", expr)):
            assert query(prometheus, name)["result"], f"{alert}: no series for {name}"
    for title, expr in panel_queries().items():
        assert query(prometheus, expr)["result"], f"panel {title}: no series for {expr}"

    figures = {}
    for family, key in (
        ("medbay_fault_to_out_of_service_seconds", "out_of_service"),
        ("medbay_fault_to_job_running_seconds", "running_again"),
        ("medbay_incident_to_decision_seconds", "decided"),
    ):
        for quantile in (0.5, 0.95):
            expr = f"histogram_quantile({quantile}, sum by (le) ({family}_bucket))"
            figures[f"{key}_p{int(quantile * 100)}_s"] = value(prometheus, expr)
        figures[f"{key}_count"] = value(prometheus, f"sum({family}_count)")
        figures[f"{key}_mean_s"] = value(prometheus, f"sum({family}_sum) / sum({family}_count)")
    figures["firing"] = sorted(
        {a["labels"]["alertname"] for a in _get(f"{prometheus}/api/v1/alerts")["data"]["alerts"]}
    )
    print("PROMETHEUS-FIGURES " + json.dumps(figures))
    Path("test-artifacts").mkdir(exist_ok=True)
    Path("test-artifacts/prometheus-storm.json").write_text(json.dumps(figures, indent=2))
    assert figures["out_of_service_count"] >= ADMITTED
    assert figures["decided_count"] == len(STORM_NODES)
    assert 0 <= figures["out_of_service_p50_s"] <= figures["out_of_service_p95_s"]
    assert 0 <= figures["running_again_p50_s"] <= figures["running_again_p95_s"]
