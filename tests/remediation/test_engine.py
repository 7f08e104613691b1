from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.backends.base import BackendError, JobSubmission
from clusters.models import Node, Partition
from remediation import services
from remediation.engine import MAX_CRASHES, Engine
from remediation.models import (
    Action,
    Mode,
    Remediation,
    RemediationStatusChange,
    RemediationStep,
    StepOutcome,
    Trigger,
)
from remediation.plans import plan_for
from remediation.transitions import ALLOWED, IllegalTransition, RunStatus
from tests.remediation.conftest import TRAINING_JOB, drive

ILLEGAL = [
    (current, new)
    for current in RunStatus
    for new in RunStatus
    if new not in ALLOWED[current] and new != current
]
LEGAL = [(current, new) for current in RunStatus for new in ALLOWED[current]]
FAST = {"grace_s": 0, "verify_after_s": 0}


def replace_run(node_name="gpu-02", **kwargs):
    options = {"trigger": Trigger.ADMIN, "reason": "bad GPU", "context": dict(FAST)}
    options.update(kwargs)
    return services.create_run(Node.objects.get(name=node_name), Action.REPLACE, **options)


def run_in(status, node_name="gpu-01"):
    return Remediation.objects.create(
        node=Node.objects.get(name=node_name),
        action=Action.DRAIN,
        trigger=Trigger.ADMIN,
        status=status,
        reason="test",
        planned_steps=plan_for(Action.DRAIN),
    )


def step_until(engine, run, name):
    """Advance one step at a time until `name` is next (for crash simulations)."""
    for _ in range(len(run.planned_steps)):
        if run.step_name == name:
            return run
        claimed = engine.claim()
        assert claimed is not None, f"run stuck before {name}: {run.message}"
        engine.advance(claimed)
        run.refresh_from_db()
    raise AssertionError(f"{name} never came up")


@pytest.mark.parametrize(("current", "new"), ILLEGAL)
def test_every_move_missing_from_the_table_raises(synced, current, new):
    run = run_in(current)
    with pytest.raises(IllegalTransition):
        services.transition(run, new)
    run.refresh_from_db()
    assert run.status == current


@pytest.mark.parametrize(("current", "new"), LEGAL)
def test_every_move_in_the_table_is_made_and_written_to_history(synced, current, new):
    run = run_in(current)
    assert services.transition(run, new, message="why")
    run.refresh_from_db()
    assert run.status == new
    change = RemediationStatusChange.objects.get(remediation=run)
    assert (change.from_status, change.to_status, change.message) == (current, new, "why")


def test_a_transition_from_a_stale_copy_loses_and_changes_nothing(synced):
    run = run_in(RunStatus.RUNNING)
    stale = Remediation.objects.get(pk=run.pk)
    assert services.transition(run, RunStatus.CANCELLED)
    assert not services.transition(stale, RunStatus.WAITING)
    assert Remediation.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def test_a_second_run_on_a_busy_node_raises_node_busy_naming_the_first(synced):
    first = replace_run()
    with pytest.raises(services.NodeBusy) as raised:
        replace_run()
    assert raised.value.existing == first
    assert Node.objects.get(name="gpu-02").active_remediation == Action.REPLACE


def test_the_engine_runs_a_replace_plan_to_success_on_the_simulator(
    sim, synced, training_job, engine
):
    other = sim.submit_job(JobSubmission(script=TRAINING_JOB, user="bob"))
    synced(timedelta(seconds=1))
    assert sim.job(other).nodes == ["gpu-03", "gpu-04"]  # the spare is the only way back
    run = replace_run()
    drive(engine, sim, synced)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    steps = list(run.steps.filter(outcome__in=[StepOutcome.SUCCEEDED, StepOutcome.SKIPPED]))
    assert [step.name for step in steps] == plan_for(Action.REPLACE)
    assert run.context["replacement"] == "gpu-06"
    failed = {info.name: info for info in sim.nodes()}["gpu-02"]
    assert "fail" in failed.flags
    assert failed.reason == f"medbay: Action:Replace [run {run.pk}]"
    assert "train" in {info.name: info for info in sim.nodes()}["gpu-06"].partitions
    job = sim.job(training_job)
    assert [signal for _, signal in job.signals] == ["USR1"]
    assert job.restart_count == 1
    assert (job.state, job.nodes) == ("RUNNING", ["gpu-01", "gpu-06"])
    assert Node.objects.get(name="gpu-02").active_remediation == ""
    assert list(run.status_changes.values_list("to_status", flat=True).order_by("id")) == [
        RunStatus.RUNNING,
        RunStatus.WAITING,
        RunStatus.RUNNING,
        RunStatus.SUCCEEDED,
    ]


def test_the_drain_reason_names_the_fault_and_the_run(sim, synced, engine):
    run = replace_run(reason="XID 79 GPU 3 fallen off the bus")
    engine.advance(engine.claim())
    drained = {info.name: info for info in sim.nodes()}["gpu-02"]
    assert drained.reason == f"medbay: XID 79 GPU 3 fallen off the bus [run {run.pk}]"
    assert "drain" in drained.flags


def test_job_owners_are_told_about_the_signal_the_requeue_and_the_restart(
    sim, synced, training_job, engine, monkeypatch, django_capture_on_commit_callbacks
):
    told = []
    monkeypatch.setattr(
        "jobs.notifications.notify_remediation_effect",
        lambda job, *, what, remediation: told.append((job.slurm_id, what, remediation.pk)),
    )
    run = replace_run()
    with django_capture_on_commit_callbacks(execute=True):
        drive(engine, sim, synced)
    assert told == [
        (training_job, "signalled", run.pk),
        (training_job, "requeued", run.pk),
        (training_job, "restarted", run.pk),
    ]


def test_each_step_records_its_intent_before_acting_and_its_result_after(
    sim, synced, training_job, engine
):
    seen = []

    def spy_drain(node, reason):
        seen.append(list(RemediationStep.objects.values_list("name", "outcome")))
        type(sim).drain_node(sim, node, reason)

    sim.drain_node = spy_drain
    replace_run()
    engine.advance(engine.claim())
    assert seen == [[("drain", StepOutcome.STARTED)]]
    step = RemediationStep.objects.get()
    assert (step.outcome, step.worker) == (StepOutcome.SUCCEEDED, "test-worker")
    assert step.finished_at is not None


def test_a_transient_backend_error_parks_the_run_and_retries_with_backoff(sim, synced, engine):
    calls = []

    def flaky_drain(node, reason):
        calls.append(node)
        if len(calls) == 1:
            raise BackendError("Unable to contact slurm controller", permanent=False)
        type(sim).drain_node(sim, node, reason)

    sim.drain_node = flaky_drain
    run = replace_run()
    engine.run_once()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
    assert run.due_at > timezone.now() + timedelta(seconds=1)
    assert run.current_step == 0 and "retrying" in run.message
    assert engine.run_once() == 0  # not due yet
    Remediation.objects.filter(pk=run.pk).update(due_at=timezone.now())
    engine.run_once()
    run.refresh_from_db()
    assert run.current_step > 0
    assert len(calls) == 2


def test_a_permanent_backend_error_fails_the_run_with_slurms_message(sim, synced, engine):
    def broken(node, reason):
        raise BackendError("Invalid node name specified", permanent=True)

    sim.drain_node = broken
    run = replace_run()
    engine.run_once()
    run.refresh_from_db()
    assert (run.status, run.message) == (RunStatus.FAILED, "Invalid node name specified")
    assert run.finished_at is not None
    assert Node.objects.get(name="gpu-02").active_remediation == ""


def test_with_no_free_spare_the_run_needs_attention_and_stops(sim, synced, training_job, engine):
    for spare in sim.spare_capacity():
        sim.drain_node(spare, "medbay-test: spare out")
    run = replace_run()
    drive(engine, sim, synced)
    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert "No free spare" in run.message and "gpu-02" in run.message
    assert run.step_name == "check_eligibility"
    steps_before = RemediationStep.objects.count()
    assert engine.run_once() == 0
    assert RemediationStep.objects.count() == steps_before


def test_a_dry_run_records_every_step_and_calls_nothing(sim, synced, training_job):
    class Spy:
        """Reads pass through; any other call is recorded and refused."""

        def __init__(self):
            self.calls = []

        def __getattr__(self, name):
            if name in ("nodes", "partitions", "jobs", "name"):
                return getattr(sim, name)

            def record(*args, **kwargs):
                self.calls.append(name)
                raise AssertionError(f"dry run called {name}")

            return record

    spy = Spy()
    run = replace_run(mode=Mode.DRY_RUN)
    Engine("dry", backend=spy, fleet=spy, validator=lambda *a: (False, "called")).run_once()
    run.refresh_from_db()
    assert run.dry_run and run.status == RunStatus.SUCCEEDED
    outcomes = list(run.steps.values_list("name", "outcome"))
    assert outcomes == [(name, StepOutcome.DRY_RUN) for name in plan_for(Action.REPLACE)]
    assert run.steps.first().message == "would drain gpu-02 so that no new job lands on it"
    assert spy.calls == []
    assert sim.job(training_job).signals == []


def test_an_awaiting_run_is_not_touched_by_the_engine(synced, engine):
    run = replace_run(mode=Mode.APPROVAL)
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert engine.run_once() == 0
    assert Node.objects.get(name="gpu-02").active_remediation == ""


def test_the_checkpoint_grace_comes_from_the_jobs_partition(sim, synced, training_job, engine):
    Partition.objects.filter(name="train").update(checkpoint_grace_s=90)
    run = replace_run(context={})
    engine.run_once()
    run.refresh_from_db()
    assert (run.status, run.step_name) == (RunStatus.WAITING, "wait_grace")
    left = (run.due_at - timezone.now()).total_seconds()
    assert 80 < left <= 90
    assert "of 90s left" in run.message
    assert sim.job(training_job).restart_count == 0


def test_a_crash_after_the_requeue_does_not_requeue_the_job_twice(
    sim, synced, training_job, engine
):
    run = replace_run()
    run = step_until(engine, run, "cordon")
    # The worker died after Slurm requeued the job but before it recorded that.
    Remediation.objects.filter(pk=run.pk).update(current_step=run.current_step - 1)
    drive(engine, sim, synced)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert sim.job(training_job).restart_count == 1
    assert "requeued" in run.steps.filter(name="requeue_jobs").last().message


def test_a_replace_step_rerun_after_the_swap_takes_no_second_spare(sim, synced, engine):
    run = replace_run()
    run = step_until(engine, run, "validate")
    context = dict(run.context)
    context.pop("replacement")
    Remediation.objects.filter(pk=run.pk).update(current_step=run.current_step - 1, context=context)
    drive(engine, sim, synced)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.context["replacement"] == "gpu-06"
    assert sim.spare_capacity() == ["gpu-07"]
    assert run.steps.filter(name="replace").last().outcome == StepOutcome.SKIPPED


def kill_on_early_release(sim):
    """Slurm's "Job credential revoked": the released job fails instead of starting."""

    def revoked(job_id):
        job = sim.job(job_id)
        job.state, job.nodes, job.end_time = "FAILED", [], sim.now

    sim.start_now = revoked


def test_a_job_killed_by_its_early_release_is_requeued_again_and_left_to_slurm(
    sim, synced, training_job, engine
):
    kill_on_early_release(sim)
    sim.requeue_hold = timedelta(seconds=6)  # Slurm's with cred_expire=5
    run = replace_run()
    drive(engine, sim, synced, rounds=30)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    job = sim.job(training_job)
    assert (job.state, job.restart_count) == ("RUNNING", 2)
    release = run.steps.filter(name="release_jobs").last()
    assert "requeued again after its early release was refused, and running" in release.message


def test_a_killed_job_that_cannot_be_requeued_again_needs_attention(
    sim, synced, training_job, engine
):
    kill_on_early_release(sim)
    requeue = sim.requeue_job

    def refuse_finished(job_id, *, hold=False):
        if sim.job(job_id).state == "FAILED":
            raise BackendError("Invalid job id specified", permanent=True)
        requeue(job_id, hold=hold)

    sim.requeue_job = refuse_finished
    run = replace_run()
    drive(engine, sim, synced, rounds=50)
    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert f"job {training_job} killed after its early release (FAILED)" in run.message
    assert "not requeueable: Invalid job id specified" in run.message


def _step_order():
    return [
        (step.remediation_id, step.index)
        for step in RemediationStep.objects.exclude(outcome=StepOutcome.STARTED).order_by("id")
    ]


def test_a_worker_goes_on_with_the_run_it_holds_while_its_next_step_is_due_at_once(
    sim, synced, engine
):
    first, second = replace_run("gpu-02"), replace_run("gpu-03")
    engine.run_once()
    steps = len(plan_for(Action.REPLACE))
    assert _step_order() == [(first.pk, i) for i in range(steps)] + [
        (second.pk, i) for i in range(steps)
    ]
    assert set(Remediation.objects.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}


def test_a_worker_holds_one_run_for_a_bounded_number_of_steps(sim, synced, engine, monkeypatch):
    monkeypatch.setattr("remediation.engine.MAX_STEPS_PER_CLAIM", 2)
    first, second = replace_run("gpu-02"), replace_run("gpu-03")
    engine.run_once()
    assert _step_order()[:6] == [
        (first.pk, 0), (first.pk, 1), (second.pk, 0), (second.pk, 1), (first.pk, 2),
        (first.pk, 3),
    ]  # fmt: skip


def test_a_run_whose_record_cannot_be_advanced_is_parked_and_the_others_go_on(sim, synced, engine):
    bad = replace_run("gpu-03")
    Remediation.objects.filter(pk=bad.pk).update(planned_steps=["no_such_step"])
    good = replace_run("gpu-02")
    for attempt in range(1, MAX_CRASHES + 1):
        engine.run_once()
        bad.refresh_from_db()
        if attempt < MAX_CRASHES:
            assert bad.status == RunStatus.RUNNING and bad.context["crashes"] == attempt
            assert bad.due_at > timezone.now()  # backing off, not taking every pass
            Remediation.objects.filter(pk=bad.pk).update(due_at=timezone.now())
    assert bad.status == RunStatus.NEEDS_ATTENTION
    assert "step no_such_step crashed 3 times" in bad.message
    assert bad.status_changes.last().to_status == RunStatus.NEEDS_ATTENTION
    good.refresh_from_db()
    assert good.steps.exists()  # advanced all along


def test_a_step_that_needs_attention_parks_the_run_with_its_message(synced, engine, monkeypatch):
    from remediation.steps import STEPS, Step, needs_attention

    why = "the BMC does not answer; power-cycle gpu-02 by hand"
    step = Step("ask_a_human", lambda run, ctx: needs_attention(why), describe="ask a human")
    monkeypatch.setitem(STEPS, step.name, step)
    run = replace_run(steps=[step.name, "uncordon"])

    assert engine.run_once() == 1
    run.refresh_from_db()
    assert (run.status, run.message, run.step_name) == (RunStatus.NEEDS_ATTENTION, why, step.name)
    change = run.status_changes.order_by("id").last()
    assert (change.from_status, change.to_status, change.message) == (
        RunStatus.RUNNING,
        RunStatus.NEEDS_ATTENTION,
        why,
    )
    assert engine.run_once() == 0  # parked until an admin retries or cancels it
