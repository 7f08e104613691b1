"""Every page on a phone (390x844), as each role that may open it: the page never scrolls
sideways (a wide table scrolls inside itself), the header is one line with a menu, and
the job form puts its preview under the form; and only a page with charts loads plotly.

The pages are the access table's (tests/security/access.py): every URL a role may GET,
its parameters filled from objects in the browser tests' portal, every report tab and
the printable reports. A new page is covered as soon as it is declared there; what
answers something other than a whole HTML page (JSON, CSV, a fragment that htmx swaps
into a page, a download) is skipped, as are the pages other projects draw: Django's
admin site and Django REST framework's browsable API (the API's URLs but its docs). One
context per role, so each role logs in once.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.urls import reverse

from tests.e2e.conftest import ARTIFACTS, expect, report_history, watch_for_problems
from tests.e2e.portal_server import PASSWORD
from tests.security.access import Access, access_for
from tests.security.routes import all_routes, fill

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}
# The access table's roles, as the portal's users (tests/e2e/portal_server.py USERS).
USERS = {"anonymous": None, "researcher": "alice", "manager": "manager", "admin": "admin"}

# The API's one page of Medbay's own; its other URLs answer programs (in a browser,
# with Django REST framework's browsable pages).
OUR_API_PAGES = {"api:api-docs"}
PLOTLY_WITHOUT_CHARTS = """() => !!document.querySelector('script[src*="plotly"]') &&
  !document.querySelector(".plotly-figure")"""
NAVIGATION_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
# The outermost elements that stick out of the viewport: what a failure names.
WIDE_ELEMENTS = """() => {
  const width = window.innerWidth, found = [];
  for (const element of document.querySelectorAll("body *")) {
    const box = element.getBoundingClientRect();
    if (box.width === 0 || box.right <= width + 1) { continue; }
    if (element.parentElement.getBoundingClientRect().right > width + 1) { continue; }
    const classes = typeof element.className === "string" ? element.className.trim() : "";
    found.push(element.tagName.toLowerCase() + (element.id ? "#" + element.id : "") +
      (classes ? "." + classes.split(/\\s+/).join(".") : "") +
      ` (right edge ${Math.round(box.right)})`);
  }
  return {page: document.documentElement.scrollWidth, viewport: width, elements: found.slice(0, 5)};
}"""


@pytest.fixture(scope="module")
def objects(portal):
    """Alice's running job, a run waiting for approval, history for the reports, and one
    of each other object a page's URL names."""
    portal.command("fresh_training")
    job = portal.command("run_job", user="alice", name="e2e-phone", gpus=2)
    spare = portal.command("fresh_training")["spare"]
    run = portal.command("await_approval", node=spare, action="cordon")["run"]
    report_history(portal)
    made = portal.command("page_objects")
    yield {"job": job["job"], "node": job["nodes"][0], "run": run, **made}
    # Leave no waiting run for the approval queue's own tests.
    portal.command("decide", run=run, verdict="reject", comment="e2e: phone test done")


def pages_for(role: str, objects: dict) -> list[str]:
    """Every path ROLE may GET by the access table, with the portal's objects in it."""
    world = SimpleNamespace(
        node=SimpleNamespace(
            name=objects["node"], cluster=SimpleNamespace(name=objects["cluster"])
        ),
        job=SimpleNamespace(slurm_id=objects["job"]),
        template=SimpleNamespace(pk=objects["template"]),
        remediation=SimpleNamespace(pk=objects["run"]),
        policy=SimpleNamespace(pk=objects["policy"]),
        demand_policy=SimpleNamespace(pk=objects["demand_policy"]),
    )
    # routes.py makes these objects in the test database; here they live in the portal's.
    raw = {"fault-group": {"pk": str(objects["fault_group"])}}
    paths: list[str] = []
    for route in all_routes():
        access = access_for(route)
        if route.is_django_admin or not isinstance(access, Access) or access.get is None:
            continue
        if route.is_api and route.key not in OUR_API_PAGES:
            continue
        if role not in access.get or role in access.not_found:
            continue
        path = fill(route, world, raw.get(route.key))
        paths += variants(route.key, path)
    return list(dict.fromkeys(paths))


def variants(key: str, path: str) -> list[str]:
    """A page that shows different things by its parameter or query: each of them."""
    from reports.catalog import REPORTS

    if key == "report":
        return [reverse("report", args=[name]) for name in REPORTS]
    if key == "reports":
        return [path, f"{path}?print=1"]
    return [path]


def new_context(browser, portal, role: str, viewport: dict):
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(10_000)
    if USERS[role] is not None:
        page.goto(f"{portal.url}/login/")
        page.get_by_label("User name").fill(USERS[role])
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        expect(page.locator("header .who")).to_contain_text(USERS[role])
    return context, page


def is_whole_page(context, url: str) -> bool | str:
    """True for an HTML page, False for anything else; the status text for an error."""
    # Asked as the browser asks when it navigates, so the API answers its HTML pages.
    answer = context.request.get(url, headers={"Accept": NAVIGATION_ACCEPT})
    if answer.status >= 400:
        return f"{answer.status}"
    if "text/html" not in answer.headers.get("content-type", ""):
        return False
    return "<html" in answer.text()[:500].lower()


def screenshot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


@pytest.mark.parametrize("role", list(USERS))
def test_no_page_scrolls_sideways_on_a_phone(browser, portal, objects, role):
    context, page = new_context(browser, portal, role, PHONE)
    problems = watch_for_problems(page)
    wide, errors, opened = [], [], 0
    try:
        for path in pages_for(role, objects):
            url = f"{portal.url}{path}"
            whole = is_whole_page(context, url)
            if isinstance(whole, str):
                errors.append(f"{path}: answered {whole} to a role the access table allows")
                continue
            if not whole:
                continue
            page.goto(url)
            page.wait_for_load_state("networkidle")
            opened += 1
            measured = page.evaluate(WIDE_ELEMENTS)
            if measured["page"] > measured["viewport"]:
                wide.append(f"{path}: {measured['page']} px wide: {measured['elements']}")
                screenshot(page, f"phone-too-wide-{role}-{path.strip('/').replace('/', '_')}")
            if page.evaluate(PLOTLY_WITHOUT_CHARTS):
                errors.append(f"{path}: loads plotly (a megabyte) but draws no chart")
            errors += [f"{path}: {error}" for error in problems.errors]
            problems.errors.clear()
    finally:
        context.close()

    # Anonymous people see the log-in page and the API docs; the others far more.
    assert opened >= (2 if role == "anonymous" else 12), f"only {opened} pages opened"
    assert not wide, "pages wider than a 390 px phone:\n" + "\n".join(wide)
    assert not errors, "\n".join(errors)


def test_the_phone_header_is_one_line_and_its_menu_opens_inside_the_dark_bar(
    browser, portal, objects
):
    context, page = new_context(browser, portal, "researcher", PHONE)
    problems = watch_for_problems(page)
    try:
        page.goto(f"{portal.url}/")
        header = page.locator("header.topbar")
        log_out = page.get_by_role("button", name="Log out")
        expect(log_out).to_be_hidden()
        assert header.bounding_box()["height"] < 60, "the closed header is more than one line"

        page.locator("header summary", has_text="Menu").click()

        expect(log_out).to_be_visible()
        expect(page.get_by_role("link", name="Jobs", exact=True)).to_be_visible()
        bar, button = header.bounding_box(), log_out.bounding_box()
        assert (
            bar["y"] <= button["y"] and button["y"] + button["height"] <= bar["y"] + bar["height"]
        )
        assert button["x"] + button["width"] <= PHONE["width"]
        page.get_by_role("link", name="Jobs", exact=True).click()
        expect(page).to_have_url(f"{portal.url}/jobs/")
        expect(log_out).to_be_hidden()  # a new page starts with the menu closed
        problems.assert_none()
    finally:
        context.close()


def test_the_job_form_shows_its_preview_under_the_form_on_a_phone(browser, portal, objects):
    context, page = new_context(browser, portal, "researcher", PHONE)
    problems = watch_for_problems(page)
    try:
        page.goto(f"{portal.url}/jobs/new")
        page.get_by_label("Job name").fill("e2e-phone-preview")
        page.get_by_label("GPUs per node").fill("2")
        page.get_by_label("Working directory").fill("/home/alice/phone")
        page.get_by_label("Command or script body").fill("train.py")
        expect(page.locator("#preview")).to_contain_text("e2e-phone-preview")

        form = page.locator(".jobform fieldset").first.bounding_box()
        preview = page.locator("#preview").bounding_box()
        assert preview["y"] >= form["y"] + form["height"], "the preview is beside the form"
        assert preview["x"] + preview["width"] <= PHONE["width"]
        problems.assert_none()
    finally:
        context.close()


@pytest.mark.parametrize("size", [PHONE, DESKTOP], ids=["390", "1440"])
def test_the_board_a_job_and_a_report_fit_the_screen_with_screenshots(
    browser, portal, objects, size
):
    """Screenshots in test-artifacts/ for a person to look at, at both sizes."""
    context, page = new_context(browser, portal, "admin", size)
    problems = watch_for_problems(page)
    try:
        for name, path in [
            ("board", "/"),
            ("job", f"/jobs/{objects['job']}/"),
            ("report", "/reports/goodput/"),
        ]:
            page.goto(f"{portal.url}{path}")
            page.wait_for_load_state("networkidle")
            if name == "report":
                expect(page.locator(".plotly-figure .plot-container svg").first).to_be_attached()
                expect(page.locator(".figure-title").first).to_be_visible()
            screenshot(page, f"screen-{size['width']}-{name}")
            measured = page.evaluate(WIDE_ELEMENTS)
            assert measured["page"] <= size["width"], f"{path}: {measured}"
        problems.assert_none()
    finally:
        context.close()
