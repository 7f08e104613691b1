"""Log-in throttling (django-axes): after 10 failures for a user name from one address,
every path that takes a password answers 429, even to the right password."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from tests.conftest import PASSWORD

TOKEN = "/api/v1/auth/token/"


def _log_in(client: Client, username: str, password: str, ip: str = "10.0.0.1"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=ip)


def _token(username: str, password: str, ip: str = "10.0.0.1"):
    body = {"username": username, "password": password}
    return Client().post(TOKEN, body, REMOTE_ADDR=ip)


def _admin_log_in(client: Client, username: str, password: str, ip: str = "10.0.0.1"):
    body = {"username": username, "password": password, "next": "/admin/"}
    return client.post("/admin/login/", body, REMOTE_ADDR=ip)


def _fail(client: Client, username: str, times: int, ip: str = "10.0.0.1") -> None:
    for _ in range(times):
        assert _log_in(client, username, "wrong", ip).status_code in (200, 429)


def test_the_tenth_failure_locks_the_name_with_a_clear_429(researcher):
    client = Client()
    _fail(client, "alice", 9)
    assert _log_in(client, "alice", "wrong").status_code == 429

    response = _log_in(client, "alice", "wrong")

    assert response.status_code == 429
    assert "Too many failed log-in attempts" in response.content.decode()
    assert int(response["Retry-After"]) == 300


def test_a_locked_user_name_is_refused_even_with_the_right_password(researcher):
    client = Client()
    _fail(client, "alice", 10)

    response = _log_in(client, "alice", PASSWORD)

    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


def test_the_lock_is_per_address_and_user_name(researcher, other_researcher):
    _fail(Client(), "alice", 10, ip="10.0.0.1")

    other_user = _log_in(Client(), "bob", PASSWORD, ip="10.0.0.1")
    other_address = _log_in(Client(), "alice", PASSWORD, ip="10.0.0.2")

    assert other_user.status_code == 302
    assert other_address.status_code == 302


def test_user_names_differing_only_in_case_share_one_counter(researcher):
    client = Client()
    _fail(client, "alice", 5)
    _fail(client, "ALICE", 5)

    assert _log_in(client, "Alice", "wrong").status_code == 429


def test_a_successful_log_in_clears_the_failures(researcher):
    _fail(Client(), "alice", 9)
    assert _log_in(Client(), "alice", PASSWORD).status_code == 302

    _fail(Client(), "alice", 9)

    assert _log_in(Client(), "alice", PASSWORD).status_code == 302


def test_the_lock_lifts_when_the_window_has_passed(researcher, settings):
    settings.MEDBAY_LOGIN_WINDOW_S = 1
    _fail(Client(), "alice", 10)
    assert _log_in(Client(), "alice", PASSWORD).status_code == 429

    time.sleep(1.2)

    assert _log_in(Client(), "alice", PASSWORD).status_code == 302


def test_an_unknown_user_name_is_throttled_like_a_real_one(db):
    client = Client()
    _fail(client, "nobody-here", 10)

    assert _log_in(client, "nobody-here", "wrong").status_code == 429


# ------------------------------------------------------- every path, one lockout


def test_the_token_endpoint_is_locked_after_ten_wrong_passwords(researcher):
    statuses = [_token("alice", "wrong").status_code for _ in range(10)]

    response = _token("alice", PASSWORD)

    assert statuses[:9] == [400] * 9 and statuses[9] == 429
    assert response.status_code == 429
    assert "token" not in response.json()
    assert "Too many failed log-in attempts" in response.json()["detail"]
    assert int(response["Retry-After"]) == 300


def test_the_admin_log_in_is_locked_after_ten_wrong_passwords(admin_user):
    client = Client()
    for _ in range(10):
        _admin_log_in(client, "admin", "wrong")

    response = _admin_log_in(client, "admin", PASSWORD)

    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize("where", ["token", "admin"])
def test_failures_anywhere_count_towards_one_lock_everywhere(admin_user, where):
    client = Client()
    _fail(client, "admin", 5)
    for _ in range(5):
        if where == "token":
            _token("admin", "wrong")
        else:
            _admin_log_in(client, "admin", "wrong")

    assert _log_in(Client(), "admin", PASSWORD).status_code == 429
    assert _token("admin", PASSWORD).status_code == 429
    assert _admin_log_in(Client(), "admin", PASSWORD).status_code == 429


def test_the_token_endpoint_still_issues_tokens(researcher):
    response = _token("alice", PASSWORD)

    assert response.status_code == 200
    assert response.json()["token"]
