"""Pages and the API with two clusters in one portal (issue 32): the header's switcher,
cluster addresses for jobs and nodes, the overview, the API's cluster filter."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from clusters.backends import registry
from clusters.backends.base import JobSubmission
from clusters.config import ClusterConfig
from clusters.configure import add_cluster
from clusters.models import Cluster
from sync.cycle import apply_snapshot

SCRIPT = "#!/bin/bash\n#SBATCH --partition=train\n#SBATCH --nodes=1\nsrun sleep 600\n"


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def second(sim, synced):
    """A second simulated cluster, with the same node names and job ids as the first."""
    cluster = add_cluster("second", ClusterConfig(), by="test")
    backend = registry.backend_for(cluster)
    backend.fault_rate_per_gpu_day = 0

    def sync():
        apply_snapshot(cluster, backend.partitions(), backend.nodes(), backend.jobs())

    sync()
    cluster.backend_sim, cluster.sync = backend, sync
    return cluster


@pytest.fixture
def same_job_on_both(sim, synced, second):
    job_id = second.backend_sim.submit_job(JobSubmission(script=SCRIPT, user="alice"))
    assert sim.submit_job(JobSubmission(script=SCRIPT, user="alice")) == job_id
    second.sync()
    synced()
    return job_id


def test_with_one_cluster_the_header_names_it_and_offers_no_choice(admin_user, synced):
    page = logged_in(admin_user).get("/").content.decode()
    assert 'class="switcher-one"' in page
    assert 'id="cluster-switcher"' not in page


def test_the_switcher_lists_every_enabled_cluster_and_all_clusters(admin_user, second):
    page = logged_in(admin_user).get("/").content.decode()
    assert 'id="cluster-switcher"' in page
    assert 'value="all"' in page and 'value="second"' in page and 'value="test"' in page


def test_a_chosen_cluster_is_remembered_and_the_board_shows_only_its_nodes(researcher, sim, second):
    second.backend_sim.drain_node("gpu-02", "only on second")
    second.sync()
    client = logged_in(researcher)
    response = client.post("/clusters/choose/", {"cluster": "second", "next": "/?cluster=test"})
    assert response.status_code == 302 and response["Location"] == "/"

    board = Client()
    board.force_login(researcher)  # another browser: the choice is the person's
    page = board.get("/").content.decode()
    assert 'href="/nodes/second/gpu-02/"' in page
    assert "/nodes/test/" not in page
    assert page.count("status-drained") == 1


def test_all_clusters_shows_both_with_tiles_named_by_cluster(researcher, second):
    page = logged_in(researcher).get("/?cluster=all").content.decode()
    assert 'id="node-second-gpu-01"' in page and 'id="node-test-gpu-01"' in page


def test_choosing_an_unknown_cluster_says_so_and_changes_nothing(researcher, second):
    client = logged_in(researcher)
    client.post("/clusters/choose/", {"cluster": "second"})
    response = client.post("/clusters/choose/", {"cluster": "nowhere"}, follow=True)
    assert "No enabled cluster is named" in response.content.decode()
    assert "/nodes/second/" in client.get("/").content.decode()


def test_an_unknown_cluster_in_the_address_is_a_404_not_a_500(researcher, second):
    assert logged_in(researcher).get("/?cluster=nowhere").status_code == 404


def test_the_queue_shows_the_chosen_clusters_jobs_with_cluster_links(researcher, same_job_on_both):
    client = logged_in(researcher)
    client.post("/clusters/choose/", {"cluster": "second"})
    page = client.get("/jobs/").content.decode()
    assert f'href="/jobs/second/{same_job_on_both}/"' in page
    assert f'href="/jobs/test/{same_job_on_both}/"' not in page
    everything = client.get("/jobs/?cluster=all").content.decode()
    assert f'href="/jobs/test/{same_job_on_both}/"' in everything


def test_a_job_id_on_two_clusters_asks_which_and_each_address_opens_its_own(
    researcher, same_job_on_both
):
    client = logged_in(researcher)
    choice = client.get(f"/jobs/{same_job_on_both}/")
    assert choice.status_code == 200
    text = choice.content.decode()
    assert f'href="/jobs/second/{same_job_on_both}/"' in text
    assert f'href="/jobs/test/{same_job_on_both}/"' in text
    story = client.get(f"/jobs/{same_job_on_both}/story").content.decode()
    assert f'href="/jobs/second/{same_job_on_both}/story"' in story
    page = client.get(f"/jobs/second/{same_job_on_both}/").content.decode()
    assert "On cluster <strong>second</strong>" in page
    assert f"topics=job%3Asecond%3A{same_job_on_both}" in page


def test_a_job_id_on_one_cluster_leads_to_its_cluster_address(researcher, sim, synced, second):
    job_id = second.backend_sim.submit_job(JobSubmission(script=SCRIPT, user="alice"))
    second.sync()
    response = logged_in(researcher).get(f"/jobs/{job_id}/")
    assert response.status_code == 302
    assert response["Location"] == f"/jobs/second/{job_id}/"


def test_cancelling_by_id_alone_on_two_clusters_cancels_nothing(researcher, same_job_on_both):
    client = logged_in(researcher)
    response = client.post(f"/jobs/{same_job_on_both}/cancel", {"confirm": "yes"})
    assert response.status_code == 409
    assert f"/jobs/second/{same_job_on_both}/cancel" in response.content.decode()


def test_a_node_name_on_two_clusters_asks_which(admin_user, second):
    client = logged_in(admin_user)
    page = client.get("/nodes/gpu-01/").content.decode()
    assert 'href="/nodes/second/gpu-01/"' in page and 'href="/nodes/test/gpu-01/"' in page
    action = client.get("/nodes/gpu-01/actions/drain/").content.decode()
    assert 'href="/nodes/second/gpu-01/actions/drain/"' in action
    assert client.get("/nodes/second/gpu-01/").status_code == 200
    assert client.get("/nodes/nowhere/gpu-01/").status_code == 404


def test_a_node_name_on_one_cluster_leads_to_its_cluster_address(admin_user, synced):
    response = logged_in(admin_user).get("/nodes/gpu-01/")
    assert response.status_code == 302 and response["Location"] == "/nodes/test/gpu-01/"


def test_the_api_filters_jobs_by_cluster_and_names_it(researcher, same_job_on_both):
    client = logged_in(researcher)
    jobs = client.get("/api/v1/jobs/?cluster=second").json()["results"]
    assert [(job["cluster"], job["url"]) for job in jobs] == [
        ("second", f"/jobs/second/{same_job_on_both}/")
    ]
    refused = client.get("/api/v1/jobs/?cluster=nowhere")
    assert refused.status_code == 400
    assert "nowhere" in refused.json()["errors"]["cluster"][0]
    ambiguous = client.get(f"/api/v1/jobs/{same_job_on_both}/")
    assert ambiguous.status_code == 400 and "cluster" in ambiguous.json()["errors"]
    one = client.get(f"/api/v1/jobs/{same_job_on_both}/?cluster=test").json()
    assert one["cluster"] == "test"


def test_the_api_names_each_nodes_cluster_and_asks_which_for_a_shared_name(researcher, second):
    client = logged_in(researcher)
    nodes = client.get("/api/v1/nodes/?cluster=second").json()["results"]
    assert {node["cluster"] for node in nodes} == {"second"}
    assert nodes[0]["url"] == f"/nodes/second/{nodes[0]['name']}/"
    assert client.get("/api/v1/nodes/gpu-01/").status_code == 400
    assert client.get("/api/v1/nodes/gpu-01/?cluster=test").json()["cluster"] == "test"


def test_the_overview_says_each_clusters_nodes_gpus_out_runs_and_sync(manager, sim, second):
    sim.drain_node("gpu-01", "broken")
    Cluster.objects.filter(name="test").update(
        controller_up=False, controller_down_since=timezone.now() - timedelta(minutes=5)
    )
    Cluster.objects.filter(name="second").update(last_sync_at=timezone.now())
    page = logged_in(manager).get("/clusters/overview/").content.decode()
    assert 'id="cluster-second"' in page and 'id="cluster-test"' in page
    assert "Slurm controller unreachable for 5" in page
    assert "Synced 0 s ago." in page or "Synced 1 s ago." in page


def test_a_sync_that_stopped_is_said_to_be_stale(researcher, second):
    Cluster.objects.filter(name="second").update(
        last_sync_at=timezone.now() - timedelta(hours=2), sync_interval_s=2.0
    )
    page = logged_in(researcher).get("/clusters/overview/").content.decode()
    assert "Sync stale: the last good cycle was 2" in page
