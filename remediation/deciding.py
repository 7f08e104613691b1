"""What the policies say about one incident: the catalogue's rung, unless a Policy row
says otherwise, and how drastic each action is (one ranking, for every comparison).

Nothing here writes: `decide` reads the incident, its repeats and its failed checks.
Acting on a decision is `admission`'s job; replaying decisions over the past is `replay`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from agent import xid as catalogue
from health.models import CheckStatus, EventKind, HealthEvent, Incident
from remediation.models import Action, Mode, Policy

RUNG_ACTIONS: dict[catalogue.Rung, str | None] = {
    catalogue.Rung.IGNORE: None,
    catalogue.Rung.NOTIFY: Action.NOTIFY,
    catalogue.Rung.RESTART_APP: Action.RESTART_APP,
    catalogue.Rung.RESET_GPU: Action.RESET_GPU,
    catalogue.Rung.REBOOT: Action.REBOOT,
    catalogue.Rung.REPLACE: Action.REPLACE,
}
# The catalogue says "restart the node" for XID 79, but the product's automatic
# recovery plan replaces a node whose GPU fell off the bus, without waiting for
# an admin: the GPU rarely comes back healthy and the job should not wait on it.
PRODUCT_DEFAULTS: dict[int, tuple[str, str]] = {79: (Action.REPLACE, Mode.AUTOMATIC)}
# Without a policy row, anything that interrupts jobs waits for an admin.
HARMLESS = (None, Action.NOTIFY)
REPEAT_WINDOW = timedelta(hours=24)

# How drastic each action is: the one ranking, for the action a decision picks among
# an incident's faults and for a fault that arrives while a run is active. Admin moves
# and uncordons rank lowest (a fault on a node being moved takes over), a plain drain
# sits between restarting jobs and resetting a GPU.
SEVERITY = {
    None: 0,
    Action.NOTIFY: 1,
    Action.UNCORDON: 2,
    Action.TO_INFERENCE: 2,
    Action.TO_TRAINING: 2,
    Action.RETURN_TO_SERVICE: 2,
    Action.RESTART_APP: 3,
    Action.CORDON: 4,
    Action.DRAIN: 4,
    Action.RESET_GPU: 5,
    Action.REBOOT: 6,
    Action.REPLACE: 7,
}


def severity(action: str | None) -> int:
    """How drastic `action` is (no action: 0), by SEVERITY."""
    return SEVERITY.get(action, 0)


@dataclass(frozen=True)
class Decision:
    """What the policies say about one incident, and (when acted on) what happened."""

    node: str
    incident_id: int | None
    at: datetime | None
    xid: int | None
    action: str | None
    mode: str
    reason: str
    policy_id: int | None = None
    gpu: int | None = None
    outcome: str = ""
    # The node's cluster, where the caller names it (a replay's rows link the node).
    cluster: str = ""

    def but(self, outcome: str) -> Decision:
        return replace(self, outcome=outcome)


def default_for_xid(xid: int, *, repeats: int = 1, with_codes=()) -> tuple[str | None, str]:
    if xid in PRODUCT_DEFAULTS:
        return PRODUCT_DEFAULTS[xid]
    rung = catalogue.escalate(xid, repeats=repeats, with_codes=with_codes)
    action = RUNG_ACTIONS[rung]
    return action, Mode.AUTOMATIC if action in HARMLESS else Mode.APPROVAL


def xid_reason(xid: int, gpu: int | None) -> str:
    """`XID 79 GPU 3 fallen off the bus`: what Slurm and the timeline show."""
    name = catalogue.lookup(xid).name
    for prefix in ("GPU has ", "GPU "):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    where = f" GPU {gpu}" if gpu is not None else ""
    return f"XID {xid}{where} {_mid_sentence(name)}"


def _mid_sentence(name: str) -> str:
    """A catalogue name as it reads after "XID 79 GPU 3": "fallen off the bus", but
    "NVLink error", "GSP RPC timeout" and the title "Graphics Engine Exception" keep
    their capitals."""
    words = name.split()
    acronym = words[0][1:2].isupper()
    title = len(words) > 1 and all(word[:1].isupper() for word in words)
    if acronym or title:
        return name
    return name[:1].lower() + name[1:]


def decide(incident: Incident, *, policies: dict | None = None) -> Decision:
    """The most drastic action any of the incident's XIDs (or failed checks) calls for."""
    policies = current_policies() if policies is None else policies
    candidates = [_for_xid(incident, xid, policies) for xid in incident.xids or []]
    if not candidates:
        candidates = _for_checks(incident, policies)
    base = no_action(incident, "nothing to do")
    return max([base, *candidates], key=lambda decision: severity(decision.action))


def no_action(incident: Incident, reason: str, outcome: str = "") -> Decision:
    """A decision to do nothing about `incident`, saying why."""
    return Decision(
        node=incident.node.name,
        incident_id=incident.pk,
        at=incident.opened_at,
        xid=None,
        action=None,
        mode=Mode.AUTOMATIC,
        reason=reason,
        gpu=incident.gpu_index,
        outcome=outcome,
    )


def current_policies() -> dict:
    """The Policy rows by what they match: ("xid", 79) or ("check", "gpu_count")."""
    policies = {}
    for policy in Policy.objects.all():
        if policy.xid is not None:
            policies[("xid", policy.xid)] = policy
        if policy.check_name:
            policies[("check", policy.check_name)] = policy
    return policies


def _for_xid(incident: Incident, xid: int, policies: dict) -> Decision:
    policy = policies.get(("xid", xid))
    if policy is not None:
        action = policy.action if policy.enabled else None
        mode = policy.mode
    elif xid in PRODUCT_DEFAULTS:  # decided without counting repeats (a query per XID)
        action, mode = PRODUCT_DEFAULTS[xid]
    else:
        action, mode = default_for_xid(
            xid, repeats=_repeats(incident, xid), with_codes=incident.xids
        )
    return Decision(
        node=incident.node.name,
        incident_id=incident.pk,
        at=incident.opened_at,
        xid=xid,
        action=action,
        mode=mode,
        reason=xid_reason(xid, incident.gpu_index),
        policy_id=policy.pk if policy else None,
        gpu=incident.gpu_index,
    )


def _for_checks(incident: Incident, policies: dict) -> list[Decision]:
    names = HealthEvent.objects.filter(
        incident=incident, kind=EventKind.CHECK, status=CheckStatus.FAIL
    ).values_list("check_name", flat=True)
    decisions = []
    for name in sorted(set(names)):
        policy = policies.get(("check", name))
        action = (policy.action if policy.enabled else None) if policy else Action.NOTIFY
        decisions.append(
            Decision(
                node=incident.node.name,
                incident_id=incident.pk,
                at=incident.opened_at,
                xid=None,
                action=action,
                mode=policy.mode if policy else Mode.AUTOMATIC,
                reason=f"health check {name} failed",
                policy_id=policy.pk if policy else None,
                gpu=incident.gpu_index,
            )
        )
    return decisions


def _repeats(incident: Incident, xid: int) -> int:
    """Bursts of this XID on the same GPU in the last day, this one included."""
    since = incident.opened_at - REPEAT_WINDOW
    earlier = Incident.objects.filter(
        node_id=incident.node_id,
        gpu_index=incident.gpu_index,
        opened_at__gte=since,
        opened_at__lte=incident.opened_at,
    ).values_list("xids", flat=True)
    return max(1, sum(1 for xids in earlier if xid in (xids or [])))
