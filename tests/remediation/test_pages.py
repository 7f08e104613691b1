import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from clusters.models import Node
from core.roles import Role
from identity.accounts import create_user_with_role
from remediation import services
from remediation.deciding import xid_reason
from remediation.models import (
    BreakerTrip,
    Mode,
    Policy,
    Remediation,
    RemediationStep,
    StepOutcome,
    Trigger,
)
from remediation.transitions import RunStatus

ADMIN_PAGES = [
    "/remediation/approvals/",
    "/remediation/policies/",
    "/remediation/policies/new/",
    "/remediation/replay/",
    "/nodes/gpu-04/actions/drain/",
]


def create_run(node_name: str, *, mode=Mode.AUTOMATIC, requested_by=None, action="reboot"):
    return services.create_run(
        Node.objects.get(name=node_name),
        action,
        trigger=Trigger.POLICY,
        reason=f"XID 79 on {node_name}",
        requested_by=requested_by,
        mode=mode,
    )


def csrf_token(page: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)


@pytest.mark.parametrize("path", ["/remediation/", *ADMIN_PAGES])
def test_the_remediation_pages_render_for_admins(admin_user, web, synced, path):
    assert web(admin_user).get(path).status_code == 200


@pytest.mark.parametrize("path", ADMIN_PAGES)
def test_admin_pages_are_forbidden_to_researchers(researcher, web, synced, path):
    assert web(researcher).get(path).status_code == 403


def test_anonymous_visitors_are_sent_to_log_in(db):
    response = Client().get("/remediation/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_researchers_see_runs_and_their_timelines_without_decision_buttons(researcher, web, synced):
    run = create_run("gpu-02", mode=Mode.APPROVAL)
    client = web(researcher)
    assert "gpu-02" in client.get("/remediation/").content.decode()
    page = client.get(f"/remediation/{run.pk}/").content.decode()
    assert f'id="run-{run.pk}-status"' in page and "Approve" not in page
    assert client.post(f"/remediation/{run.pk}/approve/", {"comment": ""}).status_code == 403


def test_the_timeline_shows_recorded_steps_and_status_history(admin_user, web, synced):
    run = create_run("gpu-02", action="replace")
    RemediationStep.objects.create(
        remediation=run, index=0, name="drain", outcome=StepOutcome.SUCCEEDED, message="drained"
    )
    RemediationStep.objects.create(
        remediation=run, index=1, name="signal_jobs", outcome=StepOutcome.STARTED, worker="w1"
    )
    page = web(admin_user).get(f"/remediation/{run.pk}/").content.decode()
    steps = page.split(f'id="run-{run.pk}-steps"')[1].split("</tbody>")[0]
    assert steps.index("drain") < steps.index("signal_jobs")
    assert "drained" in steps and "Started" in steps
    assert "Automatic run requested" in page  # the status history row from create_run


def test_the_run_list_filters_by_status_and_node(admin_user, web, synced):
    create_run("gpu-02", mode=Mode.APPROVAL)
    create_run("gpu-03")
    client = web(admin_user)
    awaiting = client.get("/remediation/?status=awaiting_approval").content.decode()
    assert "gpu-02" in awaiting and "gpu-03" not in awaiting
    by_node = client.get("/remediation/?node=gpu-03").content.decode()
    assert "gpu-03" in by_node and "gpu-02" not in by_node.split('id="run-rows"')[1]
    assert client.get("/remediation/?status=nonsense").status_code == 200


def test_the_run_list_makes_the_same_number_of_queries_for_more_runs(admin_user, web, synced):
    client = web(admin_user)
    create_run("gpu-01")
    client.get("/remediation/")
    with CaptureQueriesContext(connection) as few:
        client.get("/remediation/")
    for name in ("gpu-02", "gpu-03", "gpu-04"):
        create_run(name, requested_by=admin_user)
    with CaptureQueriesContext(connection) as many:
        client.get("/remediation/")
    assert len(many) == len(few)


def test_requesting_an_action_from_the_node_page_starts_a_run_and_shows_its_timeline(
    admin_user, web, jobs
):
    client = web(admin_user)
    preview = client.get("/nodes/gpu-03/actions/reboot/").content.decode()
    assert "eval-bob" in preview and "eval-alice" in preview and "alice, bob" in preview
    response = client.post(
        "/nodes/gpu-03/actions/reboot/", {"reason": "ECC storm", "grace_s": "15"}
    )
    run = Remediation.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/remediation/{run.pk}/"
    assert run.action == "reboot" and run.requested_by == admin_user
    assert run.context["grace_s"] == 15 and run.reason == "ECC storm"


def test_the_action_form_rejects_a_missing_reason_and_a_busy_node(admin_user, web, synced):
    client = web(admin_user)
    missing = client.post("/nodes/gpu-04/actions/drain/", {"reason": ""})
    assert missing.status_code == 400 and "This field is required" in missing.content.decode()
    existing = create_run("gpu-04")
    busy = client.post("/nodes/gpu-04/actions/drain/", {"reason": "again"})
    assert busy.status_code == 409
    assert f"/remediation/{existing.pk}/" in busy.content.decode()
    assert Remediation.objects.count() == 1


def test_unknown_actions_and_nodes_are_404(admin_user, web, synced):
    client = web(admin_user)
    assert client.get("/nodes/gpu-04/actions/explode/").status_code == 404
    assert client.get("/nodes/gpu-99/actions/drain/").status_code == 404


def test_forms_refuse_posts_without_a_csrf_token(admin_user, web, synced):
    client = web(admin_user, enforce_csrf_checks=True)
    refused = client.post("/nodes/gpu-04/actions/drain/", {"reason": "no token"})
    assert refused.status_code == 403 and not Remediation.objects.exists()
    token = csrf_token(client.get("/nodes/gpu-04/actions/drain/").content.decode())
    accepted = client.post(
        "/nodes/gpu-04/actions/drain/", {"reason": "with token", "csrfmiddlewaretoken": token}
    )
    assert accepted.status_code == 302 and Remediation.objects.count() == 1
    run = Remediation.objects.get()
    assert client.post(f"/remediation/{run.pk}/cancel/", {"comment": "x"}).status_code == 403
    assert client.post("/remediation/policies/new/", {"xid": 79}).status_code == 403


def test_the_approval_queue_approves_with_a_comment_and_returns_to_the_queue(
    admin_user, second_admin, web, jobs
):
    run = create_run("gpu-03", mode=Mode.APPROVAL, requested_by=second_admin)
    client = web(admin_user)
    queue = client.get("/remediation/approvals/").content.decode()
    assert f'id="approval-{run.pk}"' in queue and "eval-bob" in queue
    response = client.post(
        f"/remediation/{run.pk}/approve/",
        {"comment": "go", "next": "/remediation/approvals/"},
    )
    assert response.status_code == 302 and response["Location"] == "/remediation/approvals/"
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.approved_by == admin_user
    assert run.decision_comment == "go"
    assert f'id="approval-{run.pk}"' not in client.get("/remediation/approvals/").content.decode()


def test_the_requester_is_told_another_admin_must_approve(admin_user, web, synced):
    run = create_run("gpu-02", mode=Mode.APPROVAL, requested_by=admin_user)
    response = web(admin_user).post(f"/remediation/{run.pk}/approve/", {"comment": ""})
    assert response.status_code == 403
    assert "another admin must approve" in response.content.decode()
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL


def test_rejecting_needs_a_reason_and_an_offsite_next_is_ignored(admin_user, web, synced):
    run = create_run("gpu-02", mode=Mode.APPROVAL)
    client = web(admin_user)
    assert client.post(f"/remediation/{run.pk}/reject/", {"comment": ""}).status_code == 400
    response = client.post(
        f"/remediation/{run.pk}/reject/", {"comment": "wrong node", "next": "https://evil.test/"}
    )
    assert response["Location"] == f"/remediation/{run.pk}/"
    run.refresh_from_db()
    assert run.status == RunStatus.REJECTED and run.decision_comment == "wrong node"


def test_an_admin_cancels_a_running_run_and_cannot_cancel_it_twice(admin_user, web, synced):
    run = create_run("gpu-02")
    client = web(admin_user)
    assert (
        client.post(f"/remediation/{run.pk}/cancel/", {"comment": "false alarm"}).status_code == 302
    )
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and "false alarm" in run.message
    assert client.post(f"/remediation/{run.pk}/cancel/", {"comment": "again"}).status_code == 409


def test_the_policy_form_rejects_bad_input_with_field_errors(admin_user, web, db):
    client = web(admin_user)
    Policy.objects.create(xid=48, action="replace", mode="approval")
    Policy.objects.create(check_name="gpu_count", action="drain", mode="approval")
    cases = [
        ({"action": "reboot", "mode": "automatic"}, "Give an XID code or a health check name"),
        ({"xid": "5000", "action": "reboot", "mode": "automatic"}, "XID codes go up to 999"),
        ({"xid": "abc", "action": "reboot", "mode": "automatic"}, "Enter a whole number"),
        ({"xid": "79", "action": "explode", "mode": "automatic"}, "Select a valid choice"),
        ({"xid": "79", "action": "reboot", "mode": "sometimes"}, "Select a valid choice"),
        (
            {"xid": "79", "check_name": "nvlink", "action": "reboot", "mode": "automatic"},
            "not both",
        ),
        ({"xid": "48", "action": "reboot", "mode": "automatic"}, "already exists"),
        ({"check_name": "gpu_count", "action": "drain", "mode": "automatic"}, "already a policy"),
        ({"check_name": "gpu count!", "action": "drain", "mode": "automatic"}, "Letters, digits"),
    ]
    for data, message in cases:
        response = client.post("/remediation/policies/new/", data)
        assert response.status_code == 400, data
        assert message in response.content.decode(), data
    assert Policy.objects.count() == 2


def test_an_admin_creates_and_edits_a_policy_and_the_change_is_attributed(admin_user, web, db):
    client = web(admin_user)
    created = client.post(
        "/remediation/policies/new/",
        {"xid": "79", "action": "replace", "mode": "approval", "enabled": "on"},
    )
    assert created.status_code == 302
    policy = Policy.objects.get(xid=79)
    assert policy.mode == "approval" and policy.updated_by == admin_user
    client.post(
        f"/remediation/policies/{policy.pk}/",
        {"xid": "79", "action": "replace", "mode": "dry_run", "enabled": "on"},
    )
    policy.refresh_from_db()
    assert policy.mode == "dry_run"
    assert "XID 79" in client.get("/remediation/policies/").content.decode()


def test_every_policy_change_is_kept_with_its_author_and_shown_on_the_policy(admin_user, web, db):
    other_admin = create_user_with_role("second-admin", Role.ADMIN, "another-long-password")[0]
    values = {"xid": "79", "action": "replace", "mode": "approval", "enabled": "on"}
    web(admin_user).post("/remediation/policies/new/", values)
    policy = Policy.objects.get(xid=79)
    edit = f"/remediation/policies/{policy.pk}/"
    web(other_admin).post(edit, {**values, "mode": "automatic"})
    web(other_admin).post(edit, {**values, "mode": "automatic"})  # saved unchanged
    web(admin_user).post(edit, {**values, "mode": "automatic", "enabled": ""})
    changes = list(policy.changes.order_by("id"))
    assert [(c.changed_by, c.before, c.after) for c in changes] == [
        (admin_user, {}, policy_values("approval", True)),
        (other_admin, policy_values("approval", True), policy_values("automatic", True)),
        (admin_user, policy_values("automatic", True), policy_values("automatic", False)),
    ]
    page = web(admin_user).get(edit).content.decode()
    history = page[page.index('id="policy-history"') :]
    rows = re.findall(r"<tr><td>[^<]+</td><td>([^<]+)</td><td>([^<]+)</td></tr>", history)
    assert rows == [
        ("admin", "enabled True → False"),
        ("second-admin", "mode approval → automatic"),
        ("admin", "created: trigger XID 79; action replace; mode approval; enabled True"),
    ]


def policy_values(mode: str, enabled: bool) -> dict:
    return {"trigger": "XID 79", "action": "replace", "mode": mode, "enabled": enabled}


def test_the_node_page_offers_actions_to_admins_only_and_lists_its_runs(
    admin_user, researcher, web, synced
):
    run = create_run("gpu-05", action="to_training")
    admin_page = web(admin_user).get("/nodes/gpu-05/", follow=True).content.decode()
    assert 'href="/nodes/test/gpu-05/actions/drain/"' in admin_page
    # Not a training node:
    assert 'href="/nodes/test/gpu-05/actions/to_inference/"' not in admin_page
    assert f'href="/remediation/{run.pk}/"' in admin_page
    researcher_page = web(researcher).get("/nodes/gpu-05/", follow=True).content.decode()
    assert "/actions/" not in researcher_page
    assert f'href="/remediation/{run.pk}/"' in researcher_page


def test_the_board_shows_when_the_circuit_breaker_paused_automation(researcher, web, synced):
    assert "circuit breaker" not in web(researcher).get("/").content.decode()
    for name in ("gpu-01", "gpu-02", "gpu-03", "gpu-04"):
        create_run(name)
    BreakerTrip.objects.create(
        cluster=Node.objects.get(name="gpu-01").cluster, reason="4 nodes taken out in 10 min"
    )
    board = web(researcher).get("/").content.decode()
    assert "Automatic remediation paused: circuit breaker open since" in board


def incident(node_name: str, xid: int, opened_at):
    from health.models import Incident, Severity

    return Incident.objects.create(
        node=Node.objects.get(name=node_name),
        gpu_index=3,
        opened_at=opened_at,
        last_event_at=opened_at,
        severity=Severity.CRITICAL,
        xids=[xid],
        event_count=1,
    )


def test_the_replay_shows_what_policies_would_have_done_and_changes_nothing(
    admin_user, web, synced
):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    incident("gpu-02", 79, now - timedelta(days=1))
    incident("gpu-03", 48, now - timedelta(days=2))
    incident("gpu-04", 79, now - timedelta(days=30))
    policy = Policy.objects.create(xid=48, action="reboot", mode="dry_run")
    day = timezone.localdate()
    start, end = (day - timedelta(days=3)).isoformat(), day.isoformat()
    page = web(admin_user).get(f"/remediation/replay/?start={start}&end={end}").content.decode()
    rows = page.split('class="table replay"')[1]
    assert "gpu-02" in rows and "gpu-03" in rows and "gpu-04" not in rows
    assert "2 incidents" in page
    assert "<td>Replace</td>" in rows and f"/remediation/policies/{policy.pk}/" in rows
    assert "× Replace (" in page
    assert not Remediation.objects.exists()


def test_the_replay_form_rejects_a_backwards_or_malformed_period(admin_user, web, db):
    client = web(admin_user)
    backwards = client.get("/remediation/replay/?start=2026-05-02&end=2026-05-01")
    assert backwards.status_code == 400
    assert "The end must not be before the start" in backwards.content.decode()
    malformed = client.get("/remediation/replay/?start=yesterday&end=2026-05-01")
    assert malformed.status_code == 400 and "Enter a valid date" in malformed.content.decode()
    too_long = client.get("/remediation/replay/?start=2025-01-01&end=2026-05-01")
    assert too_long.status_code == 400 and "at most 90 days" in too_long.content.decode()


def test_htmx_filtering_returns_only_the_matching_rows(admin_user, web, synced):
    create_run("gpu-02", mode=Mode.APPROVAL)
    create_run("gpu-03")
    response = web(admin_user).get(
        "/remediation/?status=awaiting_approval", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="run-rows"
    )
    html = response.content.decode()
    assert "<html" not in html and html.count('id="run-') == 2  # the row and its status
    assert "gpu-02" in html and "gpu-03" not in html


def test_an_admins_run_says_it_was_requested_by_an_admin_not_automatic(admin_user, web, synced):
    run = services.create_run(
        Node.objects.get(name="gpu-02"),
        "drain",
        trigger=Trigger.ADMIN,
        reason="PSU swap",
        requested_by=admin_user,
    )

    page = web(admin_user).get(f"/remediation/{run.pk}/").content.decode()

    assert "Requested by an admin" in page
    assert "Automatic run requested" not in page


@pytest.mark.parametrize(
    ("xid", "reason"),
    [
        (79, "XID 79 GPU 3 fallen off the bus"),
        (48, "XID 48 GPU 3 double-bit ECC error"),
        (74, "XID 74 GPU 3 NVLink error"),
        (13, "XID 13 GPU 3 Graphics Engine Exception"),
        (119, "XID 119 GPU 3 GSP RPC timeout"),
    ],
)
def test_an_xid_reason_keeps_acronyms_and_titles_capitalised(xid, reason):
    assert xid_reason(xid, 3) == reason
