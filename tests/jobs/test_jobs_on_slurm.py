"""Researcher self-service against the real local Slurm: jobs run as the researcher.

The portal submits through the HTTP API and the form exactly as in production;
only the job's environment differs: the minicluster's compute "nodes" are this
machine, so the job's PATH gets shims for python/medbay-launch/torchrun that work
for alice (the test venv's interpreter may live where she cannot read it).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import stat
import sys
import uuid
from pathlib import Path

import pytest

from clusters.backends import registry
from jobs.models import Job
from sync.cycle import sync_once
from tests.conftest import PASSWORD
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.slurm_versions,
    pytest.mark.django_db(transaction=True),
]

REPO = Path(__file__).resolve().parents[2]
SITE_PACKAGES = next(Path(sys.prefix, "lib").glob("python3*/site-packages"))


def written_uid(path, what: str) -> int:
    """The uid the job wrote, once the whole line is there: the shell creates the
    file before `id -u` writes into it, and a read in between finds it empty."""

    def line():
        text = path.read_text() if path.exists() else ""
        return text if text.endswith("\n") else ""

    return int(wait_for(line, what=what))


@pytest.fixture
def portal(slurm, researcher, other_researcher, admin_user):
    """The SlurmBackend installed as the portal's backend, Slurm synced into the database."""
    from clusters.models import Cluster

    registry.use(slurm)
    cluster = Cluster.objects.create(name="minicluster", backend="slurm")
    sync_once(cluster, slurm)
    yield cluster
    registry.use(None)


@pytest.fixture
def shared_dir():
    """A folder alice can write to, removed afterwards."""
    path = Path("/tmp") / f"medbay-jobs-{uuid.uuid4().hex[:8]}"
    path.mkdir(mode=0o777)
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def shims(shared_dir):
    """python, medbay-launch and torchrun that alice can run, using this venv's packages."""
    folder = shared_dir / "bin"
    folder.mkdir()
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    env = f"export PYTHONPATH={SITE_PACKAGES}:{REPO}\n"
    scripts = {
        "python": f'#!/bin/sh\n{env}exec {python} "$@"\n',
        "medbay-launch": f'#!/bin/sh\n{env}exec {python} {REPO}/jobs/launcher.py "$@"\n',
        # Node names do not resolve on the minicluster; every "node" is 127.0.0.1.
        "torchrun": (
            f"#!/bin/sh\n{env}"
            'args=""; for a in "$@"; do case "$prev" in --master_addr) a=127.0.0.1;; esac;'
            " args=\"$args '$a'\"; prev=$a; done\n"
            f"eval exec {python} -m torch.distributed.run $args\n"
        ),
    }
    for name, text in scripts.items():
        path = folder / name
        path.write_text(text)
        path.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    return folder


def login(client, user):
    client.logout()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def form(shared_dir, **changes):
    return {
        "job_name": "selfservice",
        "partition": "train",
        "nodes": 1,
        "gpus_per_node": 1,
        "gpu_flag": "gres",
        "cpus_per_task": 1,
        "time_limit": 10,
        "workdir": str(shared_dir),
        "template": "custom",
        "command": f"id -u > {shared_dir}/uid-$SLURM_JOB_ID.txt\n",
        "auto_resume": "no",
        **changes,
    }


def test_a_job_submitted_for_alice_runs_with_alices_uid(client, portal, researcher, shared_dir):
    response = login(client, researcher).post(
        "/api/v1/jobs/", form(shared_dir), content_type="application/json"
    )

    assert response.status_code == 201, response.json()
    slurm_id = response.json()["id"]
    uid_file = shared_dir / f"uid-{slurm_id}.txt"
    assert written_uid(uid_file, "the job to write its uid") == pwd.getpwnam("alice").pw_uid
    assert Job.objects.get(slurm_id=slurm_id).user == "alice"


def test_bob_can_neither_see_nor_cancel_alices_job_but_alice_can_cancel_it(
    client, portal, researcher, other_researcher, shared_dir, slurm
):
    body = form(shared_dir, command="sleep 300\n")
    slurm_id = (
        login(client, researcher)
        .post("/api/v1/jobs/", body, content_type="application/json")
        .json()["id"]
    )

    bob = login(client, other_researcher)
    # The same answer as for a job that does not exist: ids of others stay unknown.
    assert bob.get(f"/api/v1/jobs/{slurm_id}/").status_code == 404
    assert bob.post(f"/api/v1/jobs/{slurm_id}/cancel/").status_code == 404
    assert slurm.job(slurm_id).state in ("PENDING", "RUNNING")

    cancelled = login(client, researcher).post(f"/api/v1/jobs/{slurm_id}/cancel/")

    assert cancelled.status_code == 200
    wait_for(lambda: slurm.job(slurm_id).state == "CANCELLED", 30, "scancel to take effect")


def test_alice_resubmits_her_job_and_the_new_one_runs_as_her(
    client, portal, researcher, shared_dir
):
    alice = login(client, researcher)
    first = alice.post("/api/v1/jobs/", form(shared_dir), content_type="application/json")

    second = alice.post(
        f"/api/v1/jobs/{first.json()['id']}/resubmit/",
        {"job_name": "selfservice-again"},
        content_type="application/json",
    )

    assert second.status_code == 201, second.json()
    slurm_id = second.json()["id"]
    assert slurm_id != first.json()["id"]
    uid_file = shared_dir / f"uid-{slurm_id}.txt"
    assert written_uid(uid_file, "the resubmitted job to run") == pwd.getpwnam("alice").pw_uid


def test_the_ddp_example_resumes_from_its_checkpoint_after_a_requeue(
    client, portal, researcher, shared_dir, shims, slurm
):
    if os.environ.get("CI", "").lower() != "true":
        pytest.importorskip("torch")
    checkpoints = shared_dir / "ckpt"
    body = form(
        shared_dir,
        job_name="ddp",
        nodes=2,
        gpus_per_node=0,
        time_limit=30,
        template="torchrun",
        command=f"{REPO}/examples/ddp_train.py --steps 100000 --save-every 5 --sleep 0.05",
        checkpoint_dir=str(checkpoints),
        env_setup=f"export PATH={shims}:$PATH",
        auto_resume="yes",
    )

    response = login(client, researcher).post("/jobs/new", body)

    assert response.status_code == 302, response.context["form"].errors
    slurm_id = int(response.url.strip("/").split("/")[-1])
    wait_for(lambda: any(checkpoints.glob("checkpoint*")), 120, "a first checkpoint")
    slurm.requeue_job(slurm_id)
    log = shared_dir / f"ddp-{slurm_id}.out"

    def resumed_step():
        found = re.search(r"resumed from step (\d+)", log.read_text() if log.exists() else "")
        return int(found.group(1)) if found else None

    step = wait_for(resumed_step, 120, "the job to resume after the requeue")
    assert step > 0
    assert slurm.job(slurm_id).restart_count >= 1
