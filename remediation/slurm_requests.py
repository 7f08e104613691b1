"""Requests admins write in Slurm, and Slurm's reason as Medbay's answer.

HPC admins live in a terminal. SageMaker HyperPod takes orders there:
`scontrol update node=gpu-02 state=fail reason="Action:Replace"` replaces the node,
and soperator reads reason prefixes such as `[hardware_problem]` the same way. The
sync hands every snapshot to `on_snapshot`, which

1. turns a request word at the start of a reason, on a node someone other than Medbay
   took out of service, into a run of the same engine (trigger `slurm`), under the
   same policies, breaker and drain ownership as any other run; one request is one
   `SlurmRequest` row and at most one run however many cycles see it;
2. cancels the run of a request withdrawn before the run acted (the admin resumed the
   node or changed the reason);
3. writes Medbay's answer into the node's reason, so `sinfo -R` shows it:
   `medbay: Action:Replace [run 12]: waiting for job 1234 to end (root 09:15)`, or
   why it refused, and at the end how the run ended.

The words and what they ask for are the site's table (MEDBAY_SLURM_REASON_ACTIONS).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from clusters import holders
from clusters.backends.base import BackendError, ClusterBackend, NodeInfo
from clusters.models import Cluster, Node
from jobs.models import JobState, JobStateChange
from remediation import safety, services
from remediation.deciding import severity
from remediation.models import (
    Action,
    Mode,
    Remediation,
    RemediationStep,
    SlurmRequest,
    StepOutcome,
    Trigger,
)
from remediation.plans import plan_for
from remediation.steps.hardware import serves_no_pool
from remediation.transitions import ACTIVE, TERMINAL, RunStatus

logger = logging.getLogger(__name__)

# A reason that looks like a request but names no word of the table is answered too.
REQUEST_LIKE = re.compile(r"^action:\S+", re.IGNORECASE)
ANSWER_PREFIX = "medbay:"
REFUSED = "refused"
# How each run's jobs are handled, said on its page (the first lines of its history).
WAIT_FOR_JOBS = (
    "running jobs are not killed: a spare takes its place now, and the node waits for "
    "them to end (HyperPod's Action:Replace)"
)
REQUEUE_JOBS = (
    "its jobs are signalled to checkpoint and requeued after their grace, as partition "
    "{partition} asks (MEDBAY_SLURM_REPLACE_REQUEUE_PARTITIONS)"
)
JOBS_ENDED = (
    "Slurm already ended its jobs (state=down): requeueable ones run again on healthy "
    "nodes, and the replace goes on at once"
)
REBOOT_JOBS = (
    "its jobs are signalled to checkpoint and requeued after their grace; then the node "
    "reboots and is checked before it takes jobs"
)
# The steps of a requested replace whose running jobs are left to finish: capacity first.
REPLACE_WAITING = ("check_eligibility", "replace", "validate", "wait_drained", "cordon")
# After state=down Slurm has requeued the node's requeueable jobs itself, held back for
# its credential's lifetime (121 s): they are released early, as after Medbay's requeue.
REPLACE_AFTER_DOWN = ("check_eligibility", "replace", "validate", "cordon", "release_jobs")
# How far back a requeue counts as the one state=down caused (the sync's interval).
DOWN_REQUEUE_SLACK = timedelta(minutes=2)
# Steps that only look: a run that has done nothing else has not acted yet.
LOOKING_STEPS = ("check_eligibility", "notify")
# The node is already out of service: the plans' own first drain would only rewrite it.
FIRST_DRAIN = "drain"


@dataclass(frozen=True)
class Meaning:
    """What a request word asks for."""

    word: str
    action: str
    mode: str


@dataclass(frozen=True)
class Request:
    """A request read from a node's reason: its word (None when unknown) and the rest."""

    text: str
    word: str
    meaning: Meaning | None
    form: str  # fail, drain or down


def request_words() -> dict[str, Meaning]:
    """The site's table, by lower-case word (settings checked it at start-up)."""
    table = {}
    for word, value in settings.MEDBAY_SLURM_REASON_ACTIONS.items():
        action, _, mode = value.partition("/")
        table[word.lower()] = Meaning(word, action, mode or Mode.AUTOMATIC)
    return table


def read_request(info: NodeInfo, words: dict[str, Meaning]) -> Request | None:
    """The request in INFO's reason, if someone other than Medbay wrote one on a node
    they took out of service; None otherwise."""
    reason = " ".join((info.reason or "").split())
    if not holders.out_of_service(info) or not reason or reason.startswith(ANSWER_PREFIX):
        return None
    lowered = reason.lower()
    for key, meaning in words.items():
        rest = lowered[len(key) :]
        if lowered.startswith(key) and (not rest or not (rest[0].isalnum() or rest[0] == "_")):
            return Request(reason, reason[: len(key)], meaning, form_of(info))
    if REQUEST_LIKE.match(reason):
        return Request(reason, reason.split()[0], None, form_of(info))
    return None


def form_of(info: NodeInfo) -> str:
    """How the node was taken out: down (its jobs ended), fail or drain."""
    if info.state == "down":
        return "down"
    return "fail" if "fail" in info.flags else "drain"


def request_key(info: NodeInfo, text: str) -> str:
    at = info.reason_set_at.isoformat() if info.reason_set_at else ""
    return f"{text}@{at}"[:600]


# ----------------------------------------------------------------- the sync's listener
def on_snapshot(cluster: Cluster, backend: ClusterBackend, nodes: list[NodeInfo]) -> None:
    """Take new requests, cancel withdrawn ones, and answer in Slurm. Errors are logged:
    the sync goes on whatever happens here, and the next cycle tries again."""
    infos = {info.name: info for info in nodes}
    for part in (take_new_requests, withdraw_requests, answer_requests):
        try:
            part(cluster, backend, infos)
        except Exception:
            logger.exception("Slurm requests of cluster %s: %s failed", cluster.name, part.__name__)


def take_new_requests(cluster, backend, infos: dict[str, NodeInfo]) -> list[SlurmRequest]:
    words = request_words()
    found = {name: r for name, info in infos.items() if (r := read_request(info, words))}
    if not found:
        return []
    nodes = {n.name: n for n in Node.objects.filter(cluster=cluster, name__in=list(found))}
    seen = set(
        SlurmRequest.objects.filter(node__in=list(nodes.values())).values_list("node__name", "key")
    )
    taken = []
    for name, request in sorted(found.items()):
        info, node = infos[name], nodes.get(name)
        if node is None or (name, request_key(info, request.text)) in seen:
            continue
        row = _take(node, info, request)
        if row is not None:
            taken.append(row)
    return taken


def _take(node: Node, info: NodeInfo, request: Request) -> SlurmRequest | None:
    """Record one new request and start its run, or say why not."""
    meaning = request.meaning
    row = SlurmRequest(
        node=node,
        key=request_key(info, request.text),
        text=request.text[:512],
        word=request.word[:64],
        action=meaning.action if meaning else "",
        form=request.form,
        requested_by=(info.reason_set_by or "")[:64],
        requested_at=info.reason_set_at,
    )
    try:
        with transaction.atomic():
            row.save()
            refusal = _refusal(node, info, meaning)
            if refusal:
                row.refusal = refusal[:255]
                row.save(update_fields=["refusal"])
                return row
            run = _start(node, row, meaning, info)
            if isinstance(run, str):
                row.refusal = run[:255]
                row.save(update_fields=["refusal"])
            else:
                row.run = run
                row.save(update_fields=["run"])
    except IntegrityError:  # another process took the same request first
        return None
    return row


def _refusal(node: Node, info: NodeInfo, meaning: Meaning | None) -> str:
    if meaning is None:
        known = ", ".join(m.word for m in request_words().values())
        return f"unknown request word; Medbay knows {known}"
    if meaning.action == Action.REPLACE and serves_no_pool(info):
        return f"{node.name} is a spare, in no pool in service: nothing to replace"
    if meaning.mode == Mode.AUTOMATIC and meaning.action in safety.DRAINING_ACTIONS:
        blocked = safety.breaker_blocks(node)
        if blocked:
            return f"circuit breaker open: {blocked}"
    return ""


def _start(node: Node, row: SlurmRequest, meaning: Meaning, info: NodeInfo):
    """The request's run, or the reason it was refused (a run already acting on the node
    that the request would not supersede)."""
    steps, handling = plan_for_request(meaning.action, row.form, info)
    context = {
        # The request is the admin's hold, which this run answers: when the plan returns
        # the node, nobody else holds it.
        "held_by": [],
        "slurm_request": {"id": row.pk, "text": row.text, "by": row.requested_by,
                          "at": row.requested_at.isoformat() if row.requested_at else None,
                          "form": row.form},
        "job_handling": handling,
    }  # fmt: skip
    if meaning.action == Action.REPLACE and row.form == "down":
        context.update(_requeued_by_slurm(node, row))
    who = row.requested_by or "someone"

    def create() -> Remediation:
        run = services.create_run(
            node,
            meaning.action,
            trigger=Trigger.SLURM,
            reason=row.text[:200],
            mode=meaning.mode,
            context=context,
            steps=steps,
            actor=f"{who} (in Slurm)",
        )
        services.note(run, f"How its jobs are handled: {handling}", actor="engine")
        return run

    busy = Remediation.objects.filter(node=node, status__in=list(ACTIVE)).first()
    if busy is None:
        try:
            return create()
        except services.NodeBusy as error:
            busy = error.existing
    if busy is None or severity(meaning.action) <= severity(busy.action):
        where = f"run {busy.pk} ({busy.get_action_display().lower()})" if busy else "a run"
        return f"{node.name} is already in Medbay's {where}"
    why = f"{who} asked in Slurm: {row.text}"
    return services.supersede(busy, create, why=why, actor=f"{who} (in Slurm)") or (
        f"{node.name} is already in Medbay's run {busy.pk}"
    )


def _requeued_by_slurm(node: Node, row: SlurmRequest) -> dict:
    """The jobs Slurm requeued off NODE when it went down, in the shape the release step
    reads (`requeued`, `jobs`: each one's old nodes), so they start on healthy nodes as
    soon as it is safe, not after Slurm's hold."""
    since = (row.requested_at or timezone.now()) - DOWN_REQUEUE_SLACK
    changes = JobStateChange.objects.filter(
        job__cluster_id=node.cluster_id, to_state=JobState.PENDING, at__gte=since
    ).values_list("job__slurm_id", "node_names")
    jobs = {
        str(slurm_id): {"nodes": list(names)}
        for slurm_id, names in changes
        if node.name in (names or [])
    }
    if not jobs:
        return {}
    return {
        "requeued": sorted(int(job_id) for job_id in jobs),
        "requeued_at": timezone.now().isoformat(),
        "jobs": jobs,
    }


def plan_for_request(action: str, form: str, info: NodeInfo) -> tuple[list[str], str]:
    """The steps of a requested ACTION on a node taken out with FORM, and how its jobs
    are handled, in words for the run's page."""
    if action == Action.REPLACE:
        if form == "down":
            return list(REPLACE_AFTER_DOWN), JOBS_ENDED
        requeuing = [
            p for p in info.partitions if p in settings.MEDBAY_SLURM_REPLACE_REQUEUE_PARTITIONS
        ]
        if requeuing:
            steps = [s for s in plan_for(Action.REPLACE) if s != FIRST_DRAIN]
            return steps, REQUEUE_JOBS.format(partition=requeuing[0])
        return list(REPLACE_WAITING), WAIT_FOR_JOBS
    if action == Action.REBOOT:
        steps = [s for s in plan_for(Action.REBOOT) if s != FIRST_DRAIN]
        return steps, REBOOT_JOBS
    return plan_for(action), "running jobs finish; the node stays drained afterwards"


# ----------------------------------------------------------------- withdrawn requests
def withdraw_requests(cluster, backend, infos: dict[str, NodeInfo]) -> int:
    """Cancel the runs of requests withdrawn before the run acted: the admin resumed the
    node, or wrote another reason over the request and Medbay's answer."""
    acted = (
        RemediationStep.objects.exclude(outcome__in=[StepOutcome.SKIPPED, StepOutcome.DRY_RUN])
        .exclude(name__in=LOOKING_STEPS)
        .values("remediation")
    )
    runs = (
        Remediation.objects.filter(
            node__cluster=cluster, trigger=Trigger.SLURM, status__in=list(ACTIVE)
        )
        .exclude(pk__in=acted)
        .select_related("node")
    )
    cancelled = 0
    for run in runs:
        info = infos.get(run.node.name)
        why = _withdrawn(run, info)
        if not why:
            continue
        for _ in range(2):  # the engine may move it meanwhile: read again once
            if services.transition(run, RunStatus.CANCELLED, message=why, actor="slurm"):
                cancelled += 1
                break
            run.refresh_from_db()
            if not run.is_active:
                break
    return cancelled


def _withdrawn(run: Remediation, info: NodeInfo | None) -> str:
    request = run.context.get("slurm_request") or {}
    if info is None:
        return ""
    if not holders.out_of_service(info):
        return f"request withdrawn in Slurm: {info.name} was resumed before the run acted"
    reason = " ".join(info.reason.split())
    if reason == request.get("text") or holders.run_named(reason) == run.pk:
        return ""
    by = f" by {info.reason_set_by}" if info.reason_set_by else ""
    return (
        f"request withdrawn in Slurm: the reason was changed{by} to {reason!r} before the run acted"
    )


# ----------------------------------------------------------------- the answer in Slurm
def answer_requests(cluster, backend, infos: dict[str, NodeInfo]) -> int:
    """Write each unsettled request's answer into its node's reason, where it differs."""
    rows = SlurmRequest.objects.filter(node__cluster=cluster, settled=False).select_related(
        "run", "node"
    )
    written = 0
    for row in rows:
        info = infos.get(row.node.name)
        text, final = answer(row)
        if info is None or not holders.out_of_service(info):
            # Back in service (the plan returned it, or an admin did): a node in service
            # has no reason to carry an answer.
            _settle(row, row.answer, settled=True)
            continue
        if not _still_ours(row, info):
            _settle(row, row.answer, settled=True)  # someone else's reason now: theirs
            continue
        if " ".join(info.reason.split()) != text:
            try:
                _write_reason(backend, info, text)
            except BackendError as error:
                logger.warning("Could not answer %s in Slurm: %s", row.node.name, error.message)
                continue
            written += 1
        _settle(row, text, settled=final)
    return written


def answer(row: SlurmRequest) -> tuple[str, bool]:
    """The reason Medbay writes for ROW now, and whether it is its last word."""
    who = f" ({row.who_and_when})" if row.who_and_when else ""
    if row.run is None:
        text = f"{ANSWER_PREFIX} {REFUSED} {row.word}: {row.refusal or 'not started'}"
        return _fit(text, who), True
    run = row.run
    status = RunStatus(run.status)
    if status == RunStatus.AWAITING_APPROVAL:
        doing = "awaiting an admin's approval in Medbay"
    elif status == RunStatus.NEEDS_ATTENTION:
        doing = f"needs an admin: {run.message}"
    elif status in TERMINAL:
        doing = f"{status.label.lower()}: {run.message}" if run.message else status.label.lower()
    else:
        doing = run.message or (f"step {run.step_name}" if run.step_name else "starting")
    return _fit(f"{ANSWER_PREFIX} {row.word} [run {run.pk}]: {doing}", who), status in TERMINAL


def _fit(text: str, tail: str) -> str:
    """TEXT and the requester's TAIL within Slurm's reason as Medbay keeps it."""
    room = holders.REASON_MAX - len(tail)
    text = " ".join(text.split())
    if len(text) > room:
        text = text[: room - 1] + "…"
    return text + tail


def _still_ours(row: SlurmRequest, info: NodeInfo) -> bool:
    """The reason is still the request or Medbay's answer to it, not someone else's."""
    reason = " ".join(info.reason.split())
    if reason == row.text or (row.answer and reason == row.answer):
        return True
    if row.run_id is not None:
        return reason.startswith(ANSWER_PREFIX) and holders.run_named(reason) == row.run_id
    return False


def _write_reason(backend: ClusterBackend, info: NodeInfo, text: str) -> None:
    """Slurm keeps one reason per node, set with its state: write it with the state the
    node is in, so that a failed node stays failed and a downed one down."""
    form = form_of(info)
    if form == "down":
        backend.down_node(info.name, text)
    elif form == "fail":
        backend.fail_node(info.name, text)
    else:
        backend.drain_node(info.name, text)


def _settle(row: SlurmRequest, text: str, *, settled: bool) -> None:
    if text == row.answer and settled == row.settled:
        return
    SlurmRequest.objects.filter(pk=row.pk).update(answer=text[:255], settled=settled)
    row.answer, row.settled = text, settled


def requests_for(node: Node, limit: int = 5) -> list[SlurmRequest]:
    """The node's latest requests from Slurm, for its page."""
    return list(SlurmRequest.objects.filter(node=node).select_related("run")[:limit])


def register() -> None:
    """Hook the requests into the sync (called from the remediation app's ready())."""
    from sync.cycle import snapshot_listeners

    if on_snapshot not in snapshot_listeners:
        snapshot_listeners.append(on_snapshot)


__all__ = ["answer", "on_snapshot", "plan_for_request", "read_request", "register", "requests_for"]
