"""The polling loop: its interval, its back-off during outages, and `serve`."""

from io import StringIO

import pytest
from django.core.management import call_command

from clusters.backends import registry
from clusters.models import Cluster, Node
from sync.loop import SyncLoop, ensure_cluster

from .fakes import sample_backend


@pytest.fixture
def backend(db, tmp_path):
    backend, runner = sample_backend(tmp_path)
    return backend, runner


def test_the_loop_polls_at_its_interval_while_slurm_answers(backend):
    slurm, _ = backend
    loop = SyncLoop(ensure_cluster(slurm), slurm, interval_s=2)
    assert [loop.cycle() for _ in range(3)] == [2, 2, 2]
    assert Node.objects.count() == 6


def test_the_loop_backs_off_during_an_outage_and_returns_to_its_interval(backend):
    slurm, runner = backend
    loop = SyncLoop(ensure_cluster(slurm), slurm, interval_s=1.5)
    loop.cycle()
    states = list(Node.objects.order_by("name").values_list("name", "status"))
    runner.controller_up = False
    assert [loop.cycle() for _ in range(7)] == [2, 4, 8, 16, 30, 30, 30]
    assert list(Node.objects.order_by("name").values_list("name", "status")) == states
    assert Cluster.objects.get().controller_up is False
    runner.controller_up = True
    assert loop.cycle() == 1.5
    assert Cluster.objects.get().controller_up is True


def test_a_permanent_error_is_logged_and_retried_not_fatal(backend, caplog):
    slurm, runner = backend
    loop = SyncLoop(ensure_cluster(slurm), slurm, interval_s=2)
    runner.outputs[("squeue", "--json")] = "{not json"
    assert loop.cycle() == 2  # the first retry comes after the first back-off step
    assert "Sync of cluster lab failed" in caplog.text
    assert loop.failures == 1


def test_a_stopped_loop_ends(backend):
    slurm, _ = backend
    loop = SyncLoop(ensure_cluster(slurm), slurm, interval_s=60)
    loop.stop()
    loop.run_forever()
    assert Node.objects.count() == 0


def test_serve_runs_the_sync_loop_beside_the_server_on_slurm(backend, settings, monkeypatch):
    slurm, _ = backend
    registry.use(slurm)
    settings.MEDBAY_BACKEND = "slurm"
    started, served = [], []
    monkeypatch.setattr(SyncLoop, "start", lambda loop: started.append(loop))
    monkeypatch.setattr(
        "portal.management.commands.serve.serve", lambda host, port: served.append((host, port))
    )
    monkeypatch.setattr("portal.management.commands.serve.start_engine", lambda worker: None)
    try:
        out = StringIO()
        call_command("serve", "--addr", "127.0.0.1:8123", stdout=out)
        call_command("serve", "--no-sync", stdout=StringIO())
    finally:
        registry.use(None)
    assert [loop.cluster.name for loop in started] == ["lab"]
    assert served == [("127.0.0.1", 8123), ("127.0.0.1", 8000)]
    assert "Syncing cluster lab every 2s" in out.getvalue()


def test_serve_on_the_simulator_does_not_sync(db, settings, monkeypatch):
    settings.MEDBAY_BACKEND = "simulated"
    started = []
    monkeypatch.setattr(SyncLoop, "start", lambda loop: started.append(loop))
    monkeypatch.setattr("portal.management.commands.serve.serve", lambda host, port: None)
    monkeypatch.setattr("portal.management.commands.serve.start_engine", lambda worker: None)
    call_command("serve", stdout=StringIO())
    assert started == []


def test_serve_runs_a_remediation_engine_beside_the_server_unless_told_not_to(db, monkeypatch):
    engines = []
    monkeypatch.setattr("portal.management.commands.serve.serve", lambda host, port: None)
    monkeypatch.setattr("portal.management.commands.serve.start_engine", engines.append)
    out = StringIO()
    call_command("serve", "--no-sync", "--addr", "127.0.0.1:8124", stdout=out)
    call_command("serve", "--no-sync", "--no-engine", stdout=StringIO())
    assert engines == ["serve-8124"]
    assert "Remediation engine running in this process" in out.getvalue()


def test_serve_runs_one_sync_loop_per_enabled_cluster_of_the_table(db, settings, monkeypatch):
    settings.MEDBAY_BACKEND = "simulated"  # the environment's cluster is not synced by serve
    for name, interval in (("a100", "5"), ("h100", "3"), ("old", "2")):
        call_command("cluster", "add", name, "--sync-interval", interval, stdout=StringIO())
    call_command("cluster", "disable", "old", stdout=StringIO())
    started = []
    monkeypatch.setattr(SyncLoop, "start", lambda loop: started.append(loop))
    monkeypatch.setattr("portal.management.commands.serve.serve", lambda host, port: None)
    monkeypatch.setattr("portal.management.commands.serve.start_engine", lambda worker: None)
    out = StringIO()
    try:
        call_command("serve", stdout=out)
        call_command("serve", "--no-sync", stdout=StringIO())
    finally:
        registry.use(None)
    assert [(loop.cluster.name, loop.interval_s) for loop in started] == [("a100", 5), ("h100", 3)]
    assert started[0].connect() is not started[1].connect()
    assert "Syncing cluster a100 every 5s" in out.getvalue()


def test_serve_syncs_the_environments_cluster_moved_into_the_table_once(
    backend, settings, monkeypatch
):
    slurm, _ = backend
    registry.use(slurm)
    settings.MEDBAY_BACKEND = "slurm"
    call_command("cluster", "add", "lab", stdout=StringIO())  # Slurm's ClusterName
    started = []
    monkeypatch.setattr(SyncLoop, "start", lambda loop: started.append(loop))
    monkeypatch.setattr("portal.management.commands.serve.serve", lambda host, port: None)
    monkeypatch.setattr("portal.management.commands.serve.start_engine", lambda worker: None)
    try:
        call_command("serve", stdout=StringIO())
        assert [loop.cluster.name for loop in started] == ["lab"]
        assert started[0].connect() is not slurm  # its row's backend, not the environment's
    finally:
        registry.use(None)
