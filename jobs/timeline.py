""" "Why did my job restart?": one chronological story from the rows Medbay already keeps.

Merges the job's state history, the remediation runs that acted on it (their
`RemediationJob` rows say so, wherever the job ran afterwards), health events on
its nodes while it ran and its checkpoint reports, then explains each restart
in plain words. A restart is Slurm's restart count going up, so the count is
Slurm's. It reads only what was recorded, so any source may be missing (no
remediation rows, no progress reports) and the story says less rather than
failing; "unknown" is said only when nothing was recorded at all.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Prefetch, Q
from django.utils import timezone

from agent.xid import lookup
from clusters.models import NodeStateChange
from health.ingest import SEVERITY_RANK
from health.models import EventKind, HealthEvent
from jobs.models import Job, JobProgress, JobState, JobStateChange
from remediation.correlation import job_fault_of
from remediation.models import JobEffect, Remediation, RemediationJob, SlurmRequest, StepOutcome
from remediation.models import Trigger as RunTrigger
from remediation.templatetags.remediation_tags import step_label
from remediation.transitions import TERMINAL

# The sync notices a requeue up to one interval after the engine did it.
MATCH_SLACK = timedelta(minutes=2)
# The engine's and the sync's clocks are the same host's, but not the same instant.
CLOCK_SLACK = timedelta(seconds=5)
RAN = frozenset({JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED, JobState.CONFIGURING})
NODE_FAILURE_WORDS = (
    "nodedown", "node_fail", "node fail", "node failure", "node fault", "not responding",
)  # fmt: skip


class Cause:
    XID = "xid_remediation"
    ADMIN = "admin_action"
    PREEMPTION = "preemption"
    NODE_FAILURE = "node_failure"
    JOB_FAILURE = "job_failure"
    MANUAL_REQUEUE = "manual_requeue"
    UNKNOWN = "unknown"


@dataclass
class Event:
    """One line of the timeline; `run` links a remediation's rows to its page."""

    at: datetime
    kind: str  # state | remediation | step | health | checkpoint
    title: str
    detail: str = ""
    run: int | None = None

    def as_dict(self) -> dict:
        return {
            "at": self.at,
            "kind": self.kind,
            "title": self.title,
            "detail": self.detail,
            "run": self.run,
        }


@dataclass
class Restart:
    """One restart and what Medbay could find out about it."""

    at: datetime
    cause: str
    sentence: str = ""
    run: Remediation | None = None
    fault: HealthEvent | None = None
    resumed_at: datetime | None = None
    resumed_nodes: list[str] = field(default_factory=list)
    resumed_step: int | None = None
    lost_gpu_hours: float | None = None
    time_lost: timedelta | None = None

    def as_dict(self) -> dict:
        fault = self.fault
        return {
            "at": self.at,
            "cause": self.cause,
            "explanation": self.sentence,
            "run": self.run.pk if self.run else None,
            "xid": fault.xid if fault else None,
            "gpu": fault.gpu_index if fault else None,
            "node": fault.node.name if fault else (self.run.node.name if self.run else None),
            "replacement": (self.run.context or {}).get("replacement") if self.run else None,
            "resumed_at": self.resumed_at,
            "resumed_nodes": self.resumed_nodes,
            "resumed_from_step": self.resumed_step,
            "time_lost_s": round(self.time_lost.total_seconds()) if self.time_lost else None,
            "lost_gpu_hours": self.lost_gpu_hours,
        }


@dataclass
class Timeline:
    job: Job
    events: list[Event] = field(default_factory=list)
    restarts: list[Restart] = field(default_factory=list)
    summary: str = ""
    # Slurm's StartTime is this attempt's; a requeued job first started earlier.
    first_started: datetime | None = None
    # Where it runs, else where it last ran: Slurm stops naming a finished job's nodes.
    nodes: list[str] = field(default_factory=list)


@dataclass
class Facts:
    """What one job's story is built from, read once."""

    job: Job
    changes: list
    intervals: list[tuple[datetime, datetime]]
    runs: list[Remediation]
    health: list[HealthEvent]
    progress: list[JobProgress]


def build_timeline(job: Job, *, now: datetime | None = None) -> Timeline:
    now = now or timezone.now()
    changes = list(job.state_changes.order_by("at", "id"))
    intervals = run_intervals(job, changes, now)
    runs = runs_that_touched(job)
    node_names = set(job.node_names) | {run.node.name for run in runs}
    node_names |= {name for change in changes for name in change.node_names}
    facts = Facts(
        job=job,
        changes=changes,
        intervals=intervals,
        runs=runs,
        health=health_events(node_names, intervals),
        progress=list(JobProgress.objects.filter(job=job).order_by("reported_at", "id")),
    )
    timeline = Timeline(job=job)
    timeline.events = merge_events(facts)
    timeline.restarts = [explain_restart(facts, change) for change in restarts_in(changes)]
    timeline.summary = summarize(job, timeline.restarts)
    own_fault = job_fault_of(job)
    if own_fault is not None:
        # Every rank crashed with the same application XID: the story leads with that,
        # and the job's error output (the panel on its page) says what went wrong.
        timeline.summary = (
            f"Job {job.slurm_id} hit a fault of its own: {own_fault.summary}. Medbay took"
            " no node out of service for it; the job's error output below says what went"
            f" wrong. {timeline.summary}"
        )
        timeline.events.append(
            Event(own_fault.opened_at, "health", "the job's own fault", own_fault.summary)
        )
        timeline.events.sort(key=lambda event: event.at)
    first_run = next((c for c in changes if c.to_state == JobState.RUNNING), None)
    # Slurm's StartTime where it is the same attempt's: "First started" and "Started" agree.
    own_start = first_run is not None and _starts_this_attempt(job, first_run)
    if first_run is not None:
        timeline.first_started = job.start_at if own_start else first_run.at
    held = [list(change.node_names) for change in changes if change.node_names]
    timeline.nodes = list(job.node_names) or (held[-1] if held else [])
    return timeline


def lost_gpu_hours_by_job(jobs, *, now: datetime | None = None) -> dict[int, float | None]:
    """pk -> estimated GPU-hours lost over all of the job's restarts, as its story
    counts them; None for a job that never restarted or never reported progress.

    For a page of the queue: three queries whatever the number of jobs, and no
    cause is looked up (that is the story's, one job at a time).
    """
    now = now or timezone.now()
    jobs = list(jobs)
    restarted = {job.pk: job for job in jobs if job.restart_count}
    lost: dict[int, float | None] = {job.pk: None for job in jobs}
    if not jobs:
        return lost
    # Asked for every job of the page, restarted or not, so that a page takes the
    # same three queries whatever it holds.
    page, changes, progress = [job.pk for job in jobs], defaultdict(list), defaultdict(list)
    rows = JobStateChange.objects.filter(job_id__in=page, job__restart_count__gt=0)
    for change in rows.order_by("job_id", "at", "id"):
        changes[change.job_id].append(change)
    saves = JobProgress.objects.filter(job_id__in=page, job__restart_count__gt=0)
    for report in saves.order_by("reported_at", "id"):
        progress[report.job_id].append(report)
    requeues = defaultdict(list)
    effects = RemediationJob.objects.filter(
        slurm_job_id__in={job.slurm_id for job in jobs}, effect=JobEffect.REQUEUED
    )
    for effect in effects.values_list("slurm_job_id", "at"):
        requeues[effect[0]].append(effect[1])
    for pk, job in restarted.items():
        history = changes[pk]
        facts = Facts(job, history, run_intervals(job, history, now), [], [], progress[pk])
        per_restart = [
            _lost_at(facts, change, requeues[job.slurm_id]) for change in restarts_in(history)
        ]
        known = [value for value in per_restart if value is not None]
        lost[pk] = round(sum(known), 2) if known else None
    return lost


def _lost_at(facts: Facts, change, requeued_at: list[datetime]) -> float | None:
    stopped_at, _resumed, checkpoint = attempt_end(facts, change, requeued_at)
    return _lost_gpu_hours(facts, stopped_at, checkpoint)


def attempt_end(facts: Facts, change, requeued_at: list[datetime]):
    """How the attempt this restart ended stopped: when (the requeue that the sync saw
    as this restart, else the restart row), the run that followed, if any, and the
    checkpoint that run resumed from."""
    near = [at for at in requeued_at if change.at - MATCH_SLACK <= at <= change.at + CLOCK_SLACK]
    stopped_at = near[-1] if near else change.at
    resumed = _resumed_after(facts.changes, change)
    return stopped_at, resumed, _checkpoint_resumed_from(change, resumed, facts.progress)


def restarts_in(changes) -> list:
    """The rows where Slurm's restart count went up: one per restart, however many
    states the requeue passed through."""
    found, highest = [], None
    for change in changes:
        if highest is not None and change.restart_count > highest:
            found.append(change)
        highest = change.restart_count if highest is None else max(highest, change.restart_count)
    return found


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


def runs_that_touched(job: Job) -> list[Remediation]:
    """The runs that signalled, requeued, cancelled or released this job, and only those."""
    mine = {"slurm_job_id": job.slurm_id}
    if job.submit_at:
        # Slurm reuses ids: what a run did to an earlier job with this id is not this one's.
        mine["at__gte"] = job.submit_at - MATCH_SLACK
    effects = RemediationJob.objects.filter(**mine).order_by("at", "id")
    runs = Remediation.objects.filter(
        node__cluster_id=job.cluster_id,
        **{f"job_effects__{key}": value for key, value in mine.items()},
    )
    return list(
        runs.distinct()
        .select_related("node", "requested_by", "incident")
        .prefetch_related("steps", Prefetch("job_effects", queryset=effects, to_attr="effects"))
        .order_by("created_at", "id")
    )


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


def merge_events(facts: Facts) -> list[Event]:
    events = [
        Event(
            change.at,
            "state",
            f"{change.from_state or 'new'} → {change.to_state}",
            _state_detail(facts.job, change),
        )
        for change in facts.changes
    ]
    for run in facts.runs:
        who = display_name(run.requested_by) if run.requested_by else run.get_trigger_display()
        events.append(
            Event(run.created_at, "remediation",
                  f"Medbay run {run.pk}: {run.get_action_display()} {run.node.name}",
                  f"{run.reason} (by {who}; {run.get_status_display().lower()})", run.pk)
        )  # fmt: skip
        events += [
            Event(step.started_at, "step",
                  f"{step_label(step.name)}: {step.get_outcome_display().lower()}",
                  step.message, run.pk)
            for step in run.steps.all()
        ]  # fmt: skip
    events += [
        Event(e.observed_at, "health", f"{e.node.name}: {e.title}", e.message) for e in facts.health
    ]
    events += [
        Event(p.reported_at, "checkpoint", f"checkpoint at step {p.step:,}")
        for p in facts.progress
        if p.checkpoint_saved
    ]
    return sorted(events, key=lambda event: event.at)


def _state_detail(job: Job, change) -> str:
    detail = f"{change.reason} ({change.actor})" if _said(change.reason) else change.actor
    if _starts_this_attempt(job, change) and abs(change.at - job.start_at) > CLOCK_SLACK:
        # The row is when the sync saw the start; the page's "Started" is Slurm's.
        detail += f"; Slurm started it at {timezone.localtime(job.start_at):%H:%M:%S}"
    return detail


def _starts_this_attempt(job: Job, change) -> bool:
    return (
        job.start_at is not None
        and change.to_state == JobState.RUNNING
        and change.restart_count == job.restart_count
    )


def display_name(user) -> str:
    """A person as the page names them: their full name, else their user name."""
    return user.get_full_name() or user.get_username()


def _said(reason: str) -> bool:
    # Slurm prints "None" for a job with no reason.
    return bool(reason) and reason != "None"


def explain_restart(facts: Facts, change) -> Restart:
    run = run_that_requeued(facts.runs, change.at)
    restart = Restart(at=change.at, cause=Cause.UNKNOWN, run=run)
    requeued_at = [e.at for e in run.effects if e.effect == JobEffect.REQUEUED] if run else []
    stopped_at, resumed, checkpoint = attempt_end(facts, change, requeued_at)
    if resumed is not None:
        restart.resumed_at, restart.resumed_nodes = resumed.at, list(resumed.node_names)
        restart.resumed_step = checkpoint.step if checkpoint else None
    restart.lost_gpu_hours = _lost_gpu_hours(facts, stopped_at, checkpoint)
    restart.cause, because = _cause(facts, change, restart)
    detected_at = restart.fault.observed_at if restart.fault else (run.created_at if run else None)
    if detected_at and restart.resumed_at:
        restart.time_lost = restart.resumed_at - min(detected_at, change.at)
    restart.sentence = _sentence(facts.job, restart, because)
    return restart


def _resumed_after(changes, change):
    """The first time the job ran again after this restart, if it did."""
    return next(
        (c for c in changes if c.at >= change.at and c.id != change.id
         and c.to_state == JobState.RUNNING),
        None,
    )  # fmt: skip


def run_that_requeued(runs, at: datetime) -> Remediation | None:
    """The latest run whose requeue of this job the sync saw as this restart."""
    matching = [
        run
        for run in runs
        for effect in run.effects
        if effect.effect == JobEffect.REQUEUED and at - MATCH_SLACK <= effect.at <= at + CLOCK_SLACK
    ]
    return matching[-1] if matching else None


def _cause(facts: Facts, change, restart: Restart) -> tuple[str, str]:
    run = restart.run
    if run is not None and run.trigger == RunTrigger.ADMIN:
        who = display_name(run.requested_by) if run.requested_by else "an admin"
        why = f" ({run.reason})" if run.reason else ""
        action = run.get_action_display().lower()
        return Cause.ADMIN, f"{who} asked Medbay to {action} {run.node.name}{why}"
    if run is not None and run.trigger == RunTrigger.SLURM:
        request = run.context.get("slurm_request") or {}
        action = run.get_action_display().lower()
        return Cause.ADMIN, (
            f"{request.get('by') or 'an admin'} asked in Slurm to {action} {run.node.name}"
            f" ({run.reason}), and Medbay's run {run.pk} requeued it"
        )
    if run is not None:
        restart.fault = _fault_of(run, facts.health)
        return Cause.XID, _fault_words(run, restart.fault)
    nearby = [c for c in facts.changes if abs((c.at - change.at).total_seconds()) <= 1]
    text = " ".join(f"{c.from_state} {c.to_state} {c.reason}" for c in nearby).lower()
    ran_on = list(change.node_names) or list(facts.job.node_names)
    asked = _slurm_request_ending(facts.job, ran_on, change.at)
    if asked is not None:
        ran = f"; Medbay's run {asked.run_id} replaced it" if asked.run_id else ""
        return Cause.ADMIN, (
            f"{asked.requested_by or 'an admin'} took {asked.node.name} down in Slurm"
            f" ({asked.text}), which ended the job, and Slurm requeued it{ran}"
        )
    if "preempt" in text:
        return Cause.PREEMPTION, "Slurm preempted it for a higher-priority job"
    failed_node = _failed_node(ran_on, change.at)
    if failed_node or any(word in text for word in NODE_FAILURE_WORDS):
        node = failed_node or "a node it ran on"
        return Cause.NODE_FAILURE, (
            f"{node} failed under it and Slurm requeued it; Medbay had no remediation"
            " running for that node"
        )
    if change.from_state == JobState.FAILED or "requeueexit" in text or "special_exit" in text:
        code = f" (exit code {facts.job.exit_code})" if facts.job.exit_code is not None else ""
        return Cause.JOB_FAILURE, (
            f"the job itself failed{code} and Slurm requeued it, as its RequeueExit setting asks"
        )
    if change.from_state in RAN:
        return Cause.MANUAL_REQUEUE, (
            "someone requeued it with scontrol requeue (an admin or its owner), outside"
            " Medbay; no fault was recorded on its nodes"
        )
    return (
        Cause.UNKNOWN,
        "Slurm requeued it while Medbay was not watching, and nothing recorded says why",
    )


def _fault_of(run: Remediation, health) -> HealthEvent | None:
    """The XID that started the run: its incident's worst, else the node's last before it."""
    if run.incident_id:
        events = HealthEvent.objects.filter(incident_id=run.incident_id, kind=EventKind.XID)
        events = list(events.select_related("node").order_by("observed_at", "id"))
        named = [e for e in events if f"XID {e.xid}" in run.reason]
        if named or events:
            return (named or sorted(events, key=lambda e: -SEVERITY_RANK[e.severity]))[0]
    xids = [e for e in health if e.kind == EventKind.XID and e.node_id == run.node_id]
    before = [e for e in xids if e.observed_at <= run.created_at + CLOCK_SLACK]
    return (before or xids or [None])[-1]


def _fault_words(run: Remediation, fault: HealthEvent | None) -> str:
    if fault is None or fault.xid is None:
        return f"Medbay's remediation of {run.node.name} ({run.reason})"
    gpu = f"GPU {fault.gpu_index} on " if fault.gpu_index is not None else ""
    return f"{gpu}{fault.node.name} reported XID {fault.xid} ({lookup(fault.xid).name})"


def _slurm_request_ending(job: Job, node_names: list[str], at: datetime) -> SlurmRequest | None:
    """An admin's request in Slurm that took one of NODE_NAMES down (state=down ends its
    jobs) just before AT: the cause of a requeue nobody in Medbay asked for."""
    return (
        SlurmRequest.objects.filter(
            node__cluster_id=job.cluster_id,
            node__name__in=node_names,
            form="down",
            requested_at__range=(at - MATCH_SLACK, at + CLOCK_SLACK),
        )
        .select_related("node")
        .order_by("-requested_at")
        .first()
    )


def _failed_node(node_names: list[str], at: datetime) -> str:
    change = (
        NodeStateChange.objects.filter(
            node__name__in=node_names,
            to_status__in=("down", "fail"),
            at__range=(at - MATCH_SLACK, at + CLOCK_SLACK),
        )
        .select_related("node")
        .order_by("at")
        .first()
    )
    if change is None:
        return ""
    return f"{change.node.name} ({change.reason})" if change.reason else change.node.name


def _checkpoint_resumed_from(change, resumed, progress) -> JobProgress | None:
    """The last checkpoint the stopped attempt saved: the one the next attempt loads.

    A job told to stop (TERM on requeue) often saves once more as it goes, a
    moment after Medbay's requeue; that save counts. The next attempt's own saves
    (its restart count is the new one) do not.
    """
    until = resumed.at if resumed is not None else None
    saved = [
        p
        for p in progress
        if p.checkpoint_saved
        and p.restart_count < change.restart_count
        and (until is None or p.reported_at <= until)
    ]
    return saved[-1] if saved else None


def _lost_gpu_hours(facts: Facts, stopped_at: datetime, checkpoint) -> float | None:
    """GPUs × the work between the last checkpoint and the stop, counted from this
    attempt's start at most. None when the job never reported progress: then
    Medbay cannot know what was lost."""
    job = facts.job
    if not job.gpus or not any(p.reported_at <= stopped_at for p in facts.progress):
        return None
    started = max((start for start, _ in facts.intervals if start <= stopped_at), default=None)
    candidates = [t for t in (started, checkpoint.reported_at if checkpoint else None) if t]
    if not candidates:
        return None
    lost_s = max(0.0, (stopped_at - max(candidates)).total_seconds())
    return round(job.gpus * lost_s / 3600, 2)


def _gpu_hours(value: float) -> str:
    return f"{value:.1f}" if value >= 1 else f"{value:.2f}"


STEP_PHRASES = {
    "drain": "drained {node}",
    "cordon": "cordoned {node}",
    "signal_jobs": "signalled the job to checkpoint",
    "wait_grace": "gave the job {grace} to checkpoint",
    "requeue_jobs": "requeued it",
    "reset_gpu": "reset the GPU",
    "reboot": "rebooted {node}",
    "replace": "replaced {node} with spare {replacement}",
    "release_jobs": "released it to start again",
}


def remediation_steps(run: Remediation) -> list[str]:
    """What the run did, as phrases; the first starts with "Medbay"."""
    context = run.context or {}
    replacement = context.get("replacement") or context.get("replacement_node") or "a spare"
    done = []
    for step in run.steps.all():
        if step.outcome != StepOutcome.SUCCEEDED or step.name not in STEP_PHRASES:
            continue
        phrase = STEP_PHRASES[step.name].format(
            node=run.node.name, replacement=replacement, grace=grace_given(run, step)
        )
        if phrase not in done:
            done.append(phrase)
    if not done:
        return [f"Medbay started {run.get_action_display().lower()} on {run.node.name}"]
    return ["Medbay " + done[0], *done[1:]]


GRACE_OVER = re.compile(r"grace of (\d+)s over")


def grace_given(run: Remediation, step) -> str:
    """The checkpoint grace the run's wait_grace step used: what it recorded, else
    what its message says (runs from before it recorded it), else no number."""
    used = (run.context or {}).get("grace_used_s")
    if used is None:
        said = GRACE_OVER.search(step.message or "")
        used = int(said[1]) if said else (run.context or {}).get("grace_s")
    return "its checkpoint grace" if used is None else f"{used} s"


def _join(phrases: list[str]) -> str:
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]


def _sentence(job, restart: Restart, because: str) -> str:
    text = f"Job {job.slurm_id} restarted at {_hhmm(restart.at)} because {because}."
    run = restart.run
    if run is not None:
        text += f" {_join(remediation_steps(run))} ({_run_state(run, restart)})."
    if restart.resumed_at:
        text += f" It resumed at {_hhmm(restart.resumed_at)}"
        if restart.resumed_step is not None:
            text += f" from the checkpoint at step {restart.resumed_step:,}"
        if restart.resumed_nodes:
            text += f" on {_join(restart.resumed_nodes)}"
        text += "."
    else:
        text += " It is not running again yet."
    if restart.time_lost is not None:
        since = "the fault" if restart.fault else "Medbay's action"
        text += f" Time lost: {_duration(restart.time_lost)}, from {since} to running again."
    if restart.lost_gpu_hours == 0:
        text += " No work was lost: it saved a checkpoint as it was stopped."
    elif restart.lost_gpu_hours is not None:
        text += f" Estimated lost work: {_gpu_hours(restart.lost_gpu_hours)} GPU-hours."
    return text


def _run_state(run: Remediation, restart: Restart) -> str:
    status = run.get_status_display().lower()
    if restart.resumed_at and run.status not in TERMINAL:
        # The run goes on with the node (a replacement, a reboot) after the job has
        # moved on: the job is not waiting for it.
        return f"run {run.pk} is still {status} on {run.node.name}; the job did not wait for it"
    return f"run {run.pk}, {status}"


def _duration(span: timedelta) -> str:
    seconds = max(0, round(span.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {seconds} s"
    return f"{seconds} s"


def _hhmm(at: datetime) -> str:
    return timezone.localtime(at).strftime("%H:%M")


def summarize(job: Job, restarts: list[Restart]) -> str:
    count = max(job.restart_count, len(restarts))
    if not count:
        state = job.get_state_display().lower()
        return f"Job {job.slurm_id} has not restarted; it is {state}."
    if not restarts:
        return (
            f"Job {job.slurm_id} restarted {_times(count)} before Medbay watched it;"
            " nothing recorded says why."
        )
    if count == 1:
        return restarts[0].sentence
    seen = "" if len(restarts) == count else f" (Medbay saw {len(restarts)} of them)"
    lost = [r.lost_gpu_hours for r in restarts if r.lost_gpu_hours is not None]
    total = f" In all about {round(sum(lost), 1)} GPU-hours were lost." if lost else ""
    latest = restarts[-1].sentence
    return f"Job {job.slurm_id} restarted {_times(count)}{seen}. The latest: {latest}{total}"


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"
