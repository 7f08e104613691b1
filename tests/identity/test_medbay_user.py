"""`manage.py medbay_user`: accounts without a directory, through the command itself."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def medbay_user(*args, stdin: str | None = None) -> str:
    out = io.StringIO()
    if stdin is not None:
        import sys

        old, sys.stdin = sys.stdin, io.StringIO(stdin)
        try:
            call_command("medbay_user", *args, stdout=out)
        finally:
            sys.stdin = old
    else:
        call_command("medbay_user", *args, stdout=out)
    return out.getvalue()


def password_in(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("Password: "))[10:]


def test_the_role_groups_exist_after_migrate_alone():
    assert set(Group.objects.values_list("name", flat=True)) >= {"researcher", "admin", "manager"}


def test_add_creates_a_researcher_mapped_to_their_unix_account_with_a_printed_password():
    from core.roles import Role, roles_of
    from jobs.access import unix_user_for

    output = medbay_user("add", "carol", "--role", "researcher", "--unix-user", "alice")
    user = get_user_model().objects.get(username="carol")
    assert roles_of(user) == {Role.RESEARCHER}
    assert unix_user_for(user) == "alice"
    assert not user.is_staff
    assert user.check_password(password_in(output))


def test_add_takes_the_password_from_stdin_and_never_prints_it():
    output = medbay_user(
        "add", "dana", "--role", "manager", "--password-file", "-", stdin="s3cret-enough-pw\n"
    )
    assert "s3cret-enough-pw" not in output
    assert "Password" not in output
    assert get_user_model().objects.get(username="dana").check_password("s3cret-enough-pw")


def test_add_takes_the_password_from_a_file(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("another-long-password\n")
    medbay_user("add", "erin", "--role", "admin", "--password-file", str(secret))
    user = get_user_model().objects.get(username="erin")
    assert user.check_password("another-long-password") and user.is_staff


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "x", "--role", "boss"), "Unknown role 'boss'"),
        (("add", "x", "--role", "researcher", "--unix-user", "root"), "jobs as 'root'"),
        (("add", "x", "--role", "researcher", "--unix-user", "daemon"), "system account"),
        (("add", "bad name!", "--role", "manager"), "not a valid user name"),
        (("set-role", "nobody", "--role", "admin"), "No user named 'nobody'"),
        (("disable", "nobody"), "No user named 'nobody'"),
    ],
)
def test_bad_requests_get_a_clear_error_and_change_nothing(args, message):
    before = get_user_model().objects.count()
    with pytest.raises(CommandError, match=message):
        medbay_user(*args)
    assert get_user_model().objects.count() == before


def test_a_short_password_is_refused_with_the_validators_reason():
    with pytest.raises(CommandError, match="too short"):
        medbay_user("add", "x", "--role", "manager", "--password-file", "-", stdin="abc\n")


def test_two_people_cannot_share_one_unix_account():
    medbay_user("add", "carol", "--role", "researcher", "--unix-user", "alice")
    with pytest.raises(CommandError, match="already mapped to user 'carol'"):
        medbay_user("add", "frank", "--role", "researcher", "--unix-user", "alice")


def test_an_existing_user_is_not_silently_reset(researcher):
    with pytest.raises(CommandError, match="already exists"):
        medbay_user("add", "alice", "--role", "admin")
    assert researcher.check_password("correct-horse-battery")


def test_set_role_replaces_the_roles_and_records_who_changed_them(researcher):
    from core.roles import Role, roles_of
    from identity.models import AccountChange

    medbay_user("set-role", "alice", "--role", "admin", "--role", "manager")
    user = get_user_model().objects.get(username="alice")
    assert roles_of(user) == {Role.ADMIN, Role.MANAGER}
    assert user.is_staff
    change = AccountChange.objects.get(user=user, field="roles")
    assert (change.old, change.new) == ("researcher", "admin,manager")
    assert change.by.startswith("medbay_user")


def test_disable_stops_log_in_and_api_tokens_and_enable_lets_them_log_in_again(researcher):
    client = APIClient()
    token = client.post(
        "/api/v1/auth/token/",
        {"username": "alice", "password": "correct-horse-battery"},
        format="json",
    ).json()["token"]
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/nodes/").status_code == 200

    assert "revoked 1 API token" in medbay_user("disable", "alice")
    assert client.get("/api/v1/nodes/").status_code == 401
    assert authenticate(username="alice", password="correct-horse-battery") is None

    medbay_user("enable", "alice")
    assert authenticate(username="alice", password="correct-horse-battery") is not None
    # A revoked token stays revoked: enabling someone does not resurrect what they held.
    assert client.get("/api/v1/nodes/").status_code == 401


def test_list_shows_roles_unix_account_active_and_last_log_in(researcher, manager):
    medbay_user("add", "carol", "--role", "researcher", "--unix-user", "bob")
    medbay_user("disable", "carol")
    lines = medbay_user("list").splitlines()
    assert lines[0].split() == ["NAME", "ROLES", "UNIX", "ACTIVE", "LAST", "LOG-IN"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["carol"][1:4] == ["researcher", "bob", "no"]
    assert rows["alice"][1:5] == ["researcher", "alice", "yes", "never"]
    assert rows["manager"][1] == "manager"


def test_a_researcher_without_a_unix_account_on_this_host_gets_a_warning_not_an_error():
    err = io.StringIO()
    call_command(
        "medbay_user", "add", "gina", "--role", "researcher", "--unix-user", "no-such-unix-user-x",
        stdout=io.StringIO(), stderr=err,
    )  # fmt: skip
    assert "no Unix account 'no-such-unix-user-x'" in err.getvalue()
    assert get_user_model().objects.filter(username="gina").exists()
