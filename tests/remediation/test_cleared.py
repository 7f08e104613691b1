"""Cleared before acted on: a failed check that passes again closes its incident with
no action while nothing irreversible has been done, and its history says why."""

from __future__ import annotations

import itertools

from django.utils import timezone

from clusters.models import Node
from health.ingest import ingest, validate_batch
from health.models import Incident
from remediation.engine import Engine
from remediation.models import Action, Mode, Policy, Remediation
from remediation.transitions import RunStatus

_ids = itertools.count(1)


def check(node: str, name: str, status: str, gpu: int | None = 0):
    event = {
        "id": f"chk-{next(_ids)}",
        "kind": "check",
        "check": name,
        "status": status,
        "message": f"{name} {status}",
        "observed_at": timezone.now().isoformat(),
    }
    if gpu is not None:
        event["gpu_index"] = gpu
    batch = validate_batch({"node": node, "events": [event]})
    return ingest(Node.objects.get(name=node), batch.events)


def drain_on_failure(name: str, mode: str) -> None:
    Policy.objects.create(check_name=name, action=Action.DRAIN, mode=mode, enabled=True)


def test_a_check_that_passes_again_before_approval_closes_its_incident_and_cancels_the_run(
    synced, django_capture_on_commit_callbacks
):
    drain_on_failure("nvlink", Mode.APPROVAL)
    with django_capture_on_commit_callbacks(execute=True):
        [incident_id] = check("gpu-03", "nvlink", "fail").incident_ids
    run = Remediation.objects.get()
    assert run.status == RunStatus.AWAITING_APPROVAL

    with django_capture_on_commit_callbacks(execute=True):
        check("gpu-03", "nvlink", "pass")

    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    last = run.status_changes.order_by("-id").first()
    assert last.message.startswith("cleared before anything was done: check nvlink passed")
    incident = Incident.objects.get(pk=incident_id)
    assert incident.cleared_at is not None
    assert incident.cleared_reason.startswith("cleared with no action: check nvlink passed")


def test_a_check_that_passes_after_the_drain_has_started_leaves_the_run_going(
    sim, synced, django_capture_on_commit_callbacks
):
    drain_on_failure("nvlink", Mode.AUTOMATIC)
    with django_capture_on_commit_callbacks(execute=True):
        check("gpu-03", "nvlink", "fail")
    run = Remediation.objects.get()
    engine = Engine("test", backend=sim, fleet=sim)
    engine.advance(engine.claim())  # the drain is done: the node is not as it was
    with django_capture_on_commit_callbacks(execute=True):
        check("gpu-03", "nvlink", "pass")
    run.refresh_from_db()
    assert run.status != RunStatus.CANCELLED
    assert Incident.objects.get().cleared_at is None


def test_a_pass_of_another_check_or_gpu_clears_nothing(synced, django_capture_on_commit_callbacks):
    drain_on_failure("nvlink", Mode.APPROVAL)
    with django_capture_on_commit_callbacks(execute=True):
        check("gpu-03", "nvlink", "fail", gpu=0)
        check("gpu-03", "ecc", "pass", gpu=0)
        check("gpu-03", "nvlink", "pass", gpu=5)
    assert Remediation.objects.get().status == RunStatus.AWAITING_APPROVAL
    assert Incident.objects.get().cleared_at is None


def test_the_node_page_says_an_incident_was_cleared_and_why(
    synced, client, admin_user, django_capture_on_commit_callbacks
):
    drain_on_failure("nvlink", Mode.APPROVAL)
    with django_capture_on_commit_callbacks(execute=True):
        check("gpu-03", "nvlink", "fail")
        check("gpu-03", "nvlink", "pass")
    client.force_login(admin_user)
    page = client.get("/nodes/gpu-03/", follow=True).content.decode()
    assert "cleared with no action: check nvlink passed again at" in page
