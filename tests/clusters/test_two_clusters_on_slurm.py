"""Issue 32.5: two real Slurm clusters watched, healed and shown by one portal.

The session's cluster (22.05 on the host, ClusterName medbay, the `slurm` fixture's)
and a second one of this module's own: Slurm 24.11 from its Debian root, ClusterName
`second`, on its own ports and state folder, with its own spare, started fresh for
the module and stopped after it. Both are configured in the portal's table, as an
admin would (`manage.py cluster add`): the first on the Slurm CLI, the second
through slurmrestd (the CLI for what v0.0.42 has no endpoint for). Each cluster's
tools are found by name through one PATH: the second cluster's `bin/` wrappers run
the tools of the cluster SLURM_CONF names (deploy/minicluster/README.md, "Two
clusters at once"). Node names are the same in both (gpu-01...), on purpose.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from clusters.backends import registry
from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm_rest import SlurmRestBackend
from clusters.models import Cluster, Node, Partition
from health.ingest import ingest, validate_batch
from jobs.models import ClusterAccount, Job
from remediation.engine import Engine
from remediation.models import Action, Remediation
from remediation.transitions import RunStatus
from sync.cycle import sync_once
from sync.loop import SyncLoop, slurm_identity
from tests.conftest import PASSWORD
from tests.plugins.cluster_state import bring_to_known_state, wait_until_registered
from tests.plugins.slurm_cluster import (
    UP,
    cannot_run_cluster_reason,
    environment_from_up_output,
    in_ci,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]

FIRST, SECOND = "medbay", "second"
DOWN = UP.parent / "down"
SECOND_STATE = Path("/var/tmp/medbay-two-clusters-24.11")
# Away from every other test cluster's ports (16817, 17817, 18817, 25xxx-27xxx) and
# below the kernel's ephemeral range.
SECOND_PORTS = {
    "MEDBAY_MINICLUSTER_CTLD_PORT": "29817",
    "MEDBAY_MINICLUSTER_NODE_PORT": "29901",
    "MEDBAY_MINICLUSTER_DBD_PORT": "29830",
    "MEDBAY_MINICLUSTER_RESTD_PORT": "29820",
}
# Two train nodes and one spare are enough to heal one node; no slurmdbd keeps it light.
SECOND_OPTIONS = ("--slurm", "24.11", "--name", SECOND, "--no-accounting",
                  "--nodes", "2", "--spares", "1", "--infer", "0")  # fmt: skip
# The account Medbay reads slurmrestd as (never root, whom no token is made for).
READER = "bob"
SETTLE_S = 120


def second_cluster_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*args, "--state", str(SECOND_STATE)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **SECOND_PORTS},
        check=False,
    )


def start_second_cluster(*options: str) -> dict[str, str]:
    started = second_cluster_command(str(UP), *SECOND_OPTIONS, *options)
    if started.returncode != 0:
        second_cluster_command(str(DOWN))
        pytest.fail(f"up of the second cluster failed:\n{started.stdout}\n{started.stderr}")
    return environment_from_up_output(started.stdout)


def submit_held(backend: SlurmBackend) -> int:
    """A job of root's, held and cancelled at once: it only takes the next job id."""
    job_id = int(
        backend.run(["sbatch", "--parsable", "--hold", "--chdir=/tmp", "--output=/dev/null",
                     "--job-name=medbay-test-id", "--wrap", "true"]).split(";")[0]
    )  # fmt: skip
    backend.cancel_job(job_id)
    return job_id


@pytest.fixture(scope="module")
def second_cluster(minicluster):
    """The second cluster, fresh (a state folder of its own, removed first), numbering
    its jobs from the first cluster's next id; its `bin/` first on PATH meanwhile."""
    reason = cannot_run_cluster_reason()
    if reason:
        if in_ci():
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    first_job_id = submit_held(SlurmBackend(minicluster["SLURM_CONF"])) + 1
    second_cluster_command(str(DOWN))  # what an interrupted run may have left
    shutil.rmtree(SECOND_STATE, ignore_errors=True)
    started = time.monotonic()
    environment = start_second_cluster("--first-job-id", str(first_job_id))
    environment["startup_seconds"] = f"{time.monotonic() - started:.2f}"
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{SECOND_STATE / 'bin'}:{path}"
    yield environment
    os.environ["PATH"] = path
    stopped = second_cluster_command(str(DOWN))
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


@pytest.fixture
def second_slurm(second_cluster):
    """The second cluster through its CLI, in its known state before and after (its
    slurmctld started again first if a test left it stopped)."""
    backend = SlurmBackend(second_cluster["SLURM_CONF"])
    bring_to_known_state(backend, "before (second cluster)")
    yield backend
    if not backend.controller_up():
        start_second_cluster()
        wait_until_registered(backend)
        pytest.fail("the test left the second cluster's slurmctld stopped", pytrace=False)
    bring_to_known_state(backend, "after (second cluster)")


@pytest.fixture
def portal(slurm, second_slurm, second_cluster, minicluster, monkeypatch):
    """Both clusters in the portal's table, as an admin adds them, and synced once."""
    monkeypatch.setenv("MEDBAY_SLURM_JWT_USER", READER)
    call_command(
        "cluster",
        "add",
        FIRST,
        "--transport",
        "cli",
        "--slurm-conf",
        minicluster["SLURM_CONF"],
        "--fleet",
        "slurm-spares",
    )
    call_command("cluster", "add", SECOND, "--transport", "rest",
                 "--slurmrestd-url", second_cluster["MEDBAY_SLURMRESTD_URL"],
                 "--jwt-key-file", second_cluster["MEDBAY_SLURM_JWT_KEY"],
                 "--slurm-conf", second_cluster["SLURM_CONF"],
                 "--fleet", "slurm-spares")  # fmt: skip
    for name in (FIRST, SECOND):
        call_command("slurm_sync", "--once", "--cluster", name)
    # No job runs on the nodes healed here: no checkpoint grace to wait out.
    Partition.objects.update(checkpoint_grace_s=0)
    yield {name: Cluster.objects.get(name=name) for name in (FIRST, SECOND)}
    registry.use(None)


def sync(*clusters: Cluster) -> None:
    for cluster in clusters:
        result = sync_once(cluster, registry.backend_for(cluster))
        assert result.controller_up, f"sync of {cluster.name}: {result.error}"


def report_xid_79(cluster: Cluster, node_name: str, gpu: int = 2):
    """What the node agent on NODE_NAME of CLUSTER sends: GPU fallen off the bus."""
    batch = validate_batch(
        {
            "node": node_name,
            "events": [
                {
                    "id": f"evt-{uuid.uuid4().hex[:12]}",
                    "kind": "xid",
                    "xid": 79,
                    "gpu_index": gpu,
                    "message": "Xid 79",
                    "observed_at": timezone.now().isoformat(),
                }
            ],
        }
    )
    return ingest(Node.objects.get(cluster=cluster, name=node_name), batch.events)


def heal(engine: Engine, runs: list[Remediation], clusters: list[Cluster]) -> None:
    """Engine passes and syncs of CLUSTERS, as the worker and the sync loops would, until
    every run has ended (waits between steps cut short)."""

    def settled():
        engine.run_once()
        sync(*clusters)
        Remediation.objects.filter(status=RunStatus.WAITING).update(due_at=timezone.now())
        for run in runs:
            run.refresh_from_db()
        return all(run.status not in (RunStatus.RUNNING, RunStatus.WAITING) for run in runs)

    wait_for(
        settled,
        SETTLE_S,
        "the runs to end",
        explain=lambda: "; ".join(f"run {r.pk}: {r.status} {r.message}" for r in runs),
    )


def node(backend: SlurmBackend, name: str):
    return next(info for info in backend.nodes() if info.name == name)


def members(backend: SlurmBackend) -> dict[str, set[str]]:
    return {info.name: set(info.nodes) for info in backend.partitions()}


def stop_slurmctld(state: Path) -> None:
    pid = int((state / "run" / "slurmctld.pid").read_text().strip())
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 30, "the second slurmctld to exit")


def login(client, user):
    client.logout()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_both_clusters_are_synced_into_one_portal_each_from_its_own_slurm(
    portal, slurm, second_slurm, minicluster
):
    first, second = portal[FIRST], portal[SECOND]

    assert type(registry.backend_for(first)) is SlurmBackend
    assert type(registry.backend_for(second)) is SlurmRestBackend
    for cluster in (first, second):  # each row is the cluster Slurm names so (up --name)
        assert slurm_identity(registry.backend_for(cluster)).name == cluster.name
    assert first.slurm_version.startswith(minicluster["MEDBAY_SLURM_VERSION"])
    assert second.slurm_version.startswith("24.11")
    for cluster, backend in ((first, slurm), (second, second_slurm)):
        names = set(Node.objects.filter(cluster=cluster).values_list("name", flat=True))
        assert names == {info.name for info in backend.nodes()}
        spares = Partition.objects.get(cluster=cluster, name="spare")
        assert set(spares.nodes.values_list("name", flat=True)) == members(backend)["spare"]
    assert Node.objects.filter(name="gpu-02").count() == 2  # one per cluster, not merged
    assert members(second_slurm) == {"train": {"gpu-01", "gpu-02"}, "spare": {"gpu-03"},
                                     "infer": set()}  # fmt: skip


def test_an_xid_79_on_each_cluster_is_healed_with_a_spare_of_that_cluster(
    portal, slurm, second_slurm, django_capture_on_commit_callbacks
):
    first, second = portal[FIRST], portal[SECOND]
    first_spares = members(slurm)["spare"]
    with django_capture_on_commit_callbacks(execute=True):
        report_xid_79(first, "gpu-02")
        report_xid_79(second, "gpu-02")
    runs = {
        cluster.name: Remediation.objects.get(node__cluster=cluster, node__name="gpu-02")
        for cluster in (first, second)
    }
    assert {run.action for run in runs.values()} == {Action.REPLACE}

    heal(Engine("two-clusters"), list(runs.values()), [first, second])

    for cluster, backend in ((first, slurm), (second, second_slurm)):
        run = runs[cluster.name]
        assert run.status == RunStatus.SUCCEEDED, f"{cluster.name}: {run.message}"
        failed = node(backend, "gpu-02")
        assert failed.flags & {"drain", "fail"}, f"{cluster.name}'s gpu-02: {failed.flags}"
        assert f"[run {run.pk}]" in failed.reason, f"{cluster.name}'s gpu-02: {failed.reason}"
        assert "gpu-02" not in members(backend)["train"]
    # Each spare came from its own cluster: gpu-03 is the second cluster's only spare,
    # and a train node in the first (which has gpu-01..04 training).
    assert runs[SECOND].context["replacement"] == "gpu-03"
    assert members(second_slurm)["train"] == {"gpu-01", "gpu-03"}
    assert runs[FIRST].context["replacement"] in first_spares
    assert runs[FIRST].context["replacement"] in members(slurm)["train"]
    assert node(slurm, "gpu-03").partitions == ("train",)


def test_a_stopped_controller_leaves_the_other_cluster_synced_and_healing(
    portal, slurm, second_slurm, second_cluster, admin_user, client,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    first, second = portal[FIRST], portal[SECOND]
    loops = {c.name: SyncLoop(c, registry.backend_for(c), interval_s=1) for c in (first, second)}
    stop_slurmctld(SECOND_STATE)
    try:
        assert loops[SECOND].cycle() > 1  # backs off
        second.refresh_from_db()
        assert not second.controller_up and second.controller_down_since is not None

        synced_before = Cluster.objects.get(pk=first.pk).last_sync_at
        started = time.monotonic()
        assert loops[FIRST].cycle() == 1
        first_cycle_s = time.monotonic() - started
        first.refresh_from_db()
        assert first.controller_up and first.last_sync_at > synced_before
        # The second's reads wait ~9 s each for its controller; the first's never do.
        assert first_cycle_s < 8, f"the first cluster's cycle took {first_cycle_s:.1f}s"

        page = login(client, admin_user).get("/clusters/").content.decode()
        rows = dict(
            re.findall(r'<tr id="cluster-\d+">\s*<td><a [^>]*>(\w+)</a>(.*?)</tr>', page, re.S)
        )
        assert "controller down" in rows[SECOND], rows[SECOND]
        assert "controller down" not in rows[FIRST], rows[FIRST]
        # The stopped cluster says what is wrong in words, on its row and the overview.
        second.refresh_from_db()
        assert second.sync_error.startswith("Slurm controller unreachable"), second.sync_error
        assert not Cluster.objects.get(pk=first.pk).sync_error
        overview = client.get("/clusters/overview/").content.decode()
        cards = dict(
            re.findall(r'<section [^>]*id="cluster-(\w+)">(.*?)</section>', overview, re.S)
        )
        assert "Slurm controller unreachable" in cards[SECOND], cards[SECOND]
        assert "Slurm controller unreachable" not in cards[FIRST], cards[FIRST]

        with django_capture_on_commit_callbacks(execute=True):
            report_xid_79(first, "gpu-03")
        run = Remediation.objects.get(node__cluster=first, node__name="gpu-03")
        heal(Engine("two-clusters"), [run], [first])
        assert run.status == RunStatus.SUCCEEDED, run.message
        assert "gpu-03" not in members(slurm)["train"]
        assert run.context["replacement"] in members(slurm)["train"]
    finally:
        start_second_cluster()
    wait_until_registered(second_slurm)
    assert loops[SECOND].cycle() == 1
    second.refresh_from_db()
    assert second.controller_up


def test_a_researcher_sees_her_jobs_on_both_clusters_and_one_id_opens_each_clusters_job(
    portal, slurm, second_slurm, researcher, client, tmp_path
):
    first, second = portal[FIRST], portal[SECOND]
    first_id, second_id = submit_held(slurm), submit_held(second_slurm)
    for _ in range(50):  # the second cluster starts at the first's next id: a step or two
        if first_id == second_id:
            break
        if first_id < second_id:
            first_id = submit_held(slurm)
        else:
            second_id = submit_held(second_slurm)
    assert first_id == second_id, "the two clusters' next job ids did not meet"
    workdir = Path("/tmp") / f"medbay-two-clusters-{uuid.uuid4().hex[:8]}"
    workdir.mkdir(mode=0o1777)
    workdir.chmod(0o1777)
    try:
        alice = login(client, researcher)
        # Her Unix account on the second cluster, as an admin maps it; the first is the
        # environment's default mapping.
        ClusterAccount.objects.create(user=researcher, cluster=second, unix_user="alice")
        submitted = {}
        for name in (FIRST, SECOND):
            response = alice.post(
                "/api/v1/jobs/",
                {"job_name": f"on-{name}", "partition": "train", "nodes": 1, "gpus_per_node": 1,
                 "gpu_flag": "gres", "cpus_per_task": 1, "time_limit": 10,
                 "workdir": str(workdir), "template": "custom", "command": "sleep 300\n",
                 "auto_resume": "no", "cluster": name},
                content_type="application/json",
            )  # fmt: skip
            assert response.status_code == 201, response.json()
            submitted[name] = response.json()["id"]
        on_first, on_second = submitted[FIRST], submitted[SECOND]
        assert on_first == on_second == first_id + 1

        def both_synced():
            sync(first, second)
            return Job.objects.filter(slurm_id=on_first, user="alice").count() == 2

        wait_for(both_synced, 30, "both jobs in the portal")
        jobs = {job.cluster.name: job for job in Job.objects.filter(slurm_id=on_first)}
        assert (jobs[FIRST].name, jobs[SECOND].name) == (f"on-{FIRST}", f"on-{SECOND}")
        assert set(jobs[SECOND].nodes.values_list("cluster__name", flat=True)) <= {SECOND}

        queue = alice.get("/jobs/", {"cluster": "all"}).content.decode()
        for name in (FIRST, SECOND):
            address = f"/jobs/{name}/{on_first}/"
            assert f'href="{address}"' in queue  # each row links its own cluster's job
            page = alice.get(address)
            assert page.status_code == 200
            other = SECOND if name == FIRST else FIRST
            assert f"on-{name}" in page.content.decode()
            assert f"on-{other}" not in page.content.decode()
        # The id alone names a job on both: the page asks which, and opens neither.
        choice = alice.get(f"/jobs/{on_first}/")
        assert choice.status_code == 200
        assert all(f'href="/jobs/{name}/{on_first}/"' in choice.content.decode()
                   for name in (FIRST, SECOND))  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
