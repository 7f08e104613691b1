"""OpenID Connect log-in against the real test provider, through the portal's HTTP pages.

The portal is Django's test client; the provider is the real one
(deploy/oidc-provider), reached over HTTP: its log-in form is posted as a
browser would, and the portal exchanges the code, checks the ID token and
reads the user info from it. The browser journeys are in tests/e2e.
"""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest
import requests

from tests.e2e.conftest import free_port
from tests.oidc_provider import PASSWORDS, start_provider

pytestmark = [pytest.mark.oidc, pytest.mark.integration, pytest.mark.django_db]

CALLBACK = "http://testserver/oidc/callback/"


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    running = start_provider(tmp_path_factory.mktemp("oidc"), free_port(), [CALLBACK])
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def oidc_settings(settings, provider):
    provider.reset_people()
    values = provider.portal_settings()
    settings.MEDBAY_OIDC_ENABLED = True
    settings.MEDBAY_OIDC_ISSUER = values["MEDBAY_OIDC_ISSUER"]
    settings.MEDBAY_OIDC_NAME = values["MEDBAY_OIDC_NAME"]
    settings.MEDBAY_OIDC_ROLE_GROUPS = values["MEDBAY_OIDC_ROLE_GROUPS"]
    settings.OIDC_RP_CLIENT_ID = values["MEDBAY_OIDC_CLIENT_ID"]
    settings.OIDC_RP_CLIENT_SECRET = values["MEDBAY_OIDC_CLIENT_SECRET"]
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "identity.oidc_login.OIDCBackend",
    ]
    return settings


def provider_code(
    client, username: str, *, action: str = "login", start: str = "/oidc/authenticate/"
) -> str:
    """Start the log-in at the portal, sign in at the provider; the callback's query."""
    start = client.get(start)
    assert start.status_code == 302, start.content
    browser = requests.Session()
    location = start["Location"]
    form_posted = False
    for _ in range(10):
        if location.startswith(CALLBACK):
            return urlsplit(location).query
        answer = browser.get(location, allow_redirects=False, timeout=10)
        if answer.status_code == 200 and not form_posted:
            action_url = re.search(r'action="([^"]+)"', answer.text).group(1)
            answer = browser.post(
                urljoin(location, unescape(action_url)),
                data={"username": username, "password": PASSWORDS[username], "action": action},
                allow_redirects=False,
                timeout=10,
            )
            form_posted = True
        assert answer.status_code in (302, 303), answer.text[:500]
        location = urljoin(location, answer.headers["Location"])
    raise AssertionError(f"the provider never sent the browser back: {location}")


def log_in(client, username: str):
    query = provider_code(client, username)
    return client.get(f"/oidc/callback/?{query}")


def roles(username: str) -> set[str]:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username=username)
    return set(user.groups.values_list("name", flat=True))


def test_a_person_in_a_mapped_group_logs_in_as_a_researcher_with_their_unix_account(client):
    from jobs.access import unix_user_for

    answer = log_in(client, "alice")

    assert answer.status_code == 302
    assert answer["Location"] == "/"
    board = client.get("/")
    assert board.status_code == 200
    assert b"alice \xc2\xb7 researcher" in board.content
    user = board.wsgi_request.user
    assert (user.email, user.first_name, user.last_name) == (
        "alice@example.org",
        "Alice",
        "Lovelace",
    )
    assert roles("alice") == {"researcher"}
    assert unix_user_for(user) == "alice"
    assert not user.has_usable_password()


def test_a_person_taken_out_of_the_group_loses_the_role_at_the_next_log_in(client, provider):
    log_in(client, "alice")
    assert roles("alice") == {"researcher"}
    client.logout()

    provider.set_groups("alice", ["leads"])
    log_in(client, "alice")

    assert roles("alice") == {"manager"}
    assert client.get("/jobs/new").status_code == 403


def test_groups_that_map_to_no_role_give_a_user_with_no_role(client):
    answer = log_in(client, "frank")

    assert answer.status_code == 302
    assert roles("frank") == set()


def test_the_unix_account_comes_from_the_configured_claim(client, provider, settings):
    from django.contrib.auth import get_user_model

    from jobs.access import unix_user_for

    settings.MEDBAY_OIDC_UNIX_USER_CLAIM = "posix_username"
    settings.OIDC_RP_SCOPES = "openid email profile groups posix"
    provider.update("bob", posix_username="alice")

    log_in(client, "bob")

    assert unix_user_for(get_user_model().objects.get(username="bob")) == "alice"


def test_a_mapping_to_root_is_refused_with_a_clear_page_and_no_account(client, settings):
    from django.contrib.auth import get_user_model

    settings.MEDBAY_OIDC_UNIX_USER_CLAIM = "posix_username"
    settings.OIDC_RP_SCOPES = "openid email profile groups posix"

    answer = log_in(client, "mallory")

    assert answer.status_code == 403
    assert "Medbay refused this log-in" in answer.content.decode()
    assert "never submits jobs as &#x27;root&#x27;" in answer.content.decode()
    assert not get_user_model().objects.filter(username="mallory").exists()
    assert "_auth_user_id" not in client.session


def test_a_system_account_is_refused(client):
    answer = log_in(client, "daemon")

    assert answer.status_code == 403
    assert "is a system account" in answer.content.decode()


def test_a_local_admin_account_is_not_taken_over_by_a_provider_account_of_that_name(client):
    from core.roles import Role
    from identity.accounts import create_user_with_role

    create_user_with_role("dave", Role.ADMIN, "local-admin-password")

    answer = log_in(client, "dave")

    assert answer.status_code == 403
    assert "local Medbay administrator account named &#x27;dave&#x27; already exists" in (
        answer.content.decode()
    )
    assert "_auth_user_id" not in client.session
    # ... and that account still logs in with its password.
    assert client.login(username="dave", password="local-admin-password")


def test_a_local_researcher_account_logs_in_through_the_provider_with_its_roles(
    client, researcher, provider
):
    provider.set_groups("alice", ["leads"])

    answer = log_in(client, "alice")

    assert answer.status_code == 302
    assert roles("alice") == {"manager"}
    # Her local password still works too.
    client.logout()
    assert client.login(username="alice", password="correct-horse-battery")


def test_a_disabled_account_cannot_log_in_through_the_provider(client):
    from django.contrib.auth import get_user_model

    log_in(client, "alice")
    client.logout()
    get_user_model().objects.filter(username="alice").update(is_active=False)

    answer = log_in(client, "alice")

    assert answer.status_code == 403
    assert "Your Medbay account is disabled" in answer.content.decode()
    assert "_auth_user_id" not in client.session


def test_a_cancelled_log_in_at_the_provider_gets_a_clear_page(client):
    query = provider_code(client, "alice", action="cancel")
    assert parse_qs(query)["error"] == ["access_denied"]

    answer = client.get(f"/oidc/callback/?{query}")

    assert answer.status_code == 403
    assert "The log-in was cancelled or refused at Example Lab SSO" in answer.content.decode()


def test_a_callback_this_browser_did_not_start_gets_a_clear_page(client):
    query = provider_code(client, "alice")
    stranger = type(client)()

    answer = stranger.get(f"/oidc/callback/?{query}")

    assert answer.status_code == 400
    assert "does not match a log-in started in this browser" in answer.content.decode()


def test_a_code_used_twice_gets_a_clear_page(client):
    query = provider_code(client, "alice")
    client.get(f"/oidc/callback/?{query}")
    client.logout()
    # The same state again: this browser's session no longer holds it.
    answer = client.get(f"/oidc/callback/?{query}")

    assert answer.status_code == 400


def test_the_provider_down_at_the_start_gets_a_clear_page(client, settings):
    settings.MEDBAY_OIDC_ISSUER = f"http://127.0.0.1:{free_port()}"

    answer = client.get("/oidc/authenticate/")

    assert answer.status_code == 502
    assert "Example Lab SSO could not be reached" in answer.content.decode()


def test_the_provider_down_at_the_callback_gets_a_clear_page(client, provider):
    query = provider_code(client, "alice")
    provider.stop()
    try:
        answer = client.get(f"/oidc/callback/?{query}")
    finally:
        provider.start()

    assert answer.status_code == 502
    assert "Example Lab SSO could not be reached" in answer.content.decode()
    assert "_auth_user_id" not in client.session


def test_an_id_token_from_another_issuer_is_rejected(client, settings, provider):
    # The same provider spelt differently: its tokens name http://localhost:PORT.
    settings.MEDBAY_OIDC_ISSUER = f"http://127.0.0.1:{provider.port}"

    answer = log_in(client, "alice")

    assert answer.status_code == 502
    assert "was not issued for this portal" in answer.content.decode()
    assert "_auth_user_id" not in client.session


def explicit_endpoints(settings, base: str) -> None:
    settings.MEDBAY_OIDC_ISSUER = ""
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = f"{base}/auth"
    settings.OIDC_OP_TOKEN_ENDPOINT = f"{base}/token"
    settings.OIDC_OP_USER_ENDPOINT = f"{base}/me"
    settings.OIDC_OP_JWKS_ENDPOINT = f"{base}/jwks"


def test_a_provider_without_discovery_works_from_explicit_endpoints(client, settings, provider):
    explicit_endpoints(settings, provider.issuer)

    answer = log_in(client, "erin")

    assert answer.status_code == 302
    assert roles("erin") == {"manager"}


def test_explicit_endpoints_down_give_a_clear_page_before_leaving_the_portal(client, settings):
    explicit_endpoints(settings, f"http://127.0.0.1:{free_port()}")

    answer = client.get("/oidc/authenticate/")

    assert answer.status_code == 502
    assert "could not be reached" in answer.content.decode()


def test_the_log_in_page_offers_the_provider_only_when_it_is_configured(client, settings):
    page = client.get("/login/?next=/jobs/")
    assert "Log in with Example Lab SSO" in page.content.decode()
    assert 'href="/oidc/authenticate/?next=/jobs/"' in page.content.decode()

    settings.MEDBAY_OIDC_ENABLED = False
    assert "Log in with" not in client.get("/login/").content.decode()
    assert client.get("/oidc/authenticate/")["Location"] == "/login/"


def test_a_log_in_started_from_a_page_returns_to_it(client):
    query = provider_code(client, "alice", start="/oidc/authenticate/?next=/jobs/")

    answer = client.get(f"/oidc/callback/?{query}")

    assert answer["Location"] == "/jobs/"


def test_a_bad_role_map_gives_a_clear_page_not_a_500(client, settings):
    settings.MEDBAY_OIDC_ROLE_GROUPS = "wizard=ml-users"

    answer = client.get("/oidc/authenticate/")

    assert answer.status_code == 503
    assert "&#x27;wizard&#x27; is not a Medbay role" in answer.content.decode()


def test_the_portal_refuses_to_start_with_a_role_map_naming_no_role():
    import os
    import subprocess
    import sys

    from tests.e2e.portal_server import ROOT

    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEDBAY_OIDC_")}
    site = {
        "MEDBAY_OIDC_CLIENT_ID": "medbay",
        "MEDBAY_OIDC_CLIENT_SECRET": "s3cret",
        "MEDBAY_OIDC_ISSUER": "http://127.0.0.1:9/",
    }

    def check(role_map: str) -> subprocess.CompletedProcess:
        env = {**clean, "DEBUG": "true", **site, "MEDBAY_OIDC_ROLE_GROUPS": role_map}
        return subprocess.run(
            [sys.executable, "manage.py", "check"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert check("researcher=ml-users").returncode == 0
    wizard = check("wizard=ml-users")
    assert wizard.returncode != 0
    assert "MEDBAY_OIDC_ROLE_GROUPS: 'wizard' is not a Medbay role" in wizard.stderr
