"""`manage.py slurm_sync` on Slurm 22.05's real output shapes."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from clusters.backends import registry
from clusters.models import Cluster, Node, NodeStatus
from jobs.models import Job

from .fakes import sample_backend


@pytest.fixture
def slurm(tmp_path):
    backend, runner = sample_backend(tmp_path)
    registry.use(backend)
    yield runner
    registry.use(None)


def run_once(*args) -> str:
    out = StringIO()
    call_command("slurm_sync", "--once", *args, stdout=out)
    return out.getvalue()


def test_once_names_the_cluster_after_slurm_records_its_version_and_reconciles(db, slurm):
    output = run_once()
    cluster = Cluster.objects.get()
    assert (cluster.name, cluster.backend, cluster.slurm_version) == ("lab", "slurm", "22.05.8")
    assert "Synced cluster lab (Slurm 22.05.8): 6 nodes and 7 jobs new" in output
    assert Node.objects.get(name="gpu-02").status == NodeStatus.DRAINED
    job = Job.objects.get(slurm_id=3)
    assert (job.state, job.gpus, job.restart_count) == ("RUNNING", 16, 1)
    assert sorted(job.nodes.values_list("name", flat=True)) == ["gpu-01", "gpu-03"]


def test_the_cluster_option_chooses_the_name(db, slurm):
    run_once("--cluster", "research")
    assert list(Cluster.objects.values_list("name", flat=True)) == ["research"]


def test_a_second_cycle_without_changes_reports_nothing_changed(db, slurm):
    run_once()
    assert "0 nodes and 0 jobs new, 0 nodes and 0 jobs changed, 0 restarts" in run_once()


def test_once_fails_with_a_clear_message_and_changes_nothing_when_the_controller_is_down(db, slurm):
    run_once()
    before = list(Node.objects.order_by("name").values_list("name", "status", "reason"))
    slurm.controller_up = False
    with pytest.raises(CommandError, match="Slurm controller of lab unreachable.*connect failure"):
        run_once()
    cluster = Cluster.objects.get()
    assert cluster.controller_up is False and cluster.controller_down_since is not None
    assert list(Node.objects.order_by("name").values_list("name", "status", "reason")) == before
    assert Job.objects.get(slurm_id=3).state == "RUNNING"


def test_a_controller_down_at_start_still_names_the_cluster_from_slurm_conf(db, slurm):
    slurm.controller_up = False
    with pytest.raises(CommandError, match="unreachable"):
        run_once()
    cluster = Cluster.objects.get()
    assert (cluster.name, cluster.slurm_version) == ("lab", "22.05.8")
    assert Node.objects.count() == 0


def test_a_non_positive_interval_is_refused(db, slurm):
    with pytest.raises(CommandError, match="--interval must be a positive"):
        call_command("slurm_sync", "--interval", "0")


def test_the_cluster_option_syncs_a_configured_cluster_with_its_own_backend(db, slurm):
    call_command("cluster", "add", "second", "--transport", "simulated", stdout=StringIO())
    slurm.controller_up = False  # the environment's Slurm is down: "second" must not need it
    output = run_once("--cluster", "second")
    second = Cluster.objects.get(name="second")
    assert "Synced cluster second" in output
    simulated = registry.backend_for(second)
    assert set(second.nodes.values_list("name", flat=True)) == {
        info.name for info in simulated.nodes()
    }
    assert list(Cluster.objects.values_list("name", flat=True)) == ["second"]


def test_a_disabled_cluster_is_not_synced_and_the_command_says_how_to_enable_it(db, slurm):
    run_once()
    call_command("cluster", "disable", "lab", stdout=StringIO())
    with pytest.raises(CommandError, match="Cluster lab is disabled.*cluster enable lab"):
        run_once()


def test_the_environments_cluster_moved_into_the_table_is_synced_with_its_row(db, slurm):
    # "lab" is what the environment's Slurm calls itself; its row now says "simulator".
    call_command("cluster", "add", "lab", "--transport", "simulated", stdout=StringIO())
    run_once()
    lab = Cluster.objects.get()
    simulated = registry.backend_for(lab)
    assert set(lab.nodes.values_list("name", flat=True)) == {
        info.name for info in simulated.nodes()
    }
    environments = {info.name for info in registry.get_backend().nodes()}
    assert set(lab.nodes.values_list("name", flat=True)) != environments
