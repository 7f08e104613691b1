"""Hostile input gets a 4xx naming the field, never a 500 (run on PostgreSQL in CI).

NUL bytes and lone surrogates in paths, parameters, cookies and JSON; dates near
year 9999; integers past 2**63; JSON too deep or too big to parse.
"""

from __future__ import annotations

import pytest
from django.test import Client

from health.models import HealthEvent, NodeToken
from identity.accounts import issue_api_token
from tests.security.conftest import client_for

pytestmark = pytest.mark.django_db

NUL_GETS = [
    "/?partition=%00",
    "/nodes/%00/",
    "/api/v1/nodes/%00/",
    "/api/v1/jobs/?user=%00",
    "/api/v1/jobs/?partition=%00&state=%00",
    "/events/?node=%00",
    "/api/v1/health/events/?node=%00",
    "/jobs/?q=%00",
    "/remediations/?node=%00",
    "/?%00=1",
]


@pytest.mark.parametrize("url", NUL_GETS)
def test_a_nul_in_a_path_or_parameter_is_a_400_that_names_it(world, url):
    response = client_for(world, "admin").get(url)

    assert response.status_code == 400
    assert "NUL" in response.content.decode()


def test_a_nul_in_the_session_cookie_is_a_400(world):
    client = Client()
    client.cookies["sessionid"] = "abc\x00defghijk"

    assert client.get("/").status_code == 400


def test_a_nul_in_a_login_form_is_a_400_naming_the_field(db):
    response = Client().post("/login/", {"username": "al\x00ice", "password": "x"})

    assert response.status_code == 400
    assert "username" in response.content.decode()


FAR = [
    "/reports/utilization/?end=9999-12-31",
    "/reports/utilization/?start=0001-01-01&end=0001-01-02",
    "/api/v1/reports/utilization/?end=9999-12-31",
    "/api/v1/health/events/?since=9999-12-31T23:59:59-23:59",
    "/api/v1/health/events/?until=0001-01-01T00:00:00%2B23:59",
    "/events/?since=9999-12-31T23:59:59-23:59",
    "/api/v1/health/events/?gpu=99999999999999999999999&xid=-99999999999999999999",
    "/api/v1/health/events/?limit=99999999999999999999999",
    "/api/v1/health/events/?offset=99999999999999999999999",
    "/api/v1/jobs/?limit=99999999999999999999999&offset=99999999999999999999",
    "/api/v1/jobs/99999999999999999999999/",
    "/jobs/99999999999999999999999/",
    "/remediations/99999999999999999999999/",
]


@pytest.mark.parametrize("url", FAR)
def test_far_dates_and_huge_integers_are_never_a_500(world, url):
    response = client_for(world, "admin").get(url)

    assert response.status_code < 500, response.content[:300]


def test_a_far_report_date_says_which_range_is_allowed(world):
    response = client_for(world, "admin").get("/api/v1/reports/utilization/?end=9999-12-31")

    assert response.status_code == 400
    assert "end" in response.json()["errors"]


def test_a_far_replay_date_is_a_form_error(world):
    response = client_for(world, "admin").get(
        "/remediation/replay/", {"start": "9999-12-30", "end": "9999-12-31"}
    )

    assert response.status_code == 400
    assert "between 2000-01-01" in response.content.decode()


def test_event_pages_are_capped_however_large_the_limit(world):
    response = client_for(world, "researcher").get("/api/v1/health/events/?limit=100000000")

    assert response.status_code == 200
    assert "limit=500" in (response.json()["next"] or "limit=500")


def test_the_page_size_cap_is_500(world):
    from portal.api import BoundedPagination

    assert BoundedPagination.max_limit == 500


BODIES = {
    "50,000 brackets": "[" * 50_000,
    "nested 5,000 deep": '{"a":' * 5_000 + "1" + "}" * 5_000,
    "lone surrogate": '{"node": "\\ud800", "events": []}',
    "NUL in a value": '{"node": "gpu\\u0000", "events": []}',
    "NUL in a key": '{"no\\u0000de": "gpu-01", "events": []}',
    "upper-case low surrogate deep in a list": '{"events": [{"data": ["ok", "\\uDFFF"]}]}',
    "NUL among escapes that are fine": '{"node": "\\u00e9\\u2603\\\\u0000\\u0000"}',
}


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_hostile_json_bodies_are_a_400_before_reaching_a_view(world, body):
    token = issue_api_token(world.users["admin"], "hostile input")[1]
    for url in ("/api/v1/jobs/", "/api/v1/remediations/"):
        response = Client().post(
            url, body, content_type="application/json", HTTP_AUTHORIZATION=f"Token {token}"
        )
        assert response.status_code == 400, (url, response.content[:200])
        assert response.json()["detail"]


def test_a_json_body_over_the_size_limit_is_a_413(world, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    token = issue_api_token(world.users["admin"], "hostile input")[1]

    response = Client().post(
        "/api/v1/jobs/",
        '{"job_name": "' + "x" * 2000 + '"}',
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {token}",
    )

    assert response.status_code == 413


@pytest.mark.parametrize("where", ["message", "data", "pci", "node"])
def test_an_agent_batch_with_a_nul_is_a_400_naming_the_field_and_nothing_is_stored(world, where):
    from django.utils import timezone

    _, raw = NodeToken.issue(world.node)
    event = {
        "id": "e1",
        "kind": "xid",
        "observed_at": timezone.now().isoformat(),
        "xid": 79,
        "pci": "0000:5d:00",
        "message": "fell off the bus",
        "data": {"k": "v"},
    }
    node = world.node.name
    if where == "node":
        node += "\x00"
    elif where == "data":
        event["data"] = {"k": "v\x00"}
    else:
        event[where] = event[where] + "\x00"
    before = HealthEvent.objects.count()

    response = Client().post(
        "/api/v1/health/events/",
        {"node": node, "events": [event]},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )

    assert response.status_code == 400
    errors = response.json()["errors"]
    assert any(where in field for field in errors), errors
    assert HealthEvent.objects.count() == before


def test_a_decision_whose_next_is_no_path_returns_to_the_run_page(world):
    # Found by tests/security/test_form_fuzz.py: redirect() read "6989-02-25" as a URL name.
    response = client_for(world, "admin").post(
        f"/remediation/{world.remediation.pk}/approve/", {"comment": "ok", "next": "6989-02-25"}
    )

    assert response.status_code == 302
    assert response["Location"] == f"/remediation/{world.remediation.pk}/"
