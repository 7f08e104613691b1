"""A live page's socket in Chromium follows its person's account and shares the portal.

An admin who unticks a researcher's "Active" box in /admin/ stops that
researcher's open page at once; a person with more pages open than
MEDBAY_SOCKETS_PER_USER allows gets the extra page refreshing itself by polling
(close code 4429) instead of live. Both fail on any console error or failed
request.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import (
    WATCH_SOCKET,
    expect,
    launch_portal,
    log_in,
    require_browser,
    wait_for_socket,
    watch_for_problems,
)
from tests.e2e.portal_server import PASSWORD

pytestmark = pytest.mark.browser
# Generous: what the test waits for is observed state, and it usually comes within a second.
CLOSED_MS = 15_000
# The polling page's period (static/js/live.js, POLL_MS) and some.
POLLED_MS = 25_000


def open_live(page, portal, user: str, password: str | None, path: str) -> None:
    page.add_init_script(WATCH_SOCKET)
    # Log in onto the job form, which opens no socket: a page that did would hold the
    # person's one socket on the cramped portal until the server saw it close, and the
    # next page's socket could reach the server first and be turned away.
    page.goto(f"{portal.url}/login/?next=/jobs/new")
    page.get_by_label("User name").fill(user)
    page.get_by_label("Password").fill(password or PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/jobs/new$"))
    page.goto(f"{portal.url}{path}")
    wait_for_socket(page)
    expect(page.locator("#live-status")).to_have_text("live")


def new_researcher(portal, name: str) -> str:
    """A researcher of this test's own (deactivating alice would fail the next test)."""
    output = portal.command("medbay_user", args=["add", name, "--role", "researcher"])["output"]
    return output.split("Password: ", 1)[1].split()[0]


def test_unticking_active_in_admin_closes_the_researchers_open_page(page, browser, portal):
    password = new_researcher(portal, "dora")
    problems = watch_for_problems(page)
    open_live(page, portal, "dora", password, "/jobs/")

    portal.command("superuser", username="e2e-root")
    admin = browser.new_context().new_page()
    admin.route("**/favicon.ico", lambda route: route.fulfill(status=204))  # admin links none
    admin_problems = watch_for_problems(admin)
    log_in(admin, portal, "e2e-root")
    admin.goto(f"{portal.url}/admin/auth/user/?q=dora")
    admin.get_by_role("link", name="dora", exact=True).click()
    admin.get_by_label("Active").uncheck()
    admin.get_by_role("button", name="Save", exact=True).click()
    expect(admin.locator(".messagelist")).to_contain_text("was changed successfully")

    status = page.locator("#live-status")
    expect(status).to_have_text("offline", timeout=CLOSED_MS)
    expect(status).to_have_attribute("title", re.compile("logged out"))
    page.goto(f"{portal.url}/jobs/")
    expect(page).to_have_url(re.compile(r"/login/"))
    problems.assert_none()
    admin_problems.assert_none()
    admin.context.close()


@pytest.fixture(scope="module")
def cramped(tmp_path_factory, request):
    """A portal that lets each person hold one socket."""
    require_browser()
    folder = tmp_path_factory.mktemp("e2e-cramped")
    yield from launch_portal(
        request,
        folder,
        "tests/e2e/portal_server.py",
        MEDBAY_BACKEND="simulated",
        MEDBAY_SOCKETS_PER_USER="1",
    )


def test_a_page_past_the_socket_cap_polls_and_still_shows_new_rows(browser, cramped):
    context = browser.new_context()
    first = context.new_page()
    open_live(first, cramped, "alice", None, "/health/events/")
    second = context.new_page()
    problems = watch_for_problems(second)
    second.goto(f"{cramped.url}/health/events/")

    status = second.locator("#live-status")
    expect(status).to_have_text("polling", timeout=CLOSED_MS)
    expect(status).to_have_attribute("title", re.compile("refreshes every 10 s"))
    node = cramped.command("fresh_training")["spare"]
    cramped.command("xid", node=node, gpu=2, xid=92, message="High single-bit ECC error rate.")
    expect(second.locator("#event-rows tr").first).to_contain_text(node, timeout=POLLED_MS)
    expect(first.locator("#event-rows tr").first).to_contain_text(node)  # the live one
    problems.assert_none()
    context.close()
