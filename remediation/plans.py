"""The steps each action runs, in order. The engine executes them one at a time.

The replace plan follows the fatal-fault recovery in the product brief and the
reference's remediation ladder: take the node out of scheduling, give the jobs
their checkpoint grace, requeue them, take the node out of the fleet, bring in a
validated spare and only then release the jobs early.
"""

from __future__ import annotations

from remediation.models import Action

PLANS: dict[str, tuple[str, ...]] = {
    Action.NOTIFY: ("notify",),
    Action.RESTART_APP: ("signal_jobs", "wait_grace", "requeue_jobs", "release_jobs"),
    Action.CORDON: ("drain", "cordon"),
    Action.UNCORDON: ("uncordon", "resume"),
    Action.DRAIN: ("drain", "wait_drained"),
    Action.RESET_GPU: (
        "drain", "signal_jobs", "wait_grace", "requeue_jobs", "reset_gpu", "validate",
        "resume", "release_jobs",
    ),
    Action.REBOOT: (
        "drain", "signal_jobs", "wait_grace", "requeue_jobs", "reboot", "validate",
        "release_jobs",
    ),
    Action.REPLACE: (
        "drain", "signal_jobs", "wait_grace", "requeue_jobs", "cordon", "check_eligibility",
        "replace", "validate", "release_jobs",
    ),
    Action.TO_INFERENCE: ("drain", "wait_drained", "move_pool", "resume"),
    Action.TO_TRAINING: ("drain", "wait_drained", "move_pool", "resume"),
    # A repaired node: the replacement path's checks, then back to a pool, then service.
    Action.RETURN_TO_SERVICE: ("validate", "return_pool", "resume"),
}  # fmt: skip


def plan_for(action: str) -> list[str]:
    """The planned steps for `action`; unknown actions are a caller bug."""
    return list(PLANS[Action(action)])
