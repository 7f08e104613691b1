"""The spare-pool fleet over any ClusterBackend (here the simulator, as Slurm stand-in)."""

import pytest

from clusters.backends.base import BackendError
from clusters.backends.slurm_spares import SlurmSparesFleet, reapply_pools
from clusters.models import Node
from remediation.steps.records import record_membership


@pytest.fixture
def fleet(sim):
    return SlurmSparesFleet(sim)


def members(sim):
    return {info.name: sorted(info.nodes) for info in sim.partitions()}


def test_spares_are_the_idle_schedulable_nodes_of_the_spare_partition(sim, fleet):
    assert fleet.spare_capacity() == ["gpu-06", "gpu-07"]
    sim.drain_node("gpu-06", "medbay-test: broken spare")
    assert fleet.spare_capacity() == ["gpu-07"]


def test_replace_moves_the_first_spare_in_and_fails_the_node_out_of_every_partition(sim, fleet):
    assert fleet.replace("gpu-02", "medbay: Action:Replace [run 7]") == "gpu-06"
    assert members(sim)["train"] == ["gpu-01", "gpu-03", "gpu-04", "gpu-06"]
    assert members(sim)["spare"] == ["gpu-07"]
    gpu_02 = {info.name: info for info in sim.nodes()}["gpu-02"]
    assert ("fail" in gpu_02.flags, gpu_02.partitions, gpu_02.reason) == (
        True,
        (),
        "medbay: Action:Replace [run 7]",
    )


def test_replace_without_a_free_spare_is_a_permanent_error(sim, fleet):
    fleet.replace("gpu-01", "medbay: Action:Replace [run 1]")
    fleet.replace("gpu-02", "medbay: Action:Replace [run 2]")
    with pytest.raises(BackendError) as raised:
        fleet.replace("gpu-03", "medbay: Action:Replace [run 3]")
    assert raised.value.permanent and "spare" in raised.value.message


def test_moving_between_pools_moves_between_partitions(sim, fleet):
    fleet.move_to_pool("gpu-04", "inference")
    assert "gpu-04" in members(sim)["infer"] and "gpu-04" not in members(sim)["train"]
    with pytest.raises(BackendError):
        fleet.move_to_pool("gpu-04", "nowhere")


def test_cordon_drains_with_the_reason_and_uncordon_resumes(sim, fleet):
    fleet.cordon("gpu-03", "medbay: cordoned [run 4]")
    assert {i.name: i for i in sim.nodes()}["gpu-03"].reason == "medbay: cordoned [run 4]"
    fleet.uncordon("gpu-03")
    assert not {i.name: i for i in sim.nodes()}["gpu-03"].flags


def test_reapply_pools_restores_medbays_membership_after_slurm_forgot_it(sim, synced, fleet):
    fleet.replace("gpu-02", "medbay: Action:Replace [run 9]")
    cluster = Node.objects.first().cluster
    record_membership(cluster.pk, sim, ["gpu-02", "gpu-06"])  # as the replace step does
    synced()
    assert Node.objects.get(name="gpu-06").partition_names == "train"
    # slurmctld restarted: scontrol partition changes are gone, back to slurm.conf.
    sim.set_partition_nodes("train", ["gpu-01", "gpu-02", "gpu-03", "gpu-04"])
    sim.set_partition_nodes("spare", ["gpu-06", "gpu-07"])
    changed = reapply_pools(Node.objects.first().cluster, sim)
    assert changed == ["spare", "train"]
    assert members(sim)["train"] == ["gpu-01", "gpu-03", "gpu-04", "gpu-06"]
    assert members(sim)["spare"] == ["gpu-07"]
    assert reapply_pools(Node.objects.first().cluster, sim) == []


def test_reapply_pools_leaves_alone_nodes_medbay_never_moved(sim, synced):
    sim.set_partition_nodes("infer", ["gpu-05", "gpu-04"])  # an admin's move
    sim.set_partition_nodes("train", ["gpu-01", "gpu-02", "gpu-03"])
    synced()
    sim.set_partition_nodes("train", ["gpu-01", "gpu-02", "gpu-03", "gpu-04"])
    sim.set_partition_nodes("infer", ["gpu-05"])

    assert reapply_pools(Node.objects.first().cluster, sim) == []
    assert members(sim)["train"] == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
