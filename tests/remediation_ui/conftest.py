"""Fixtures for the remediation pages and API: clients per role, jobs on nodes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.conftest import PASSWORD


@pytest.fixture
def second_admin(db):
    from portal.accounts import create_user_with_role
    from portal.roles import Role

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
