"""Finding a job's output files and reading their end as the job's Unix user (no HTTP)."""

from __future__ import annotations

import pwd
from datetime import timedelta

import pytest

from clusters.backends import job_file_reader
from clusters.backends.base import JobFileError
from clusters.backends.job_files import (
    READER_PATH,
    expand_output_pattern,
    output_paths_from_record,
    read_tail_as,
)
from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm_cli import CommandResult


def account(name: str, uid: int) -> pwd.struct_passwd:
    return pwd.struct_passwd((name, "x", uid, uid, "", f"/home/{name}", "/bin/sh"))


ACCOUNTS = {
    "alice": account("alice", 1001),
    "daemon": account("daemon", 1),
    "root": account("root", 0),
}


def lookup(name: str) -> pwd.struct_passwd:
    return ACCOUNTS[name]


class FakeRunner:
    """Records each command and answers with the given exit status and output."""

    def __init__(self, returncode=0, stdout="", stderr=""):
        self.calls = []
        self.inputs = []
        self.answer = (returncode, stdout, stderr)

    def __call__(self, args, *, input_text=None, timeout=None, env=None):
        self.calls.append(list(args))
        self.inputs.append(input_text)
        return CommandResult(tuple(args), *self.answer)


def read(user="alice", path="/home/alice/out.log", max_bytes=100, runner=None, euid=0):
    return read_tail_as(
        user, path, max_bytes, runner=runner or FakeRunner(), euid=lambda: euid, lookup=lookup
    )


# ------------------------------------------------------------------ patterns


def test_job_id_user_and_name_patterns_are_expanded():
    path = expand_output_pattern("/scratch/%u/%x-%j.out", job_id=12, user="alice", name="resnet")

    assert path == "/scratch/alice/resnet-12.out"


def test_a_relative_pattern_is_the_workdirs():
    assert (
        expand_output_pattern("slurm-%j.out", job_id=7, workdir="/home/a") == "/home/a/slurm-7.out"
    )


def test_array_patterns_and_zero_padding_follow_sbatch():
    path = expand_output_pattern("/o/%A_%3a.out", job_id=101, array_job_id=100, array_task_id=1)

    assert path == "/o/100_001.out"


def test_a_job_outside_an_array_gets_slurms_no_val_for_the_task_id():
    assert expand_output_pattern("/o/%A-%a", job_id=5) == "/o/5-4294967294"


def test_a_double_percent_is_a_literal_percent_and_unknown_patterns_stay():
    assert expand_output_pattern("/o/100%%-%s-%N", job_id=5) == "/o/100%-%s-%N"


def test_a_backslash_turns_expansion_off():
    assert expand_output_pattern("/o/\\%j.out", job_id=5) == "/o/%j.out"


def test_scontrol_record_paths_are_expanded_and_stderr_defaults_to_stdout():
    record = {
        "JobId": "9",
        "JobName": "my job",
        "UserId": "alice(1001)",
        "WorkDir": "/tmp/w",
        "BatchHost": "gpu-01",
        "StdOut": "/tmp/w/my job-9.%N.out",
    }

    paths = output_paths_from_record(record, 9)

    assert paths.stdout == paths.stderr == "/tmp/w/my job-9.gpu-01.out"
    assert paths.user == "alice"


def test_slurm_backend_reads_paths_from_scontrol_show_job():
    line = (
        "JobId=41 JobName=train UserId=alice(1001) GroupId=alice(1001) JobState=RUNNING "
        "WorkDir=/home/alice StdErr=/home/alice/err-41.%N StdIn=/dev/null "
        "StdOut=/home/alice/train-41.out BatchHost=gpu-02\n"
    )
    runner = FakeRunner(stdout=line)

    paths = SlurmBackend("/etc/slurm.conf", runner=runner).job_output_paths(41)

    assert runner.calls == [["scontrol", "-o", "show", "job", "41"]]
    assert (paths.stdout, paths.stderr) == ("/home/alice/train-41.out", "/home/alice/err-41.gpu-02")


# ------------------------------------------------------------------ reading


def test_as_root_the_reader_runs_with_runuser_as_the_jobs_user_and_gets_the_path_on_stdin():
    runner = FakeRunner(stdout="step 1\nstep 2\n")

    tail = read(runner=runner, euid=0)

    assert runner.calls == [["runuser", "-u", "alice", "--", "/usr/bin/python3", "-I", READER_PATH]]
    assert runner.inputs == ["101\0/home/alice/out.log"]
    assert tail.text == "step 1\nstep 2\n"
    assert not tail.truncated


def test_not_as_root_the_reader_runs_with_sudo_exactly_as_the_sudoers_file_allows():
    runner = FakeRunner(stdout="ok\n")

    read(runner=runner, euid=999)

    assert runner.calls == [
        ["sudo", "-n", "-u", "alice", "--", "/usr/bin/python3", "-I", READER_PATH]
    ]


def test_the_tail_is_capped_at_max_bytes_and_starts_at_a_whole_line():
    runner = FakeRunner(stdout="partial line\n" + "x" * 20 + "\n")

    tail = read(runner=runner, max_bytes=25)

    assert tail.truncated
    assert tail.text == "x" * 20 + "\n"


def test_a_missing_file_says_so():
    runner = FakeRunner(job_file_reader.EXIT_MISSING, stderr="/home/alice/out.log does not exist.")

    with pytest.raises(JobFileError) as error:
        read(runner=runner)

    assert error.value.kind == JobFileError.MISSING
    assert "does not exist" in error.value.message


def test_a_file_the_user_may_not_read_says_permission_denied():
    runner = FakeRunner(job_file_reader.EXIT_DENIED, stderr="/home/bob/x: permission denied.")

    with pytest.raises(JobFileError) as error:
        read(path="/home/bob/x", runner=runner)

    assert error.value.kind == JobFileError.DENIED
    assert "alice may not read /home/bob/x (permission denied)" in error.value.message


@pytest.mark.parametrize("user", ["root", "daemon"])
def test_system_accounts_are_refused_before_running_anything(user):
    runner = FakeRunner()

    with pytest.raises(JobFileError) as error:
        read(user=user, runner=runner)

    assert error.value.kind == JobFileError.REFUSED
    assert "system account" in error.value.message
    assert runner.calls == []


@pytest.mark.parametrize("user", ["carol", "", "-alice", "al ice"])
def test_a_user_that_does_not_exist_says_so(user):
    with pytest.raises(JobFileError) as error:
        read(user=user)

    assert error.value.kind == JobFileError.NO_USER


@pytest.mark.parametrize(
    "path", ["/dev/zero", "/tmp/../proc/self/environ", "relative.out", "/a\x00b"]
)
def test_devices_proc_relative_and_nul_paths_are_not_read(path):
    runner = FakeRunner()

    with pytest.raises(JobFileError):
        read(path=path, runner=runner)

    assert runner.calls == []


def test_output_sent_to_dev_null_says_it_is_discarded():
    with pytest.raises(JobFileError) as error:
        read(path="/dev/null")

    assert error.value.kind == JobFileError.DISCARDED


def test_sudo_refusing_is_reported_in_words():
    runner = FakeRunner(1, stderr="sudo: a password is required")

    with pytest.raises(JobFileError) as error:
        read(runner=runner, euid=999)

    assert "could not run a command as alice" in error.value.message


def test_when_the_portal_is_the_jobs_user_it_runs_the_reader_itself(tmp_path):
    log = tmp_path / "out.log"
    log.write_bytes(b"first\n" + "é".encode() * 3 + b"\n")

    tail = read_tail_as("alice", str(log), 1000, euid=lambda: 1001, lookup=lookup)

    assert tail.text == "first\nééé\n"


def test_the_readers_refusal_is_passed_on_in_its_own_words():
    runner = FakeRunner(
        job_file_reader.EXIT_REFUSED,
        stderr="/home/alice/out.log is a named pipe (FIFO), not a regular file.\n",
    )

    with pytest.raises(JobFileError) as error:
        read(runner=runner)

    assert error.value.kind == JobFileError.REFUSED
    assert error.value.message.startswith("/home/alice/out.log is a named pipe (FIFO)")


# ------------------------------------------------------------------ the simulator


def test_the_simulator_shows_made_up_output_once_a_job_has_started(sim):
    job_id = sim.submit_job(_submission("alice"))
    paths = sim.job_output_paths(job_id)

    with pytest.raises(JobFileError):
        sim.read_job_file("alice", paths.stdout, 4096)
    sim.advance(timedelta(hours=1))
    tail = sim.read_job_file("alice", paths.stdout, 4096)

    assert paths.stdout == f"/home/alice/resnet-{job_id}.out"
    assert f"job {job_id} (resnet)" in tail.text
    assert "loss" in tail.text


def test_the_simulator_never_reads_another_users_file(sim):
    job_id = sim.submit_job(_submission("alice"))
    sim.advance(timedelta(hours=1))

    with pytest.raises(JobFileError):
        sim.read_job_file("bob", sim.job_output_paths(job_id).stdout, 4096)


def _submission(user):
    from clusters.backends.base import JobSubmission

    script = (
        "#!/bin/bash\n#SBATCH --job-name=resnet\n#SBATCH --partition=train\n"
        "#SBATCH --output=%x-%j.out\n#SBATCH --chdir=/home/alice\npython train.py\n"
    )
    return JobSubmission(script=script, user=user)
