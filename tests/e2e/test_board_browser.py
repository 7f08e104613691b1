"""The portal in a real browser: logging in per role, the live board, a wrong password."""

from __future__ import annotations

import re
import time

import pytest

from tests.e2e.conftest import expect, log_in
from tests.e2e.portal_server import NODE_PREFIX, USERS

pytestmark = pytest.mark.browser

# Set before the page loads; still there after a live update only if the page
# was not reloaded.
WATCH_SOCKET = """
window.__medbayNoReload = true;
document.addEventListener("htmx:wsOpen", () => { window.__medbayWsOpen = true; });
"""


@pytest.mark.parametrize("username", list(USERS))
def test_each_role_logs_in_and_sees_the_board(page, portal, username):
    log_in(page, portal, username)

    expect(page).to_have_url(f"{portal.url}/")
    expect(page.locator(".topbar .who")).to_contain_text(f"{username} · {USERS[username]}")
    expect(page.locator("#board-grid .tile")).to_have_count(6)
    expect(page.locator(f"#node-{NODE_PREFIX}-01")).to_be_visible()


def test_a_wrong_password_shows_an_error_and_stays_on_the_login_page(page, portal):
    log_in(page, portal, "alice", password="not-the-password")

    expect(page.locator(".error-text")).to_contain_text("didn't match")
    expect(page).to_have_url(re.compile(r"/login/$"))
    expect(page.locator("#board-grid")).to_have_count(0)


def test_the_board_updates_live_when_a_node_is_drained(page, portal):
    node = f"{NODE_PREFIX}-02"
    page.add_init_script(WATCH_SOCKET)
    log_in(page, portal, "alice")
    tile = page.locator(f"#node-{node}")
    expect(tile).not_to_have_class(re.compile(r"status-drain"))
    page.wait_for_function("() => window.__medbayWsOpen === true")

    started = time.monotonic()
    portal.command("drain", node=node, reason="e2e: live board")
    try:
        expect(tile).to_have_class(re.compile(r"\bstatus-drain(ing|ed)\b"), timeout=2000)
        assert time.monotonic() - started < 2.0
        assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"
    finally:
        portal.command("resume", node=node)
    expect(tile).not_to_have_class(re.compile(r"status-drain"), timeout=2000)
