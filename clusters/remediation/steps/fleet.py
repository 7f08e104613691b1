"""Steps that swap hardware: eligibility, replacement by a spare, validation."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta

from django.db.models import Max, Q
from django.utils import timezone

from clusters.backends.base import BackendError, ClusterBackend, nodes_named
from clusters.models import Gpu, GpuHealth, Node
from clusters.remediation import ownership, safety
from clusters.remediation.models import Trigger
from clusters.remediation.steps import (
    failed,
    needs_attention,
    skipped,
    step,
    succeeded,
    waiting,
)
from clusters.remediation.steps.nodes import QUARANTINE_REASON
from clusters.remediation.steps.records import record_membership
from health.models import CheckStatus, EventKind, HealthEvent, NodeToken, Severity

REPLACE_REASON = "Action:Replace"
# A rebooting node takes minutes to come back; after this the run asks a human.
VALIDATE_PATIENCE_S = 600
VALIDATE_POLL_S = 5.0
AGENT_TIMEOUT_S = 45.0
# The agent checks that make sense right after a swap: nvidia-smi answers, the GPU
# count matches Slurm's GRES, no pending remap or DBE, disk not full, no operator
# force-drain switch. Checks whose tool is missing (fake GPUs) skip, not fail.
VALIDATION_CHECKS = "force_drain,nvidia_smi_responds,gpu_count,ecc_remap,disk_free"
# A node with an agent is judged on its own reports: the agent must have reported
# its checks within REPORT_FRESHNESS (deploy/systemd runs them every 60 s), and
# nothing may have failed or gone critical on it within REPORT_QUIET.
REPORT_FRESHNESS = timedelta(minutes=3)
REPORT_QUIET = timedelta(minutes=10)
# How long the eligibility check waits for spares that are not registered yet (after a
# controller restart) before it asks an admin, and how often it looks again.
SPARE_REGISTRATION_WAIT = timedelta(seconds=60)
SPARE_RECHECK_S = 2.0


@step("check_eligibility", "check that a free spare exists and automation may go on")
def check_eligibility(run, ctx):
    if ctx.context.get("replacement"):
        return skipped(f"already replaced by {ctx.context['replacement']}")
    automatic = run.trigger != Trigger.ADMIN
    if automatic:
        faults = safety.fault_count(run.node)
        if faults >= safety.flap_threshold():
            ctx.backend.drain_node(run.node.name, QUARANTINE_REASON)
            Node.objects.filter(pk=run.node_id).update(cordoned=True)
            return needs_attention(
                f"{run.node.name} is flapping ({faults} faults in "
                f"{safety.flap_window_hours()} h): quarantined instead of replaced. Triage the "
                "hardware, then cancel this run."
            )
        blocked = safety.breaker_blocks(run.node, exclude_run=run.pk)
        if blocked:
            return needs_attention(f"Circuit breaker open: {blocked}. Retry once it closes.")
    spares = [name for name in ctx.fleet.spare_capacity() if name != run.node.name]
    if not spares:
        unsettled = _spares_not_registered(run, ctx)
        waited = ctx.since("spares_awaited_at")
        if unsettled and (waited is None or waited < SPARE_REGISTRATION_WAIT):
            # Just after slurmctld restarts, nodes read `unknown` until their slurmd
            # registers again (seconds): a spare among them may be free in a moment.
            if waited is None:
                ctx.remember(spares_awaited_at=ctx.now.isoformat())
            return waiting(
                f"No free spare yet: {', '.join(unsettled)} not registered with Slurm "
                "(controller restarted?); checking again",
                SPARE_RECHECK_S,
            )
        return needs_attention(
            f"No free spare to replace {run.node.name}: the spare pool is empty or busy. "
            f"Add or free a spare, then retry this run; {run.node.name} stays drained."
        )
    return succeeded(f"{len(spares)} free spare(s): {', '.join(spares)}")


def _spares_not_registered(run, ctx) -> list[str]:
    """Spare-partition nodes whose state Slurm does not know yet (`unknown`)."""
    return sorted(
        info.name
        for info in ctx.backend.nodes()
        if "spare" in info.partitions and info.state == "unknown" and info.name != run.node.name
    )


@step("replace", "replace {node} with a free spare and take it out of service")
def replace(run, ctx):
    done = _replacement_already_made(run, ctx)
    if done:
        ctx.context["replacement"] = done
        return skipped(f"{run.node.name} was already replaced by {done}")
    info = ctx.node(run.node.name)
    if info is None:
        return failed(f"{run.node.name} is not known to the cluster any more")
    # Written down before the swap, so that a worker that dies during it lets the
    # next one recognise the swap instead of taking a second spare.
    ctx.remember(
        spares_before=ctx.fleet.spare_capacity(),
        partitions_before=[name for name in info.partitions if name != "spare"],
    )
    reason = ownership.reason_for(run, ctx, REPLACE_REASON, info=info)
    replacement = ctx.fleet.replace(run.node.name, reason)
    ctx.context["replacement"] = replacement
    _record_pools(run, ctx, replacement)
    return succeeded(f"{replacement} replaces {run.node.name}; {run.node.name} marked fail")


def _replacement_already_made(run, ctx) -> str:
    if ctx.context.get("replacement"):
        return ctx.context["replacement"]
    spares_before = ctx.context.get("spares_before")
    if not spares_before:
        return ""
    nodes = {info.name: info for info in nodes_named(ctx.backend, [run.node.name, *spares_before])}
    failed_node = nodes.get(run.node.name)
    if failed_node is None or "fail" not in failed_node.flags:
        return ""
    wanted = set(ctx.context.get("partitions_before") or [])
    for name in spares_before:
        info = nodes.get(name)
        if info is not None and wanted and wanted <= set(info.partitions):
            _record_pools(run, ctx, name)
            return name
    return ""


def _record_pools(run, ctx, replacement: str) -> None:
    """Medbay's pool record: the spare takes the failed node's place, which leaves service."""
    record_membership(run.node.cluster_id, ctx.backend, [run.node.name, replacement])
    Node.objects.filter(pk=run.node_id).update(cordoned=True)


@step("validate", "check the node that takes over passes the health checks")
def validate(run, ctx):
    target = ctx.context.get("replacement") or run.node.name
    info = ctx.node(target)
    problem = _not_ready(info, target)
    if not problem:
        ok, message = ctx.validator(ctx.backend, target)
        if ok:
            return succeeded(f"{target} passed validation: {message}")
        problem = message
    ctx.context.setdefault("validate_started_at", ctx.now.isoformat())
    waited = ctx.since("validate_started_at")
    if waited is not None and waited.total_seconds() > VALIDATE_PATIENCE_S:
        return needs_attention(f"{target} did not pass validation: {problem}")
    return waiting(f"{target} not valid yet: {problem}", VALIDATE_POLL_S)


def _not_ready(info, name: str) -> str:
    if info is None:
        return f"{name} is not reported by the cluster"
    if info.state == "down" or "not_responding" in info.flags:
        return f"{name} is {info.state} and not responding"
    if info.flags & {"reboot_requested", "reboot_issued"}:
        return f"{name} is rebooting"
    return ""


def default_validator(backend: ClusterBackend, node: str) -> tuple[bool, str]:
    """GPU health from the simulator; on Slurm, what the node's own agent reports
    when it has one, else `medbay-agent check --once` run here (the local cluster,
    where every node is this host)."""
    if hasattr(backend, "gpu_health"):
        try:
            health = backend.gpu_health(node)
        except BackendError as error:
            return False, error.message
        bad = sorted(index for index, state in health.items() if state != "healthy")
        if bad:
            return False, f"GPU(s) {', '.join(map(str, bad))} not healthy"
        return True, f"{len(health)} GPUs healthy"
    if has_agent(node):
        return reported_health(node)
    return agent_check(node, slurm_conf=getattr(backend, "slurm_conf", ""))


def has_agent(node: str) -> bool:
    return NodeToken.objects.filter(node__name=node, revoked_at__isnull=True).exists()


def reported_health(node: str, *, now: datetime | None = None) -> tuple[bool, str]:
    """Healthy when the node's agent reported its checks lately, every GPU is
    healthy as reported, and nothing failed or went critical in REPORT_QUIET."""
    now = now or timezone.now()
    events = HealthEvent.objects.filter(node__name=node)
    last_report = events.filter(kind=EventKind.CHECK).aggregate(last=Max("last_observed_at"))[
        "last"
    ]
    if last_report is None or now - last_report > REPORT_FRESHNESS:
        seen = f"last at {last_report:%H:%M:%S}" if last_report else "none yet"
        return False, (
            f"waiting for the agent on {node} to report its health checks ({seen}; "
            "the agent runs them every --interval seconds)"
        )
    unhealthy = list(
        Gpu.objects.filter(node__name=node)
        .exclude(health=GpuHealth.HEALTHY)
        .order_by("index")
        .values_list("index", "health")
    )
    if unhealthy:
        listed = ", ".join(f"GPU {index} {health}" for index, health in unhealthy)
        return False, f"the agent on {node} reports {listed}"
    bad = (
        events.filter(last_observed_at__gte=now - REPORT_QUIET)
        .filter(Q(kind=EventKind.CHECK, status=CheckStatus.FAIL) | Q(severity=Severity.CRITICAL))
        .order_by("-last_observed_at")
        .first()
    )
    if bad is not None:
        what = bad.check_name or (f"XID {bad.xid}" if bad.xid is not None else bad.kind)
        return False, f"{node} reported {what} at {bad.last_observed_at:%H:%M:%S}"
    return True, f"its agent reports it healthy (checks at {last_report:%H:%M:%S})"


def agent_check(node: str, *, slurm_conf: str = "") -> tuple[bool, str]:
    """Run the node agent's checks (exit 0 = healthy) the way Slurm's HealthCheckProgram
    would. On the local minicluster every node shares this host, so running them here
    checks that node's view of Slurm; on a real fleet this is the agent on the node."""
    args = [sys.executable, "-m", "health.agent.cli", "check", "--once", "--node", node]
    args += ["--checks", VALIDATION_CHECKS]
    if slurm_conf:
        args += ["--slurm-conf", slurm_conf]
    try:
        completed = subprocess.run(
            args, capture_output=True, text=True, timeout=AGENT_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return False, f"medbay-agent check timed out after {AGENT_TIMEOUT_S:g}s"
    lines = (completed.stdout or completed.stderr).strip().splitlines()
    summary = lines[-1] if lines else f"exit status {completed.returncode}"
    return completed.returncode == 0, f"medbay-agent check: {summary}"
