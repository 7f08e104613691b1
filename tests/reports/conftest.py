"""Hand-built histories with known answers, and clients for each role."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

DAY = datetime(2026, 1, 1, tzinfo=UTC)
RANGE = {"start": "2026-01-01", "end": "2026-01-01"}


def at(hours: float) -> datetime:
    return DAY + timedelta(hours=hours)


@pytest.fixture
def history(db):
    """Builds nodes, jobs and their history rows directly, as the sync would have."""
    from clusters.models import Cluster, Node, NodePool, NodeStateChange, Partition
    from jobs.models import Job, JobStateChange

    cluster = Cluster.objects.create(name="hist")
    train = Partition.objects.create(cluster=cluster, name="train")
    pool = NodePool.objects.create(
        cluster=cluster, name="training", kind="training", partition=train
    )

    class History:
        def node(self, name, changes, gpus=8):
            node = Node.objects.create(
                cluster=cluster, name=name, gpu_count=gpus, pool=pool, partition_names="train"
            )
            NodeStateChange.objects.bulk_create(
                NodeStateChange(node=node, to_status=status, at=at(hour))
                for hour, status in changes
            )
            return node

        def job(self, slurm_id, gpus, changes, **fields):
            fields.setdefault("account", "llm")
            fields.setdefault("user", "alice")
            job = Job.objects.create(
                cluster=cluster, slurm_id=slurm_id, gpus=gpus, partition="train", **fields
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

    return History()


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
