"""The tokens pages through HTTP: your own API tokens, and admins' agent tokens for nodes."""

from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
EVENTS = "/api/v1/health/events/"


def post_event(agent, event_id: str):
    from django.utils import timezone

    event = {
        "id": event_id,
        "kind": "xid",
        "observed_at": timezone.now().isoformat(),
        "xid": 13,
        "pci": "0000:5d:00",
        "message": "Graphics SM Warp Exception",
    }
    return agent.post(EVENTS, {"node": "gpu-01", "events": [event]}, format="json")


def logged_in(client, user):
    client.force_login(user)
    return client


def created_token(response) -> str:
    match = re.search(r'id="new-token-value">([^<]+)<', response.content.decode())
    assert match, "the new token is shown once on the page"
    return match.group(1)


def test_a_created_token_is_shown_once_then_only_by_its_prefix_and_works_on_the_api(
    client, researcher
):
    logged_in(client, researcher)
    response = client.post("/account/tokens/", {"name": "laptop scripts"})
    assert response.status_code == 200
    assert response["Cache-Control"].startswith("max-age=0")
    raw = created_token(response)

    page = client.get("/account/tokens/").content.decode()
    assert "laptop scripts" in page and raw[:12] in page
    assert raw not in page

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    assert api.get("/api/v1/nodes/").status_code == 200
    assert "never" not in client.get("/account/tokens/").content.decode().split("laptop")[1][:200]


def test_a_token_without_a_name_gets_a_clear_error_and_is_not_created(client, researcher):
    from identity.models import ApiToken

    response = logged_in(client, researcher).post("/account/tokens/", {"name": ""})
    assert response.status_code == 400
    assert "Give the token a name" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_revoking_a_token_stops_it_on_the_api_at_once(client, researcher):
    from identity.accounts import issue_api_token

    token, raw = issue_api_token(researcher, "ci")
    response = logged_in(client, researcher).post(
        f"/account/tokens/{token.pk}/revoke/", follow=True
    )
    assert "Token revoked" in response.content.decode()
    assert "You have no API tokens." in response.content.decode()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    assert api.get("/api/v1/nodes/").status_code == 401


def test_nobody_sees_or_revokes_someone_elses_token(client, researcher, other_researcher):
    from identity.accounts import issue_api_token

    token, raw = issue_api_token(researcher, "alice's")
    logged_in(client, other_researcher)
    assert "alice&#x27;s" not in client.get("/account/tokens/").content.decode()
    response = client.post(f"/account/tokens/{token.pk}/revoke/", follow=True)
    assert "No such token of yours" in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is None


def test_the_log_in_endpoint_issues_a_listed_hashed_token(researcher):
    from identity.models import ApiToken

    raw = (
        APIClient()
        .post("/api/v1/auth/token/", {"username": "alice", "password": PASSWORD}, format="json")
        .json()["token"]
    )
    stored = ApiToken.objects.get(user=researcher)
    assert stored.name == "API log-in" and raw.startswith(stored.prefix)
    assert raw not in (stored.token_hash, stored.prefix)


def test_an_admin_issues_a_nodes_agent_token_that_the_ingest_accepts_and_revokes_it(
    client, admin_user, synced
):
    from health.models import NodeToken

    logged_in(client, admin_user)
    response = client.post("/health/agents/", {"node": "gpu-01"})
    assert response.status_code == 200
    raw = created_token(response)
    assert "--node gpu-01" in response.content.decode()
    assert NodeToken.objects.get(revoked_at__isnull=True).created_by == admin_user

    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert post_event(agent, "e1").status_code == 201

    page = client.get("/health/agents/").content.decode()
    assert raw[4:12] in page and raw not in page
    token = NodeToken.objects.get()
    response = client.post(f"/health/agents/{token.pk}/revoke/", follow=True)
    assert "its agent is refused now" in response.content.decode()
    assert post_event(agent, "e2").status_code == 401
    response = client.post(f"/health/agents/{token.pk}/revoke/", follow=True)
    assert "already revoked" in response.content.decode()


def test_an_unknown_node_gets_a_clear_error(client, admin_user, synced):
    response = logged_in(client, admin_user).post("/health/agents/", {"node": "gpu-99"})
    assert response.status_code == 400
    assert "Unknown node &#x27;gpu-99&#x27;" in response.content.decode()


def test_the_node_token_command_still_issues_a_token(synced, tmp_path):
    from django.core.management import call_command

    from health.models import NodeToken

    out = tmp_path / "token"
    call_command("node_token", "gpu-02", "--output", str(out))
    assert NodeToken.objects.get(node__name="gpu-02").prefix == out.read_text()[4:12]
