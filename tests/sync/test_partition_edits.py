"""An admin's partition edit to a node Medbay moved is shown and adopted after an
admin confirms, never fought; after a slurmctld restart Medbay re-applies only its
own moves."""

import pytest
from django.test import Client

from clusters.backends.slurm_spares import SlurmSparesFleet
from clusters.models import Cluster, Node
from remediation.steps.records import record_membership
from sync.cycle import sync_once

from .fakes import SimWithSlurmConf

pytestmark = pytest.mark.django_db


@pytest.fixture
def slurm(sim, cluster):
    backend = SimWithSlurmConf(sim)
    sync_once(cluster, backend)
    # Medbay's replace: spare gpu-06 takes gpu-02's place in train.
    SlurmSparesFleet(backend).replace("gpu-02", "medbay: Action:Replace [run 1]")
    record_membership(cluster.pk, backend, ["gpu-02", "gpu-06"])
    sync_once(cluster, backend)
    return backend


def members(backend):
    return {p.name: sorted(p.nodes) for p in backend.partitions()}


def put_back_by_hand(backend):
    """What an admin does with scontrol: partitions as slurm.conf has them."""
    for name, nodes in backend.conf.items():
        backend.set_partition_nodes(name, nodes)


def test_an_admins_edit_back_to_slurm_conf_is_not_reverted(slurm, cluster):
    put_back_by_hand(slurm)

    result = sync_once(cluster, slurm)
    sync_once(cluster, slurm)

    assert result.reapplied is False and result.partition_drift == {}
    assert "gpu-02" in members(slurm)["train"] and "gpu-06" in members(slurm)["spare"]
    edits = Cluster.objects.get(pk=cluster.pk).partition_edits
    assert edits["gpu-02"]["slurm"] == ["train"] and edits["gpu-02"]["medbay"] == []
    assert edits["gpu-06"] == {**edits["gpu-06"], "slurm": ["spare"], "medbay": ["train"]}


def test_the_board_shows_the_edit_and_an_admin_adopts_it(slurm, cluster, admin_user):
    put_back_by_hand(slurm)
    sync_once(cluster, slurm)
    client = Client()
    client.force_login(admin_user)

    assert "Partition edits outside Medbay" in client.get("/").content.decode()
    assert "gpu-02" in client.get("/partitions/edits/").content.decode()
    client.post("/partitions/edits/", {"node": ["gpu-02", "gpu-06"]})

    cluster.refresh_from_db()
    assert cluster.partition_edits == {}
    assert Node.objects.get(name="gpu-02").medbay_partitions is None
    change = Node.objects.get(name="gpu-02").state_changes.first()
    assert change.reason.startswith("partition edit adopted: train")
    assert change.actor == "admin"
    # A later restart leaves adopted nodes as slurm.conf says.
    slurm.restart_controller()
    assert sync_once(cluster, slurm).partition_drift == {}


def test_a_restart_still_gets_medbays_own_moves_re_applied(slurm, cluster, settings):
    settings.MEDBAY_REAPPLY_POOLS = True
    slurm.restart_controller()

    result = sync_once(cluster, slurm)

    assert result.reapplied is True
    assert "gpu-06" in members(slurm)["train"] and "gpu-02" not in members(slurm)["train"]
    assert Cluster.objects.get(pk=cluster.pk).partition_edits == {}
