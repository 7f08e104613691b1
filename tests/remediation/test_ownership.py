"""Medbay never undoes another party's drain: it keeps their reason visible while it
works on the node, gives the node back to them and says so when the run ends."""

from __future__ import annotations

import pytest

from clusters.models import Node, Partition
from remediation.models import Action, Trigger
from remediation.services import create_run
from remediation.transitions import RunStatus
from tests.remediation.conftest import drive

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_drained(sim, synced):
    Partition.objects.update(checkpoint_grace_s=0)
    sim.drain_node("gpu-03", "maint PSU swap")
    synced()
    return Node.objects.get(name="gpu-03")


def info(sim, name):
    return {node.name: node for node in sim.nodes()}[name]


def start(node, action, **context):
    return create_run(
        node, action, trigger=Trigger.HEALTH_EVENT, reason="XID 48 GPU 2 double bit ECC",
        context={"gpu": 2, "verify_after_s": 0, **context},
    )  # fmt: skip


def test_the_sync_shows_who_holds_a_node_an_admin_drained(admin_drained, sim):
    assert admin_drained.reason == "maint PSU swap"
    assert admin_drained.reason_set_by == "root"
    assert admin_drained.held_by.startswith("maint PSU swap (root, ")


def test_a_reset_run_keeps_the_admins_reason_visible_and_leaves_the_node_drained(
    admin_drained, sim, synced, engine
):
    run = start(admin_drained, Action.RESET_GPU)
    engine.advance(engine.claim())  # the drain: Medbay's reason with the admin's appended
    reason = info(sim, "gpu-03").reason
    assert reason.startswith(f"medbay: XID 48 GPU 2 double bit ECC [run {run.pk}] | held: ")
    assert "maint PSU swap (root, " in reason

    drive(engine, sim, synced)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    gpu_03 = info(sim, "gpu-03")
    assert "drain" in gpu_03.flags
    assert gpu_03.reason == "maint PSU swap"
    assert run.message.startswith("all steps done; left drained for: maint PSU swap (root, ")
    resume = run.steps.get(name="resume")
    assert "did not resume gpu-03; left drained for: maint PSU swap" in resume.message


def test_an_admin_who_drains_again_during_the_run_keeps_the_node(
    admin_drained, sim, synced, engine
):
    sim.resume_node("gpu-03")
    synced()
    run = start(Node.objects.get(name="gpu-03"), Action.RESET_GPU)
    engine.advance(engine.claim())  # the drain
    sim.drain_node("gpu-03", "firmware update")

    drive(engine, sim, synced)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert info(sim, "gpu-03").reason == "firmware update"
    assert "left drained for: firmware update" in run.message


def test_a_node_only_medbay_drained_is_resumed(sim, synced, engine):
    Partition.objects.update(checkpoint_grace_s=0)
    run = start(Node.objects.get(name="gpu-03"), Action.RESET_GPU)

    drive(engine, sim, synced)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.message == "all steps done"
    assert not info(sim, "gpu-03").flags & {"drain", "fail"}


def test_an_uncordon_does_not_resume_a_node_an_admin_holds(admin_drained, sim, synced, engine):
    run = create_run(admin_drained, Action.UNCORDON, trigger=Trigger.ADMIN, reason="back")

    drive(engine, sim, synced)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert info(sim, "gpu-03").reason == "maint PSU swap"
    assert "left drained for: maint PSU swap (root, " in run.message


def test_a_reboot_of_a_node_another_party_holds_asks_an_admin(admin_drained, sim, synced, engine):
    run = start(admin_drained, Action.REBOOT)

    drive(engine, sim, synced)

    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert "also held by maint PSU swap (root, " in run.message
    assert "reboot_requested" not in info(sim, "gpu-03").flags


def test_a_healthcheck_drain_is_held_by_healthcheckprogram(sim, synced):
    sim.drain_node("gpu-04", "medbay: gpu_count: 7 GPUs, expected 8")
    synced()

    held = Node.objects.get(name="gpu-04").held_by
    assert held.startswith("medbay: gpu_count: 7 GPUs, expected 8 (HealthCheckProgram, ")
