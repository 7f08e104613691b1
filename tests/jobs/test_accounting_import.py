"""`import_accounting` stores finished jobs once each, resumes, and ties them to Medbay's jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from clusters.backends import registry
from clusters.backends.base import BackendError
from clusters.backends.slurm_accounting import finished_in
from clusters.backends.slurm_parsers import decode_accounting_json
from jobs.accounting import import_accounting, resume_point
from jobs.models import AccountingImport, AccountingJob, Job

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures/slurm/22.05/accounting"
RECORDS = decode_accounting_json((FIXTURE / "sacct_D_X_alice_bob.json").read_text())
DAY = datetime(2026, 12, 1, tzinfo=UTC)
NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)


class RecordedAccounting:
    """A backend whose accounting holds the recorded sacct page; counts its reads."""

    name = "slurm"

    def __init__(self, records=RECORDS, fail_after: int | None = None):
        self.records = list(records)
        self.reads: list[tuple[datetime, datetime]] = []
        self.fail_after = fail_after

    def finished_jobs(self, start, end):
        if self.fail_after is not None and len(self.reads) >= self.fail_after:
            raise BackendError("slurmdbd: Connection refused", permanent=False)
        self.reads.append((start, end))
        return finished_in(self.records, start, end)


def stored():
    return sorted(AccountingJob.objects.values_list("slurm_id", "state", "account", "gpus"))


def test_it_imports_every_finished_attempt_with_account_qos_and_gpus(cluster):
    result = import_accounting(cluster, RecordedAccounting(), since=DAY, until=NOW)
    assert (result.records, result.windows) == (5, 2)
    assert stored() == [
        (1, "COMPLETED", "vision", 2),
        (2, "FAILED", "nlp", 1),
        (3, "COMPLETED", "vision", 8),
        (3, "REQUEUED", "vision", 8),
        (4, "CANCELLED", "nlp", 8),
    ]
    bob = AccountingJob.objects.get(slurm_id=2)
    assert (bob.user, bob.partition, bob.qos, bob.elapsed_s, bob.exit_code) == (
        "bob", "infer", "high", 2, None,
    )  # fmt: skip


def test_importing_the_same_window_again_stores_nothing_twice(cluster):
    import_accounting(cluster, RecordedAccounting(), since=DAY, until=NOW)
    import_accounting(cluster, RecordedAccounting(), since=DAY, until=NOW)
    assert AccountingJob.objects.count() == 5


def test_a_plain_run_resumes_where_the_last_one_stopped_less_the_overlap(cluster):
    import_accounting(cluster, RecordedAccounting(), since=DAY, until=NOW)
    later = RecordedAccounting()
    import_accounting(cluster, later, until=NOW + timedelta(hours=1))
    assert later.reads == [(NOW - timedelta(minutes=10), NOW + timedelta(hours=1))]
    assert resume_point(cluster) == NOW + timedelta(hours=1) - timedelta(minutes=10)


def test_a_failed_read_keeps_the_windows_before_it_and_the_next_run_continues(cluster):
    with pytest.raises(BackendError):
        import_accounting(
            cluster, RecordedAccounting(fail_after=1), since=DAY - timedelta(days=1), until=NOW
        )
    assert AccountingImport.objects.count() == 1
    assert AccountingJob.objects.count() == 0  # the failed window held every record
    again = RecordedAccounting()
    import_accounting(cluster, again, until=NOW)
    assert again.reads[0][0] == DAY - timedelta(minutes=10)
    assert AccountingJob.objects.count() == 5


def test_the_final_attempt_of_a_requeued_job_counts_its_restarts(cluster):
    import_accounting(cluster, RecordedAccounting(), since=DAY, until=NOW)
    final = AccountingJob.objects.get(slurm_id=3, state="COMPLETED")
    assert final.restarts == 1
    assert AccountingJob.objects.get(slurm_id=3, state="REQUEUED").restarts == 0


def test_restarts_count_requeued_attempts_stored_by_an_earlier_window(cluster):
    requeued = [r for r in RECORDS if r.state == "REQUEUED"]
    rest = [r for r in RECORDS if r.state != "REQUEUED"]
    import_accounting(cluster, RecordedAccounting(requeued), since=DAY, until=NOW)
    import_accounting(cluster, RecordedAccounting(rest), since=DAY, until=NOW)
    assert AccountingJob.objects.get(slurm_id=3, state="COMPLETED").restarts == 1


def test_records_match_medbays_job_by_cluster_id_and_submit_time(cluster):
    # Job 3 as the sync saw it: its first submit time, kept across the requeue.
    first_submit = next(r.submit_time for r in RECORDS if r.state == "REQUEUED")
    three = Job.objects.create(cluster=cluster, slurm_id=3, submit_at=first_submit)
    # Id 1 was reused: the old row is superseded, the current one was submitted later.
    old_one = Job.objects.create(
        cluster=cluster, slurm_id=1, submit_at=DAY + timedelta(hours=1), superseded=True
    )
    Job.objects.create(cluster=cluster, slurm_id=1, submit_at=DAY + timedelta(hours=22))
    # Id 2 is known only from a later job: the record is from before it.
    Job.objects.create(cluster=cluster, slurm_id=2, submit_at=DAY + timedelta(hours=23))
    result = import_accounting(cluster, RecordedAccounting(), since=DAY, until=NOW)
    assert set(AccountingJob.objects.filter(slurm_id=3).values_list("job", flat=True)) == {three.pk}
    assert AccountingJob.objects.get(slurm_id=1).job == old_one
    assert AccountingJob.objects.get(slurm_id=2).job is None
    assert AccountingJob.objects.get(slurm_id=4).job is None  # from before Medbay
    assert result.matched == 3


def test_a_job_seen_without_a_submit_time_matches_when_it_is_the_current_row(cluster):
    current = Job.objects.create(cluster=cluster, slurm_id=4)
    import_accounting(cluster, RecordedAccounting(), since=DAY, until=NOW)
    assert AccountingJob.objects.get(slurm_id=4).job == current


def test_records_of_another_cluster_stay_apart(cluster):
    from clusters.models import Cluster

    other = Cluster.objects.create(name="other")
    import_accounting(cluster, RecordedAccounting(), since=DAY, until=NOW)
    import_accounting(other, RecordedAccounting(), since=DAY, until=NOW)
    assert AccountingJob.objects.filter(cluster=other).count() == 5
    assert AccountingJob.objects.count() == 10


@pytest.fixture
def recorded_backend():
    backend = RecordedAccounting()
    registry.use(backend, fleet=object())
    yield backend
    registry.use(None)


def test_the_command_imports_from_a_date_and_says_what_it_stored(db, recorded_backend, capsys):
    call_command("import_accounting", "--since", "2026-12-01", "--cluster", "medbay")
    out = capsys.readouterr().out
    assert "Imported 5 job attempt(s)" in out
    assert recorded_backend.reads[0][0] == DAY
    assert AccountingJob.objects.filter(cluster__name="medbay").count() == 5


@pytest.mark.parametrize("since", ["yesterday", "2026-13-01", "2999-01-01"])
def test_the_command_refuses_a_bad_since_with_a_clear_message(db, recorded_backend, since):
    with pytest.raises(CommandError, match="--since"):
        call_command("import_accounting", "--since", since, "--cluster", "medbay")
    assert recorded_backend.reads == []


def test_the_command_reports_unreadable_accounting_as_an_error_not_a_traceback(db):
    registry.use(RecordedAccounting(fail_after=0), fleet=object())
    try:
        with pytest.raises(CommandError, match="could not be read: slurmdbd"):
            call_command("import_accounting", "--since", "2026-12-01", "--cluster", "medbay")
    finally:
        registry.use(None)


def test_the_simulator_offers_its_finished_jobs_as_accounting(sim, cluster):
    sim.generate_workload()
    for _ in range(48):
        sim.advance(timedelta(hours=1))
    result = import_accounting(
        cluster, sim, since=sim.now - timedelta(days=3), until=sim.now + timedelta(seconds=1)
    )
    assert result.records > 0
    finished = {job.job_id for job in sim.jobs() if job.end_time is not None}
    assert set(AccountingJob.objects.values_list("slurm_id", flat=True)) <= finished


def test_a_slurmdbd_shared_with_another_cluster_gives_each_cluster_only_its_own_jobs(db):
    from dataclasses import replace

    from clusters.models import Cluster

    ours = Cluster.objects.create(name="ours", slurm_cluster_name="medbay")
    theirs = Cluster.objects.create(name="theirs", slurm_cluster_name="other")
    both = RECORDS + [replace(record, cluster="other", job_id=900 + i) for i, record in
                      enumerate(RECORDS)]  # fmt: skip
    import_accounting(ours, RecordedAccounting(both), since=DAY, until=NOW)
    import_accounting(theirs, RecordedAccounting(both), since=DAY, until=NOW)
    assert {job.slurm_id < 900 for job in AccountingJob.objects.filter(cluster=ours)} == {True}
    assert {job.slurm_id >= 900 for job in AccountingJob.objects.filter(cluster=theirs)} == {True}
    assert AccountingJob.objects.filter(cluster=ours).count() == 5
    assert AccountingJob.objects.filter(cluster=theirs).count() == 5
