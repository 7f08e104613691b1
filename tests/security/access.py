"""Who may use each URL: the table the permission matrix checks every route against.

Keyed by URL name (`api:` in front for routes under /api/v1/, where names may
repeat a page's). A URL missing here fails `test_every_url_has_a_declared_access`
with a message saying to add it. The Django admin site is covered as a whole by
DJANGO_ADMIN: it checks `is_staff` and model permissions itself.
"""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("anonymous", "researcher", "other_researcher", "manager", "admin")

EVERYONE = frozenset(ROLES)
MEDBAY = frozenset(ROLES) - {"anonymous"}
SUBMITTERS = frozenset({"researcher", "other_researcher", "admin"})
# The fixture job, template and so on belong to "researcher" (alice).
OWNER_AND_ADMIN = frozenset({"researcher", "admin"})
OWNER_AND_WATCHERS = frozenset({"researcher", "manager", "admin"})
MANAGERS = frozenset({"manager", "admin"})
ADMINS = frozenset({"admin"})
# Endpoints that take their own token (node agent, running job), not a user's:
# a user's session or API token is refused with 401, like no credentials at all.
TOKEN_ONLY: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Access:
    """Roles allowed per method; None means the URL does not offer that method."""

    get: frozenset[str] | None = None
    post: frozenset[str] | None = None
    # Roles refused with the 404 a missing object gets, so that they cannot tell
    # which objects exist (another researcher's job).
    not_found: frozenset[str] = frozenset()


def page(get=None, post=None, not_found=frozenset()) -> Access:
    return Access(get=get, post=post, not_found=not_found)


# A researcher opening someone else's job is told there is no such job.
OTHERS_JOB = frozenset({"other_researcher"})


ACCESS: dict[str, Access] = {
    # Public: logging in, liveness, metrics (from 127.0.0.1, the test client's
    # address; other addresses are tested in tests/portal/test_metrics.py).
    "login": page(get=EVERYONE, post=EVERYONE),
    "logout": page(post=EVERYONE),
    # OpenID Connect log-in (when off, both send to the log-in page).
    "oidc_authentication_init": page(get=EVERYONE),
    "oidc_authentication_callback": page(get=EVERYONE),
    "healthz": page(get=EVERYONE, post=EVERYONE),
    "metrics": page(get=EVERYONE),
    # Board, nodes and health.
    "board": page(get=MEDBAY),
    "fleet-data": page(get=MEDBAY),
    "node-detail": page(get=MEDBAY),
    "cluster-node": page(get=MEDBAY),
    # Which cluster the pages show (the header's switcher), and all clusters at a glance.
    "cluster-choose": page(post=MEDBAY),
    "cluster-overview": page(get=MEDBAY),
    "event-feed": page(get=MEDBAY),
    "xid-catalogue": page(get=MEDBAY),
    "xid-detail": page(get=MEDBAY),
    # Jobs.
    "job-queue": page(get=MEDBAY),
    "job-new": page(get=SUBMITTERS, post=SUBMITTERS),
    "job-preview": page(post=SUBMITTERS),
    "job-templates": page(get=SUBMITTERS),
    "job-template-delete": page(post=SUBMITTERS),
    "job-detail": page(get=OWNER_AND_WATCHERS, not_found=OTHERS_JOB),
    "job-story": page(get=OWNER_AND_WATCHERS, not_found=OTHERS_JOB),
    "job-resubmit": page(get=OWNER_AND_ADMIN, post=OWNER_AND_ADMIN, not_found=OTHERS_JOB),
    "job-cancel": page(post=OWNER_AND_ADMIN, not_found=OTHERS_JOB),
    # Output files: the owner and admins only; managers are told it is private (403).
    "job-output": page(get=OWNER_AND_ADMIN, not_found=OTHERS_JOB),
    "job-output-raw": page(get=OWNER_AND_ADMIN, not_found=OTHERS_JOB),
    # The same pages at the job's cluster address.
    "cluster-job": page(get=OWNER_AND_WATCHERS, not_found=OTHERS_JOB),
    "cluster-job-story": page(get=OWNER_AND_WATCHERS, not_found=OTHERS_JOB),
    "cluster-job-resubmit": page(get=OWNER_AND_ADMIN, post=OWNER_AND_ADMIN, not_found=OTHERS_JOB),
    "cluster-job-cancel": page(post=OWNER_AND_ADMIN, not_found=OTHERS_JOB),
    "cluster-job-output": page(get=OWNER_AND_ADMIN, not_found=OTHERS_JOB),
    "cluster-job-output-raw": page(get=OWNER_AND_ADMIN, not_found=OTHERS_JOB),
    # Remediation.
    "remediation-list": page(get=MEDBAY),
    "remediation-detail": page(get=MEDBAY),
    "remediation-decide": page(post=ADMINS),
    "remediation-approvals": page(get=ADMINS),
    "remediation-decide-again": page(post=ADMINS),
    # Fault groups: everyone reads what was grouped; admins split or decide on a part.
    "fault-group": page(get=MEDBAY),
    "fault-group-split": page(post=ADMINS),
    "fault-group-decide": page(post=ADMINS),
    "fault-group-by-hand": page(post=ADMINS),
    "remediation-policies": page(get=ADMINS),
    "remediation-policy-new": page(get=ADMINS, post=ADMINS),
    "remediation-policy-edit": page(get=ADMINS, post=ADMINS),
    "remediation-replay": page(get=ADMINS, post=ADMINS),
    "node-action": page(get=ADMINS, post=ADMINS),
    # Training and inference follow demand: managers see the pools and GPU-hours.
    "capacity": page(get=MANAGERS),
    "capacity-what-if": page(get=ADMINS),
    "demand-policies": page(get=ADMINS),
    "demand-policy-new": page(get=ADMINS, post=ADMINS),
    "demand-policy-edit": page(get=ADMINS, post=ADMINS),
    "cluster-node-action": page(get=ADMINS, post=ADMINS),
    # Tokens: everyone their own; agent tokens for nodes are admins' business.
    "api-tokens": page(get=MEDBAY, post=MEDBAY),
    "api-token-revoke": page(post=MEDBAY),
    # Notification preferences: everyone their own.
    "notification-preferences": page(get=MEDBAY, post=MEDBAY),
    "notification-test": page(post=MEDBAY),
    "agent-tokens": page(get=ADMINS, post=ADMINS),
    "agent-token-revoke": page(post=ADMINS),
    "node-repair": page(post=ADMINS),
    "cluster-node-repair": page(post=ADMINS),
    "partition-edits": page(get=ADMINS, post=ADMINS),
    "cluster-list": page(get=ADMINS),
    "cluster-new": page(get=ADMINS, post=ADMINS),
    "cluster-edit": page(get=ADMINS, post=ADMINS),
    # Reports.
    "reports": page(get=MANAGERS),
    "report": page(get=MANAGERS),
    # API.
    "api:api-root": page(get=MEDBAY),
    "api:api-token": page(post=EVERYONE),
    "api:api-schema": page(get=EVERYONE),
    "api:api-docs": page(get=EVERYONE),
    "api:node-list": page(get=MEDBAY),
    "api:node-detail": page(get=MEDBAY),
    "api:api-health-events": page(get=MEDBAY, post=TOKEN_ONLY),
    "api:api-jobs": page(get=MEDBAY, post=SUBMITTERS),
    "api:api-job": page(get=OWNER_AND_WATCHERS, not_found=OTHERS_JOB),
    "api:api-job-timeline": page(get=OWNER_AND_WATCHERS, not_found=OTHERS_JOB),
    "api:api-job-resubmit": page(post=OWNER_AND_ADMIN, not_found=OTHERS_JOB),
    "api:api-job-cancel": page(post=OWNER_AND_ADMIN, not_found=OTHERS_JOB),
    "api:api-job-progress": page(post=TOKEN_ONLY),
    "api:remediation-list": page(get=MEDBAY, post=ADMINS),
    "api:remediation-detail": page(get=MEDBAY),
    "api:remediation-approve": page(post=ADMINS),
    "api:remediation-reject": page(post=ADMINS),
    "api:remediation-cancel": page(post=ADMINS),
    "api:remediation-retry": page(post=ADMINS),
    "api:remediation-release": page(post=ADMINS),
    "api:api-report": page(get=MANAGERS),
    "api:api-report-csv": page(get=MANAGERS),
    # The admin site's log-in page is public; the rest is DJANGO_ADMIN.
    "admin:login": page(get=EVERYONE, post=EVERYONE),
}

DJANGO_ADMIN = "django-admin"


def access_for(route) -> Access | str | None:
    if route.key in ACCESS:
        return ACCESS[route.key]
    if route.is_django_admin:
        return DJANGO_ADMIN
    return None


# ---------------------------------------------------------------- expected outcomes


def outcome(response, login_path: str) -> str:
    """What a response amounts to: "ok", a kind of redirect, "server-error" or the status."""
    status = response.status_code
    if status >= 500:
        return "server-error"
    if status in (301, 302, 303, 307, 308):
        location = response["Location"]
        if location.startswith(f"{login_path}?next="):
            return "login"
        if location.startswith("/admin/login/"):
            return "admin-login"
        # The admin's index: where it sends non-staff from its log-out (to be sent
        # on to log in), staff from its log-in page, and anyone from a missing object.
        if location == "/admin/":
            return "admin-index"
        return "redirect"
    if 200 <= status < 300:
        return "ok"
    return str(status)


REFUSED = {"401", "403", "login", "admin-login"}


def acceptable(access: Access | str, role: str, method: str, is_api: bool) -> set[str]:
    """The outcomes that are right for ROLE calling METHOD on a URL with ACCESS."""
    if access == DJANGO_ADMIN:
        if role != "admin":
            return {"admin-login", "admin-index"}
        # Staff without model permissions: pages they may see, 403 for the rest.
        return {"ok", "redirect", "admin-index", "403", "404", "405"}
    allowed = access.get if method == "GET" else access.post
    if role in access.not_found:
        return {"404"} if allowed is not None else {"404", "405"}
    if allowed is None:
        # A method the URL does not offer may be refused, or treated like a GET
        # (many pages render the same on POST), but never let more roles in.
        may_get = access.get is not None and role in access.get
        return REFUSED | {"405"} | ({"ok", "redirect", "400"} if may_get else set())
    if role in allowed:
        if method == "GET":
            return {"ok", "redirect", "admin-index"}
        # Posting an empty body: refused as bad input, absent or conflicting is fine.
        return {"ok", "redirect", "admin-index", "400", "404", "409"}
    if role == "anonymous" or allowed == TOKEN_ONLY:
        return {"401"} if is_api else {"login"}
    return {"403"}
