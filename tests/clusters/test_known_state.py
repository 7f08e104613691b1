"""The real-Slurm tests' known-state check (tests/plugins/cluster_state.py),
on a small in-memory cluster: what it undoes, and how it names what it cannot."""

from __future__ import annotations

from dataclasses import replace

import pytest

from clusters.backends.base import JobInfo, NodeInfo, PartitionInfo
from tests.plugins.cluster_state import (
    bring_to_known_state,
    departures,
    unregistered_nodes,
)

CONFIGURED = {"train": ("gpu-01", "gpu-02"), "spare": ("gpu-03",)}


class SmallCluster:
    """Three nodes as slurm.conf has them; STUCK actions are accepted and change nothing."""

    def __init__(self, *, stuck: bool = False):
        self.stuck = stuck
        self.up = True
        self.node_list = [
            NodeInfo(name, "idle", partitions=(part,))
            for part, names in CONFIGURED.items()
            for name in names
        ]
        self.job_list: list[JobInfo] = []
        self.members = {name: tuple(nodes) for name, nodes in CONFIGURED.items()}
        self.actions: list[str] = []

    def controller_up(self):
        return self.up

    def nodes(self):
        return list(self.node_list)

    def jobs(self):
        return list(self.job_list)

    def partitions(self):
        return [PartitionInfo(name, nodes) for name, nodes in self.members.items()]

    def configured_partitions(self):
        return dict(CONFIGURED)

    def cancel_job(self, job_id):
        self.actions.append(f"cancel {job_id}")
        if not self.stuck:
            self.job_list = [j for j in self.job_list if j.job_id != job_id]

    def resume_node(self, name):
        self.actions.append(f"resume {name}")
        if not self.stuck:
            self.node_list = [
                replace(n, state="idle", flags=frozenset(), reason="") if n.name == name else n
                for n in self.node_list
            ]

    def checks_holds(self):
        return []

    def set_partition_nodes(self, name, nodes):
        self.actions.append(f"partition {name}={','.join(nodes)}")
        if not self.stuck:
            self.members[name] = tuple(nodes)

    def leave_a_mess(self):
        self.node_list[1] = replace(
            self.node_list[1], flags=frozenset({"drain"}), reason="medbay: XID 79 [run 3]"
        )
        self.job_list = [JobInfo(7, "blocker", "bob", state="RUNNING", nodes=("gpu-01",))]
        self.members["train"] = ("gpu-01", "gpu-03")


def test_a_cluster_as_slurm_conf_has_it_and_idle_departs_from_nothing():
    assert departures(SmallCluster()) == []


def test_leftover_jobs_drains_and_partition_moves_are_undone_and_waited_for():
    cluster = SmallCluster()
    cluster.leave_a_mess()
    bring_to_known_state(cluster, "before a test", timeout_s=5)
    assert departures(cluster) == []
    assert cluster.actions == ["cancel 7", "resume gpu-02", "partition train=gpu-01,gpu-02"]


def test_what_cannot_be_undone_in_time_is_named_node_job_and_partition():
    cluster = SmallCluster(stuck=True)
    cluster.leave_a_mess()
    with pytest.raises(pytest.fail.Exception) as failed:
        bring_to_known_state(cluster, "after test_x", timeout_s=0)
    message = str(failed.value)
    assert "not back to its known state after test_x" in message
    assert "node gpu-02 is idle (drain), reason 'medbay: XID 79 [run 3]'" in message
    assert "job 7 (blocker, bob) is RUNNING on gpu-01" in message
    assert "partition train holds gpu-01,gpu-03, slurm.conf says gpu-01,gpu-02" in message


def test_a_stopped_controller_is_named_rather_than_read():
    cluster = SmallCluster()
    cluster.up = False
    assert departures(cluster) == ["slurmctld does not answer scontrol ping"]


def test_nodes_unknown_or_not_responding_after_a_start_are_not_registered():
    cluster = SmallCluster()
    cluster.node_list[0] = replace(cluster.node_list[0], state="unknown")
    cluster.node_list[2] = replace(cluster.node_list[2], flags=frozenset({"not_responding"}))
    assert unregistered_nodes(cluster) == ["gpu-01", "gpu-03"]
