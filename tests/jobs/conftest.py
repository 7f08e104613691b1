"""Helpers for the self-service tests: logged-in clients, a valid form, a backend spy."""

from __future__ import annotations

import re

import pytest

from tests.conftest import PASSWORD


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    # Four users per test with the real PBKDF2 cost would dominate the run time.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def login(client):
    def log_in(user):
        client.logout()
        assert client.login(username=user.username, password=PASSWORD)
        return client

    return log_in


@pytest.fixture
def job_form():
    """A valid single-node job for the simulator's `train` partition."""
    return {
        "job_name": "resnet",
        "partition": "train",
        "nodes": 1,
        "gpus_per_node": 8,
        "gpu_flag": "gres",
        "cpus_per_task": 4,
        "mem": "32G",
        "time_limit": 120,
        "workdir": "/home/alice/resnet",
        "env_setup": "source /home/alice/venv/bin/activate",
        "template": "python",
        "command": "train.py --epochs 3",
        "checkpoint_dir": "",
        "auto_resume": "auto",
    }


@pytest.fixture
def submissions(sim, monkeypatch):
    """Every JobSubmission that reaches the (simulated) backend, in order."""
    calls = []
    original = sim.submit_job

    def spy(submission):
        calls.append(submission)
        return original(submission)

    monkeypatch.setattr(sim, "submit_job", spy)
    return calls


def token_in(script: str) -> str:
    return re.search(r"^export MEDBAY_JOB_TOKEN=(\S+)$", script, re.M).group(1)


@pytest.fixture
def submit_as(login, job_form, synced, submissions):
    """Submit the standard form through the API as `user`; returns the Job's Slurm id."""

    def submit(user, **changes):
        response = login(user).post(
            "/api/v1/jobs/", {**job_form, **changes}, content_type="application/json"
        )
        assert response.status_code == 201, response.json()
        return response.json()["id"]

    return submit


@pytest.fixture
def job_and_run(researcher, cluster):
    """alice's job and a replace run on gpu-02, for the notifications' tests."""
    from clusters.models import Node
    from jobs.models import Job
    from remediation.models import Remediation

    researcher.email = "alice@example.org"
    researcher.save()
    node = Node.objects.create(cluster=cluster, name="gpu-02", gpu_count=8)
    job = Job.objects.create(cluster=cluster, slurm_id=1234, name="llm", user="alice")
    run = Remediation.objects.create(
        node=node, action="replace", trigger="health_event", reason="XID 79 on GPU 3"
    )
    return job, run
