"""Lists of all clusters with two clusters that share node names (issue 32): the fleet
view, the event feed and the approval queue follow the cluster shown, and their live
updates reach only the pages that show it."""

from __future__ import annotations

import json

import pytest

from clusters import canvas
from clusters.board import BoardFilter
from core import live
from tests.portal import test_many_clusters_pages as pages

logged_in = pages.logged_in
second = pages.second  # the fixture: a second cluster with the first's node names


@pytest.fixture
def large(settings):
    """Seven nodes a cluster count as large: the board is the fleet view."""
    settings.MEDBAY_BOARD_TILES_MAX = 4


def test_a_fleet_of_all_clusters_draws_each_clusters_nodes_in_groups_of_their_own(second, large):
    groups = canvas.payload(BoardFilter())["groups"]
    train = [(g["cluster"], g["nodes"][:2]) for g in groups if g["name"] == "train"]
    assert train == [("second", ["gpu-01", "gpu-02"]), ("test", ["gpu-01", "gpu-02"])]


def test_a_change_on_one_cluster_reaches_fleet_pages_named_by_its_cluster(
    sim, second, large, monkeypatch, django_capture_on_commit_callbacks
):
    sent = []
    monkeypatch.setattr(live, "send_html", lambda group, html: sent.append((group, html)))
    second.backend_sim.drain_node("gpu-02", "only on second")
    with django_capture_on_commit_callbacks(execute=True):
        second.sync()
    everywhere = [json.loads(html) for group, html in sent if group == live.FLEET_GROUP]
    assert everywhere == [{"fleet": [["second", "gpu-02", "oooooooo"]]}]
    on_second = [html for group, html in sent if group == f"fleet.{second.pk}"]
    assert len(on_second) == 1
    others = [g for g, _ in sent if g.startswith("fleet.") and g != f"fleet.{second.pk}"]
    assert others == []


def test_the_fleet_page_links_nodes_at_their_cluster_address(researcher, second, large):
    page = logged_in(researcher).get("/?cluster=all").content.decode()
    assert 'data-node-url="/nodes/CLUSTER/NODE/"' in page


def test_a_fleet_of_all_clusters_names_each_unhealthy_nodes_cluster(
    researcher, sim, synced, second, large
):
    sim.drain_node("gpu-03", "on test")
    second.backend_sim.drain_node("gpu-03", "on second")
    second.sync()
    synced()
    client = logged_in(researcher)
    page = client.get("/?cluster=all").content.decode()
    assert 'id="problem-second-gpu-03"' in page and 'id="problem-test-gpu-03"' in page
    assert '<th scope="col">Cluster</th>' in page
    one = client.get("/?cluster=second").content.decode()
    assert 'id="problem-gpu-03"' in one and '<th scope="col">Cluster</th>' not in one
