"""A status change matches the status that was read and records it, so the run's
history never says a move that did not happen."""

from __future__ import annotations

import pytest

from clusters.models import Node
from remediation import actions, services
from remediation.models import Action, Remediation, Trigger
from remediation.transitions import RunStatus

pytestmark = pytest.mark.django_db


def history(run) -> list[tuple[str, str]]:
    changes = run.status_changes.order_by("at", "id")
    return list(changes.values_list("from_status", "to_status"))


@pytest.fixture
def running(synced):
    node = Node.objects.get(name="gpu-02")
    return services.create_run(node, Action.DRAIN, trigger=Trigger.ADMIN, reason="race")


def move_behind_its_back(run, status: str) -> None:
    """Another actor's move, which the caller's copy of the run does not see."""
    fresh = Remediation.objects.get(pk=run.pk)
    assert services.transition(fresh, status, message="elsewhere")


def test_a_move_from_a_status_the_run_has_left_changes_nothing(running):
    stale = Remediation.objects.get(pk=running.pk)
    move_behind_its_back(running, RunStatus.WAITING)
    assert services.transition(stale, RunStatus.CANCELLED, message="late") is False
    running.refresh_from_db()
    assert running.status == RunStatus.WAITING
    assert history(running) == [("", "running"), ("running", "waiting")]


def test_a_cancel_that_lost_the_race_cancels_from_where_the_run_now_is(running, admin_user):
    stale = Remediation.objects.get(pk=running.pk)
    move_behind_its_back(running, RunStatus.WAITING)
    cancelled = actions.cancel(stale, admin_user, "no longer needed")
    assert cancelled.status == RunStatus.CANCELLED
    assert history(running) == [("", "running"), ("running", "waiting"), ("waiting", "cancelled")]


def test_a_cancel_of_a_run_that_finished_meanwhile_says_so(running, admin_user):
    stale = Remediation.objects.get(pk=running.pk)
    move_behind_its_back(running, RunStatus.SUCCEEDED)
    with pytest.raises(actions.WrongStatus, match="succeeded; only active runs"):
        actions.cancel(stale, admin_user, "no longer needed")
    assert history(running) == [("", "running"), ("running", "succeeded")]
