"""Whether a node is sound enough to take work: the validation policy.

The remediation engine asks this after it swapped a spare in, and before it puts a
repaired node back in service (its `validate` step, which decides how long to wait
and what to do with a node that does not pass). What must pass, and who is trusted
to say so, is decided here, in this order:

1. A backend that knows each GPU's health itself (the simulator) is asked.
2. A node with an agent is judged on its agent's own reports (`reported_health`).
3. On the local minicluster only, the agent's checks are run on this host
   (`agent_check`): there every node is this host, so a check here is a check of the
   node (`ChecksRunOnThisHost`). On a real fleet the same run would judge the
   engine's machine and pass a broken node, so a node there without an agent
   cannot be validated (`CannotValidate`): an admin enrols its agent.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta

from django.db.models import Max, Q
from django.utils import timezone

from agent.checks.deep import DEEP_SUMMARY
from clusters.backends.base import BackendError, ClusterBackend
from clusters.backends.capabilities import (
    ChecksRunOnThisHost,
    HoldsNodesForChecks,
    ReportsGpuHealth,
)
from clusters.models import Gpu, GpuHealth
from health.models import CheckStatus, EventKind, HealthEvent, NodeToken, Severity

# The agent's deep checks (`check --once --deep`: GPU count against GRES, ECC and
# remapping, NVLink and InfiniBand, DCGM diagnostics level 2, CPU and memory stress,
# NCCL all-reduce), which the node passes before it takes jobs again. Checks whose tool
# is missing (fake GPUs) skip, with the reason, not fail. DCGM level 2 and NCCL take
# minutes on real GPUs.
AGENT_TIMEOUT_S = 900.0
# A node with an agent is judged on its own reports: the agent must have reported
# its checks within REPORT_FRESHNESS (deploy/systemd runs them every 60 s), and
# nothing may have failed or gone critical on it within REPORT_QUIET.
REPORT_FRESHNESS = timedelta(minutes=3)
REPORT_QUIET = timedelta(minutes=10)


class CannotValidate(Exception):
    """Nothing may judge this node: waiting would not change that, a person must."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def validate_node(backend: ClusterBackend, node: str) -> tuple[bool, str]:
    """(passed, why) for NODE now; raises CannotValidate when nothing may judge it."""
    if isinstance(backend, ReportsGpuHealth):
        return backend_gpu_health(backend, node)
    if has_agent(node):
        held = isinstance(backend, HoldsNodesForChecks) and node in backend.checks_holds()
        return reported_health(node, deep=held)
    if isinstance(backend, ChecksRunOnThisHost) and backend.checks_run_on_this_host():
        return agent_check(node, slurm_conf=backend.slurm_conf)
    raise CannotValidate(
        f"{node} has no agent to report its health checks, and checks run on Medbay's "
        "host would judge that host, not the node. Issue it an agent token and start "
        "medbay-agent there (deploy/systemd)"
    )


def backend_gpu_health(backend: ReportsGpuHealth, node: str) -> tuple[bool, str]:
    """Healthy when the backend reports every GPU of NODE healthy."""
    try:
        health = backend.gpu_health(node)
    except BackendError as error:
        return False, error.message
    bad = sorted(index for index, state in health.items() if state != "healthy")
    if bad:
        return False, f"GPU(s) {', '.join(map(str, bad))} not healthy"
    return True, f"{len(health)} GPUs healthy"


def has_agent(node: str) -> bool:
    return NodeToken.objects.filter(node__name=node, revoked_at__isnull=True).exists()


def reported_health(node: str, *, now: datetime | None = None, deep: bool = False):
    """Healthy when the node's agent reported its checks lately, every GPU is
    healthy as reported, and nothing failed or went critical in REPORT_QUIET; with
    DEEP (Medbay holds the node in a maintenance reservation, where the agent runs its
    deep checks), also when the agent's deep checks passed within REPORT_FRESHNESS."""
    now = now or timezone.now()
    events = HealthEvent.objects.filter(node__name=node)
    if deep:
        verdict = (
            events.filter(kind=EventKind.CHECK, check_name=DEEP_SUMMARY)
            .filter(last_observed_at__gte=now - REPORT_FRESHNESS)
            .order_by("-last_observed_at")
            .first()
        )
        if verdict is None:
            return False, (
                f"waiting for the agent on {node} to run its deep checks (it runs them once "
                "it sees Medbay's maintenance reservation on the node)"
            )
        if verdict.status == CheckStatus.FAIL:
            return False, f"{node} failed its deep checks: {verdict.message}"
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
    deep_words = f"; deep checks: {verdict.message}" if deep else ""
    return True, f"its agent reports it healthy (checks at {last_report:%H:%M:%S}){deep_words}"


def agent_check(node: str, *, slurm_conf: str = "") -> tuple[bool, str]:
    """Run the node agent's checks here (exit 0 = healthy), the way Slurm's
    HealthCheckProgram would. Only for a cluster whose nodes are this host (the local
    minicluster, see ChecksRunOnThisHost): elsewhere it would check the wrong machine."""
    args = [sys.executable, "-m", "agent.cli", "check", "--once", "--deep", "--node", node]
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
