"""Helpers for the remediation engine tests: jobs on the simulator, XIDs through ingestion."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tests.conftest import PASSWORD

TRAINING_JOB = (
    "#!/bin/bash\n#SBATCH --partition=train\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:8\nsrun train\n"
)
_event_ids = itertools.count(1)


@pytest.fixture
def engine(sim):
    from remediation.engine import Engine

    return Engine("test-worker", backend=sim, fleet=sim)


@pytest.fixture
def training_job(sim, synced):
    """A 2-node job running on gpu-01 and gpu-02, reconciled into the database."""
    from clusters.backends.base import JobSubmission

    job_id = sim.submit_job(JobSubmission(script=TRAINING_JOB, user="alice"))
    synced(timedelta(seconds=1))
    assert sim.job(job_id).nodes == ["gpu-01", "gpu-02"]
    return job_id


@pytest.fixture
def big_sim(cluster):
    """Twenty training nodes, so that a storm can hit more nodes than the breaker allows
    (10 % of the partition: 2)."""
    from clusters.backends import registry
    from clusters.backends.simulated import SimulatedCluster
    from sync.cycle import apply_snapshot

    simulator = SimulatedCluster.standard(train=20, infer=0, spare=2, seed=3)
    simulator.fault_rate_per_gpu_day = 0
    registry.use(simulator)
    apply_snapshot(cluster, simulator.partitions(), simulator.nodes(), simulator.jobs())
    yield simulator
    registry.use(None)


def ingest_xid(node_name: str, xid: int, gpu: int = 3, *, ago: timedelta = timedelta(0)):
    """Store one XID event as the agent would send it; returns the IngestResult."""
    from clusters.models import Node
    from health.ingest import ingest, validate_batch

    observed = (timezone.now() - ago).isoformat()
    batch = validate_batch(
        {
            "node": node_name,
            "events": [
                {
                    "id": f"evt-{next(_event_ids)}",
                    "kind": "xid",
                    "xid": xid,
                    "gpu_index": gpu,
                    "message": f"Xid {xid}",
                    "observed_at": observed,
                }
            ],
        }
    )
    return ingest(Node.objects.get(name=node_name), batch.events)


def drive(engine, sim, synced, *, rounds: int = 20, step=timedelta(seconds=1)):
    """Alternate engine passes with simulated time, as the worker and Slurm would."""
    from remediation.models import Remediation
    from remediation.transitions import RunStatus

    for _ in range(rounds):
        engine.run_once()
        synced(step)
        Remediation.objects.filter(status=RunStatus.WAITING).update(due_at=timezone.now())
        if not Remediation.objects.filter(
            status__in=[RunStatus.RUNNING, RunStatus.WAITING]
        ).exists():
            return


# The pages and API: clients per role, jobs on nodes.
@pytest.fixture
def second_admin(db):
    from core.roles import Role
    from identity.accounts import create_user_with_role

    return create_user_with_role("admin2", Role.ADMIN, PASSWORD)[0]


@pytest.fixture
def api():
    """api(user) -> an API client authenticated as `user`."""

    def client_for(user) -> APIClient:
        client = APIClient()
        client.force_authenticate(user)
        return client

    return client_for


@pytest.fixture
def web():
    """web(user) -> a browser-like client logged in as `user`."""

    def client_for(user, **kwargs) -> Client:
        client = Client(**kwargs)
        client.force_login(user)
        return client

    return client_for


@pytest.fixture
def jobs(sim, synced):
    """Three running jobs: alice's on gpu-01+02, bob's and alice's sharing gpu-03."""
    from clusters.backends.base import JobSubmission

    def submit(name: str, user: str, nodes: int, gpus: int) -> int:
        script = (
            f"#SBATCH --job-name={name}\n#SBATCH --partition=train\n"
            f"#SBATCH --nodes={nodes}\n#SBATCH --gres=gpu:{gpus}\n"
        )
        return sim.submit_job(JobSubmission(script=script, user=user))

    ids = {
        "pretrain": submit("pretrain", "alice", 2, 8),
        "eval-bob": submit("eval-bob", "bob", 1, 4),
        "eval-alice": submit("eval-alice", "alice", 1, 2),
    }
    synced(timedelta(seconds=1))
    return ids


@pytest.fixture
def node(synced):
    """node(name) -> the synced Node row."""
    from clusters.models import Node

    return lambda name: Node.objects.select_related("pool", "cluster").get(name=name)


def job_running_on(node_name: str, slurm_id: int = 4242):
    """A running job on the node, as the sync records it: something a restart can restart."""
    from clusters.models import Node
    from jobs.models import Job

    node = Node.objects.get(name=node_name)
    job = Job.objects.create(
        cluster=node.cluster, slurm_id=slurm_id, user="alice", state="RUNNING",
        node_names=[node_name], node_count=1, gpus=8,
    )  # fmt: skip
    job.nodes.add(node)
    return job
