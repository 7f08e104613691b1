"""Log-in with the site's directory: a real OpenLDAP slapd (deploy/ldap/up), the log-in page.

Roles come from the directory's groups and the Unix account from its `uid`, at
every log-in; a disabled account and an unreachable directory are told apart
from a wrong password; local accounts keep working; failures are throttled.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from core.roles import Role, roles_of
from identity.ldap_config import ldap_settings
from jobs.access import unix_user_for
from tests.conftest import PASSWORD
from tests.e2e.conftest import free_port
from tests.identity.directory import (
    add_member,
    group_dn,
    members,
    password_of,
    remove_member,
)

pytestmark = [pytest.mark.ldap, pytest.mark.integration, pytest.mark.django_db]

BACKENDS = [
    "identity.views.login.ThrottlingBackend",
    "identity.ldap_login.DirectoryBackend",
    "django.contrib.auth.backends.ModelBackend",
]


@pytest.fixture
def use_directory(settings, directory):
    """Turns the portal's directory log-in on with these MEDBAY_LDAP_* overrides."""

    def use(**overrides) -> None:
        for name, value in ldap_settings({**directory, **overrides}).items():
            setattr(settings, name, value)
        settings.AUTHENTICATION_BACKENDS = BACKENDS

    use()
    return use


def log_in(username: str, password: str, ip: str = "10.1.0.1"):
    client = Client()
    response = client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=ip)
    return client, response


def user(username: str):
    found = get_user_model().objects.get(username=username)
    found._medbay_roles = None
    return found


def test_alice_logs_in_with_her_directory_password_as_a_researcher_who_runs_jobs_as_alice(
    use_directory,
):
    client, response = log_in("alice", password_of("alice"))

    assert response.status_code == 302, response.content.decode()[:2000]
    assert response["Location"] == "/"
    alice = user("alice")
    assert roles_of(alice) == {Role.RESEARCHER}
    assert unix_user_for(alice) == "alice"
    assert (alice.email, alice.first_name, alice.last_name) == (
        "alice@medbay.test",
        "Alice",
        "Archer",
    )
    assert not alice.has_usable_password()  # the directory checks it, never a copy here
    assert client.get("/jobs/new").status_code == 200


@pytest.mark.parametrize(
    ("username", "roles", "staff"),
    [("dave", {Role.ADMIN}, True), ("erin", {Role.MANAGER}, False), ("bob", set(), False)],
)
def test_each_person_gets_the_roles_of_their_directory_groups(
    use_directory, username, roles, staff
):
    _, response = log_in(username, password_of(username))

    assert response.status_code == 302
    person = user(username)
    assert roles_of(person) == roles
    assert person.is_staff is staff


def test_a_wrong_directory_password_reads_as_a_wrong_password(use_directory):
    _, response = log_in("alice", "not-her-password")

    assert response.status_code == 200
    assert "Your user name and password didn&#x27;t match" in response.content.decode()


def test_someone_taken_out_of_the_group_loses_the_role_at_their_next_log_in(
    use_directory, directory
):
    log_in("alice", password_of("alice"))
    assert roles_of(user("alice")) == {Role.RESEARCHER}
    remove_member(directory, "ml-users", "alice")
    try:
        client, response = log_in("alice", password_of("alice"))
        assert response.status_code == 302
        assert roles_of(user("alice")) == set()
        assert client.get("/jobs/new").status_code == 403
    finally:
        add_member(directory, "ml-users", "alice")
    assert "alice" in members(directory, "ml-users")

    log_in("alice", password_of("alice"))
    assert roles_of(user("alice")) == {Role.RESEARCHER}


def test_a_disabled_account_cannot_log_in_and_is_told_so(use_directory):
    _, response = log_in("frank", password_of("frank"))

    assert response.status_code == 200
    assert "This account is disabled in the site directory." in response.content.decode()
    assert not get_user_model().objects.filter(username="frank").exists()


def test_a_disabled_account_s_earlier_portal_user_loses_its_roles(use_directory, settings):
    settings.MEDBAY_LDAP_DENY_GROUPS = ()
    log_in("frank", password_of("frank"))
    assert roles_of(user("frank")) == {Role.RESEARCHER}
    settings.MEDBAY_LDAP_DENY_GROUPS = (group_dn("disabled"),)

    client, response = log_in("frank", password_of("frank"))

    assert "disabled in the site directory" in response.content.decode()
    assert roles_of(user("frank")) == set()
    assert "_auth_user_id" not in client.session


def test_a_local_account_of_the_same_name_does_not_let_in_someone_the_directory_disabled(
    use_directory,
):
    get_user_model().objects.create_user("frank", password=password_of("frank"))

    client, response = log_in("frank", password_of("frank"))

    assert "disabled in the site directory" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_wrong_password_of_a_disabled_account_says_nothing_about_it(use_directory):
    _, response = log_in("frank", "guess")

    assert "disabled" not in response.content.decode()
    assert "didn&#x27;t match" in response.content.decode()


def test_an_unreachable_directory_is_a_clear_error_and_local_accounts_still_log_in(
    use_directory, admin_user
):
    use_directory(MEDBAY_LDAP_URI=f"ldap://127.0.0.1:{free_port()}")

    _, response = log_in("alice", password_of("alice"))

    assert response.status_code == 200
    assert "The site directory cannot be reached" in response.content.decode()
    client, response = log_in("admin", PASSWORD)
    assert response.status_code == 302
    assert client.get("/").status_code == 200


def test_a_researcher_without_the_unix_account_attribute_is_refused_with_the_reason(
    use_directory,
):
    use_directory(MEDBAY_LDAP_UNIX_USER_ATTR="employeeNumber")

    _, response = log_in("alice", password_of("alice"))

    assert response.status_code == 200
    assert "has no Unix account to run jobs as" in response.content.decode()


def test_posix_groups_with_member_uids_map_to_roles_too(use_directory, directory):
    use_directory(
        MEDBAY_LDAP_GROUP_TYPE="posixGroup",
        MEDBAY_LDAP_GROUP_SEARCH_BASE="ou=posixgroups,dc=medbay,dc=test",
        MEDBAY_LDAP_ROLE_GROUPS="researcher=cn=ml-users,ou=posixgroups,dc=medbay,dc=test",
        MEDBAY_LDAP_DENY_GROUPS="cn=disabled,ou=posixgroups,dc=medbay,dc=test",
    )

    log_in("alice", password_of("alice"))
    _, refused = log_in("frank", password_of("frank"))

    assert roles_of(user("alice")) == {Role.RESEARCHER}
    assert "disabled in the site directory" in refused.content.decode()


def test_a_site_without_a_search_account_binds_straight_as_the_person(use_directory):
    use_directory(
        MEDBAY_LDAP_BIND_DN="",
        MEDBAY_LDAP_BIND_PASSWORD="",
        MEDBAY_LDAP_USER_SEARCH_BASE="",
        MEDBAY_LDAP_USER_DN_TEMPLATE="uid=%(user)s,ou=people,dc=medbay,dc=test",
    )

    log_in("dave", password_of("dave"))

    assert roles_of(user("dave")) == {Role.ADMIN}


def test_failed_directory_log_ins_are_throttled_like_local_ones(use_directory, settings):
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(3):
        log_in("alice", "wrong")

    client, response = log_in("alice", password_of("alice"))

    assert response.status_code == 429
    assert "Too many failed log-in attempts" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_api_token_endpoint_takes_the_directory_password_too(use_directory):
    response = Client().post(
        "/api/v1/auth/token/",
        {"username": "alice", "password": password_of("alice")},
        REMOTE_ADDR="10.1.0.9",
    )

    assert response.status_code == 200
    assert response.json()["token"]
    assert roles_of(user("alice")) == {Role.RESEARCHER}


def test_a_directory_that_refuses_the_portal_s_search_account_is_not_a_wrong_password(
    use_directory, caplog
):
    use_directory(MEDBAY_LDAP_BIND_PASSWORD="not-the-portal-password")

    _, response = log_in("alice", password_of("alice"))

    assert response.status_code == 200
    assert "The site directory could not check this log-in" in response.content.decode()
    assert "site directory error" in caplog.text  # the admin's clue, in the log


def test_a_directory_account_never_takes_over_a_local_administrator_of_its_name(use_directory):
    from identity.accounts import create_user_with_role

    create_user_with_role("dave", Role.ADMIN, PASSWORD)  # a local admin, before the directory

    _, with_directory_password = log_in("dave", password_of("dave"))
    _, with_local_password = log_in("dave", PASSWORD)

    assert "A local Medbay administrator account named &#x27;dave&#x27; already exists" in (
        with_directory_password.content.decode()
    )
    assert with_local_password.status_code == 302
    assert user("dave").has_usable_password()


def test_someone_disabled_in_medbay_cannot_log_in_with_their_directory_password(use_directory):
    """`medbay_user disable` holds for directory people too: no session and no API token."""
    from identity.accounts import disable_user

    log_in("alice", password_of("alice"))
    disable_user("alice", by="test")

    client, response = log_in("alice", password_of("alice"))
    assert response.status_code == 200
    assert "This account is disabled in Medbay." in response.content.decode()
    assert "_auth_user_id" not in client.session
    token = Client().post(
        "/api/v1/auth/token/",
        {"username": "alice", "password": password_of("alice")},
        REMOTE_ADDR="10.9.0.2",
    )
    assert token.status_code == 400, token.content
