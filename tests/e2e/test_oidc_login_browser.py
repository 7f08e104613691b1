"""Logging in with the site's identity provider, in Chromium, as each person would.

The provider is the real one (deploy/oidc-provider, panva's certified
oidc-provider): each person types their name and password into its own form
and comes back to the portal in the role their site groups give them. The
researcher's journey on the real Slurm is in test_oidc_login_slurm.py.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import expect, free_port, launch_portal, log_in, require_browser
from tests.e2e.conftest import watch_for_problems as watch
from tests.oidc_provider import sso_log_in, start_provider

pytestmark = [pytest.mark.browser, pytest.mark.oidc]


@pytest.fixture(scope="module")
def stack(request, tmp_path_factory):
    """The simulated portal with OIDC log-in on, and the provider it trusts."""
    require_browser()
    folder = tmp_path_factory.mktemp("oidc-e2e")
    port = free_port()
    provider = start_provider(
        folder / "provider", free_port(), [f"http://127.0.0.1:{port}/oidc/callback/"]
    )
    settings = provider.portal_settings(MEDBAY_BACKEND="simulated")
    try:
        for portal in launch_portal(
            request, folder, "tests/e2e/portal_server.py", port=port, **settings
        ):
            yield portal, provider
    finally:
        provider.stop()


@pytest.fixture
def portal(stack):
    return stack[0]


@pytest.fixture
def provider(stack):
    stack[1].reset_people()
    return stack[1]


def test_dave_in_hpc_admins_logs_in_through_the_provider_as_an_admin(page, portal):
    problems = watch(page)
    started = time.monotonic()
    sso_log_in(page, portal.url, "dave")

    expect(page.locator("header .who")).to_have_text("dave · admin")
    print(f"OIDC log-in round trip: {time.monotonic() - started:.2f} s")
    page.goto(f"{portal.url}/remediation/approvals/")
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    problems.assert_none()


def test_erin_in_leads_logs_in_as_a_manager_and_reads_the_reports(page, portal):
    problems = watch(page)
    sso_log_in(page, portal.url, "erin")

    expect(page.locator("header .who")).to_have_text("erin · manager")
    page.get_by_role("link", name="Reports").click()
    expect(page).to_have_url(f"{portal.url}/reports/")
    problems.assert_none()


def test_alice_taken_out_of_ml_users_has_no_researcher_role_at_her_next_log_in(
    page, portal, provider
):
    sso_log_in(page, portal.url, "alice")
    expect(page.locator("header .who")).to_have_text("alice · researcher")
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(f"{portal.url}/login/")

    provider.set_groups("alice", [])
    # The provider remembers her: no form this time, but its answer is today's groups.
    sso_log_in(page, portal.url, "alice")

    expect(page.locator("header .who")).to_have_text("alice")
    answer = page.goto(f"{portal.url}/jobs/new")
    assert answer.status == 403


def test_the_provider_down_gives_a_clear_page_and_a_way_back(page, portal, provider):
    provider.stop()
    try:
        page.goto(f"{portal.url}/login/")
        page.get_by_role("link", name="Log in with Example Lab SSO").click()

        expect(page.get_by_role("heading", level=1)).to_have_text(
            "Log-in with Example Lab SSO did not work"
        )
        expect(page.locator(".error-text")).to_contain_text("Example Lab SSO could not be reached")
        page.screenshot(path=str(portal.log.parent / "oidc-provider-down.png"))
    finally:
        provider.start()
    page.get_by_role("link", name="Try again with Example Lab SSO").click()
    expect(page.get_by_role("heading", name="Medbay test identity provider")).to_be_visible()


def test_a_person_who_cancels_at_the_provider_is_told_so(page, portal):
    page.goto(f"{portal.url}/login/")
    page.get_by_role("link", name="Log in with Example Lab SSO").click()
    page.get_by_role("button", name="Cancel").click()

    expect(page.locator(".error-text")).to_contain_text(
        "The log-in was cancelled or refused at Example Lab SSO"
    )


def test_a_system_account_mapped_by_the_provider_is_refused_with_a_clear_page(page, portal):
    sso_log_in(page, portal.url, "daemon")

    expect(page.locator(".error-text")).to_contain_text("Medbay refused this log-in")
    expect(page.locator(".error-text")).to_contain_text("'daemon' is a system account")
    expect(page.locator("header .who")).to_have_count(0)


def test_a_local_admin_still_logs_in_with_a_password_while_oidc_is_on(page, portal):
    problems = watch(page)
    page.goto(f"{portal.url}/login/")
    expect(page.get_by_role("link", name="Log in with Example Lab SSO")).to_be_visible()
    page.screenshot(path=str(portal.log.parent / "oidc-login-page.png"))

    log_in(page, portal, "admin")

    expect(page.locator("header .who")).to_have_text("admin · admin")
    problems.assert_none()
