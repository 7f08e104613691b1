"""After a replace: failed -> in repair (with a note) -> return to service, which
validates the node and puts it back in the spare pool or the pool it left."""

from __future__ import annotations

import pytest

from clusters.backends.slurm_spares import SlurmSparesFleet
from clusters.models import Gpu, GpuHealth, Node, NodeStatus, Partition
from remediation import actions
from remediation.engine import Engine
from remediation.models import Action, Trigger
from remediation.services import create_run
from remediation.transitions import RunStatus
from tests.remediation.conftest import drive

pytestmark = pytest.mark.django_db


@pytest.fixture
def replaced(sim, synced, admin_user):
    """gpu-02 replaced by spare gpu-06 (partitions moved as on Slurm), GPU 3 failed."""
    Partition.objects.update(checkpoint_grace_s=0)
    engine = Engine("test-worker", backend=sim, fleet=SlurmSparesFleet(sim))
    run = create_run(
        Node.objects.get(name="gpu-02"), Action.REPLACE, trigger=Trigger.ADMIN,
        reason="GPU 3 fell off the bus", requested_by=admin_user,
    )  # fmt: skip
    drive(engine, sim, synced)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    Gpu.objects.filter(node__name="gpu-02", index=3).update(health=GpuHealth.FAILED)
    sim.inject_xid("gpu-02", 3, 79)  # what the hardware still says until it is repaired
    node = Node.objects.get(name="gpu-02")
    assert (node.status, node.partition_names) == (NodeStatus.FAIL, "")
    return engine


def members(sim):
    return {info.name: sorted(info.nodes) for info in sim.partitions()}


def test_a_failed_node_goes_to_repair_with_a_note_in_its_history(replaced, admin_user, synced):
    node = actions.mark_in_repair(Node.objects.get(name="gpu-02"), user=admin_user, note="RMA 4711")

    assert node.status == NodeStatus.IN_REPAIR and node.repair_note == "RMA 4711"
    change = node.state_changes.first()
    assert (change.from_status, change.to_status, change.actor) == ("fail", "in_repair", "admin")
    synced()
    assert Node.objects.get(name="gpu-02").status == NodeStatus.IN_REPAIR


def test_return_to_service_of_a_node_with_failed_gpus_asks_to_confirm(replaced, admin_user):
    node = Node.objects.get(name="gpu-02")
    assert actions.impact_preview(node, Action.RETURN_TO_SERVICE).failed_gpus == [3]
    with pytest.raises(actions.ActionError) as refused:
        actions.request_action(node, Action.RETURN_TO_SERVICE, user=admin_user, reason="fixed")
    assert refused.value.field == "confirm"
    assert "failed GPU 3" in refused.value.message


def test_a_repaired_node_returns_to_the_spare_pool_through_the_engine(
    replaced, sim, synced, admin_user
):
    node = actions.mark_in_repair(Node.objects.get(name="gpu-02"), user=admin_user, note="RMA")
    sim.repair_gpu("gpu-02", 3)
    run = actions.request_action(
        node, Action.RETURN_TO_SERVICE, user=admin_user, reason="PSU swapped", confirm=True
    )
    assert run.planned_steps == ["validate", "return_pool", "resume"]

    drive(replaced, sim, synced)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert "gpu-02" in members(sim)["spare"]
    gpu_02 = {info.name: info for info in sim.nodes()}["gpu-02"]
    assert not gpu_02.flags & {"drain", "fail"}
    node.refresh_from_db()
    assert node.status == NodeStatus.SPARE and node.in_repair_since is None
    assert node.medbay_partitions == ["spare"]
    assert not node.gpus.exclude(health=GpuHealth.HEALTHY).exists()


def test_a_repaired_node_can_go_back_to_the_pool_it_left(replaced, sim, synced, admin_user):
    sim.repair_gpu("gpu-02", 3)
    run = actions.request_action(
        Node.objects.get(name="gpu-02"), Action.RETURN_TO_SERVICE, user=admin_user,
        reason="fixed", confirm=True, pool="original",
    )  # fmt: skip
    assert run.context["pool"] == "training"

    drive(replaced, sim, synced)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert "gpu-02" in members(sim)["train"]


def test_a_node_that_fails_validation_does_not_return(replaced, sim, synced, admin_user):
    run = actions.request_action(
        Node.objects.get(name="gpu-02"), Action.RETURN_TO_SERVICE, user=admin_user,
        reason="fixed?", confirm=True,
    )  # fmt: skip
    replaced.run_once()

    run.refresh_from_db()
    assert run.status == RunStatus.WAITING and run.step_name == "validate"
    assert "gpu-02" not in members(sim)["spare"]


def test_an_uncordon_of_a_node_with_failed_gpus_warns_and_asks_to_confirm(sim, synced, admin_user):
    sim.drain_node("gpu-01", "medbay: XID 48 GPU 3 [run 99]")
    synced()
    Gpu.objects.filter(node__name="gpu-01", index__in=[3, 5]).update(health=GpuHealth.FAILED)
    node = Node.objects.get(name="gpu-01")

    assert actions.impact_preview(node, Action.UNCORDON).failed_gpus == [3, 5]
    with pytest.raises(actions.ActionError, match="failed GPUs 3, 5"):
        actions.request_action(node, Action.UNCORDON, user=admin_user, reason="back")
    run = actions.request_action(
        node, Action.UNCORDON, user=admin_user, reason="back", confirm=True
    )
    assert run.status == RunStatus.RUNNING
