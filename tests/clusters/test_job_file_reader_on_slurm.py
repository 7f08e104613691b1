"""Reading a real job's output as its owner is safe, as root and as a non-root portal.

Jobs on the real local Slurm turn their own output file into a link to
/proc/self/environ or a FIFO; the portal refuses both at once and leaves nothing
running. The non-root set-up is the documented one: deploy/sudoers.medbay,
installed with only its names adjusted, and the portal code run as an
unprivileged service account that reads through `sudo -n`.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from clusters.backends import job_file_reader
from clusters.backends.base import JobFileError, JobSubmission
from clusters.backends.job_files import READER_PATH, READER_PYTHON
from tests.plugins.slurm_cluster import REPO
from tests.unix_processes import processes_using, settled, unix_user
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions, pytest.mark.integration]

SERVICE_USER = "medbay-test-svc"
RESEARCHERS = "medbay-test-researchers"
SUDOERS_INSTALLED = Path("/etc/sudoers.d/medbay-test")
# The portal's own code, run as the service account: it has no Django here, only
# the backends, which are plain Python.
PORTAL_READS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from clusters.backends.base import JobFileError
from clusters.backends.job_files import read_tail_as
try:
    tail = read_tail_as(sys.argv[2], sys.argv[3], 4096)
    print(json.dumps({"text": tail.text}))
except JobFileError as error:
    print(json.dumps({"kind": error.kind, "message": error.message}))
"""


@pytest.fixture
def private_dir():
    """A folder only its user may enter (0700), one per user asked for."""
    made = []

    def make(user: str) -> Path:
        entry = pwd.getpwnam(user)
        path = Path("/tmp") / f"medbay-reader-{user}-{uuid.uuid4().hex[:8]}"
        path.mkdir(mode=0o700)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        made.append(path)
        return path

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def finished_job_output(slurm, user: str, folder: Path, body: str) -> str:
    """Runs BODY as USER's batch job (with $out its output file) to the end; its path."""
    script = (
        "#!/bin/sh\n"
        f"#SBATCH --output={folder}/reader-%j.out\n"
        "#SBATCH --job-name=medbay-reader\n"
        f'out="{folder}/reader-$SLURM_JOB_ID.out"\n'
        f"{body}\n"
    )
    job_id = slurm.submit_job(JobSubmission(script=script, user=user, workdir="/tmp"))
    path = slurm.job_output_paths(job_id).stdout
    wait_for(lambda: slurm.job(job_id).state == "COMPLETED", 60, f"job {job_id} to complete")
    return path


# ------------------------------------------------------------------ as root (runuser)


def test_a_job_that_swaps_its_output_for_a_link_to_proc_self_environ_is_refused(slurm, private_dir):
    path = finished_job_output(
        slurm, "alice", private_dir("alice"), 'echo secret; ln -sf /proc/self/environ "$out"'
    )

    with pytest.raises(JobFileError) as error:
        slurm.read_job_file("alice", path, 4096)

    assert Path(path).is_symlink()
    assert error.value.kind == JobFileError.REFUSED
    assert "is a symbolic link" in error.value.message
    assert "PATH=" not in error.value.message


def test_a_job_that_makes_its_output_a_fifo_is_refused_at_once_leaving_nothing_running(
    slurm, private_dir
):
    path = finished_job_output(slurm, "alice", private_dir("alice"), 'rm -f "$out"; mkfifo "$out"')
    started = time.monotonic()

    with pytest.raises(JobFileError) as error:
        slurm.read_job_file("alice", path, 4096)

    assert time.monotonic() - started < 2
    assert error.value.kind == JobFileError.REFUSED
    assert "named pipe (FIFO)" in error.value.message
    assert settled(lambda: processes_using(path)) == []


# ------------------------------------------------------------------ as a non-root portal (sudo)


@pytest.fixture(scope="module")
def sudo_portal(minicluster):
    """deploy/sudoers.medbay installed for SERVICE_USER and RESEARCHERS (alice alone)."""
    ensure_sudo()
    run(["groupadd", "-f", RESEARCHERS])
    run(["gpasswd", "-a", "alice", RESEARCHERS])
    try:
        with unix_user(SERVICE_USER) as service:
            install_sudoers(minicluster["SLURM_CONF"])
            yield service
    finally:
        SUDOERS_INSTALLED.unlink(missing_ok=True)
        run(["gpasswd", "-d", "alice", RESEARCHERS], check=False)
        run(["groupdel", RESEARCHERS], check=False)


def ensure_sudo() -> None:
    if shutil.which("sudo") and shutil.which("visudo"):
        return
    install = ["apt-get", "install", "-y", "--no-install-recommends", "sudo"]
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # The package lists may be stale or absent on a fresh machine; refresh only then.
    if subprocess.run(install, env=environment, capture_output=True).returncode != 0:
        run(["apt-get", "update"])
        run(install, env=environment)


def install_sudoers(slurm_conf: str) -> None:
    """The documented file with only the account, group and paths made this machine's."""
    text = (REPO / "deploy" / "sudoers.medbay").read_text()
    changes = [
        (r"^Defaults:medbay ", f"Defaults:{SERVICE_USER} "),
        (r"^medbay ALL", f"{SERVICE_USER} ALL"),
        (r"%medbay-researchers", f"%{RESEARCHERS}"),
        (r"/etc/slurm/slurm\.conf", sudoers_escaped(slurm_conf)),
        (r"/opt/medbay/clusters/backends/job_file_reader\.py", sudoers_escaped(READER_PATH)),
    ]
    for pattern, replacement in changes:
        text, count = re.subn(pattern, lambda _: replacement, text, flags=re.MULTILINE)
        assert count, f"deploy/sudoers.medbay no longer has {pattern!r}"
    staged = SUDOERS_INSTALLED.with_suffix(".new")  # sudo skips names with a dot
    staged.write_text(text)
    staged.chmod(0o440)
    checked = subprocess.run(["visudo", "-cf", str(staged)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    staged.rename(SUDOERS_INSTALLED)


def sudoers_escaped(word: str) -> str:
    return re.sub(r"([\\,:= ])", r"\\\1", word)


def as_service(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", SERVICE_USER, "--", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd="/",
        timeout=30,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"},
    )


def portal_reads(user: str, path: str) -> dict:
    completed = as_service(READER_PYTHON, "-c", PORTAL_READS, str(REPO), user, path)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def run(args, check=True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=check, capture_output=True, text=True, **kwargs)


def test_a_non_root_portal_reads_a_researchers_output_through_the_documented_sudoers(
    slurm, sudo_portal, private_dir
):
    path = finished_job_output(slurm, "alice", private_dir("alice"), "echo hello from $(id -un)")

    read = portal_reads("alice", path)

    assert os.geteuid() == 0 and sudo_portal.pw_uid >= 1000
    assert read == {"text": "hello from alice\n"}


def test_a_non_root_portal_refuses_a_fifo_at_once_leaving_nothing_running(
    slurm, sudo_portal, private_dir
):
    path = finished_job_output(slurm, "alice", private_dir("alice"), 'rm -f "$out"; mkfifo "$out"')
    started = time.monotonic()

    read = portal_reads("alice", path)

    assert time.monotonic() - started < 3
    assert read["kind"] == JobFileError.REFUSED
    assert "named pipe (FIFO)" in read["message"]
    assert settled(lambda: processes_using(path)) == []


def test_a_non_root_portal_cannot_read_as_someone_outside_the_researchers_group(
    slurm, sudo_portal, private_dir
):
    path = finished_job_output(slurm, "bob", private_dir("bob"), "echo from bob")

    read = portal_reads("bob", path)

    assert read["kind"] == JobFileError.FAILED
    assert "could not run a command as bob" in read["message"]


@pytest.mark.parametrize(
    "command",
    [
        ["-u", "alice", "--", "/bin/cat", "/etc/hostname"],
        ["-u", "alice", "--", READER_PYTHON, "-c", "print(1)"],
        ["-u", "alice", "--", READER_PYTHON, "-I", READER_PATH, "--extra"],
        ["-u", "root", "--", READER_PYTHON, "-I", READER_PATH],
        ["-u", "bob", "--", READER_PYTHON, "-I", READER_PATH],
    ],
)
def test_the_sudoers_rule_allows_the_reader_and_nothing_else(sudo_portal, command):
    allowed = as_service("sudo", "-n", "-u", "alice", "--", READER_PYTHON, "-I", READER_PATH)
    refused = as_service("sudo", "-n", *command)

    # The reader itself ran, and said it was given no request.
    assert allowed.returncode == job_file_reader.EXIT_FAILED, allowed.stderr
    assert "The reader expects" in allowed.stderr
    assert refused.returncode != 0
    assert refused.stdout == ""
