"""Notification preferences in Chromium, as a researcher, on a desktop and a phone.

The portal here allows webhooks to 127.0.0.1 (MEDBAY_WEBHOOK_ALLOW), so that a
real local server can stand in for Slack; every other private address is still
refused.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import expect, launch_portal, log_in, require_browser, watch_for_problems
from tests.jobs.webhook_servers import webhook_server

pytestmark = pytest.mark.browser

WIDTHS = {"desktop": (1440, 900), "phone": (390, 844)}


@pytest.fixture(scope="module")
def portal(tmp_path_factory, request):
    require_browser()
    folder = tmp_path_factory.mktemp("e2e-notifications")
    yield from launch_portal(
        request,
        folder,
        "tests/e2e/portal_server.py",
        MEDBAY_BACKEND="simulated",
        MEDBAY_WEBHOOK_ALLOW="127.0.0.1",
    )


def scrolls_sideways(page) -> bool:
    return page.evaluate(
        "() => document.documentElement.scrollWidth > document.documentElement.clientWidth"
    )


@pytest.mark.parametrize("device", list(WIDTHS))
def test_a_researcher_chooses_notifications_and_sees_a_failed_test(page, portal, device, tmp_path):
    width, height = WIDTHS[device]
    page.set_viewport_size({"width": width, "height": height})
    problems = watch_for_problems(page)
    log_in(page, portal, "alice")
    if device == "phone":
        page.locator(
            "header summary", has_text="Menu"
        ).click()  # the header's links are in its menu
    page.get_by_role("link", name="Notifications").click()
    expect(page.locator("h1")).to_have_text("Your notifications")
    assert not scrolls_sideways(page)

    # A private address is refused next to the field, and nothing is saved.
    page.locator("#kind-requeued").get_by_label("Email").uncheck()
    page.get_by_label("Webhook URL").fill("http://169.254.169.254/latest/meta-data/")
    page.get_by_role("button", name="Save preferences").click()
    error = page.locator("#id_webhook_url_error")
    expect(error).to_contain_text("cloud metadata address")
    expect(page.get_by_label("Webhook URL")).to_have_attribute("aria-invalid", "true")
    assert not scrolls_sideways(page)
    page.screenshot(path=str(tmp_path / f"notifications-refused-{device}.png"), full_page=True)

    with webhook_server(status=302, location="http://127.0.0.1:{port}/latest/") as server:
        page.get_by_label("Webhook URL").fill(f"{server.url}/services/T0/B0/secret")
        page.get_by_role("button", name="Save preferences").click()
        expect(page.locator(".messages")).to_contain_text("Notification preferences saved")
        expect(page.locator("#kind-requeued").get_by_label("Email")).not_to_be_checked()
        expect(page.locator("#kind-requeued").get_by_label("Webhook")).to_be_checked()

        page.get_by_role("button", name="Send a test").click()
        expect(page.locator(".messages")).to_contain_text("The test was not delivered")

    assert [(seen.method, seen.path) for seen in server.seen] == [
        ("POST", "/services/T0/B0/secret")
    ]
    expect(page.locator("#webhook-failing")).to_contain_text("answered 302, a redirect")
    row = page.locator("#deliveries tbody tr").first
    expect(row).to_contain_text("Failed")
    expect(row).to_contain_text("HTTP 302")
    expect(row).not_to_contain_text("secret")
    assert not scrolls_sideways(page)
    page.screenshot(path=str(tmp_path / f"notifications-{device}.png"), full_page=True)
    # The refused save answered 400 on purpose (Chromium logs it); nothing else may fail.
    expected = [
        f"400 {portal.url}/account/notifications/",
        "console: Failed to load resource: the server responded with a status of 400 (Bad Request)",
    ]
    assert sorted(e for e in problems.errors if e in expected) == sorted(expected)
    problems.errors = [e for e in problems.errors if e not in expected]
    problems.assert_none()
