"""Lists of all clusters with two clusters that share node names (issue 32): the fleet
view, the event feed and the approval queue follow the cluster shown, and their live
updates reach only the pages that show it."""

from __future__ import annotations

import json

import pytest

from clusters import canvas
from clusters.board import BoardFilter
from core import live
from tests.portal import test_many_clusters_pages as pages

logged_in = pages.logged_in
second = pages.second  # the fixture: a second cluster with the first's node names


@pytest.fixture
def large(settings):
    """Seven nodes a cluster count as large: the board is the fleet view."""
    settings.MEDBAY_BOARD_TILES_MAX = 4


def test_a_fleet_of_all_clusters_draws_each_clusters_nodes_in_groups_of_their_own(second, large):
    groups = canvas.payload(BoardFilter())["groups"]
    train = [(g["cluster"], g["nodes"][:2]) for g in groups if g["name"] == "train"]
    assert train == [("second", ["gpu-01", "gpu-02"]), ("test", ["gpu-01", "gpu-02"])]


def test_a_change_on_one_cluster_reaches_fleet_pages_named_by_its_cluster(
    sim, second, large, monkeypatch, django_capture_on_commit_callbacks
):
    sent = []
    monkeypatch.setattr(live, "send_html", lambda group, html: sent.append((group, html)))
    second.backend_sim.drain_node("gpu-02", "only on second")
    with django_capture_on_commit_callbacks(execute=True):
        second.sync()
    everywhere = [json.loads(html) for group, html in sent if group == live.FLEET_GROUP]
    assert everywhere == [{"fleet": [["second", "gpu-02", "oooooooo"]]}]
    on_second = [html for group, html in sent if group == f"fleet.{second.pk}"]
    assert len(on_second) == 1
    others = [g for g, _ in sent if g.startswith("fleet.") and g != f"fleet.{second.pk}"]
    assert others == []


def test_the_fleet_page_links_nodes_at_their_cluster_address(researcher, second, large):
    page = logged_in(researcher).get("/?cluster=all").content.decode()
    assert 'data-node-url="/nodes/CLUSTER/NODE/"' in page


def test_a_fleet_of_all_clusters_names_each_unhealthy_nodes_cluster(
    researcher, sim, synced, second, large
):
    sim.drain_node("gpu-03", "on test")
    second.backend_sim.drain_node("gpu-03", "on second")
    second.sync()
    synced()
    client = logged_in(researcher)
    page = client.get("/?cluster=all").content.decode()
    assert 'id="problem-second-gpu-03"' in page and 'id="problem-test-gpu-03"' in page
    assert '<th scope="col">Cluster</th>' in page
    one = client.get("/?cluster=second").content.decode()
    assert 'id="problem-gpu-03"' in one and '<th scope="col">Cluster</th>' not in one


def _on_second_approval(second):
    from clusters.models import Node
    from remediation import services
    from remediation.models import Mode, Trigger

    node = Node.objects.get(cluster=second, name="gpu-02")
    return services.create_run(
        node, "drain", trigger=Trigger.POLICY, reason="asks first", mode=Mode.APPROVAL, actor="t"
    )


def test_the_event_feed_shows_the_chosen_clusters_events_and_names_clusters_on_all(
    researcher, sim, second
):
    from demo.simulation import record_gpu_fault

    record_gpu_fault(second, second.backend_sim.inject_xid("gpu-02", 3, 31))
    client = logged_in(researcher)
    on_second = client.get("/health/events/?cluster=second").content.decode()
    assert 'href="/nodes/second/gpu-02/"' in on_second and "event-cluster" not in on_second
    on_test = client.get("/health/events/?cluster=test").content.decode()
    assert "/nodes/second/gpu-02/" not in on_test
    assert "topics=events%3Atest" in on_test
    rows = client.get(
        "/health/events/?cluster=test", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="event-rows"
    ).content.decode()
    assert "/nodes/second/" not in rows and 'id="no-events"' in rows
    everything = client.get("/health/events/?cluster=all").content.decode()
    assert 'gpu-02</a> <span class="muted event-cluster">second</span>' in everything
    xid_page = client.get("/health/xid/31/?cluster=test").content.decode()
    assert "/nodes/second/gpu-02/" not in xid_page
    assert "/nodes/second/gpu-02/" in client.get("/health/xid/31/?cluster=all").content.decode()


def test_an_event_on_one_cluster_pokes_only_its_feeds_and_those_of_all(
    sim, synced, second, monkeypatch, django_capture_on_commit_callbacks
):
    from demo.simulation import record_gpu_fault

    sent = []
    monkeypatch.setattr(live, "send_events", lambda events: sent.extend(events))
    with django_capture_on_commit_callbacks(execute=True):
        record_gpu_fault(second, second.backend_sim.inject_xid("gpu-02", 3, 31))
    poked = {group for group, event in sent if "events" in event.get("regions", ())}
    assert poked == {"events", f"events.{second.pk}"}


def test_the_approval_queue_shows_the_chosen_clusters_runs_only(admin_user, sim, synced, second):
    run = _on_second_approval(second)
    client = logged_in(admin_user)
    on_test = client.get("/remediation/approvals/?cluster=test").content.decode()
    assert f'id="approval-{run.pk}"' not in on_test
    assert "topics=remediation%3Atest" in on_test
    assert 'hx-get="/remediation/approvals/?cluster=test"' in on_test
    on_second = client.get("/remediation/approvals/?cluster=second").content.decode()
    assert f'id="approval-{run.pk}"' in on_second
    assert f'id="approval-{run.pk}"' in client.get("/remediation/approvals/").content.decode()


def test_with_one_cluster_the_approval_queue_fetches_itself_as_before(admin_user, synced):
    page = logged_in(admin_user).get("/remediation/approvals/").content.decode()
    assert 'hx-get="/remediation/approvals/" hx-select' in page
    assert "topics=remediation%22" in page or 'topics=remediation"' in page


def test_the_overview_says_a_failing_sync_in_words_and_since_when(manager, second):
    from datetime import timedelta

    from django.utils import timezone

    from clusters.models import Cluster

    since = timezone.now() - timedelta(minutes=7)
    Cluster.objects.filter(name="second").update(
        sync_error="slurm.conf /etc/nowhere.conf does not exist on this host",
        sync_error_since=since,
        last_sync_at=since,
    )
    page = logged_in(manager).get("/clusters/overview/").content.decode()
    card = page[page.index('id="cluster-second"') :]
    assert "Sync failing for 7" in card
    assert f"failing since {timezone.localtime(since):%Y-%m-%d %H:%M:%S}" in card
    assert "slurm.conf /etc/nowhere.conf does not exist on this host" in card
    assert 'id="sync-error-test"' not in page
    assert "topics=clusters" in page


def test_the_overviews_cards_are_fetched_alone_for_its_live_updates(manager, second):
    response = logged_in(manager).get(
        "/clusters/overview/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="cluster-overview"
    )
    text = response.content.decode()
    assert text.lstrip().startswith('<div class="cluster-overview" id="cluster-overview"')
    assert 'id="cluster-second"' in text and "csrf" not in text


def test_a_clusters_node_or_sync_change_pokes_the_overview(
    sim, second, monkeypatch, django_capture_on_commit_callbacks
):
    from sync.cycle import record_sync_error

    sent = []
    monkeypatch.setattr(live, "send_events", lambda events: sent.extend(events))
    second.backend_sim.drain_node("gpu-02", "only on second")
    with django_capture_on_commit_callbacks(execute=True):
        second.sync()
    assert ("clusters", {"type": "live.poke", "regions": ["cluster-overview"]}) in sent
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        record_sync_error(second, "slurmrestd unreachable")
    assert ("clusters", {"type": "live.poke", "regions": ["cluster-overview"]}) in sent


def _trouble_on_both(second, settings):
    """The first cluster's controller is down; the second's sync fails and its breaker
    refused a drain of its gpu-02 (a cluster-wide trip, kept open by a limit of 0)."""
    from datetime import timedelta

    from django.utils import timezone

    from clusters.models import Cluster, Node
    from remediation.models import BreakerRefusal, BreakerTrip

    now = timezone.now()
    Cluster.objects.filter(name="test").update(
        controller_up=False, controller_down_since=now - timedelta(minutes=3)
    )
    Cluster.objects.filter(name="second").update(
        sync_error="slurmrestd refused Medbay's JWT", sync_error_since=now
    )
    settings.MEDBAY_BREAKER_MAX_NODES = 0
    node = Node.objects.get(cluster=second, name="gpu-02")
    trip = BreakerTrip.objects.create(
        cluster=second, partition="", reason="too many nodes taken out"
    )
    BreakerRefusal.objects.create(trip=trip, node=node, action="drain", reason="limit reached")


def test_a_board_of_all_clusters_names_each_clusters_problem(
    researcher, sim, synced, second, settings
):
    _trouble_on_both(second, settings)
    page = logged_in(researcher).get("/?cluster=all").content.decode()
    banner = page[page.index('id="controller-banner"') : page.index('id="board-counts"')]
    assert 'id="controller-down-test"' in banner
    assert "Cluster test: slurm controller unreachable since" in banner
    assert 'id="sync-error-second"' in banner
    assert "Cluster second is not synced since" in banner
    assert "slurmrestd refused Medbay&#x27;s JWT" in banner
    assert "Automatic remediation paused: on second, circuit breaker open since" in banner
    assert 'href="/nodes/second/gpu-02/">gpu-02</a> on second (drain at' in banner


def test_a_board_of_one_cluster_shows_only_that_clusters_problems(
    researcher, sim, synced, second, settings
):
    _trouble_on_both(second, settings)
    client = logged_in(researcher)
    on_test = client.get("/?cluster=test").content.decode()
    banner = on_test[on_test.index('id="controller-banner"') : on_test.index('id="board-counts"')]
    assert "Slurm controller unreachable since" in banner
    assert "second" not in banner and "breaker" not in banner
    on_second = client.get("/?cluster=second").content.decode()
    banner = on_second[on_second.index('id="controller-banner"') :]
    assert 'id="sync-error"' in banner and 'id="breaker-banner"' in banner
    assert "circuit breaker open since" in banner and "unreachable" not in banner


def test_a_clusters_banner_change_reaches_its_boards_and_the_boards_of_all_clusters(
    sim, synced, second, monkeypatch, settings
):
    from clusters.live import publish_banner

    _trouble_on_both(second, settings)
    sent = []
    monkeypatch.setattr(live, "send_html", lambda group, html: sent.append((group, html)))
    publish_banner(second.pk)
    by_group = dict(sent)
    assert set(by_group) == {"board", "fleet", f"board.{second.pk}", f"fleet.{second.pk}"}
    assert "Cluster test: slurm controller unreachable" in by_group["board"]
    assert 'id="sync-error-second"' in by_group["board"]
    assert "unreachable" not in by_group[f"board.{second.pk}"]
    assert 'id="sync-error"' in by_group[f"board.{second.pk}"]


def test_a_runs_steps_link_the_jobs_they_name_on_the_runs_cluster(admin_user, sim, synced, second):
    from remediation.models import RemediationStep

    run = _on_second_approval(second)
    RemediationStep.objects.create(
        remediation=run, index=0, name="requeue_jobs", outcome="ok", message="requeued 1012"
    )
    page = logged_in(admin_user).get(f"/remediation/{run.pk}/").content.decode()
    assert 'requeued <a href="/jobs/second/1012/">1012</a>' in page
    assert "topics=remediation%3Asecond" in page


def _incident_on_second(second, **fields):
    from django.utils import timezone

    from clusters.models import Node
    from health.models import Incident

    now = timezone.now()
    node = Node.objects.get(cluster=second, name="gpu-02")
    return Incident.objects.create(
        node=node, gpu_index=3, opened_at=now, last_event_at=now, xids=[79], **fields
    )


def test_a_fault_groups_page_links_its_job_and_nodes_on_its_cluster(researcher, sim, second):
    from django.utils import timezone

    from health.models import FaultGroup, FaultGroupKind

    group = FaultGroup.objects.create(
        kind=FaultGroupKind.JOB,
        cluster=second,
        slurm_job_id=1012,
        rule="one job's ranks",
        window_s=2,
        opened_at=timezone.now(),
    )
    _incident_on_second(second, group=group)
    page = logged_in(researcher).get(f"/faults/{group.pk}/").content.decode()
    assert 'Fault of job <a href="/jobs/second/1012/">1012</a>' in page
    assert '<a href="/nodes/second/gpu-02/">gpu-02</a>' in page
    assert "topics=remediation%3Asecond" in page


def test_the_replay_links_each_node_on_its_cluster_and_follows_the_cluster_shown(
    admin_user, sim, synced, second
):
    from django.utils import timezone

    _incident_on_second(second)
    day = timezone.localdate().isoformat()
    client = logged_in(admin_user)
    everything = client.get(f"/remediation/replay/?start={day}&end={day}&cluster=all")
    assert '<a href="/nodes/second/gpu-02/">gpu-02</a>' in everything.content.decode()
    on_test = client.get(f"/remediation/replay/?start={day}&end={day}&cluster=test")
    assert "0 incidents" in on_test.content.decode()


def test_partition_edits_are_listed_and_adopted_per_cluster(admin_user, sim, synced, second):
    from clusters.models import Cluster

    edit = {"slurm": ["infer"], "medbay": ["train"], "seen_at": "now"}
    Cluster.objects.update(partition_edits={"gpu-02": edit})
    client = logged_in(admin_user)
    page = client.get("/partitions/edits/?cluster=all").content.decode()
    assert 'id="edits-second"' in page and 'id="edits-test"' in page
    assert 'href="/nodes/second/gpu-02/"' in page and 'href="/nodes/test/gpu-02/"' in page

    unnamed = client.post("/partitions/edits/", {"node": ["gpu-02"]}, follow=True)
    assert "Say which cluster" in unnamed.content.decode()
    assert Cluster.objects.filter(partition_edits={}).count() == 0

    response = client.post("/partitions/edits/", {"cluster": "second", "node": ["gpu-02"]})
    assert response["Location"] == "/partitions/edits/?cluster=second"
    assert Cluster.objects.get(name="second").partition_edits == {}
    assert Cluster.objects.get(name="test").partition_edits == {"gpu-02": edit}
    banner = client.get("/?cluster=test").content.decode()
    assert 'href="/partitions/edits/?cluster=test">Review and adopt</a>' in banner
