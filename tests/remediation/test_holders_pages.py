"""The board and the node page show who holds a node; admins send failed nodes to repair."""

from __future__ import annotations

import pytest

from clusters.models import Node, NodeStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_drained(sim, synced):
    sim.drain_node("gpu-03", "maint PSU swap")
    synced()


def test_the_board_tile_says_who_holds_the_node(admin_drained, web, researcher):
    page = web(researcher).get("/").content.decode()

    tile = page[page.index('id="node-gpu-03"') :].split("</a>", 1)[0]
    assert 'data-held-by="maint PSU swap (root, ' in tile
    assert 'title="held by maint PSU swap (root, ' in tile


def test_the_node_page_shows_the_holder_and_who_set_the_reason(admin_drained, web, admin_user):
    page = web(admin_user).get("/nodes/gpu-03/", follow=True).content.decode()

    assert "Held out of service by" in page
    assert "maint PSU swap (root, " in page
    assert "Reason set by</dt><dd>root" in page
    assert "Mark in repair" in page


def test_an_admin_marks_a_drained_node_in_repair_from_its_page(admin_drained, web, admin_user):
    response = web(admin_user).post("/nodes/gpu-03/repair/", {"note": "ticket HW-12"})

    assert response.status_code == 302
    node = Node.objects.get(name="gpu-03")
    assert (node.status, node.repair_note) == (NodeStatus.IN_REPAIR, "ticket HW-12")
    page = web(admin_user).get("/nodes/gpu-03/", follow=True).content.decode()
    assert "In repair since" in page and "ticket HW-12" in page


def test_a_node_in_service_cannot_go_to_repair(synced, web, admin_user):
    web(admin_user).post("/nodes/gpu-04/repair/", {"note": "why not"})

    assert Node.objects.get(name="gpu-04").in_repair_since is None


def test_the_uncordon_page_warns_about_failed_gpus_and_offers_a_confirmation(
    sim, synced, web, admin_user
):
    from clusters.models import Gpu, GpuHealth

    sim.drain_node("gpu-01", "medbay: XID 48 [run 5]")
    synced()
    Gpu.objects.filter(node__name="gpu-01", index=3).update(health=GpuHealth.FAILED)
    client = web(admin_user)

    page = client.get("/nodes/gpu-01/actions/uncordon/").content.decode()
    assert "has failed GPU 3" in page and 'name="confirm"' in page
    refused = client.post("/nodes/gpu-01/actions/uncordon/", {"reason": "back"})
    assert refused.status_code == 400
    accepted = client.post("/nodes/gpu-01/actions/uncordon/", {"reason": "back", "confirm": "on"})
    assert accepted.status_code == 302
