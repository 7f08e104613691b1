"""Each cluster's sync on its own: one cluster's down, hanging or wrongly configured
controller is recorded on its own row, in words, and never stops or delays another's."""

from __future__ import annotations

import threading
from datetime import timedelta
from io import StringIO

import pytest
import requests
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from clusters.backends import registry
from clusters.backends.base import BackendError
from clusters.backends.simulated import SimulatedCluster
from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm_rest import JwtAuth, SlurmRestBackend
from clusters.models import Cluster, Node
from sync.cycle import sync_once
from sync.identity import SameSlurmAsAnother
from sync.loop import SyncLoop
from tests.waiting import wait_for

from .fakes import SLURM_CONF, SampleSlurm

MISSING_CONF = "/nonexistent/slurm.conf"


def table_cluster(name: str) -> Cluster:
    call_command("cluster", "add", name, "--sync-interval", "0.5", stdout=StringIO())
    return Cluster.objects.get(name=name)


def slurm_at(tmp_path, name: str = "lab") -> tuple[SlurmBackend, SampleSlurm]:
    tmp_path.mkdir(exist_ok=True)
    conf = tmp_path / f"{name}.conf"
    conf.write_text(SLURM_CONF.replace("ClusterName=lab", f"ClusterName={name}"))
    runner = SampleSlurm()
    config = runner.outputs[("scontrol", "show", "config")]
    runner.outputs[("scontrol", "show", "config")] = config.replace("= lab", f"= {name}")
    return SlurmBackend(str(conf), runner=runner), runner


def simulated() -> SimulatedCluster:
    simulator = SimulatedCluster.standard(train=2, infer=1, spare=1, seed=3)
    simulator.fault_rate_per_gpu_day = 0
    return simulator


class Hanging(SimulatedCluster):
    """A controller that stops answering: every read waits until released, then times out."""

    def __init__(self, released: threading.Event) -> None:
        super().__init__()
        self.released, self.waiting = released, threading.Event()

    def partitions(self):
        self.waiting.set()
        self.released.wait(30)
        raise BackendError("slurm_load_partitions: Socket timed out", permanent=False)


def cluster_list() -> str:
    out = StringIO()
    call_command("cluster", "list", stdout=out)
    return out.getvalue()


@pytest.fixture(autouse=True)
def forget_backends():
    yield
    registry.use(None)


@pytest.mark.django_db(transaction=True)
def test_a_hanging_controller_never_delays_another_clusters_sync():
    stuck_cluster, live_cluster = table_cluster("stuck"), table_cluster("live")
    released = threading.Event()
    stuck = SyncLoop(stuck_cluster, Hanging(released), interval_s=0.5)
    live = SyncLoop(live_cluster, simulated(), interval_s=0.5)
    threads = [stuck.start(), live.start()]
    try:
        assert stuck.backend.waiting.wait(10)
        first = wait_for(
            lambda: Cluster.objects.get(name="live").last_sync_at, 20, "the live cluster's sync"
        )
        wait_for(
            lambda: Cluster.objects.get(name="live").last_sync_at > first,
            20,
            "a second cycle of the live cluster while the other hangs",
        )
        assert stuck.backend.waiting.is_set() and not released.is_set()
        assert Node.objects.filter(cluster__name="live").exists()
        released.set()  # the hanging command times out, as Slurm's client would
        wait_for(lambda: Cluster.objects.get(name="stuck").sync_error, 20, "the recorded outage")
    finally:
        released.set()
        for loop in (stuck, live):
            loop.stop()
        for thread in threads:
            thread.join(10)
        connection.close()
    stuck_row = Cluster.objects.get(name="stuck")
    assert "Socket timed out" in stuck_row.sync_error
    assert stuck_row.sync_error_since is not None
    assert Cluster.objects.get(name="live").sync_error == ""


def test_a_cluster_that_hangs_without_ever_timing_out_is_reported_as_silent(db):
    cluster = table_cluster("quiet")
    Cluster.objects.filter(pk=cluster.pk).update(
        last_sync_at=timezone.now() - timedelta(minutes=10)
    )
    assert "quiet" in cluster_list()
    assert "no sync since" in cluster_list()
    assert "its controller is not answering" in cluster_list()


def test_a_wrong_slurm_conf_is_recorded_on_its_cluster_and_the_others_sync_on(db, tmp_path):
    broken_cluster, good_cluster = table_cluster("broken"), table_cluster("good")
    runner = SampleSlurm()
    runner.outputs = {}  # Slurm's client cannot read its configuration: every command fails
    broken = SyncLoop(broken_cluster, SlurmBackend(MISSING_CONF, runner=runner), interval_s=1)
    good = SyncLoop(good_cluster, simulated(), interval_s=1)
    assert broken.cycle() == 2  # backing off
    assert good.cycle() == 1
    row = Cluster.objects.get(name="broken")
    assert row.sync_error.startswith(f"slurm.conf {MISSING_CONF} does not exist on this host")
    assert not Node.objects.filter(cluster=row).exists()
    assert Node.objects.filter(cluster__name="good").exists()
    assert f"sync failing since {timezone.localtime(row.sync_error_since):%Y-%m-%d}" in (
        cluster_list()
    )
    assert Cluster.objects.get(name="good").sync_problem() == ""


def test_the_first_failure_is_when_the_error_started_and_a_good_cycle_clears_it(db, tmp_path):
    backend, runner = slurm_at(tmp_path)
    cluster = table_cluster("lab")
    runner.controller_up = False
    sync_once(cluster, backend)
    since = Cluster.objects.get(pk=cluster.pk).sync_error_since
    sync_once(cluster, backend)
    row = Cluster.objects.get(pk=cluster.pk)
    assert row.sync_error_since == since
    assert row.sync_error.startswith("Slurm controller unreachable")
    runner.controller_up = True
    sync_once(cluster, backend)
    row = Cluster.objects.get(pk=cluster.pk)
    assert (row.sync_error, row.sync_error_since) == ("", None)
    assert row.slurm_cluster_name == "lab"


def rest_backend(tmp_path, session) -> SlurmRestBackend:
    key = tmp_path / "jwt.key"
    key.write_bytes(b"k" * 32)
    rest = SlurmRestBackend(
        "http://rest.test",
        JwtAuth(key_path=str(key), token_user="medbay"),
        session=session,
        runner=SampleSlurm(),
    )
    rest.api_version = "v0.0.45"
    return rest


class Answering(requests.Session):
    def __init__(self, status: int, body: bytes = b"") -> None:
        super().__init__()
        self.status, self.body = status, body

    def request(self, method, url, **kwargs):
        response = requests.Response()
        response._content_consumed = True
        response.status_code, response._content = self.status, self.body
        return response


class Unreachable(requests.Session):
    def request(self, *args, **kwargs):
        raise requests.ConnectionError("[Errno 111] Connection refused")


def test_a_jwt_slurmrestd_refuses_is_said_in_words_on_that_cluster(db, tmp_path):
    cluster = table_cluster("rest")
    refused = b'{"errors": [{"error": "Authentication failure", "error_number": 1007}]}'
    loop = SyncLoop(cluster, rest_backend(tmp_path, Answering(401, refused)), interval_s=1)
    loop.cycle()
    error = Cluster.objects.get(name="rest").sync_error
    assert error.startswith("slurmrestd refused Medbay's JWT; check the cluster's JWT key file")
    assert "Authentication failure" in error


def test_an_unreachable_slurmrestd_is_an_outage_of_its_cluster_only(db, tmp_path):
    cluster, other = table_cluster("far"), table_cluster("near")
    SyncLoop(cluster, rest_backend(tmp_path, Unreachable()), interval_s=1).cycle()
    SyncLoop(other, simulated(), interval_s=1).cycle()
    far = Cluster.objects.get(name="far")
    assert far.controller_up is False
    assert "slurmrestd unreachable at http://rest.test" in far.sync_error
    near = Cluster.objects.get(name="near")
    assert near.controller_up and near.sync_error == ""


def test_a_row_whose_backend_cannot_be_built_says_why_and_retries(db):
    cluster = table_cluster("nokey")
    Cluster.objects.filter(pk=cluster.pk).update(
        transport="rest", slurmrestd_url="http://rest.test", jwt_key_file="", fleet="slurm-spares"
    )
    loop = SyncLoop.for_cluster(Cluster.objects.get(pk=cluster.pk))
    assert loop.cycle() == 2
    error = Cluster.objects.get(pk=cluster.pk).sync_error
    assert error == (
        "Cannot set up the cluster's backend: slurmrestd needs a JWT key or a token file"
    )


def test_two_clusters_reporting_one_clustername_the_second_is_refused_and_nothing_merges(
    db, tmp_path, client, admin_user
):
    first_backend, _ = slurm_at(tmp_path / "first", "lab")
    second_backend, _ = slurm_at(tmp_path, "lab")
    first, second = table_cluster("lab"), table_cluster("copy")
    sync_once(first, first_backend)
    nodes = sorted(Node.objects.filter(cluster=first).values_list("name", "status"))
    with pytest.raises(SameSlurmAsAnother):
        sync_once(second, second_backend)
    assert SyncLoop(second, second_backend, interval_s=1).cycle() == 2  # the loop goes on
    copy = Cluster.objects.get(name="copy")
    assert "reports ClusterName=lab, the Slurm cluster lab already syncs" in copy.sync_error
    assert copy.slurm_cluster_name == ""
    assert not Node.objects.filter(cluster=copy).exists()
    assert sorted(Node.objects.filter(cluster=first).values_list("name", "status")) == nodes
    sync_once(first, first_backend)  # the first row keeps syncing
    assert Cluster.objects.get(name="lab").sync_error == ""
    assert "the Slurm cluster lab already syncs" in cluster_list()
    client.force_login(admin_user)
    page = client.get("/clusters/")
    assert page.status_code == 200
    assert "the Slurm cluster lab already syncs" in page.content.decode()


def test_pointing_the_refused_row_at_its_own_slurm_lets_it_sync(db, tmp_path):
    first_backend, _ = slurm_at(tmp_path / "first", "lab")
    second_backend, runner = slurm_at(tmp_path, "lab")
    first, second = table_cluster("lab"), table_cluster("other")
    sync_once(first, first_backend)
    with pytest.raises(SameSlurmAsAnother):
        sync_once(second, second_backend)
    config = runner.outputs[("scontrol", "show", "config")]
    runner.outputs[("scontrol", "show", "config")] = config.replace("= lab", "= other")
    sync_once(second, second_backend)
    other = Cluster.objects.get(name="other")
    assert (other.slurm_cluster_name, other.sync_error) == ("other", "")
    assert Node.objects.filter(cluster=other).count() == 6


def test_editing_how_a_cluster_is_reached_forgets_its_claimed_clustername(db, tmp_path):
    backend, _ = slurm_at(tmp_path, "lab")
    cluster = table_cluster("lab")
    sync_once(cluster, backend)
    assert Cluster.objects.get(pk=cluster.pk).slurm_cluster_name == "lab"
    call_command("cluster", "edit", "lab", "--sync-interval", "3", stdout=StringIO())
    assert Cluster.objects.get(pk=cluster.pk).slurm_cluster_name == "lab"
    call_command(
        "cluster", "edit", "lab", "--transport", "cli", "--slurm-conf", "/etc/x.conf",
        stdout=StringIO(),
    )  # fmt: skip
    assert Cluster.objects.get(pk=cluster.pk).slurm_cluster_name == ""
