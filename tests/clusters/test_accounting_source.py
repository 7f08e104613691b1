"""The accounting source reads real `sacct --json` of 22.05 and 24.11 (tests/fixtures/slurm)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from clusters.backends import slurm_parsers as parsers
from clusters.backends.base import BackendError
from clusters.backends.slurm import SlurmBackend
from tests.clusters.test_slurm_backend import FakeSlurm

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
ALICE_BOB = "22.05/accounting/sacct_D_X_alice_bob.json"


def read(relative: str) -> str:
    return (FIXTURES / relative).read_text()


def utc(*parts):
    return datetime(*parts, tzinfo=UTC)


def attempts(records):
    return {(record.job_id, record.state): record for record in records}


def test_2205_records_carry_account_user_partition_qos_and_allocated_gpus():
    records = attempts(parsers.decode_accounting_json(read(ALICE_BOB)))
    alice = records[(1, "COMPLETED")]
    assert (alice.cluster, alice.user, alice.account, alice.partition, alice.qos) == (
        "medbay", "alice", "vision", "train", "normal",
    )  # fmt: skip
    assert (alice.gpus, alice.elapsed_s, alice.exit_code) == (2, 3, 0)
    assert alice.submit_time == utc(2026, 12, 1, 19, 31, 4)
    assert alice.end_time == utc(2026, 12, 1, 19, 31, 7)
    bob = records[(2, "FAILED")]
    assert (bob.user, bob.account, bob.partition, bob.qos, bob.gpus) == (
        "bob", "nlp", "infer", "high", 1,
    )  # fmt: skip


def test_2205_failed_jobs_exit_code_is_unknown_since_its_json_always_says_success():
    # The job ran `exit 3`; sacct's text says 3:0, its 22.05 JSON SUCCESS/0.
    assert "|FAILED|3:0|" in read("22.05/accounting/sacct_D_X_alice_bob.txt")
    records = attempts(parsers.decode_accounting_json(read(ALICE_BOB)))
    assert records[(2, "FAILED")].exit_code is None
    assert records[(4, "CANCELLED")].exit_code is None


def test_2205_lists_each_attempt_of_a_requeued_job_with_its_own_submit_time():
    records = attempts(parsers.decode_accounting_json(read(ALICE_BOB)))
    first, final = records[(3, "REQUEUED")], records[(3, "COMPLETED")]
    assert first.submit_time < final.submit_time
    assert (first.elapsed_s, final.elapsed_s) == (4, 30)
    assert first.nodes == final.nodes == ("gpu-01", "gpu-02")
    assert first.gpus == final.gpus == 8
    # 22.05 keeps no restart count in accounting: the importer works it out.
    assert final.restart_count is None


def test_2411_records_read_state_arrays_number_objects_and_restart_counts():
    records = parsers.decode_accounting_json(read("24.11/requeue/sacct_job5_duplicates.json"))
    requeued, later = sorted(records, key=lambda record: record.submit_time)
    assert requeued.state == "REQUEUED" and requeued.restart_count == 0
    assert later.restart_count == 1
    finished = attempts(parsers.decode_accounting_json(read("24.11/sacct_all.json")))
    assert finished[(2, "FAILED")].exit_code == 3
    assert finished[(13, "TIMEOUT")].elapsed_s == 89
    # Cancelled while pending: never ran, so no start and no allocated GPUs.
    assert finished[(9, "PENDING")].start_time is None
    assert finished[(9, "PENDING")].gpus == 0


def test_decoded_and_already_parsed_documents_give_the_same_records():
    import json

    text = read(ALICE_BOB)
    assert parsers.parse_accounting_json(json.loads(text)) == parsers.decode_accounting_json(text)


def test_an_empty_window_is_no_records_and_no_error():
    text = read("22.05/accounting/sacct_nothing_found.json")
    assert parsers.accounting_errors(text) == []
    assert parsers.decode_accounting_json(text) == []


def test_invalid_json_is_a_clear_parse_error():
    with pytest.raises(parsers.AccountingParseError, match="invalid JSON"):
        parsers.decode_accounting_json("sacct: error: something")


def backend(answers, **options):
    return SlurmBackend("/etc/test/slurm.conf", runner=FakeSlurm(answers), **options)


def test_finished_jobs_asks_sacct_for_every_attempt_of_every_user_in_local_time():
    fake = FakeSlurm({("sacct",): (0, read(ALICE_BOB), "")})
    slurm = SlurmBackend("/etc/test/slurm.conf", runner=fake, local_tz=timezone(timedelta(hours=2)))
    slurm.finished_jobs(utc(2026, 12, 1), utc(2026, 12, 2))
    (args,) = fake.commands()
    assert args[:5] == ["sacct", "--json", "--allusers", "--duplicates", "--allocations"]
    assert args[5:] == ["--starttime", "2026-12-01T02:00:00", "--endtime", "2026-12-02T02:00:00"]
    assert fake.calls[-1]["env"]["SLURM_CONF"] == "/etc/test/slurm.conf"


def test_finished_jobs_keeps_only_attempts_that_ended_in_the_window():
    slurm = backend({("sacct",): (0, read(ALICE_BOB), "")})
    # 19:32:53 is the end of job 3's requeued attempt; job 3's final attempt ends 19:33:32.
    kept = slurm.finished_jobs(utc(2026, 12, 1, 19, 32, 0), utc(2026, 12, 1, 19, 33, 30))
    assert sorted((record.job_id, record.state) for record in kept) == [
        (3, "REQUEUED"),
        (4, "CANCELLED"),
    ]


def test_finished_jobs_leaves_out_attempts_still_running():
    slurm = backend({("sacct",): (0, read("24.11/sacct_all.json"), "")})
    kept = slurm.finished_jobs(utc(2026, 11, 29), utc(2026, 11, 30))
    assert {record.state for record in kept} <= {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
    assert {record.job_id for record in kept} == {1, 2, 5, 7, 13}


def test_a_cluster_without_accounting_is_a_permanent_error():
    slurm = backend({("sacct",): (1, "", "sacct: error: Slurm accounting storage is disabled")})
    with pytest.raises(BackendError, match="accounting storage is disabled") as raised:
        slurm.finished_jobs(utc(2026, 12, 1), utc(2026, 12, 2))
    assert raised.value.permanent


def test_slurmdbd_down_is_a_transient_error():
    slurm = backend(
        {("sacct",): (1, "", "sacct: error: Problem talking to the database: Connection refused")}
    )
    with pytest.raises(BackendError) as raised:
        slurm.finished_jobs(utc(2026, 12, 1), utc(2026, 12, 2))
    assert not raised.value.permanent
