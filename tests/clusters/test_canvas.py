"""The fleet view of a large cluster: chosen by size, its payload, deltas, counts, table."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from clusters import canvas
from clusters.backends.simulated import SimulatedCluster
from clusters.board import BoardFilter, board_rows, count_gpus
from sync.cycle import apply_snapshot
from tests.conftest import PASSWORD


@pytest.fixture
def large(settings, synced):
    """The seven-node test cluster counts as large: above four nodes, the fleet view."""
    settings.MEDBAY_BOARD_TILES_MAX = 4


def login(client, user):
    assert client.login(username=user.username, password=PASSWORD)


def test_a_large_cluster_gets_the_fleet_view_and_a_small_one_the_cards(client, researcher, large):
    login(client, researcher)
    html = client.get(reverse("board")).content.decode()
    assert 'id="fleet"' in html and 'class="tile' not in html
    assert 'data-source="/board/fleet.json?"' in html
    small = client.get(reverse("board"), {"partition": "train"}).content.decode()
    assert small.count('class="tile ') == 4 and 'id="fleet"' not in small


def test_the_payload_has_every_gpu_as_a_letter_grouped_by_partition(
    client, researcher, sim, cluster, large
):
    from demo.simulation import record_gpu_fault

    record_gpu_fault(cluster, sim.inject_xid("gpu-03", 3, 79))
    login(client, researcher)
    payload = client.get(reverse("fleet-data")).json()
    groups = {group["name"]: group for group in payload["groups"]}
    assert list(groups) == ["infer", "spare", "train"]
    assert groups["train"]["nodes"] == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    assert groups["train"]["gpus"][2] == "hhhfhhhh"
    assert groups["spare"]["gpus"] == ["hhhhhhhh"] * 2
    assert payload["states"]["f"] == "failed"
    only = client.get(reverse("fleet-data"), {"partition": "infer"}).json()
    assert [g["name"] for g in only["groups"]] == ["infer"]


def test_the_payload_needs_a_login(client, large):
    assert client.get(reverse("fleet-data")).status_code == 302


def test_a_drained_node_is_out_of_service_and_one_in_remediation_is_purple(sim, synced, large):
    from clusters.models import Node

    sim.drain_node("gpu-01", "admin: cabling")
    synced()
    Node.objects.filter(name="gpu-02").update(active_remediation="replace")
    groups = {g["name"]: g for g in canvas.payload(BoardFilter())["groups"]}
    assert groups["train"]["gpus"][:2] == ["oooooooo", "rrrrrrrr"]


def test_the_counts_grouped_in_the_database_equal_the_boards(sim, cluster, synced, large):
    from clusters.models import Node
    from demo.simulation import record_gpu_fault

    record_gpu_fault(cluster, sim.inject_xid("gpu-03", 3, 79))
    record_gpu_fault(cluster, sim.inject_xid("gpu-04", 1, 31))
    sim.drain_node("gpu-05", "admin")
    synced()
    Node.objects.filter(name="gpu-03").update(active_remediation="replace")
    for node_filter in (BoardFilter(), BoardFilter(partition="train"), BoardFilter(pool="spare")):
        assert canvas.counts(node_filter) == count_gpus(*board_rows(node_filter))


def test_a_change_is_sent_to_fleet_pages_as_the_nodes_new_letters(
    sim, cluster, synced, large, monkeypatch, django_capture_on_commit_callbacks
):
    from core import live
    from demo.simulation import record_gpu_fault

    sent = []
    monkeypatch.setattr(live, "send_html", lambda group, html: sent.append((group, html)))
    with django_capture_on_commit_callbacks(execute=True):
        record_gpu_fault(cluster, sim.inject_xid("gpu-02", 6, 79))
    deltas = [json.loads(html) for group, html in sent if group == live.FLEET_GROUP]
    # The GPU fails, then the XID 79 policy's replacement takes the node in hand.
    assert deltas == [
        {"fleet": [["test", "gpu-02", "hhhhhhfh"]]},
        {"fleet": [["test", "gpu-02", "rrrrrrfr"]]},
    ]


def test_the_table_lists_the_nodes_that_are_not_healthy(client, researcher, sim, cluster, large):
    from demo.simulation import record_gpu_fault

    record_gpu_fault(cluster, sim.inject_xid("gpu-04", 1, 31))
    login(client, researcher)
    html = client.get(reverse("board")).content.decode()
    assert 'id="problem-gpu-04"' in html and "GPU 1 degraded" in html
    assert 'id="problem-gpu-01"' not in html
    region = client.get(reverse("board"), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="fleet-problems")
    assert region.content.decode().lstrip().startswith('<section id="fleet-problems"')


def test_the_table_stops_at_its_limit_and_says_how_many_more(
    sim, cluster, synced, large, monkeypatch
):
    from clusters.models import Node

    monkeypatch.setattr(canvas, "PROBLEM_ROWS", 2)
    for name in ("gpu-01", "gpu-02", "gpu-03"):
        sim.drain_node(name, "admin")
    synced()
    rows, total = canvas.problem_rows(BoardFilter())
    assert ([row["name"] for row in rows], total) == (["gpu-01", "gpu-02"], 3)
    assert Node.objects.count() == 7


def test_the_fleet_page_and_its_payload_take_as_many_queries_for_more_nodes(
    client, researcher, cluster, settings
):
    settings.MEDBAY_BOARD_TILES_MAX = 4
    login(client, researcher)

    def queries(nodes: int) -> tuple[int, int]:
        sim = SimulatedCluster.standard(train=nodes, infer=2, spare=2, seed=1)
        apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())
        with CaptureQueriesContext(connection) as page:
            assert client.get(reverse("board")).status_code == 200
        with CaptureQueriesContext(connection) as data:
            assert client.get(reverse("fleet-data")).status_code == 200
        return len(page), len(data)

    assert queries(8) == queries(64)
