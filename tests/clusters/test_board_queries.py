"""The board renders without per-node queries, and live sockets connect cheaply and safely."""

from channels.testing import WebsocketCommunicator
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from clusters.models import Gpu, GpuHealth
from portal.consumers import LiveConsumer, groups_for
from remediation.models import BreakerTrip


def breaker_queries(client) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get("/").status_code == 200
    return sum('"clusters_breakertrip"' in query["sql"] for query in captured)


def test_the_breaker_banner_costs_one_query_while_no_trip_is_open(client, researcher, synced):
    client.force_login(researcher)
    assert breaker_queries(client) == 1


def test_a_trip_whose_limit_is_no_longer_reached_is_closed_when_a_page_renders(
    client, researcher, synced, cluster
):
    trip = BreakerTrip.objects.create(
        cluster=cluster, partition="", reason="4 nodes drained in 10 minutes"
    )
    client.force_login(researcher)
    response = client.get("/")
    trip.refresh_from_db()
    assert trip.closed_at is not None
    assert "4 nodes drained in 10 minutes" not in response.content.decode()


def test_tiles_escape_reasons_and_link_each_node_to_its_page(client, researcher, sim, synced):
    sim.drain_node("gpu-02", 'medbay: <script>alert("x")</script>')
    synced()
    Gpu.objects.filter(node__name="gpu-02", index=3).update(
        health=GpuHealth.FAILED, health_reason="XID 79 <b>off the bus</b>"
    )
    client.force_login(researcher)
    html = client.get("/").content.decode()
    assert "<script>alert" not in html
    assert "medbay: &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert 'title="GPU 3: failed: XID 79 &lt;b&gt;off the bus&lt;/b&gt;"' in html
    assert f'href="{reverse("cluster-node", args=["test", "gpu-02"])}"' in html


def test_everyone_with_a_role_joins_the_lists_groups_which_carry_no_rows(
    researcher, admin_user, manager
):
    # Lists are poked and fetch their rows through their views (core.live.poke).
    for user in (researcher, admin_user, manager):
        assert groups_for(user, ("board", "jobs")) == ("board", "jobs")


def test_only_those_who_may_see_a_job_join_its_pages_group(researcher, other_researcher, cluster):
    from jobs.models import Job

    Job.objects.create(cluster=cluster, slurm_id=77, user="alice")
    assert groups_for(researcher, ("job:77",)) == (f"job.{cluster.pk}.77",)
    assert groups_for(other_researcher, ("job:77",)) == ()


async def test_a_database_failure_on_connect_closes_the_socket_as_try_again_later(
    researcher, monkeypatch
):
    def unavailable(user):
        raise OperationalError("database is locked")

    monkeypatch.setattr("portal.consumers.roles_of", unavailable)
    comm = WebsocketCommunicator(LiveConsumer.as_asgi(), "/ws/live/?topics=board")
    comm.scope["user"] = researcher
    connected, _ = await comm.connect()
    assert connected  # accepted, so that the close code reaches the browser
    assert await comm.receive_output(timeout=2) == {"type": "websocket.close", "code": 4013}
