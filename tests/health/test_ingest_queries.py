"""Agent ingestion stays cheap per batch: constant queries, remediation woken only by news."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from clusters.models import Node
from health import ingest
from health.models import HealthEvent, Incident, NodeToken
from remediation import admission
from remediation.models import Remediation

URL = "/api/v1/health/events/"
HGX_BUS_IDS = ("0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00",
               "0000:9a:00", "0000:ab:00", "0000:ba:00", "0000:db:00")  # fmt: skip


@pytest.fixture
def agent(synced):
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {NodeToken.issue(Node.objects.get(name='gpu-02'))[1]}"
    )
    return client


@pytest.fixture
def heard():
    """Incident ids handed to the remediation listeners, one list per call."""
    calls: list[list[int]] = []
    ingest.incident_listeners.append(calls.append)
    yield calls
    ingest.incident_listeners.remove(calls.append)


def events(prefix: str, count: int, xids=(13, 31, 43)) -> list[dict]:
    """Distinct XID events (none folds) spread over the node's 8 GPUs, seconds old."""
    start = timezone.now() - timedelta(seconds=30)
    return [
        {
            "id": f"{prefix}-{n}",
            "kind": "xid",
            "xid": xids[n % len(xids)],
            "pci": HGX_BUS_IDS[n % len(HGX_BUS_IDS)],
            "message": f"pid={1000 + n}, name=python-{prefix}",
            "observed_at": (start + timedelta(milliseconds=n)).isoformat(),
        }
        for n in range(count)
    ]


def post(agent, batch, capture):
    with capture(execute=True):
        response = agent.post(URL, {"node": "gpu-02", "events": batch}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_a_batch_repeating_known_xids_wakes_no_remediation_listener(
    agent, heard, django_capture_on_commit_callbacks
):
    post(agent, events("first", 24), django_capture_on_commit_callbacks)
    assert len(heard) == 1 and len(heard[0]) == 8  # one new incident per GPU
    post(agent, events("again", 48), django_capture_on_commit_callbacks)
    assert len(heard) == 1
    assert Incident.objects.get(gpu_index=0).event_count == 3 + 6


def test_a_new_xid_in_an_open_incident_wakes_the_listeners_for_that_incident(
    agent, heard, django_capture_on_commit_callbacks
):
    post(agent, events("first", 8), django_capture_on_commit_callbacks)
    post(agent, events("worse", 1, xids=(48,)), django_capture_on_commit_callbacks)
    grown = Incident.objects.get(gpu_index=0)
    assert heard[-1] == [grown.pk]
    assert grown.xids == [13, 48]


def test_the_queries_of_a_batch_do_not_grow_with_its_size(
    agent, django_capture_on_commit_callbacks
):
    # 24 events give every GPU all three XIDs, so later batches only repeat them. Sizes
    # stay within one SQLite insert statement (999 parameters); PostgreSQL has no such cut.
    post(agent, events("warm", 24), django_capture_on_commit_callbacks)
    counts = []
    for prefix, size in (("small", 24), ("large", 48)):
        with CaptureQueriesContext(connection) as captured:
            post(agent, events(prefix, size), django_capture_on_commit_callbacks)
        counts.append(len(captured))
    assert counts[0] == counts[1]
    assert HealthEvent.objects.count() == 24 + 24 + 48


def test_an_incident_that_already_has_a_run_is_answered_in_one_query(
    synced, django_capture_on_commit_callbacks
):
    from tests.remediation.conftest import ingest_xid

    with django_capture_on_commit_callbacks(execute=True):
        incident_id = ingest_xid("gpu-02", 79).incident_ids[0]
    assert Remediation.objects.filter(incident_id=incident_id).count() == 1
    with CaptureQueriesContext(connection) as captured:
        decisions = admission.on_incidents([incident_id])
    assert [decision.outcome for decision in decisions] == ["already handled"]
    # The policies, then the incidents with their node and whether a run has them.
    assert len(captured) == 2
    assert Remediation.objects.count() == 1
