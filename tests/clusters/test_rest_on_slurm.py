"""The slurmrestd transport on a real slurmrestd (24.11 and 26.05: `up --slurm V`).

Reads through REST agree with the CLI's on the same cluster; a researcher's job is
submitted with a token minted for her alone and runs as her; a token signed with
another key is refused with slurmrestd's own words; her finished job is imported
from slurmdbd through slurmrestd with her account. 22.05's minicluster runs no
slurmrestd: conftest deselects these there; `make test-slurm-versions` runs them.
"""

from __future__ import annotations

import pwd
import uuid
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from clusters.backends import registry
from clusters.backends.base import BackendError, JobSubmission
from clusters.backends.slurm_rest import JwtAuth, SlurmRestBackend
from jobs.models import AccountingJob
from jobs.sbatch import JobParams, render_sbatch
from tests.plugins.slurm_cluster import TEST_REASON_PREFIX
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions, pytest.mark.slurmrestd]

# data_parser versions each version's slurmrestd offers (/openapi/v3), newest last.
NEWEST_DATA_PARSER = {"24.11": "v0.0.42", "26.05": "v0.0.45"}
READER = "bob"
UID_JOB = "#!/bin/sh\nid -u > {path}\nsleep 300\n"


@pytest.fixture
def rest(minicluster, slurm):
    assert "MEDBAY_SLURMRESTD_URL" in minicluster, "up printed no slurmrestd URL"
    # Reads as bob: Medbay never makes a token for root, and the tests run as root.
    return SlurmRestBackend(
        minicluster["MEDBAY_SLURMRESTD_URL"],
        JwtAuth(key_path=minicluster["MEDBAY_SLURM_JWT_KEY"], token_user=READER),
        slurm_conf=minicluster["SLURM_CONF"],
    )


@pytest.fixture
def shared_dir():
    path = Path("/tmp") / f"medbay-rest-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    path.chmod(0o1777)
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


def running(backend, job_id):
    job = backend.job(job_id)
    return job if job.state == "RUNNING" else None


def test_rest_speaks_the_newest_data_parser_and_reads_what_the_cli_reads(rest, slurm, minicluster):
    assert rest.api_version == NEWEST_DATA_PARSER[minicluster["MEDBAY_SLURM_VERSION"]]
    assert rest.controller_up()
    assert rest.nodes() == slurm.nodes()
    job_id = slurm.submit_job(JobSubmission(script=UID_JOB.format(path="/dev/null"), user="bob"))
    wait_for(lambda: running(slurm, job_id), 15, "bob's job to run")
    from_rest = {job.job_id: job for job in rest.jobs()}[job_id]
    assert from_rest == {job.job_id: job for job in slurm.jobs()}[job_id]
    assert rest.job(job_id).user == "bob"
    with pytest.raises(BackendError, match="Invalid job id") as raised:
        rest.job(999_999)
    assert raised.value.permanent


def test_a_researchers_job_goes_through_slurmrestd_with_her_own_token_and_runs_as_her(
    rest, shared_dir
):
    uid_file = shared_dir / "uid.txt"
    job_id = rest.submit_job(
        JobSubmission(script=UID_JOB.format(path=uid_file), user="alice", workdir=str(shared_dir))
    )
    job = wait_for(lambda: running(rest, job_id), 15, "alice's job to run")
    assert job.user == "alice"
    written = wait_for(lambda: uid_file.exists() and uid_file.read_text().strip(), 15, "its uid")
    assert int(written) == pwd.getpwnam("alice").pw_uid
    assert uid_file.stat().st_uid == pwd.getpwnam("alice").pw_uid


def test_a_job_from_the_portals_form_keeps_its_sbatch_options_through_slurmrestd(
    rest, slurm, shared_dir
):
    """slurmrestd does not read #SBATCH lines: the backend sends them as fields, so the
    job runs as sbatch would run the same script (seen before: nameless, no GPU)."""
    script = render_sbatch(
        JobParams(
            job_name="rest-options", partition="train", nodes=1, gpus_per_node=2,
            cpus_per_task=2, mem="1G", time_limit=90, workdir=str(shared_dir),
            output=f"{shared_dir}/out-%j.txt", template="custom", command="sleep 300",
            auto_resume=True, checkpoint_dir=str(shared_dir),
        )
    )  # fmt: skip

    job_id = rest.submit_job(JobSubmission(script=script, user="alice", workdir=str(shared_dir)))

    job = wait_for(lambda: running(slurm, job_id), 15, "the job to run")
    assert (job.name, job.partition, job.gpus, job.requeue) == ("rest-options", "train", 2, True)
    assert job.time_limit_minutes == 90
    assert wait_for(lambda: (shared_dir / f"out-{job_id}.txt").exists(), 15, "its output file")


def test_no_token_is_ever_made_for_root_so_reads_as_root_are_refused_before_slurm(rest):
    as_root = SlurmRestBackend(rest.url, JwtAuth(key_path=rest.auth.key_path, token_user="root"))
    with pytest.raises(BackendError, match="never makes or uses a slurmrestd token for root"):
        as_root.nodes()


def test_a_token_signed_with_another_key_is_refused_in_slurmrestds_words(rest, tmp_path):
    wrong_key = tmp_path / "wrong.key"
    wrong_key.write_bytes(b"x" * 32)
    stranger = SlurmRestBackend(rest.url, JwtAuth(key_path=str(wrong_key), token_user=READER))
    stranger.api_version = rest.api_version
    with pytest.raises(BackendError) as raised:
        stranger.nodes()
    assert raised.value.message == "slurmrestd 511: Protocol authentication error"
    assert raised.value.permanent
    assert not stranger.controller_up()


def test_polls_ask_only_for_what_changed_since_the_last_answer(rest, slurm):
    """slurmctld answers `update_time` with nothing when nothing changed: jobs as an
    empty list with a "No job changes since" warning, nodes as an empty 304; after a
    change, the whole list again. 24.11's node polls answer 500 once nodes changed and
    partitions did not, and the backend polls its nodes in full from then on."""
    asked = []
    send = rest.session.request

    def recording(method, url, **kwargs):
        response = send(method, url, **kwargs)
        unchanged = response.status_code == 304 or "changes since update_time" in response.text
        asked.append((url.rstrip("/").rsplit("/", 1)[-1], kwargs.get("params"), unchanged))
        return response

    rest.session.request = recording
    rest.jobs()
    wait_for(lambda: rest.jobs() is not None and asked[-1][2], 15, "a job poll saying no change")
    assert "update_time" in asked[-1][1]
    job_id = slurm.submit_job(JobSubmission(script=UID_JOB.format(path="/dev/null"), user="bob"))
    wait_for(lambda: job_id in {job.job_id for job in rest.jobs()}, 15, "the new job")
    assert "update_time" in asked[-1][1] and not asked[-1][2]

    nodes = rest.nodes()
    slurm.drain_node("gpu-03", f"{TEST_REASON_PREFIX} update_time")
    wait_for(
        lambda: next(n for n in rest.nodes() if n.name == "gpu-03").flags & {"drain"}, 15,
        "the drain in a node poll",
    )  # fmt: skip
    assert nodes and asked[-1][0] == "nodes"
    if rest.api_version == "v0.0.42":
        assert rest.full_node_polls and asked[-1][1] is None
    else:
        assert "update_time" in asked[-1][1] and not rest.full_node_polls
        rest.nodes()
        wait_for(lambda: rest.nodes() is not None and asked[-1][2], 15, "a node poll, no change")


@pytest.mark.django_db
def test_a_finished_job_of_alice_is_imported_through_slurmdbds_rest_with_her_account(rest):
    """The session's cluster runs slurmdbd (the minicluster's default), so slurmrestd
    offers `/slurmdb/vX/jobs`: the import reads alice's finished job there, never
    through sacct, and stores it with her account (team vision)."""
    assert rest.slurmdb_jobs_path(), "slurmrestd offers no slurmdb jobs endpoint"
    cli_calls = []
    run_cli = rest.runner
    rest.runner = lambda args, **options: cli_calls.append(list(args)) or run_cli(args, **options)
    since = timezone.now() - timedelta(minutes=1)
    job_id = rest.submit_job(
        JobSubmission(script="#!/bin/sh\nexit 0\n", user="alice", workdir="/tmp")
    )

    def finished():
        window_end = timezone.now() + timedelta(minutes=1)
        return any(r.job_id == job_id for r in rest.finished_jobs(since, window_end))

    wait_for(finished, 30, "alice's job in slurmdbd's records")
    registry.use(rest, fleet=object())
    try:
        call_command("import_accounting", "--since", since.isoformat(), stdout=StringIO())
    finally:
        registry.use(None)
    record = AccountingJob.objects.get(slurm_id=job_id)
    assert (record.user, record.account, record.state) == ("alice", "vision", "COMPLETED")
    assert not [args for args in cli_calls if args[0] == "sacct"]
