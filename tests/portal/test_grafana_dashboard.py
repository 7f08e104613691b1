"""deploy/grafana/medbay.json: importable as is, with the panels operators asked for.

Every panel's query is evaluated against a real Prometheus in test_prometheus_scrape.py.
"""

from __future__ import annotations

import json

from tests.portal.prometheus_tools import DASHBOARD

PANELS = {
    "Fleet GPUs by health",
    "Faults by XID",
    "Time from fault to node out of service",
    "Time from fault to job running again",
    "Runs by action and outcome",
    "Approvals waiting",
    "Spares free",
    "Breakers open",
    "Sync lag",
    "Slurm command latency p95",
}


def dashboard() -> dict:
    with open(DASHBOARD) as file:
        return json.load(file)


def test_the_dashboard_has_every_panel_asked_for():
    assert {panel["title"] for panel in dashboard()["panels"]} >= PANELS


def test_every_panel_reads_the_datasource_chosen_at_import():
    board = dashboard()
    (source,) = board["__inputs"]
    assert source["pluginId"] == "prometheus"
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == f"${{{source['name']}}}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert target["datasource"] == panel["datasource"]


def test_panels_are_numbered_once_and_the_links_find_the_dashboard_and_its_filters():
    board = dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    # The portal's links (portal/grafana.py) open /d/medbay/ with var-cluster and var-node.
    assert board["uid"] == "medbay"
    assert {variable["name"] for variable in board["templating"]["list"]} == {"cluster", "node"}
