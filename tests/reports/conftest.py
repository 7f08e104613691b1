"""Hand-built histories with known answers, and clients for each role."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

DAY = datetime(2026, 1, 1, tzinfo=UTC)
RANGE = {"start": "2026-01-01", "end": "2026-01-01"}


def at(hours: float) -> datetime:
    return DAY + timedelta(hours=hours)


class History:
    """Builds nodes, jobs and their history rows in one cluster directly, as the sync would."""

    def __init__(self, cluster_name: str) -> None:
        from clusters.models import Cluster, NodePool, Partition

        self.cluster = Cluster.objects.create(name=cluster_name)
        train = Partition.objects.create(cluster=self.cluster, name="train")
        self.pool = NodePool.objects.create(
            cluster=self.cluster, name="training", kind="training", partition=train
        )

    def node(self, name, changes, gpus=8):
        from clusters.models import Node, NodeStateChange

        node = Node.objects.create(
            cluster=self.cluster, name=name, gpu_count=gpus, pool=self.pool,
            partition_names="train",
        )  # fmt: skip
        NodeStateChange.objects.bulk_create(
            NodeStateChange(node=node, to_status=status, at=at(hour)) for hour, status in changes
        )
        return node

    def job(self, slurm_id, gpus, changes, **fields):
        from jobs.models import Job, JobStateChange

        fields.setdefault("account", "llm")
        fields.setdefault("user", "alice")
        job = Job.objects.create(
            cluster=self.cluster, slurm_id=slurm_id, gpus=gpus, partition="train", **fields
        )
        rows, previous = [], ""
        for hour, state, restarts in (c if len(c) == 3 else (*c, 0) for c in changes):
            rows.append(
                JobStateChange(
                    job=job, from_state=previous, to_state=state, at=at(hour),
                    restart_count=restarts,
                )
            )  # fmt: skip
            previous = state
        JobStateChange.objects.bulk_create(rows)
        return job


@pytest.fixture
def history(db):
    """Builds nodes, jobs and their history rows directly, as the sync would have."""
    return History("hist")


@pytest.fixture
def history_of(db):
    """History in a cluster of its own: `history_of("west")`."""
    return History


@pytest.fixture
def manager_client(manager):
    client = Client()
    client.force_login(manager)
    return client


@pytest.fixture
def admin_client(admin_user):
    client = Client()
    client.force_login(admin_user)
    return client
