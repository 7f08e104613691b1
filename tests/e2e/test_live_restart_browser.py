"""A page whose server process died and came back catches up on what it missed.

The portal is killed (SIGKILL, as a crash or an OOM kill would), an event is
recorded by the restarted process before it listens, and the page, never
reloaded, reconnects by itself and shows it.
"""

from __future__ import annotations

import json
import secrets

import pytest

from tests.e2e.conftest import (
    WATCH_SOCKET,
    expect,
    free_port,
    launch_portal,
    log_in,
    require_browser,
    wait_for_socket,
    watch_for_problems,
)
from tests.e2e.portal_server import NODE_PREFIX

pytestmark = pytest.mark.browser
LIVE_MS = 2000
# A bounded retry interval, so the page comes back soon after the server does.
QUICK_RECONNECT = """
document.addEventListener("DOMContentLoaded", () => {
  htmx.config.wsReconnectDelay = () => 500;
});
"""


def test_a_page_catches_up_after_its_server_process_is_killed_and_restarted(
    page, request, tmp_path
):
    require_browser()
    port, key = free_port(), secrets.token_urlsafe(50)
    settings = {"MEDBAY_BACKEND": "simulated", "SECRET_KEY": key}
    first_run = launch_portal(
        request, tmp_path, "tests/e2e/portal_server.py", port=port, **settings
    )
    portal = next(first_run)
    problems = watch_for_problems(page)
    page.add_init_script(WATCH_SOCKET)
    page.add_init_script(QUICK_RECONNECT)
    log_in(page, portal, "admin")
    page.goto(f"{portal.url}/health/events/")
    wait_for_socket(page)
    expect(page.locator("#live-status")).to_have_text("live")

    problems.assert_none()
    portal.process.kill()
    first_run.close()
    expect(page.locator("#live-status")).to_have_text("reconnecting", timeout=10_000)

    node = f"{NODE_PREFIX}-03"
    missed = {"op": "xid", "node": node, "gpu": 6, "xid": 94, "message": "Contained ECC error."}
    second_run = launch_portal(
        request,
        tmp_path,
        "tests/e2e/portal_server.py",
        port=port,
        E2E_BEFORE_SERVING=json.dumps([missed]),
        **settings,
    )
    try:
        next(second_run)
        expect(page.locator("#live-status")).to_have_text("live", timeout=20_000)
        # While the server was down, htmx logged each refused reconnect attempt
        # (the ws extension's error event): expected then, and only then.
        problems.errors.clear()
        top = page.locator("#event-rows tr").first
        expect(top).to_contain_text(node, timeout=LIVE_MS)
        expect(top).to_contain_text("XID 94")
        assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"
    finally:
        second_run.close()
    problems.assert_none()
