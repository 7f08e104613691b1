"""The fleet view in a real browser: every GPU on a canvas, changed live, drilled into.

The portal is started with MEDBAY_BOARD_TILES_MAX=4, so that its six nodes are a
"large" cluster and the board is the fleet view; a partition of four nodes is
then small enough for the cards.
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
from tests.e2e.portal_server import NODE_PREFIX

pytestmark = pytest.mark.browser
LIVE_MS = 2000
FAILED_RED = [214, 59, 59]  # --bad in medbay.css, fleet.js's "f"
HEALTHY_GREEN = [46, 158, 91]

PIXEL = """([name, gpu]) => {
  const spot = window.MedbayFleet.locate(name, gpu);
  if (!spot) { return null; }
  const canvas = document.querySelector(`canvas[data-group="${spot.group}"]`);
  return Array.from(canvas.getContext("2d").getImageData(spot.x, spot.y, 1, 1).data.slice(0, 3));
}"""


@pytest.fixture(scope="module")
def fleet_portal(tmp_path_factory, request):
    require_browser()
    folder = tmp_path_factory.mktemp("e2e-fleet")
    yield from launch_portal(
        request,
        folder,
        "tests/e2e/portal_server.py",
        MEDBAY_BACKEND="simulated",
        MEDBAY_BOARD_TILES_MAX="4",
    )


def test_a_gpu_fault_turns_its_square_red_live_and_the_fleet_drills_down(page, fleet_portal):
    node = f"{NODE_PREFIX}-03"
    problems = watch_for_problems(page)
    page.add_init_script(WATCH_SOCKET)
    log_in(page, fleet_portal, "alice")
    expect(page.locator("#fleet canvas")).to_have_count(3)  # infer, spare, train
    expect(page.locator("#board-grid")).to_have_count(0)
    wait_for_socket(page)
    page.wait_for_function("() => document.getElementById('fleet').dataset.drawn")
    assert page.evaluate(PIXEL, [node, 3]) == HEALTHY_GREEN
    expect(page.locator("#fleet-problems")).to_contain_text("Every GPU shown is healthy")

    fleet_portal.command("xid", node=node, gpu=3, xid=79)

    page.wait_for_function(
        f"(args) => JSON.stringify(({PIXEL})(args)) === '{FAILED_RED}'.replace(/ /g, '')",
        arg=[node, 3],
        timeout=LIVE_MS,
    )
    assert page.evaluate(PIXEL, [node, 2]) != FAILED_RED  # only the GPU that failed
    row = page.locator(f"#problem-{node}")
    expect(row).to_contain_text("GPU 3 failed", timeout=LIVE_MS)
    assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"

    spot = page.evaluate("([n, g]) => window.MedbayFleet.locate(n, g)", [node, 3])
    canvas = page.locator(f'canvas[data-group="{spot["group"]}"]')
    canvas.hover(position={"x": spot["x"], "y": spot["y"]})
    # Its other GPUs are in remediation by now: the XID 79 policy replaces the node.
    expect(page.locator("#fleet-tip")).to_have_text(re.compile(rf"^{node}: .*GPU 3 failed"))
    canvas.click(position={"x": spot["x"], "y": spot["y"]})
    # Straight to the node's cluster address, the one the payload names.
    expect(page).to_have_url(f"{fleet_portal.url}/nodes/{spot['cluster']}/{node}/")
    expect(page.locator("h1")).to_contain_text(node)

    page.go_back()
    page.get_by_role("link", name="train", exact=True).click()
    expect(page).to_have_url(f"{fleet_portal.url}/?partition=train")
    expect(page.locator("#board-grid .tile")).to_have_count(4)  # small enough for cards
    problems.assert_none()


def test_keyboard_users_reach_each_unhealthy_node_from_the_table(page, fleet_portal):
    node = f"{NODE_PREFIX}-06"
    problems = watch_for_problems(page)
    page.add_init_script(WATCH_SOCKET)
    log_in(page, fleet_portal, "alice")
    wait_for_socket(page)
    fleet_portal.command("xid", node=node, gpu=5, xid=31)  # a warning: degraded, no run
    table = page.get_by_role("table")
    expect(table.get_by_role("row", name=re.compile(node))).to_contain_text(
        "GPU 5 degraded", timeout=LIVE_MS
    )
    expect(table.get_by_role("columnheader", name="GPUs not healthy")).to_be_visible()
    table.get_by_role("link", name=node).focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(
        re.compile(rf"{re.escape(fleet_portal.url)}/nodes/[a-z0-9_-]+/{node}/$")
    )
    problems.assert_none()
