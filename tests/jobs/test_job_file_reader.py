"""Reading a job's file as its owner is safe: the real reader, run as a real Unix user.

A job can make its output file anything: a link to /proc/self/environ, a FIFO, a
path through a folder that links to /dev. Each is refused at once, with a sentence,
and nothing is left running. These run the reader through runuser as a throwaway
login account (root only, as CI runs).
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from clusters.backends import job_files
from clusters.backends.base import BackendError, JobFileError
from clusters.backends.job_files import read_tail_as, run_lossless
from clusters.backends.slurm_cli import CommandResult
from tests.unix_processes import processes_using, session_members, settled, unix_user

READER_USER = "medbay-test-reader"


@pytest.fixture(scope="module")
def reader_user():
    with unix_user(READER_USER) as entry:
        yield entry


@pytest.fixture
def job_dir(reader_user):
    """A folder of the reader's user that everyone may enter (pytest's tmp_path is root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="medbay-reader-", dir="/tmp"))
    path.chmod(0o755)
    os.chown(path, reader_user.pw_uid, reader_user.pw_gid)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def owned_file(entry, path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


def refusal(path, max_bytes=4096) -> JobFileError:
    with pytest.raises(JobFileError) as error:
        read_tail_as(READER_USER, str(path), max_bytes)
    return error.value


def test_the_jobs_user_reads_their_regular_file(reader_user, job_dir):
    log = owned_file(reader_user, job_dir / "out.log", b"epoch 1\nepoch 2\n")

    tail = read_tail_as(READER_USER, str(log), 4096)

    assert tail.text == "epoch 1\nepoch 2\n"
    assert not tail.truncated


def test_a_link_to_proc_self_environ_is_refused_and_shows_no_environment(reader_user, job_dir):
    link = job_dir / "out.log"
    os.symlink("/proc/self/environ", link)
    os.lchown(link, reader_user.pw_uid, reader_user.pw_gid)

    error = refusal(link)

    assert error.kind == JobFileError.REFUSED
    assert "is a symbolic link" in error.message
    assert "PATH=" not in error.message


def test_a_fifo_is_refused_at_once_and_leaves_no_process_behind(reader_user, job_dir):
    fifo = job_dir / "out.log"
    os.mkfifo(fifo)
    os.chown(fifo, reader_user.pw_uid, reader_user.pw_gid)
    started = time.monotonic()

    error = refusal(fifo)

    assert time.monotonic() - started < 2
    assert error.kind == JobFileError.REFUSED
    assert "is a named pipe (FIFO), not a regular file" in error.message
    assert settled(lambda: processes_using(str(fifo))) == []


def test_a_device_node_outside_dev_is_refused(reader_user, job_dir):
    device = job_dir / "out.log"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is

    error = refusal(device)

    assert error.kind == JobFileError.REFUSED
    assert "is a character device" in error.message


@pytest.mark.parametrize(
    ("target", "inside"),
    [("/proc", "self/environ"), ("/dev", "zero"), ("/sys", "kernel/uevent_seqnum")],
)
def test_proc_dev_and_sys_are_refused_when_a_linked_folder_hides_them(
    reader_user, job_dir, target, inside
):
    os.symlink(target, job_dir / "logs")
    path = job_dir / "logs" / inside

    error = refusal(path)

    assert error.kind == JobFileError.REFUSED
    assert "Medbay" in error.message
    assert "PATH=" not in error.message
    assert settled(lambda: processes_using(str(path))) == []


def test_no_more_than_max_bytes_come_back_from_a_large_file(reader_user, job_dir):
    lines = b"".join(b"line %06d\n" % number for number in range(200_000))  # 2.2 MB
    log = owned_file(reader_user, job_dir / "out.log", lines)

    tail = read_tail_as(READER_USER, str(log), 100)

    assert tail.truncated
    assert len(tail.text.encode()) <= 100
    assert tail.text.endswith("line 199999\n")


def test_the_reader_program_writes_at_most_the_count_it_was_asked_for(tmp_path):
    log = tmp_path / "out.log"
    log.write_bytes(b"x" * 3_000_000)

    completed = subprocess.run(
        ["/usr/bin/python3", "-I", job_files.READER_PATH],
        input=b"1000\0" + bytes(log),
        capture_output=True,
        timeout=10,
        check=False,
    )

    assert completed.returncode == 0
    assert completed.stdout == b"x" * 1000


def test_the_reader_runs_with_a_minimal_environment_of_its_own(monkeypatch):
    monkeypatch.setenv("PATH", "/opt/portal-only/bin:/usr/bin:/bin")
    monkeypatch.setenv("MEDBAY_SECRET_KEY", "not for researchers")
    seen = []

    def runner(args, *, input_text=None, timeout=None, env=None):
        seen.append(env)
        return CommandResult(tuple(args), 0, "ok\n", "")

    read_tail_as("alice", "/home/alice/out.log", 100, runner=runner, lookup=_alice, euid=lambda: 0)

    assert seen == [{"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}]


def test_a_command_past_its_timeout_is_stopped_with_everything_it_started(tmp_path):
    leader = tmp_path / "leader"
    marker = f"{30 + uuid.uuid4().int % 10_000 / 10_000:.4f}"
    script = f"echo $$ > {leader}; sleep {marker} & sleep {marker}"

    with pytest.raises(BackendError) as error:
        run_lossless(["sh", "-c", script], timeout=0.5)

    assert "timed out" in error.value.message
    assert settled(lambda: session_members(int(leader.read_text()))) == []
    assert settled(lambda: processes_using(marker)) == []


@pytest.mark.django_db
def test_a_refused_file_is_a_sentence_in_the_output_panel_not_a_500(
    reader_user, job_dir, login, researcher, submit_as, synced, sim, monkeypatch
):
    fifo = job_dir / "out.log"
    os.mkfifo(fifo)
    job_id = submit_as(researcher)
    synced(advance=timedelta(hours=1))
    monkeypatch.setattr(
        sim, "read_job_file", lambda user, path, n: read_tail_as(READER_USER, str(fifo), n)
    )

    panel = login(researcher).get(f"/jobs/{job_id}/output/?stream=stdout")

    assert panel.status_code == 200
    assert "is a named pipe (FIFO), not a regular file" in panel.content.decode()


def _alice(name):
    return pwd.struct_passwd(("alice", "x", 1001, 1001, "", "/home/alice", "/bin/sh"))
