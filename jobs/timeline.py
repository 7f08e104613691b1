""" "Why did my job restart?": one chronological story from the rows Medbay already keeps.

Merges the job's state history, the remediation runs that touched it (with their
steps), health events on its nodes while it ran and its checkpoint reports, then
explains each restart in plain words. It reads only what was recorded, so any
source may be missing (no remediation rows, no progress reports) and the story
says less rather than failing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from clusters.models import NodeStateChange
from clusters.remediation.models import Remediation, StepOutcome, Trigger
from health.models import EventKind, HealthEvent
from health.xid import lookup
from jobs.models import Job, JobProgress, JobState

# The sync notices a requeue up to one interval after the engine did it.
MATCH_SLACK = timedelta(minutes=2)
RESTART_FROM = frozenset(
    {
        JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED, JobState.CONFIGURING,
        JobState.PREEMPTED, JobState.NODE_FAIL, JobState.FAILED,
    }
)  # fmt: skip
NODE_FAILURE_WORDS = ("nodedown", "node_fail", "node fail", "node failure", "not responding")


class Cause:
    XID = "xid_remediation"
    ADMIN = "admin_action"
    PREEMPTION = "preemption"
    JOB_FAILURE = "job_failure"
    UNKNOWN = "unknown"


@dataclass
class Event:
    """One line of the timeline."""

    at: datetime
    kind: str  # state | remediation | step | health | checkpoint
    title: str
    detail: str = ""

    def as_dict(self) -> dict:
        return {"at": self.at, "kind": self.kind, "title": self.title, "detail": self.detail}


@dataclass
class Restart:
    """One restart and what Medbay could find out about it."""

    at: datetime
    cause: str
    sentence: str
    resumed_at: datetime | None = None
    resumed_step: int | None = None
    lost_gpu_hours: float | None = None

    def as_dict(self) -> dict:
        return {
            "at": self.at,
            "cause": self.cause,
            "explanation": self.sentence,
            "resumed_at": self.resumed_at,
            "resumed_from_step": self.resumed_step,
            "lost_gpu_hours": self.lost_gpu_hours,
        }


@dataclass
class Timeline:
    job: Job
    events: list[Event] = field(default_factory=list)
    restarts: list[Restart] = field(default_factory=list)
    summary: str = ""


def build_timeline(job: Job, *, now: datetime | None = None) -> Timeline:
    now = now or timezone.now()
    changes = list(job.state_changes.order_by("at", "id"))
    intervals = run_intervals(job, changes, now)
    progress = list(JobProgress.objects.filter(job=job).order_by("reported_at", "id"))
    runs = related_remediations(job, intervals, now)
    node_names = set(job.node_names) | {run.node.name for run in runs}
    health = health_events(node_names, intervals)
    timeline = Timeline(job=job)
    timeline.events = merge_events(changes, runs, health, progress)
    timeline.restarts = [
        explain_restart(job, change, changes, runs, health, progress, intervals)
        for change in changes
        if is_restart(change)
    ]
    timeline.summary = summarize(job, timeline.restarts)
    return timeline


def is_restart(change) -> bool:
    return change.to_state in (JobState.PENDING, JobState.REQUEUED) and (
        change.from_state in RESTART_FROM
    )


def run_intervals(job: Job, changes, now: datetime) -> list[tuple[datetime, datetime]]:
    """When the job was running, from its state history (or start/end if none)."""
    intervals, started = [], None
    for change in changes:
        if change.to_state == JobState.RUNNING and started is None:
            started = change.at
        elif change.to_state != JobState.RUNNING and started is not None:
            intervals.append((started, change.at))
            started = None
    if started is not None:
        intervals.append((started, job.end_at or now))
    if not intervals and job.start_at:
        intervals.append((job.start_at, job.end_at or now))
    return intervals


def related_remediations(job: Job, intervals, now: datetime) -> list[Remediation]:
    """Runs naming this job in their context, or on its nodes while it ran."""
    if not intervals and not job.submit_at:
        return []
    start = min([job.submit_at or now, *(a for a, _ in intervals)]) - MATCH_SLACK
    end = max([job.end_at or now, *(b for _, b in intervals)]) + MATCH_SLACK
    candidates = (
        Remediation.objects.filter(created_at__range=(start, end))
        .select_related("node", "requested_by", "incident")
        .prefetch_related("steps")
        .order_by("created_at", "id")
    )
    names = set(job.node_names)
    return [
        run
        for run in candidates
        if job.slurm_id in _job_ids(run)
        or (run.node.name in names and _during(run.created_at, intervals))
    ]


def _job_ids(run: Remediation) -> set[int]:
    ids = (run.context or {}).get("job_ids") or []
    return {int(value) for value in ids if str(value).isdigit()}


def _during(at: datetime, intervals) -> bool:
    return any(start - MATCH_SLACK <= at <= end + MATCH_SLACK for start, end in intervals)


def health_events(node_names: set[str], intervals) -> list[HealthEvent]:
    if not node_names or not intervals:
        return []
    window = Q()
    for start, end in intervals:
        window |= Q(observed_at__range=(start - MATCH_SLACK, end))
    return list(
        HealthEvent.objects.filter(window, node__name__in=node_names)
        .select_related("node")
        .order_by("observed_at", "id")[:200]
    )


def merge_events(changes, runs, health, progress) -> list[Event]:
    events = [
        Event(
            change.at,
            "state",
            f"{change.from_state or 'new'} → {change.to_state}",
            f"{change.reason} ({change.actor})" if change.reason else change.actor,
        )
        for change in changes
    ]
    for run in runs:
        who = run.requested_by.get_username() if run.requested_by else run.get_trigger_display()
        events.append(
            Event(run.created_at, "remediation", f"Medbay {run.action} of {run.node.name}",
                  f"{run.reason} (by {who}; {run.status})")
        )  # fmt: skip
        events += [
            Event(step.started_at, "step", f"{step.name}: {step.outcome}", step.message)
            for step in run.steps.all()
        ]
    events += [
        Event(e.observed_at, "health", f"{e.node.name}: {e.title}", e.message) for e in health
    ]
    events += [
        Event(p.reported_at, "checkpoint", f"checkpoint at step {p.step:,}")
        for p in progress
        if p.checkpoint_saved
    ]
    return sorted(events, key=lambda event: event.at)


def explain_restart(job, change, changes, runs, health, progress, intervals) -> Restart:
    at = change.at
    run = _run_for(at, runs, intervals)
    cause, because = _cause(job, change, changes, run, health)
    restart = Restart(at=at, cause=cause, sentence="")
    resumed = next(
        (c for c in changes if c.at >= at and c.id != change.id and c.to_state == "RUNNING"), None
    )
    restart.resumed_at = resumed.at if resumed else None
    checkpoint = _last_checkpoint_before(at, progress)
    restart.resumed_step = checkpoint.step if checkpoint and resumed else None
    restart.lost_gpu_hours = _lost_gpu_hours(job, at, progress, intervals)
    restart.sentence = _sentence(job, restart, because, run)
    return restart


def _run_for(at: datetime, runs, intervals) -> Remediation | None:
    started = max((start for start, _ in intervals if start <= at), default=None)
    before = [
        run
        for run in runs
        if run.created_at <= at + MATCH_SLACK
        and (started is None or run.created_at >= started - MATCH_SLACK)
    ]
    return before[-1] if before else None


def _cause(job, change, changes, run, health) -> tuple[str, str]:
    if run is not None and run.trigger == Trigger.ADMIN:
        who = run.requested_by.get_username() if run.requested_by else "an admin"
        why = f" ({run.reason})" if run.reason else ""
        return Cause.ADMIN, f"admin {who} asked Medbay to {run.action} {run.node.name}{why}"
    if run is not None:
        return Cause.XID, _health_reason(run, health)
    nearby = [c for c in changes if abs((c.at - change.at).total_seconds()) <= 1]
    text = " ".join(f"{c.from_state} {c.to_state} {c.reason}" for c in nearby).lower()
    if "preempt" in text:
        return Cause.PREEMPTION, "it was preempted by a higher-priority job"
    if change.actor not in ("slurm", "") and not change.actor.startswith("sync"):
        return Cause.ADMIN, f"{change.actor} requeued it by hand"
    if any(word in text for word in NODE_FAILURE_WORDS) or _node_failed(job, change.at):
        return Cause.JOB_FAILURE, "a node it ran on failed, with no Medbay remediation"
    if "requeueexit" in text or "special_exit" in text or JobState.FAILED in text.upper():
        return Cause.JOB_FAILURE, "the job itself failed and Slurm requeued it (RequeueExit)"
    return Cause.UNKNOWN, "Slurm requeued it for a reason Medbay did not record"


def _health_reason(run: Remediation, health) -> str:
    xids = [e for e in health if e.kind == EventKind.XID and e.node_id == run.node_id]
    xids = [e for e in xids if e.observed_at <= run.created_at + MATCH_SLACK] or xids
    if not xids:
        return f"Medbay's remediation of {run.node.name} ({run.reason})"
    event = xids[-1]
    gpu = f"GPU {event.gpu_index} on " if event.gpu_index is not None else ""
    return f"{gpu}{run.node.name} reported XID {event.xid} ({lookup(event.xid).name})"


def _node_failed(job, at: datetime) -> bool:
    return NodeStateChange.objects.filter(
        node__name__in=job.node_names,
        to_status__in=("down", "fail"),
        at__range=(at - MATCH_SLACK, at),
    ).exists()


def _last_checkpoint_before(at: datetime, progress) -> JobProgress | None:
    saved = [p for p in progress if p.checkpoint_saved and p.reported_at <= at]
    return saved[-1] if saved else None


def _lost_gpu_hours(job, at: datetime, progress, intervals) -> float | None:
    """GPUs × time since the last checkpoint, counted from this attempt's start at most.

    None when the job never reported progress: then Medbay cannot know what was lost.
    """
    if not job.gpus or not any(p.reported_at <= at for p in progress):
        return None
    started = max((start for start, _ in intervals if start <= at), default=None)
    checkpoint = _last_checkpoint_before(at, progress)
    candidates = [t for t in (started, checkpoint.reported_at if checkpoint else None) if t]
    if not candidates:
        return None
    return round(job.gpus * (at - max(candidates)).total_seconds() / 3600, 1)


STEP_PHRASES = {
    "drain": "drained {node}",
    "cordon": "cordoned {node}",
    "signal_jobs": "signalled the job to checkpoint",
    "wait_grace": "gave the job {grace} s to checkpoint",
    "requeue_jobs": "requeued it",
    "reset_gpu": "reset the GPU",
    "reboot": "rebooted {node}",
    "replace": "replaced {node} with {replacement}",
    "release_jobs": "released it to start again",
}


def remediation_steps(run: Remediation) -> list[str]:
    """What the run did, as phrases; the first starts with "Medbay"."""
    context = run.context or {}
    replacement = context.get("replacement") or context.get("replacement_node") or "a spare"
    grace = context.get("grace_s") or context.get("checkpoint_grace_s") or 120
    done = []
    for step in run.steps.all():
        if step.outcome != StepOutcome.SUCCEEDED or step.name not in STEP_PHRASES:
            continue
        phrase = STEP_PHRASES[step.name].format(
            node=run.node.name, replacement=replacement, grace=grace
        )
        if phrase not in done:
            done.append(phrase)
    if not done:
        return [f"Medbay ran {run.action} on {run.node.name}"]
    return ["Medbay " + done[0], *done[1:]]


def _join(phrases: list[str]) -> str:
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]


def _sentence(job, restart: Restart, because: str, run) -> str:
    text = f"Job {job.slurm_id} restarted at {_hhmm(restart.at)} because {because}."
    tail = []
    if restart.resumed_at:
        resumed = f"the job resumed at {_hhmm(restart.resumed_at)}"
        if restart.resumed_step is not None:
            resumed += f" from step {restart.resumed_step:,}"
        tail.append(resumed)
    if run is not None and restart.cause in (Cause.XID, Cause.ADMIN):
        text += f" {_join(remediation_steps(run) + tail)}."
    elif tail:
        text += f" {_capital(tail.pop())}."
    if restart.lost_gpu_hours is not None:
        text += f" Estimated lost work: {restart.lost_gpu_hours} GPU-hours."
    return text


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _hhmm(at: datetime) -> str:
    return timezone.localtime(at).strftime("%H:%M")


def summarize(job: Job, restarts: list[Restart]) -> str:
    if not restarts:
        state = job.get_state_display().lower()
        return f"Job {job.slurm_id} has not restarted; it is {state}."
    if len(restarts) == 1:
        return restarts[0].sentence
    lost = [r.lost_gpu_hours for r in restarts if r.lost_gpu_hours is not None]
    total = f" In all about {round(sum(lost), 1)} GPU-hours were lost." if lost else ""
    latest = restarts[-1].sentence
    return f"Job {job.slurm_id} restarted {len(restarts)} times. The latest: {latest}{total}"
