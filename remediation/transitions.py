"""The one table of allowed status moves for a remediation run.

Every status change goes through `check_transition`; anything not listed here
is a bug and raises, so a run can never skip approval or leave a terminal state.
"""

from __future__ import annotations

from django.db import models


class RunStatus(models.TextChoices):
    PROPOSED = "proposed"
    AWAITING_APPROVAL = "awaiting_approval"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    NEEDS_ATTENTION = "needs_attention"


TERMINAL = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.REJECTED, RunStatus.CANCELLED}
)
ACTIVE = frozenset(set(RunStatus) - TERMINAL)

ALLOWED: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.PROPOSED: frozenset(
        {RunStatus.AWAITING_APPROVAL, RunStatus.RUNNING, RunStatus.CANCELLED}
    ),
    RunStatus.AWAITING_APPROVAL: frozenset(
        {RunStatus.RUNNING, RunStatus.REJECTED, RunStatus.CANCELLED}
    ),
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.WAITING,
            RunStatus.SUCCEEDED,
            RunStatus.FAILED,
            RunStatus.NEEDS_ATTENTION,
            RunStatus.CANCELLED,
        }
    ),
    RunStatus.WAITING: frozenset(
        {RunStatus.RUNNING, RunStatus.NEEDS_ATTENTION, RunStatus.CANCELLED, RunStatus.FAILED}
    ),
    RunStatus.NEEDS_ATTENTION: frozenset(
        {RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.FAILED}
    ),
    RunStatus.SUCCEEDED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.REJECTED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}


class IllegalTransition(Exception):
    def __init__(self, current: str, new: str):
        super().__init__(f"A remediation cannot go from {current} to {new}")
        self.current, self.new = current, new


def check_transition(current: str, new: str) -> None:
    if RunStatus(new) not in ALLOWED[RunStatus(current)]:
        raise IllegalTransition(current, new)
