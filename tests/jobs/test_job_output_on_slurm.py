"""A job's output on the real local Slurm is read as its user, and only as its user."""

from __future__ import annotations

import os
import pwd
import shutil
import uuid
from pathlib import Path

import pytest

from clusters.backends.base import JobFileError, JobSubmission
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions]


@pytest.fixture
def alices_private_dir():
    """A folder only alice may enter (0700, hers)."""
    entry = pwd.getpwnam("alice")
    path = Path("/tmp") / f"medbay-output-{uuid.uuid4().hex[:8]}"
    path.mkdir(mode=0o700)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_jobs_output_is_read_as_alice_and_bob_is_denied(slurm, alices_private_dir):
    script = (
        "#!/bin/sh\n"
        f"#SBATCH --output={alices_private_dir}/%x-%j.out\n"
        "#SBATCH --job-name=medbay-output\n"
        "echo hello from $(id -un)\n"
    )
    job_id = slurm.submit_job(JobSubmission(script=script, user="alice", workdir="/tmp"))
    paths = slurm.job_output_paths(job_id)

    def finished():
        return slurm.job(job_id).state == "COMPLETED"

    wait_for(finished, timeout_s=60, what=f"job {job_id} to complete")
    tail = slurm.read_job_file("alice", paths.stdout, 4096)
    with pytest.raises(JobFileError) as bobs_try:
        slurm.read_job_file("bob", paths.stdout, 4096)

    assert paths.stdout == f"{alices_private_dir}/medbay-output-{job_id}.out"
    assert paths.stderr == paths.stdout
    assert tail.text == "hello from alice\n"
    assert bobs_try.value.kind == JobFileError.DENIED
    assert "permission denied" in bobs_try.value.message
