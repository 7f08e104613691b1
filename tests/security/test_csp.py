"""Every HTML answer carries the strict Content-Security-Policy (finding 6).

The URLs come from the URL conf (tests/security/routes.py), so a new page is
checked the moment it is routed; error pages (400, 403, 404) are checked too.
That the pages pass the policy in Chromium is tests/e2e/test_csp_browser.py.
"""

from __future__ import annotations

import pytest

from tests.security.conftest import client_for
from tests.security.routes import all_routes, fill

pytestmark = pytest.mark.django_db

POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "frame-ancestors": "'none'",
    "form-action": "'self'",
}


def directives(header: str) -> dict[str, str]:
    pairs = (part.strip().split(" ", 1) for part in header.split(";") if part.strip())
    return {name: value for name, value in pairs}


def html_answers(world):
    for route in all_routes():
        path = fill(route, world)
        for role in ("researcher", "manager", "admin"):
            response = client_for(world, role).get(path)
            if response.get("Content-Type", "").startswith("text/html"):
                yield f"GET {path} as {role} ({response.status_code})", response


def test_every_html_page_carries_the_strict_policy(world):
    seen, wrong = 0, []
    for name, response in html_answers(world):
        seen += 1
        header = response.get("Content-Security-Policy")
        if header is None or directives(header) != POLICY:
            wrong.append(f"{name}: {header}")

    assert seen > 40, "the walk found too few HTML pages to mean anything"
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", ["/nodes/%00/", "/no-such-page/", "/remediation/approvals/"])
def test_error_pages_carry_the_policy_too(world, path):
    response = client_for(world, "researcher").get(path)

    assert response.status_code in (400, 403, 404)
    assert directives(response["Content-Security-Policy"]) == POLICY


def test_the_policy_allows_no_inline_script_or_style():
    from django.conf import settings

    policy = settings.CONTENT_SECURITY_POLICY["DIRECTIVES"]
    for directive in ("script-src", "style-src", "default-src"):
        assert not {"'unsafe-inline'", "'unsafe-eval'"} & set(policy[directive])
    assert "EXCLUDE_URL_PREFIXES" not in settings.CONTENT_SECURITY_POLICY


def test_a_job_output_file_keeps_its_own_stricter_sandbox_policy(world):
    # jobs/output_views.py sets its own header on researchers' files; django-csp keeps it.
    response = client_for(world, "researcher").get(f"/jobs/{world.job.slurm_id}/output/raw")

    assert response["Content-Security-Policy"] == "default-src 'none'; sandbox"
