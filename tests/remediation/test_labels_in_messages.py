"""Messages name actions and statuses as people read them, never by their keys (#30 item 6)."""

from __future__ import annotations

import pytest

from clusters.models import Node
from remediation.models import Remediation, action_words, status_words
from remediation.services import NodeBusy

pytestmark = pytest.mark.django_db


def test_actions_and_statuses_read_as_words_mid_sentence():
    assert action_words("return_to_service") == "return to service"
    assert action_words("reset_gpu") == "reset GPU"
    assert action_words("to_training") == "move to training"
    assert action_words(None) == "nothing"
    assert status_words("awaiting_approval") == "awaiting approval"


def test_a_busy_node_names_its_run_in_words(cluster):
    node = Node.objects.create(cluster=cluster, name="gpu-03", gpu_count=8)
    run = Remediation.objects.create(
        node=node, action="return_to_service", trigger="admin", status="awaiting_approval"
    )

    message = str(NodeBusy(run))

    assert f"run {run.pk} (return to service, awaiting approval)" in message
    assert "return_to_service" not in message and "awaiting_approval" not in message


def test_starting_a_run_from_the_node_page_says_what_it_does_in_words(
    client, admin_user, sim, synced
):
    client.force_login(admin_user)

    response = client.post("/nodes/gpu-01/actions/to_inference/", {"reason": "demand"}, follow=True)

    page = response.content.decode()
    assert "started: move to inference on gpu-01." in page
    assert "to_inference on gpu-01" not in page


def test_the_node_page_and_the_boards_problem_list_name_the_action_in_words(
    client, admin_user, sim, synced
):
    sim.drain_node("gpu-03", "medbay: back to service [run 9]")
    synced()
    Node.objects.filter(name="gpu-03").update(
        active_remediation="return_to_service", held_by="", fleet_held_by=""
    )
    client.force_login(admin_user)

    node_page = client.get("/nodes/gpu-03/", follow=True).content.decode()
    board = client.get("/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="fleet-problems")

    assert "Medbay (Return to service)" in node_page
    assert "(Return to service)" in board.content.decode()
