"""Medbay's side of the ownership rule: note who else held a node, keep their reason
visible while Medbay works on it, and give the node back to them, never to service.

Soperator's rule is the one followed here: a check only undrains nodes it drained
itself. The first step of a run that touches Slurm remembers the other holders (in
the run's context, before acting, so a re-run after a crash sees the same ones);
every reason Medbay writes carries them; the step that would resume restores their
reason instead and the run ends saying "left drained for: …".
"""

from __future__ import annotations

from clusters import holders
from clusters.models import Node
from remediation.services import slurm_reason
from remediation.steps import StepContext, succeeded


def held_by_others(run, ctx: StepContext, info=None) -> list[dict]:
    """The other parties holding the node when Medbay first looked, remembered once."""
    if "held_by" not in ctx.context:
        info = info if info is not None else ctx.node(run.node.name)
        ctx.remember(held_by=[h.as_dict() for h in holders.other_holders(info)])
    return ctx.context["held_by"]


def reason_for(run, ctx: StepContext, text: str | None = None, info=None) -> str:
    """Medbay's Slurm reason for this run, with the other holders' reasons appended."""
    return holders.combined(slurm_reason(run, text), held_by_others(run, ctx, info))


def hand_back(run, ctx: StepContext, verb: str = "resume"):
    """If someone else still holds the node, restore their reason and do not resume:
    returns the step's result then, None when the node is Medbay's alone to resume."""
    info = ctx.node(run.node.name)
    if not holders.out_of_service(info):
        return None
    current = holders.other_holders(info)
    if current and not holders.is_medbays(info.reason):
        # Someone drained it again (or changed the reason) while Medbay worked: theirs.
        return _left_held(run, ctx, [h.as_dict() for h in current], verb)
    held = ctx.context.get("held_by") or [h.as_dict() for h in current]
    if not held:
        return None
    ctx.backend.drain_node(run.node.name, holders.original_reason(held) or info.reason)
    return _left_held(run, ctx, held, verb)


def _left_held(run, ctx: StepContext, held: list[dict], verb: str):
    text = holders.describe(held)
    ctx.context["left_held_for"] = text
    Node.objects.filter(pk=run.node_id).update(held_by=text[:255])
    return succeeded(f"did not {verb} {run.node.name}; left drained for: {text}")
