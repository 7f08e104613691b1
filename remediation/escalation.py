"""A fault on a node whose run is already active: a more drastic one supersedes the run,
an equal or milder one joins it, written on the run rather than dropped.

How drastic is `deciding.severity`, the one ranking. Every write goes through
`services`: a join is a history note, a supersede cancels the milder run and starts
the new one in one transaction, its history naming the new run.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from health.models import Incident
from remediation import services
from remediation.deciding import Decision, severity
from remediation.models import Remediation, action_words, status_words
from remediation.safety import BreakerLedger


def supersedes(decision: Decision, run: Remediation) -> bool:
    """A more drastic action than the active run's takes over; a quarantine stays."""
    if run.planned_steps == ["quarantine"]:
        return False
    return severity(decision.action) > severity(run.action)


def grew(incident: Incident) -> bool:
    """Whether the incident's active run was decided on fewer XIDs than it now holds
    (`active_run` and `active_context` annotated by the decision pass)."""
    if incident.active_run is None:
        return False
    context = incident.active_context or {}
    if isinstance(context, str):  # SQLite hands the subquery's JSON back as text
        context = json.loads(context)
    decided = context.get("xids") or [context.get("xid")]
    return bool(set(incident.xids or []) - set(decided))


def join(incident: Incident, run: Remediation, decision: Decision) -> Decision:
    """An equal or milder fault joins the active run: written on the run, not dropped."""
    joined = list(run.context.get("joined_incidents") or [])
    xids = sorted({*_xids_of(run), *(incident.xids or [])} - {None})
    if incident.pk not in joined or xids != sorted(set(_xids_of(run)) - {None}):
        if incident.pk not in joined and incident.pk != run.incident_id:
            joined.append(incident.pk)
        services.note(
            run,
            f"joined by incident {incident.pk}: {decision.reason} "
            f"({action_words(decision.action)}, not more drastic than {action_words(run.action)})",
            actor="policy",
            context={**run.context, "joined_incidents": joined, "xids": xids},
        )
    return decision.but(
        f"joined run {run.pk} ({action_words(run.action)}, {status_words(run.status)})"
    )


Admit = Callable[[Remediation], tuple[Decision, Remediation | None]]


def supersede(
    old: Remediation, decision: Decision, admit: Admit, ledger: BreakerLedger
) -> Decision:
    """Cancel the milder run and admit the new one in its place, or neither.

    `admit(old)` asks the breaker and starts the new run: (its decision, the run, or None
    when it started none, e.g. refused, so that the milder run goes on).
    """
    admitted: list[Decision] = []

    def start() -> Remediation | None:
        ledger.forget()  # the cancelled run no longer counts
        outcome, run = admit(old)
        admitted.append(outcome)
        return run

    why = f"{decision.reason} calls for {action_words(decision.action)}"
    new = services.supersede(old, start, why=why, actor="policy")
    if new is None:
        ledger.forget()  # the cancel was rolled back: the milder run counts again
        if admitted:
            return admitted[0]
        return decision.but(f"node busy with run {old.pk} ({old.status})")
    return admitted[0].but(f"run {new.pk} (supersedes run {old.pk})")


def _xids_of(run: Remediation) -> list:
    return run.context.get("xids") or [run.context.get("xid")]
