"""Log-in throttling: after 10 failures for a user name from one address, a 429."""

from __future__ import annotations

import time

from django.test import Client

from tests.conftest import PASSWORD


def _log_in(client: Client, username: str, password: str, ip: str = "10.0.0.1"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=ip)


def _fail(client: Client, username: str, times: int, ip: str = "10.0.0.1") -> None:
    for _ in range(times):
        assert _log_in(client, username, "wrong", ip).status_code == 200


def test_the_eleventh_attempt_after_ten_failures_is_refused_with_a_clear_429(researcher):
    client = Client()
    _fail(client, "alice", 10)

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
