""" "Why did my job restart?" built from recorded rows, one test per cause.

The rows are the ones the sync and the engine write: history rows carry Slurm's
restart count and the nodes the job held; a run's acts on a job are its
`RemediationJob` rows.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from clusters.models import Node
from health.models import HealthEvent
from jobs.models import Job, JobProgress, JobStateChange
from remediation.models import Remediation, RemediationJob, RemediationStep

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def at(hh: int, mm: int, ss: int = 0) -> datetime:
    return T0.replace(hour=hh, minute=mm, second=ss)


@pytest.fixture
def job(cluster):
    for name in ("gpu-02", "gpu-03", "gpu-05"):
        Node.objects.create(cluster=cluster, name=name, gpu_count=8)
    job = Job.objects.create(
        cluster=cluster,
        slurm_id=1234,
        name="llm",
        user="alice",
        state="RUNNING",
        node_names=["gpu-03", "gpu-05"],
        node_count=2,
        gpus=16,
        restart_count=0,
        submit_at=at(8, 59),
        start_at=at(10, 7),
    )
    history(job, ("", "PENDING", at(8, 59)), ("PENDING", "RUNNING", at(9, 0)))
    return job


def history(job, *rows, reason="", restarts=0, nodes=("gpu-02", "gpu-03")):
    for from_state, to_state, when in rows:
        JobStateChange.objects.create(
            job=job,
            from_state=from_state,
            to_state=to_state,
            at=when,
            reason=reason,
            restart_count=restarts,
            node_names=list(nodes),
        )


def requeue_and_resume(job, *, reason="requeued (restart 1)", restarts=1):
    Job.objects.filter(pk=job.pk).update(restart_count=restarts)
    history(job, ("RUNNING", "PENDING", at(10, 2)), reason=reason, restarts=restarts)
    history(job, ("PENDING", "RUNNING", at(10, 7)), restarts=restarts, nodes=["gpu-03", "gpu-05"])


def checkpoints(job):
    JobProgress.objects.create(job=job, step=4200, checkpoint_saved=True, reported_at=at(9, 50))
    JobProgress.objects.create(job=job, step=4300, checkpoint_saved=False, reported_at=at(10, 0))


def remediation(job, *, trigger, steps, requested_by=None, action="replace", reason="XID 79"):
    run = Remediation.objects.create(
        node=Node.objects.get(name="gpu-02"),
        action=action,
        trigger=trigger,
        status="succeeded",
        reason=reason,
        context={"replacement": "gpu-05", "grace_s": 120},
        requested_by=requested_by,
        created_at=at(9, 58, 30),
    )
    for effect, when in (("signalled", at(9, 59)), ("requeued", at(10, 1, 30))):
        RemediationJob.objects.create(
            remediation=run, slurm_job_id=job.slurm_id, effect=effect, at=when,
            nodes=["gpu-02", "gpu-03"],
        )  # fmt: skip
    for index, name in enumerate(steps):
        RemediationStep.objects.create(
            remediation=run, index=index, name=name, outcome="succeeded", started_at=at(10, 0)
        )
    return run


def xid_event(node_name="gpu-02", xid=79, gpu=3, when=None):
    when = when or at(9, 58)
    return HealthEvent.objects.create(
        node=Node.objects.get(name=node_name),
        kind="xid",
        xid=xid,
        gpu_index=gpu,
        severity="critical",
        message="GPU has fallen off the bus.",
        observed_at=when,
        last_observed_at=when,
        fold_key=f"{node_name}-{xid}",
    )


def timeline(login, user, slurm_id=1234):
    response = login(user).get(f"/api/v1/jobs/{slurm_id}/timeline/")
    assert response.status_code == 200
    return response.json()


def test_an_xid_driven_restart_is_explained_with_the_gpu_the_spare_and_the_lost_work(
    login, job, researcher
):
    xid_event()
    checkpoints(job)
    run = remediation(
        job,
        trigger="health_event",
        steps=["drain", "signal_jobs", "wait_grace", "requeue_jobs", "replace", "release_jobs"],
    )
    requeue_and_resume(job)

    data = timeline(login, researcher)

    assert data["summary"] == (
        "Job 1234 restarted at 10:02 because GPU 3 on gpu-02 reported XID 79"
        " (GPU has fallen off the bus). Medbay drained gpu-02, signalled the job to"
        " checkpoint, gave the job 120 s to checkpoint, requeued it, replaced gpu-02 with"
        f" spare gpu-05 and released it to start again (run {run.pk}, succeeded)."
        " It resumed at 10:07 from the checkpoint at step 4,200 on gpu-03 and gpu-05."
        " Time lost: 9 min 0 s, from the fault to running again."
        " Estimated lost work: 3.1 GPU-hours."
    )
    restart = data["restarts"][0]
    assert restart["cause"] == "xid_remediation"
    assert (restart["xid"], restart["gpu"], restart["node"]) == (79, 3, "gpu-02")
    assert (restart["run"], restart["replacement"]) == (run.pk, "gpu-05")
    assert restart["resumed_from_step"] == 4200
    assert restart["time_lost_s"] == 540
    # 16 GPUs from the 9:50 checkpoint to the requeue at 10:01:30.
    assert restart["lost_gpu_hours"] == 3.07


def test_the_events_are_merged_in_time_order(login, job, researcher):
    xid_event()
    checkpoints(job)
    remediation(job, trigger="health_event", steps=["drain", "requeue_jobs"])
    requeue_and_resume(job)

    events = timeline(login, researcher)["events"]

    kinds = [event["kind"] for event in events]
    assert kinds == [
        "state", "state", "checkpoint", "health", "remediation", "step", "step", "state", "state",
    ]  # fmt: skip
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)
    assert events[3]["title"] == "gpu-02: XID 79: GPU has fallen off the bus"


def test_a_run_appears_only_on_the_jobs_it_acted_on(login, job, researcher, cluster):
    """A run on a node the job later used, or used at the same time, is not its story."""
    other = Job.objects.create(
        cluster=cluster, slurm_id=1300, user="alice", state="RUNNING", node_names=["gpu-02"],
        start_at=at(9, 0),
    )  # fmt: skip
    history(other, ("", "RUNNING", at(9, 0)), nodes=["gpu-02"])
    run = remediation(job, trigger="health_event", steps=["drain", "requeue_jobs"])
    requeue_and_resume(job)

    mine = timeline(login, researcher)["events"]
    theirs = timeline(login, researcher, slurm_id=1300)["events"]

    assert {e["run"] for e in mine if e["run"]} == {run.pk}
    assert [e for e in theirs if e["run"]] == []


def test_the_run_stays_on_the_job_after_it_moved_to_other_nodes(login, job, researcher):
    xid_event()
    remediation(job, trigger="health_event", steps=["drain", "requeue_jobs", "replace"])
    requeue_and_resume(job)
    Job.objects.filter(pk=job.pk).update(node_names=["gpu-03", "gpu-05"])

    data = timeline(login, researcher)

    assert data["restarts"][0]["cause"] == "xid_remediation"
    assert "XID 79" in data["summary"] and "replaced gpu-02 with spare gpu-05" in data["summary"]


def test_an_admin_action_is_told_apart_from_an_xid_and_names_the_admin_once(
    login, job, researcher, admin_user
):
    admin_user.first_name, admin_user.last_name = "Ada", "Lovelace"
    admin_user.save()
    run = remediation(
        job,
        trigger="admin",
        requested_by=admin_user,
        action="drain",
        reason="firmware update",
        steps=["drain", "requeue_jobs"],
    )
    requeue_and_resume(job)

    data = timeline(login, researcher)

    assert data["restarts"][0]["cause"] == "admin_action"
    assert data["summary"] == (
        "Job 1234 restarted at 10:02 because Ada Lovelace asked Medbay to drain gpu-02"
        f" (firmware update). Medbay drained gpu-02 and requeued it (run {run.pk}, succeeded)."
        " It resumed at 10:07 on gpu-03 and gpu-05."
        " Time lost: 8 min 30 s, from Medbay's action to running again."
    )


def test_a_preemption_is_explained_as_such(login, job, researcher):
    Job.objects.filter(pk=job.pk).update(restart_count=1)
    history(job, ("RUNNING", "PREEMPTED", at(10, 2)), reason="Preempted")
    history(job, ("PREEMPTED", "PENDING", at(10, 2)), reason="requeued (restart 1)", restarts=1)
    history(job, ("PENDING", "RUNNING", at(10, 7)), restarts=1)

    data = timeline(login, researcher)

    assert data["restarts"][0]["cause"] == "preemption"
    assert data["summary"] == (
        "Job 1234 restarted at 10:02 because Slurm preempted it for a higher-priority job."
        " It resumed at 10:07 on gpu-02 and gpu-03."
    )


def test_the_jobs_own_failure_is_explained_with_lost_work_since_the_checkpoint(
    login, job, researcher
):
    checkpoints(job)
    Job.objects.filter(pk=job.pk).update(restart_count=1, exit_code=1)
    history(job, ("RUNNING", "FAILED", at(10, 2)), reason="NonZeroExitCode")
    history(job, ("FAILED", "PENDING", at(10, 2)), reason="requeued (restart 1)", restarts=1)
    history(job, ("PENDING", "RUNNING", at(10, 7)), restarts=1)

    data = timeline(login, researcher)

    assert data["restarts"][0]["cause"] == "job_failure"
    assert (
        "because the job itself failed (exit code 1) and Slurm requeued it,"
        " as its RequeueExit setting asks" in data["summary"]
    )
    assert "Estimated lost work: 3.2 GPU-hours." in data["summary"]


def test_a_node_failure_outside_medbay_names_the_node(login, job, researcher):
    from clusters.models import NodeStateChange

    NodeStateChange.objects.create(
        node=Node.objects.get(name="gpu-02"), from_status="allocated", to_status="down",
        reason="Not responding", at=at(10, 1),
    )  # fmt: skip
    requeue_and_resume(job)

    data = timeline(login, researcher)

    assert data["restarts"][0]["cause"] == "node_failure"
    assert data["summary"].startswith(
        "Job 1234 restarted at 10:02 because gpu-02 (Not responding) failed under it and"
        " Slurm requeued it; Medbay had no remediation running for that node."
    )


def test_a_plain_scontrol_requeue_is_not_called_unknown(login, job, researcher):
    requeue_and_resume(job)

    data = timeline(login, researcher)

    assert data["restarts"][0]["cause"] == "manual_requeue"
    assert "someone requeued it with scontrol requeue" in data["summary"]


def test_unknown_is_said_only_when_nothing_was_recorded(login, job, researcher):
    Job.objects.filter(pk=job.pk).update(restart_count=1, state="PENDING")
    history(job, ("PENDING", "PENDING", at(10, 2)), reason="BeginTime", restarts=1)

    data = timeline(login, researcher)

    assert data["restarts"][0]["cause"] == "unknown"
    assert "nothing recorded says why" in data["summary"]
    assert "It is not running again yet." in data["summary"]


def test_a_job_that_never_restarted_says_so(login, job, researcher):
    data = timeline(login, researcher)

    assert data["summary"] == "Job 1234 has not restarted; it is running."
    assert data["restarts"] == []


def test_a_requeue_through_completing_is_one_restart_as_slurm_counts(login, job, researcher):
    Job.objects.filter(pk=job.pk).update(restart_count=1)
    history(job, ("RUNNING", "PENDING", at(10, 2)), reason="requeued (restart 1)", restarts=1)
    history(job, ("PENDING", "COMPLETING", at(10, 2, 2)), restarts=1)
    history(job, ("COMPLETING", "PENDING", at(10, 2, 4)), restarts=1)
    history(job, ("PENDING", "RUNNING", at(10, 7)), restarts=1)

    data = timeline(login, researcher)

    assert len(data["restarts"]) == 1
    assert not data["summary"].startswith("Job 1234 restarted 2 times")


def test_several_restarts_are_counted_and_the_lost_work_added_up(login, job, researcher):
    checkpoints(job)
    requeue_and_resume(job)
    Job.objects.filter(pk=job.pk).update(restart_count=2)
    history(job, ("RUNNING", "PENDING", at(10, 30)), reason="requeued (restart 2)", restarts=2)
    history(job, ("PENDING", "RUNNING", at(10, 35)), restarts=2)

    summary = timeline(login, researcher)["summary"]

    assert summary.startswith("Job 1234 restarted 2 times. The latest: Job 1234 restarted at 10:30")
    # 16 GPUs: 12 min since the checkpoint, then 23 min since the second attempt began.
    assert summary.endswith("In all about 9.3 GPU-hours were lost.")


def test_restarts_before_medbay_watched_are_counted_as_slurm_counts(login, job, researcher):
    Job.objects.filter(pk=job.pk).update(restart_count=3)

    summary = timeline(login, researcher)["summary"]

    assert summary == (
        "Job 1234 restarted 3 times before Medbay watched it; nothing recorded says why."
    )


def test_the_job_page_shows_the_summary(login, job, researcher):
    requeue_and_resume(job)

    page = login(researcher).get("/jobs/1234/", follow=True).content.decode()

    assert "Job 1234 restarted at 10:02 because someone requeued it" in page


def test_another_researcher_cannot_read_the_timeline(login, job, other_researcher):
    response = login(other_researcher).get("/api/v1/jobs/1234/timeline/")

    assert response.status_code == 404


def test_the_checkpoint_saved_as_the_requeue_stopped_the_job_is_the_one_it_resumed_from(
    login, job, researcher
):
    xid_event()
    checkpoints(job)  # 4,200 saved at 9:50
    remediation(job, trigger="health_event", steps=["drain", "requeue_jobs"])  # requeue 10:01:30
    # TERM on requeue: the trainer saves once more, a moment after Medbay's requeue.
    JobProgress.objects.create(job=job, step=4310, checkpoint_saved=True, reported_at=at(10, 1, 31))
    requeue_and_resume(job)
    # The next attempt's own save does not count as where it resumed from.
    JobProgress.objects.create(
        job=job, step=4400, checkpoint_saved=True, restart_count=1, reported_at=at(10, 6, 59)
    )

    restart = timeline(login, researcher)["restarts"][0]

    assert restart["resumed_from_step"] == 4310
    assert restart["lost_gpu_hours"] == 0
    assert "No work was lost: it saved a checkpoint as it was stopped." in restart["explanation"]


def test_the_queue_shows_the_same_lost_work_as_the_story(login, job, researcher):
    xid_event()
    checkpoints(job)
    remediation(job, trigger="health_event", steps=["drain", "requeue_jobs"])
    requeue_and_resume(job)
    story = timeline(login, researcher)["restarts"][0]["lost_gpu_hours"]

    page = login(researcher).get("/jobs/").content.decode()

    row = page[page.index('<tr id="job-1234"') :].split("</tr>")[0]
    assert f'<td class="lost-work">{story:.2f}</td>' in row


def test_lost_work_for_a_page_of_jobs_takes_the_same_queries_for_one_or_many(
    cluster, django_assert_num_queries
):
    from jobs.timeline import lost_gpu_hours_by_job

    def restarted_jobs(first: int, count: int) -> list:
        rows = []
        for slurm_id in range(first, first + count):
            row = Job.objects.create(
                cluster=cluster, slurm_id=slurm_id, state="RUNNING", gpus=8, restart_count=1
            )
            history(row, ("", "RUNNING", at(9, 0)))
            history(row, ("RUNNING", "PENDING", at(10, 0)), restarts=1)
            JobProgress.objects.create(
                job=row, step=1, checkpoint_saved=True, reported_at=at(9, 30)
            )
            rows.append(row)
        return rows

    one, many = restarted_jobs(5000, 1), restarted_jobs(6000, 20)
    with django_assert_num_queries(3):
        assert lost_gpu_hours_by_job(one) == {one[0].pk: 4.0}  # 8 GPUs × 30 min
    with django_assert_num_queries(3):
        assert set(lost_gpu_hours_by_job(many).values()) == {4.0}


def test_a_run_on_an_earlier_job_with_the_same_id_is_not_this_jobs(login, job, researcher):
    """Slurm reuses ids: a run that acted on job 1234 a month ago acted on another job."""
    from datetime import timedelta

    run = remediation(job, trigger="health_event", steps=["drain", "requeue_jobs"])
    RemediationJob.objects.filter(remediation=run).update(at=at(8, 0) - timedelta(days=30))

    events = timeline(login, researcher)["events"]

    assert [e for e in events if e["run"]] == []


def test_a_requeued_job_waiting_to_start_again_shows_when_it_first_started(login, job, researcher):
    Job.objects.filter(pk=job.pk).update(state="PENDING", start_at=None, restart_count=1)
    history(job, ("RUNNING", "PENDING", at(10, 2)), restarts=1)

    page = login(researcher).get("/jobs/1234/", follow=True).content.decode()

    assert "waiting to start again" in page
    assert "<dt>First started</dt><dd>2026-03-01 09:00:00</dd>" in page


def test_the_grace_named_is_the_grace_the_run_used_even_when_it_was_none(login, job, researcher):
    xid_event()
    run = remediation(job, trigger="health_event", steps=["signal_jobs", "wait_grace"])
    run.context = {"replacement": "gpu-05", "grace_used_s": 0}
    run.save()
    requeue_and_resume(job)

    summary = timeline(login, researcher)["summary"]

    assert "gave the job 0 s to checkpoint" in summary
    assert "120 s" not in summary


def test_an_older_run_names_the_grace_its_step_reported(login, job, researcher):
    xid_event()
    run = remediation(job, trigger="health_event", steps=["wait_grace"])
    run.context = {"replacement": "gpu-05"}
    run.save()
    RemediationStep.objects.filter(remediation=run).update(message="grace of 0s over")
    requeue_and_resume(job)

    assert "gave the job 0 s to checkpoint" in timeline(login, researcher)["summary"]


def test_a_run_still_going_after_the_job_moved_on_is_not_cited_as_what_the_job_waits_for(
    login, job, researcher
):
    xid_event()
    run = remediation(job, trigger="health_event", steps=["drain", "requeue_jobs"])
    Remediation.objects.filter(pk=run.pk).update(status="waiting")
    requeue_and_resume(job)

    summary = timeline(login, researcher)["summary"]

    assert f"(run {run.pk} is still waiting on gpu-02; the job did not wait for it)" in summary
    assert f"(run {run.pk}, waiting)" not in summary
    assert "It resumed at 10:07" in summary


def test_a_requeue_recorded_as_after_a_node_fault_is_not_told_as_a_manual_requeue(
    login, job, researcher
):
    requeue_and_resume(job, reason="requeued after a node fault")

    data = timeline(login, researcher)

    assert data["restarts"][0]["cause"] == "node_failure"
    assert "scontrol requeue" not in data["summary"]
    assert "no fault was recorded" not in data["summary"]


def test_a_finished_jobs_nodes_come_from_its_history_or_say_they_were_not_recorded(
    login, job, researcher, cluster
):
    Job.objects.filter(pk=job.pk).update(state="COMPLETED", node_names=[], end_at=at(11, 0))
    other = Job.objects.create(
        cluster=cluster, slurm_id=99, user="alice", state="COMPLETED", node_count=4, gpus=32
    )
    history(other, ("RUNNING", "COMPLETED", at(10, 0)), nodes=())
    client = login(researcher)

    from_history = client.get("/jobs/1234/", follow=True).content.decode()
    unrecorded = client.get("/jobs/99/", follow=True).content.decode()

    nodes = '<a href="/nodes/test/gpu-02/">gpu-02</a>, <a href="/nodes/test/gpu-03/">'
    assert f'<dd id="job-nodes">{nodes}' in from_history
    assert '<dd id="job-nodes">4 (which ones was not recorded)</dd>' in unrecorded


def test_a_job_without_its_own_time_limit_shows_the_partitions(login, job, researcher, cluster):
    from clusters.models import Partition

    Partition.objects.create(cluster=cluster, name="train", max_time_minutes=7 * 24 * 60)
    Job.objects.filter(pk=job.pk).update(partition="train", time_limit_minutes=None)

    page = login(researcher).get("/jobs/1234/", follow=True).content.decode()

    assert "<dt>Time limit</dt><dd>7 d (the partition's)</dd>" in page


def test_lost_work_is_given_in_gpu_hours(login, job, researcher):
    checkpoints(job)
    requeue_and_resume(job)

    page = login(researcher).get("/jobs/1234/", follow=True).content.decode()

    assert "<th>Lost work (GPU-h)</th>" in page


def test_a_running_row_seen_after_slurms_start_says_when_slurm_started_it(login, job, researcher):
    # The fixture's job: the sync saw it RUNNING at 09:00, Slurm says it started at 10:07.
    page = login(researcher).get("/jobs/1234/", follow=True).content.decode()

    assert "PENDING → RUNNING" in page
    assert "; Slurm started it at 10:07:00" in page
    assert "<dt>Started</dt><dd>2026-03-01 10:07:00</dd>" in page


def test_progress_reports_number_attempts_from_one(login, job, researcher):
    JobProgress.objects.create(job=job, step=10, checkpoint_saved=True, reported_at=at(9, 30))
    JobProgress.objects.create(
        job=job, step=20, checkpoint_saved=True, reported_at=at(10, 30), restart_count=1
    )

    page = login(researcher).get("/jobs/1234/", follow=True).content.decode()

    assert "<td>10</td><td>saved</td><td>1</td>" in page
    assert "<td>20</td><td>saved</td><td>2</td>" in page
