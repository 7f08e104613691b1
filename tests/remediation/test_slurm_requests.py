"""Admins' requests written in Slurm's reason, on the simulator: one request, one run;
the answer in the reason; withdrawn and refused requests (README: Acting from Slurm).
The same on the real Slurm: tests/remediation/test_slurm_requests_on_slurm.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.backends.base import JobSubmission
from clusters.models import Partition
from remediation import slurm_requests
from remediation.models import Action, Remediation, SlurmRequest, Trigger
from remediation.slurm_requests import REPLACE_AFTER_DOWN, REPLACE_WAITING
from remediation.transitions import RunStatus
from tests.remediation.conftest import TRAINING_JOB


@pytest.fixture
def look(sim, cluster, synced):
    """One sync cycle as the sync loop runs it: apply the snapshot, then read requests."""

    def cycle(advance: timedelta | None = None):
        synced(advance)
        slurm_requests.on_snapshot(cluster, sim, sim.nodes())

    return cycle


@pytest.fixture
def job_on_01_02(sim, synced):
    job_id = sim.submit_job(JobSubmission(script=TRAINING_JOB, user="alice"))
    synced(timedelta(seconds=1))
    assert sim.job(job_id).nodes == ["gpu-01", "gpu-02"]
    return job_id


def reason_of(sim, name: str) -> str:
    return {info.name: info for info in sim.nodes()}[name].reason


def drive(engine, look, rounds: int = 15):
    for _ in range(rounds):
        engine.run_once()
        look(timedelta(seconds=1))
        Remediation.objects.filter(status=RunStatus.WAITING).update(due_at=timezone.now())


def test_a_replace_request_on_a_failed_node_is_one_run_however_many_cycles_see_it(
    sim, look, job_on_01_02
):
    sim.fail_node("gpu-02", "Action:Replace PSU smells burnt")
    for _ in range(4):
        look(timedelta(seconds=1))
    run = Remediation.objects.get()
    assert (run.action, run.trigger, run.status) == (
        Action.REPLACE,
        Trigger.SLURM,
        RunStatus.RUNNING,
    )
    assert run.planned_steps == list(REPLACE_WAITING)
    assert run.context["slurm_request"]["by"] == "root"
    history = list(run.status_changes.values_list("message", flat=True))
    assert history[0] == "Requested in Slurm by root: Action:Replace PSU smells burnt"
    assert "running jobs are not killed" in history[1]
    request = SlurmRequest.objects.get()
    assert (request.word, request.form, request.run_id) == ("Action:Replace", "fail", run.pk)
    # Slurm shows the answer, the admin's words kept readable in it.
    reason = reason_of(sim, "gpu-02")
    assert reason.startswith(f"medbay: Action:Replace [run {run.pk}]: ")
    at = timezone.localtime(request.requested_at)
    assert reason.endswith(f"(root {at:%H:%M})")


def test_the_spare_comes_in_at_once_and_the_node_waits_for_its_job(sim, look, engine, job_on_01_02):
    sim.fail_node("gpu-02", "Action:Replace")
    look()
    run = Remediation.objects.get()
    drive(engine, look, rounds=6)
    run.refresh_from_db()
    train = {p.name: p for p in sim.partitions()}["train"]
    assert run.context["replacement"] in train.nodes, "capacity comes back at once"
    assert "gpu-02" not in train.nodes
    assert sim.job(job_on_01_02).state == "RUNNING", "the running job is not killed"
    assert run.status == RunStatus.WAITING and run.step_name == "wait_drained"
    look()
    assert f"waiting for job {job_on_01_02} to end on gpu-02" in reason_of(sim, "gpu-02")

    sim.cancel_job(job_on_01_02)
    drive(engine, look, rounds=6)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    look()
    final = reason_of(sim, "gpu-02")
    assert final.startswith(f"medbay: Action:Replace [run {run.pk}]: succeeded"), final
    info = {i.name: i for i in sim.nodes()}["gpu-02"]
    assert "fail" in info.flags, "a replaced node stays out of service"
    assert SlurmRequest.objects.get().settled


def test_state_down_replaces_at_once_and_the_requeued_job_runs_again_elsewhere(
    sim, look, engine, job_on_01_02
):
    sim.down_node("gpu-02", "Action:Replace")
    look()
    run = Remediation.objects.get()
    assert run.planned_steps == list(REPLACE_AFTER_DOWN)
    assert run.context["requeued"] == [job_on_01_02], "Slurm's own requeue, to release"
    Remediation.objects.filter(pk=run.pk).update(context={**run.context, "verify_after_s": 0})
    drive(engine, look)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    job = sim.job(job_on_01_02)
    assert sim.now - job.start_time < sim.requeue_hold, "released before Slurm's hold ends"
    assert job.state == "RUNNING" and "gpu-02" not in job.nodes


def test_a_withdrawn_request_cancels_its_run_with_a_line_saying_so(sim, look, settings):
    settings.MEDBAY_SLURM_REASON_ACTIONS = {"Action:Replace": "replace/approval"}
    sim.drain_node("gpu-03", "Action:Replace")
    look()
    run = Remediation.objects.get()
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert "awaiting an admin's approval" in reason_of(sim, "gpu-03")
    sim.resume_node("gpu-03")
    look()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert run.message == "request withdrawn in Slurm: gpu-03 was resumed before the run acted"
    assert run.status_changes.last().actor == "slurm"


def test_a_reason_changed_before_the_run_acted_withdraws_it(sim, look, settings):
    settings.MEDBAY_SLURM_REASON_ACTIONS = {"Action:Drain": "drain/approval"}
    sim.drain_node("gpu-03", "Action:Drain")
    look()
    sim.drain_node("gpu-03", "PSU swap, do not touch")
    look()
    run = Remediation.objects.get()
    assert run.status == RunStatus.CANCELLED
    assert "reason was changed by root to 'PSU swap, do not touch'" in run.message
    assert reason_of(sim, "gpu-03") == "PSU swap, do not touch", "the admin's words stay"


def test_the_same_request_set_again_after_its_run_ended_is_a_new_run(sim, look, settings):
    settings.MEDBAY_SLURM_REASON_ACTIONS = {"Action:Drain": "drain/approval"}
    sim.drain_node("gpu-03", "Action:Drain")
    look()
    sim.resume_node("gpu-03")
    look()
    sim.advance(timedelta(seconds=5))
    sim.drain_node("gpu-03", "Action:Drain")
    look()
    assert Remediation.objects.count() == 2
    assert SlurmRequest.objects.count() == 2


def test_an_unknown_word_is_refused_in_the_reason_and_starts_nothing(sim, look):
    sim.drain_node("gpu-03", "Action:Frobnicate now")
    look()
    look()
    assert not Remediation.objects.exists()
    reason = reason_of(sim, "gpu-03")
    assert reason.startswith("medbay: refused Action:Frobnicate: unknown request word")
    assert "Action:Replace" in reason and reason.endswith(")")
    assert SlurmRequest.objects.get().settled


def test_a_spare_cannot_be_replaced_and_says_so(sim, look):
    sim.fail_node("gpu-06", "Action:Replace")
    look()
    assert not Remediation.objects.exists()
    assert "gpu-06 is a spare" in reason_of(sim, "gpu-06")


def test_an_open_breaker_refuses_the_request_in_the_reason(sim, look, settings):
    settings.MEDBAY_BREAKER_MAX_NODES = 1
    sim.fail_node("gpu-01", "Action:Replace")
    look()
    sim.fail_node("gpu-03", "Action:Replace")
    look()
    assert Remediation.objects.count() == 1
    assert reason_of(sim, "gpu-03").startswith("medbay: refused Action:Replace: circuit breaker")


def test_a_sites_own_word_and_matching_that_ignores_case(sim, look, settings):
    settings.MEDBAY_SLURM_REASON_ACTIONS = {"[hardware_problem]": "replace"}
    sim.fail_node("gpu-03", "[HARDWARE_PROBLEM] fans")
    look()
    run = Remediation.objects.get()
    assert run.action == Action.REPLACE
    assert run.reason == "[HARDWARE_PROBLEM] fans"


def test_a_word_must_end_where_the_table_says(sim, look):
    sim.drain_node("gpu-03", "Action:Replacement parts ordered")
    look()
    assert not Remediation.objects.exists()
    assert "unknown request word" in reason_of(sim, "gpu-03")


def test_a_request_on_a_node_in_a_run_that_is_as_drastic_is_refused(sim, look, node):
    from remediation import services
    from remediation.models import Mode

    services.create_run(
        node("gpu-03"), Action.REPLACE, trigger=Trigger.ADMIN, reason="by hand", mode=Mode.APPROVAL
    )
    sim.drain_node("gpu-03", "Action:Drain")
    look()
    assert Remediation.objects.count() == 1
    assert "gpu-03 is already in Medbay's run" in reason_of(sim, "gpu-03")


def test_a_requeue_partition_checkpoints_and_requeues_instead(sim, look, settings):
    settings.MEDBAY_SLURM_REPLACE_REQUEUE_PARTITIONS = ["train"]
    Partition.objects.update(checkpoint_grace_s=0)
    sim.fail_node("gpu-02", "Action:Replace")
    look()
    run = Remediation.objects.get()
    assert run.planned_steps[:3] == ["signal_jobs", "wait_grace", "requeue_jobs"]
    assert "as partition train asks" in run.context["job_handling"]


def test_the_approval_card_shows_the_runs_own_plan_and_no_hold_of_its_own_request(
    sim, look, settings, web, admin_user
):
    settings.MEDBAY_SLURM_REASON_ACTIONS = {"Action:Replace": "replace/approval"}
    sim.fail_node("gpu-03", "Action:Replace fans, ticket 4711")
    look()
    run = Remediation.objects.get()
    page = web(admin_user).get("/remediation/approvals/").content.decode()
    card = page.split(f'id="approval-{run.pk}"', 1)[1].split("</section>", 1)[0]
    assert "Asked in Slurm by <strong>root</strong>" in card
    assert "<q>Action:Replace fans, ticket 4711</q>" in card
    assert "Check for a free spare → Replace with a spare" in card
    assert "Signal jobs" not in card, "the action's usual plan, not this run's"
    assert "Also held by" not in card, "the request is the hold this run answers"

    detail = web(admin_user).get(f"/remediation/{run.pk}/").content.decode()
    assert "root, in Slurm" in detail
    assert "running jobs are not killed" in detail


def test_the_node_page_lists_requests_with_their_run_or_refusal(sim, look, web, admin_user):
    sim.drain_node("gpu-03", "Action:Frobnicate")
    look()
    look()
    page = web(admin_user).get("/nodes/gpu-03/", follow=True).content.decode()
    assert "Requests from Slurm" in page
    assert "<q>Action:Frobnicate</q>" in page
    assert "refused: unknown request word" in page
    assert "Slurm's reason now: medbay: refused Action:Frobnicate" in page
