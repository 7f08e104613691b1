"""Tokens in Chromium: each role's own API tokens, and an admin enrolling a node's agent."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import expect, log_in, watch_for_problems

pytestmark = pytest.mark.browser

NODE = "e2e-02"


def api_status(page, portal, token: str) -> int:
    response = page.request.get(
        f"{portal.url}/api/v1/nodes/", headers={"Authorization": f"Token {token}"}
    )
    return response.status


@pytest.mark.parametrize("role", ["alice", "manager", "admin"])
def test_a_person_creates_uses_and_revokes_their_own_api_token(page, portal, role, tmp_path):
    problems = watch_for_problems(page)
    log_in(page, portal, role)
    page.get_by_role("link", name="API tokens").click()
    expect(page.locator("h1")).to_have_text("Your API tokens")

    page.get_by_label("Name").fill(f"{role} laptop")
    page.get_by_role("button", name="Create token").click()
    expect(page.locator("#new-token")).to_contain_text("shown only this once")
    token = page.locator("#new-token-value").inner_text().strip()
    assert token.startswith("mbu_")
    page.screenshot(path=str(tmp_path / f"tokens-{role}.png"), full_page=True)
    assert api_status(page, portal, token) == 200

    # Seen again, the token is its prefix only, now with when it was last used.
    page.goto(f"{portal.url}/account/tokens/")
    row = page.locator("#api-tokens tr", has_text=f"{role} laptop")
    expect(row).to_contain_text(token[:12] + "…")
    expect(row).not_to_contain_text("never")
    assert token not in page.content()

    row.get_by_role("button", name="Revoke").click()
    expect(page.locator(".messages")).to_contain_text("Token revoked")
    expect(page.locator("#api-tokens")).not_to_contain_text(f"{role} laptop")
    assert api_status(page, portal, token) == 401
    problems.errors = [e for e in problems.errors if "/api/v1/nodes/" not in e]
    problems.assert_none()


def test_a_token_without_a_name_is_refused_with_a_message(page, portal):
    log_in(page, portal, "alice")
    page.goto(f"{portal.url}/account/tokens/")
    # The browser's own `required` check would stop an empty name; a blank one reaches us.
    page.get_by_label("Name").fill("   ")
    page.get_by_role("button", name="Create token").click()
    expect(page.locator(".errorlist")).to_contain_text("Give the token a name")
    expect(page.locator("#new-token")).to_have_count(0)


def test_an_admin_issues_a_nodes_agent_token_and_revokes_it(page, portal, tmp_path):
    problems = watch_for_problems(page)
    log_in(page, portal, "admin")
    page.goto(f"{portal.url}/account/tokens/")
    page.get_by_role("link", name="agent tokens").click()
    expect(page.locator("h1")).to_have_text("Node agent tokens")

    page.get_by_label("Node").select_option(NODE)
    page.get_by_role("button", name="Issue token").click()
    banner = page.locator("#new-token")
    expect(banner).to_contain_text(f"New token for {NODE}")
    expect(banner.locator("pre")).to_contain_text(f"--node {NODE}")
    token = page.locator("#new-token-value").inner_text().strip()
    page.screenshot(path=str(tmp_path / "agent-tokens.png"), full_page=True)
    response = page.request.post(
        f"{portal.url}/api/v1/health/events/",
        headers={"Authorization": f"Bearer {token}"},
        data={"node": NODE, "events": []},
    )
    assert response.status != 401

    page.goto(f"{portal.url}/health/agents/")
    row = page.locator("#agent-tokens tr", has_text=NODE)
    expect(row).to_contain_text(token[:12] + "…")
    assert token not in page.content()
    row.get_by_role("button", name="Revoke").click()
    expect(page.locator(".messages")).to_contain_text("its agent is refused now")
    expect(page.locator("#agent-tokens")).not_to_contain_text(token[4:12])
    response = page.request.post(
        f"{portal.url}/api/v1/health/events/",
        headers={"Authorization": f"Bearer {token}"},
        data={"node": NODE, "events": []},
    )
    assert response.status == 401
    problems.errors = [e for e in problems.errors if "/api/v1/health/events/" not in e]
    problems.assert_none()


@pytest.mark.parametrize("role", ["alice", "manager"])
def test_only_admins_reach_the_agent_tokens_page(page, portal, role):
    log_in(page, portal, role)
    expect(page.locator(".who")).to_contain_text(role)
    response = page.goto(f"{portal.url}/health/agents/")
    assert response.status == 403
    expect(page.locator("main")).to_contain_text("You do not have permission")


def test_a_disabled_person_is_logged_out_everywhere_at_once(page, portal):
    """medbay_user disable: the open board stops, their token is refused, log-in fails."""
    from tests.e2e.conftest import WATCH_SOCKET, wait_for_socket

    output = portal.command("medbay_user", args=["add", "carol", "--role", "manager"])["output"]
    password = output.split("Password: ", 1)[1].split()[0]
    problems = watch_for_problems(page)
    page.add_init_script(WATCH_SOCKET)
    log_in(page, portal, "carol", password)
    page.goto(f"{portal.url}/account/tokens/")
    page.get_by_label("Name").fill("carol's script")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("#new-token-value").inner_text().strip()
    page.goto(f"{portal.url}/")
    wait_for_socket(page)
    expect(page.locator("#live-status")).to_have_text("live")

    said = portal.command("medbay_user", args=["disable", "carol"])["output"]
    assert "revoked 1 API token" in said

    expect(page.locator("#live-status")).to_have_text("offline")
    expect(page.locator("#live-status")).to_have_attribute("title", re.compile("logged out"))
    assert api_status(page, portal, token) == 401
    page.goto(f"{portal.url}/")
    expect(page).to_have_url(re.compile(r"/login/"))
    log_in(page, portal, "carol", password)
    expect(page.locator(".error-text")).to_contain_text("didn't match")
    problems.errors = [e for e in problems.errors if "/api/v1/nodes/" not in e]
    problems.assert_none()
