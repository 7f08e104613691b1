"""Medbay's maintenance holds: a node about to take jobs (a replacement entering a pool,
a node after its reboot, a repaired node returning) sits in a Slurm maintenance
reservation of its own while its deep checks run, so that the scheduler places nothing
on it until they pass.

The node held is written into the run's context before the reservation is made, so a
worker that dies in between leaves a record that names it; `release_stranded` deletes
every hold that no active run names (an engine killed mid-check, a run cancelled while
it held one). A backend that cannot hold (the simulator) simply checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clusters.backends.base import ClusterBackend
from clusters.backends.capabilities import HoldsNodesForChecks
from remediation.models import Remediation
from remediation.transitions import ACTIVE

if TYPE_CHECKING:
    from clusters.models import Cluster
    from remediation.steps import StepContext

HOLD_KEY = "checks_hold"
MADE_KEY = "checks_hold_made"


def hold(ctx: StepContext, node: str) -> bool:
    """Hold NODE for its checks (letting go of another node this run held); False when
    the backend cannot hold nodes."""
    if not isinstance(ctx.backend, HoldsNodesForChecks):
        return False
    held = ctx.context.get(HOLD_KEY)
    if held == node and ctx.context.get(MADE_KEY) == node:
        return True
    if held and held != node:
        ctx.backend.release_checks_hold(held)
    if held != node:
        ctx.remember(**{HOLD_KEY: node})  # the intent, before Slurm is asked
    ctx.backend.hold_for_checks(node)
    ctx.context[MADE_KEY] = node  # saved with the step's result: a re-run asks again
    return True


def release(ctx: StepContext) -> str:
    """Let go of this run's hold; the node it held, or "" when it held none."""
    held = ctx.context.pop(HOLD_KEY, None) or ""
    ctx.context.pop(MADE_KEY, None)
    if held and isinstance(ctx.backend, HoldsNodesForChecks):
        ctx.backend.release_checks_hold(held)
    return held


def release_stranded(backend: ClusterBackend, cluster: Cluster | None = None) -> list[str]:
    """Delete the holds of CLUSTER's Slurm that no active run on CLUSTER names; returns
    the nodes let go. (Node names repeat across clusters: a run holding gpu-01 of one
    cluster must neither keep nor lose another cluster's hold on its gpu-01.)"""
    if not isinstance(backend, HoldsNodesForChecks):
        return []
    held = backend.checks_holds()
    if not held:
        return []
    active = Remediation.objects.filter(status__in=list(ACTIVE), context__has_key=HOLD_KEY)
    if cluster is not None:
        active = active.filter(node__cluster=cluster)
    claimed = {
        (context or {}).get(HOLD_KEY) for context in active.values_list("context", flat=True)
    }
    stranded = [node for node in held if node not in claimed]
    for node in stranded:
        backend.release_checks_hold(node)
    return stranded
