"""Every page, as each role, under the Content-Security-Policy: not one violation.

Chromium reports a refused inline script, <style>, style="" or socket both as a
console error and as a `securitypolicyviolation` event; the test fails on
either, and on any failed request or error answer. Live pages must also open
their websocket (connect-src 'self'), the job form's live preview must run and
every report's plotly charts must draw.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import (
    WATCH_SOCKET,
    expect,
    log_in,
    report_history,
    wait_for_socket,
    watch_for_problems,
)

pytestmark = pytest.mark.browser

REPORTS = ("utilization", "training_share", "availability", "reliability", "goodput")
REPORTS += ("remediation", "accounting", "lemons", "failures", "ettr")

WATCH_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations.push(
    `${event.violatedDirective} refused ${event.blockedURI || "inline"} ` +
    `at ${event.sourceFile}:${event.lineNumber}`);
});
"""


@pytest.fixture(scope="module")
def objects(portal):
    """Alice's running job, a run waiting for approval and some history for the reports."""
    portal.command("fresh_training")
    job = portal.command("run_job", user="alice", name="e2e-csp", gpus=2)
    spare = portal.command("fresh_training")["spare"]
    run = portal.command("await_approval", node=spare, action="cordon")["run"]
    report_history(portal)
    yield {"job": job["job"], "node": job["nodes"][0], "run": run}
    # Leave no waiting run for the approval queue's own tests.
    portal.command("decide", run=run, verdict="reject", comment="e2e: csp test done")


def pages_for(role: str, objects: dict) -> list[str]:
    everyone = [
        "/",
        f"/nodes/{objects['node']}/",
        "/health/events/",
        "/health/xid/",
        "/health/xid/79/",
        "/jobs/",
        f"/jobs/{objects['job']}/",
        "/remediation/",
        f"/remediation/{objects['run']}/",
        "/api/v1/docs/",
        "/account/tokens/",
        "/account/notifications/",
    ]
    submitters = ["/jobs/templates/"]
    managers = [f"/reports/{name}/" for name in REPORTS] + ["/reports/?print=1", "/capacity/"]
    admins = [
        "/remediation/approvals/",
        f"/nodes/{objects['node']}/actions/cordon/",
        "/remediation/policies/",
        "/remediation/policies/new/",
        "/capacity/policies/",
        "/remediation/replay/",
        "/partitions/edits/",
        "/health/agents/",
        "/admin/",
    ]
    return {
        "alice": everyone + submitters,
        "manager": everyone + managers,
        "admin": everyone + submitters + managers + admins,
    }[role]


def open_and_check(page, portal, path: str, problems) -> None:
    page.goto(f"{portal.url}{path}")
    page.wait_for_load_state("networkidle")
    if page.locator("[ws-connect]").count():
        wait_for_socket(page)
    for figure in page.locator(".plotly-figure").all():
        expect(figure.locator(".plot-container svg").first).to_be_attached()
    violations = page.evaluate("window.__cspViolations")
    assert not violations, f"{path}: " + "; ".join(violations)
    assert not problems.errors, f"{path}: " + "\n".join(problems.errors)


def type_a_job(page, role: str) -> None:
    """The new job form, typed into so that its live preview (htmx) runs."""
    page.get_by_label("Job name").fill("e2e-csp-preview")
    page.get_by_label("GPUs per node").fill("2")
    page.get_by_label("Working directory").fill(f"/home/{role}/csp")
    page.get_by_label("Command or script body").fill("train.py")
    expect(page.locator("#preview")).to_contain_text("e2e-csp-preview")


def ignore_the_missing_favicon(page) -> None:
    # Django's admin pages link no icon, so Chromium asks for /favicon.ico (a 404
    # that is no policy's doing).
    page.route("**/favicon.ico", lambda route: route.fulfill(status=204))


@pytest.mark.parametrize("role", ["alice", "manager", "admin"])
def test_every_page_loads_without_a_content_security_policy_violation(page, portal, objects, role):
    problems = watch_for_problems(page)
    ignore_the_missing_favicon(page)
    page.add_init_script(WATCH_SOCKET)
    page.add_init_script(WATCH_VIOLATIONS)
    log_in(page, portal, role)
    expect(page.locator(".who")).to_contain_text(role)

    for path in pages_for(role, objects):
        open_and_check(page, portal, path, problems)
        if path.startswith("/reports/") and "print" not in path:
            assert page.locator(".plotly-figure .plot-container svg").count(), path
        if path == "/api/v1/docs/":
            expect(page.locator(".swagger-ui .info .title")).to_contain_text("Medbay API")
    if role != "manager":
        open_and_check(page, portal, "/jobs/new", problems)
        type_a_job(page, role)
        assert not page.evaluate("window.__cspViolations")
        problems.assert_none()


def test_django_admin_site_pages_pass_the_policy(page, portal, objects):
    """The admin role has no model permissions there; a superuser sees every kind of page."""
    user = portal.command("superuser", username="e2e-root")
    problems = watch_for_problems(page)
    ignore_the_missing_favicon(page)
    page.add_init_script(WATCH_VIOLATIONS)
    log_in(page, portal, "e2e-root")

    for path in [
        "/admin/",
        "/admin/auth/user/",
        "/admin/auth/user/add/",
        f"/admin/auth/user/{user['pk']}/change/",
        "/admin/clusters/node/",
        "/admin/jobs/job/",
        "/admin/jobs/job/?q=e2e",
    ]:
        open_and_check(page, portal, path, problems)
    page.goto(f"{portal.url}/admin/clusters/node/")
    page.locator("#result_list tbody a").first.click()
    page.wait_for_load_state("networkidle")
    assert not page.evaluate("window.__cspViolations")
    problems.assert_none()


def test_the_login_page_and_an_error_page_pass_the_policy_too(page, portal):
    problems = watch_for_problems(page)
    page.add_init_script(WATCH_VIOLATIONS)
    page.goto(f"{portal.url}/login/")
    page.wait_for_load_state("networkidle")
    page.goto(f"{portal.url}/admin/login/")
    page.wait_for_load_state("networkidle")
    answer = page.goto(f"{portal.url}/no-such-page/")

    assert answer.status == 404
    assert answer.headers["content-security-policy"]
    assert not page.evaluate("window.__cspViolations")
    # The 404 itself, as the response and as the console's "Failed to load resource".
    problems.errors = [e for e in problems.errors if "404" not in e]
    problems.assert_none()
