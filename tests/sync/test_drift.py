"""Partition drift: a controller restart that reverts Medbay's pool moves is
flagged on the board and, when the spare-pool driver offers it, re-applied."""

import sys
import types

import pytest
from django.test import Client

from clusters import drift
from clusters.drift import REAPPLY_MODULE
from clusters.models import Cluster, Node, NodeStatus
from sync.cycle import sync_once
from tests.conftest import PASSWORD

from .fakes import SimWithSlurmConf

REVERTED = {
    "spare": {"missing": [], "unexpected": ["gpu-06"]},
    "train": {"missing": ["gpu-06"], "unexpected": []},
}


@pytest.fixture
def slurm(sim, cluster):
    backend = SimWithSlurmConf(sim)
    sync_once(cluster, backend)
    return backend


@pytest.fixture
def hook(monkeypatch):
    """A stand-in spare-pool driver that re-applies the membership Medbay recorded."""
    calls = []

    def reapply_pools(cluster, backend):
        calls.append(cluster.name)
        members = {}
        for node in Node.objects.filter(cluster=cluster):
            for partition in filter(None, node.partition_names.split(",")):
                members.setdefault(partition, []).append(node.name)
        for partition, nodes in members.items():
            backend.set_partition_nodes(partition, nodes)

    module = types.ModuleType(REAPPLY_MODULE)
    module.reapply_pools = reapply_pools
    monkeypatch.setitem(sys.modules, REAPPLY_MODULE, module)
    return calls


def drift_of(cluster) -> dict:
    return Cluster.objects.get(pk=cluster.pk).partition_drift


def board_html(researcher) -> str:
    client = Client()
    client.login(username=researcher.username, password=PASSWORD)
    return client.get("/").content.decode()


def test_a_deliberate_runtime_move_is_followed_and_not_flagged(slurm, cluster):
    slurm.move("gpu-06", "spare", "train")
    result = sync_once(cluster, slurm)
    assert result.partition_drift == {} and drift_of(cluster) == {}
    assert Node.objects.get(name="gpu-06").pool.kind == "training"


def test_a_restart_that_reverts_a_move_is_flagged_until_slurm_matches_again(
    slurm, cluster, researcher, settings
):
    settings.MEDBAY_REAPPLY_POOLS = False
    slurm.move("gpu-06", "spare", "train")
    sync_once(cluster, slurm)
    slurm.restart_controller()
    assert sync_once(cluster, slurm).partition_drift == REVERTED
    # The board tells the truth (the node is a spare again) and warns about it.
    assert Node.objects.get(name="gpu-06").status == NodeStatus.SPARE
    assert "Partition drift" in board_html(researcher)
    assert "train lacks gpu-06" in board_html(researcher)
    sync_once(cluster, slurm)
    assert drift_of(cluster) == REVERTED
    slurm.move("gpu-06", "spare", "train")
    sync_once(cluster, slurm)
    assert drift_of(cluster) == {}
    assert "Partition drift" not in board_html(researcher)


def test_a_deliberate_change_to_a_reverted_partition_becomes_medbays_record(
    slurm, cluster, settings
):
    settings.MEDBAY_REAPPLY_POOLS = False
    slurm.move("gpu-06", "spare", "train")
    sync_once(cluster, slurm)
    slurm.restart_controller()
    sync_once(cluster, slurm)
    slurm.move("gpu-04", "train", "infer")
    sync_once(cluster, slurm)
    assert drift_of(cluster) == {"spare": REVERTED["spare"]}
    assert Node.objects.get(name="gpu-04").pool.kind == "inference"


def test_the_reapply_hook_restores_the_move_before_the_board_flaps(slurm, cluster, hook):
    slurm.move("gpu-06", "spare", "train")
    sync_once(cluster, slurm)
    slurm.restart_controller()
    result = sync_once(cluster, slurm)
    assert hook == ["test"]
    assert result.reapplied is True and result.partition_drift == {}
    node = Node.objects.get(name="gpu-06")
    assert (node.pool.kind, node.partition_names) == ("training", "train")
    assert not node.state_changes.filter(to_status=NodeStatus.SPARE, from_status="idle").exists()
    assert {p.name: p.nodes for p in slurm.partitions()}["spare"] == ("gpu-07",)


def test_with_reapply_disabled_the_hook_is_not_called(slurm, cluster, hook, settings):
    settings.MEDBAY_REAPPLY_POOLS = False
    slurm.move("gpu-06", "spare", "train")
    sync_once(cluster, slurm)
    slurm.restart_controller()
    assert sync_once(cluster, slurm).reapplied is False
    assert hook == []
    assert drift_of(cluster) == REVERTED


def test_a_backend_without_slurm_conf_never_reports_drift(sim, cluster):
    sync_once(cluster, sim)
    sim.set_partition_nodes("spare", ["gpu-07"])
    assert sync_once(cluster, sim).partition_drift == {}


def test_a_backend_that_cannot_read_slurm_conf_flags_no_drift(sim, cluster, settings):
    settings.MEDBAY_REAPPLY_POOLS = False
    slurm_like = SimWithSlurmConf(sim)  # only to move nodes; the sync reads the bare simulator
    sync_once(cluster, sim)
    slurm_like.move("gpu-06", "spare", "train")
    sync_once(cluster, sim)
    slurm_like.restart_controller()  # back to the start, as a restart would revert it

    result = sync_once(cluster, sim)

    assert drift.configured_membership(sim) is None and drift.controller_generation(sim) is None
    assert result.partition_drift == {} and drift_of(cluster) == {}
    assert Node.objects.get(name="gpu-06").status == NodeStatus.SPARE  # followed, not flagged
