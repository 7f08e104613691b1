"""Node and job actions through a real slurmrestd (24.11 and 26.05), as an operator.

slurmctld lets only a Slurm super user update nodes: root, the SlurmUser (root in the
minicluster) or an account with AdminLevel=Administrator in slurmdbd. So these tests
run on a small cluster of their own with `--accounting` (own state folder and ports,
beside the session's), where bob is made Administrator: the operator account the
backend acts as; no token for root is ever made. What goes through REST and what
stays on the CLI per version is in deploy/minicluster/README.md's version table.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
import requests

from clusters.backends.base import BackendError, JobSubmission
from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm_rest import JwtAuth, SlurmRestBackend
from tests.plugins.slurm_cluster import UP, environment_from_up_output, wait_for_empty_queue
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions, pytest.mark.slurmrestd]

OPERATOR = "bob"
# Own ports per version, away from the default clusters' (16817, 17817, 18817, ...) and
# below the kernel's ephemeral range (32768+), where a client socket can hold one.
PORTS = {"24.11": 25000, "26.05": 26000}
DOWN = UP.parent / "down"
TRAP_JOB = """#!/bin/bash
trap 'echo got-usr1 > {path}' USR1
for i in $(seq 600); do sleep 1; done
"""


def cluster_command(version: str, state: Path, *args: str) -> subprocess.CompletedProcess:
    base = PORTS[version]
    env = {
        **os.environ,
        "MEDBAY_MINICLUSTER_CTLD_PORT": str(base + 817),
        "MEDBAY_MINICLUSTER_NODE_PORT": str(base + 901),
        "MEDBAY_MINICLUSTER_DBD_PORT": str(base + 830),
        "MEDBAY_MINICLUSTER_RESTD_PORT": str(base + 820),
    }
    return subprocess.run(
        [*args, "--slurm", version, "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def operator_cluster(minicluster):
    version = minicluster["MEDBAY_SLURM_VERSION"]
    # Named after its ports: a state folder remembers the slurmdbd (and database) it met.
    state = Path(f"/var/tmp/medbay-rest-actions-{version}-{PORTS[version]}")
    started = cluster_command(
        version, state, str(UP), "--accounting", "--nodes", "2", "--spares", "1", "--infer", "1"
    )
    if started.returncode != 0:
        cluster_command(version, state, str(DOWN))
        pytest.fail(f"up --accounting failed:\n{started.stdout}\n{started.stderr}")
    environment = environment_from_up_output(started.stdout)
    env = {**os.environ, **environment}
    made = subprocess.run(
        ["sacctmgr", "-i", "modify", "user", OPERATOR, "set", "adminlevel=Administrator"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    listed = subprocess.run(
        ["sacctmgr", "-n", "-P", "list", "user", OPERATOR, "format=adminlevel"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert listed.stdout.strip() == "Administrator", made.stdout + made.stderr + listed.stderr
    # slurmdbd pushes the new admin level to slurmctld; act only once it has it.
    wait_for(
        lambda: "AdminLevel=Administrator" in subprocess.run(
            ["scontrol", "show", "assoc_mgr", f"users={OPERATOR}", "flags=users"],
            capture_output=True, text=True, env=env, check=False,
        ).stdout,
        30,
        "slurmctld to know bob is an Administrator",
    )  # fmt: skip
    yield environment
    cluster_command(version, state, str(DOWN))


class Recording(requests.Session):
    """A real session that remembers which requests went out."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[str, str]] = []

    def request(self, method, url, *args, **kwargs):
        if "/slurm/" in url:  # not the /openapi/v3 the backend asks once
            self.asked.append((method, url.split("/slurm/", 1)[-1]))
        return super().request(method, url, *args, **kwargs)


def acting_as(cluster: dict, operator: str | None) -> SlurmRestBackend:
    return SlurmRestBackend(
        cluster["MEDBAY_SLURMRESTD_URL"],
        JwtAuth(key_path=cluster["MEDBAY_SLURM_JWT_KEY"], token_user=OPERATOR),
        slurm_conf=cluster["SLURM_CONF"],
        session=Recording(),
        operator=operator,
    )


@pytest.fixture
def cli(operator_cluster):
    backend = SlurmBackend(operator_cluster["SLURM_CONF"])
    yield backend
    for job in backend.jobs():
        if job.state in {"PENDING", "RUNNING", "SUSPENDED", "CONFIGURING"}:
            backend.cancel_job(job.job_id)
    for node in backend.nodes():
        if node.reason.startswith("medbay-test"):
            backend.resume_node(node.name)
    wait_for_empty_queue(backend)


@pytest.fixture
def rest(operator_cluster, cli):
    return acting_as(operator_cluster, OPERATOR)


def show_node(cli: SlurmBackend, node: str) -> str:
    return cli.run(["scontrol", "show", "node", node])


def rest_calls(backend: SlurmRestBackend, method: str) -> list[str]:
    return [path for asked, path in backend.session.asked if asked == method]


def test_a_node_is_drained_and_resumed_through_slurmrestd_as_the_operator(rest, cli):
    reason = f"medbay-test rest drain {uuid.uuid4().hex[:6]}"
    rest.drain_node("gpu-01", reason)
    shown = show_node(cli, "gpu-01")
    assert "DRAIN" in shown and f"Reason={reason}" in shown
    rest.resume_node("gpu-01")
    shown = show_node(cli, "gpu-01")
    assert "DRAIN" not in shown and "Reason=" not in shown.replace("Reason=(null)", "")
    rest.resume_node("gpu-01")  # needs none: refused by slurmctld, fine for the caller
    version = rest.api_version
    assert rest_calls(rest, "POST") == [f"{version}/node/gpu-01"] * 3


def test_a_job_is_signalled_held_and_released_through_slurmrestd(rest, cli, tmp_path):
    shared = Path("/tmp") / f"medbay-rest-signal-{uuid.uuid4().hex[:8]}"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    mark = shared / "usr1"
    try:
        job_id = cli.submit_job(
            JobSubmission(script=TRAP_JOB.format(path=mark), user="alice", workdir=str(shared))
        )
        wait_for(lambda: cli.job(job_id).state == "RUNNING", 30, "alice's job to run")
        rest.signal_job(job_id, "USR1")  # bob, an Administrator, signals alice's job
        wait_for(lambda: mark.exists() and mark.read_text().strip() == "got-usr1", 20, "the trap")
        assert cli.job(job_id).state == "RUNNING"

        # Pending from submission on: an update of its start time after sbatch raced the
        # scheduler, which had sometimes already started it on a free node.
        later = JobSubmission(
            script="#!/bin/sh\n#SBATCH --begin=now+1hour\nsleep 60\n",
            user="alice",
            workdir=str(shared),
        )
        pending = cli.submit_job(later)
        rest.hold_job(pending)
        assert "Priority=0 " in cli.run(["scontrol", "show", "job", str(pending)])
        rest.release_job(pending)
        assert "Priority=0 " not in cli.run(["scontrol", "show", "job", str(pending)])
        version = rest.api_version
        assert rest_calls(rest, "DELETE") == [f"{version}/job/{job_id}"]
        assert rest_calls(rest, "POST") == [f"{version}/job/{pending}"] * 2
    finally:
        for child in shared.iterdir():
            child.unlink()
        shared.rmdir()


def test_requeue_goes_through_slurmrestd_where_the_version_has_an_endpoint(rest, cli):
    job_id = cli.submit_job(
        JobSubmission(script="#!/bin/sh\n#SBATCH --requeue\nsleep 300\n", user="alice")
    )
    wait_for(lambda: cli.job(job_id).state == "RUNNING", 30, "alice's job to run")
    rest.requeue_job(job_id)
    wait_for(lambda: cli.job(job_id).restart_count == 1, 30, "the requeue")
    # v0.0.45 (26.05) has GET job/{id}/requeue; v0.0.42 (24.11) none: scontrol requeue.
    through_rest = rest_calls(rest, "GET")
    if rest.api_version == "v0.0.42":
        assert not rest.acts_through_rest("job_requeue") and through_rest == []
    else:
        assert through_rest == [f"{rest.api_version}/job/{job_id}/requeue"]


def test_a_researchers_token_cannot_drain_a_node(operator_cluster, cli):
    alice = acting_as(operator_cluster, "alice")
    with pytest.raises(BackendError, match="Invalid user id") as raised:
        alice.drain_node("gpu-02", "medbay-test not hers")
    assert raised.value.permanent
    assert "DRAIN" not in show_node(cli, "gpu-02")
