"""Where a Slurm job writes its output, and reading the end of it as the job's user.

Plain Python (no Django), like the rest of the backends. The portal often runs
as root, which could read anyone's files; it must not. A researcher's output is
read by Medbay's small reader program (`job_file_reader.py`, beside this file),
run as them with `runuser -u USER --` (as root) or `sudo -n -u USER --`
(otherwise; deploy/sudoers.medbay allows exactly that command), the same way
`SlurmBackend.submit_job` submits as them, so the kernel decides what they may
read, not Medbay. The reader checks the file it opened, not the path it was
given (the rules are in its docstring). System accounts are refused.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import pwd
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from clusters.backends import job_file_reader as reader
from clusters.backends.base import BackendError, FileTail, JobFileError, JobOutputPaths
from clusters.backends.slurm_cli import CommandResult, Runner

# login.defs' UID_MIN: accounts below it are the system's, never a researcher's.
MIN_LOGIN_UID = 1000
NOBODY_UID = 65534
READ_TIMEOUT_S = 5.0
# SIGTERM first: sudo relays it to the reader, which the portal, not being root,
# may not signal itself; then SIGKILL for whatever is left in the group.
STOP_GRACE_S = 0.2
# Refused before starting anything. The reader's own checks on the opened file
# are what protect: a path can reach /proc or /dev through a symlinked folder.
UNREADABLE_PREFIXES = ("/dev/", "/proc/", "/sys/")
DISCARDED_PATHS = frozenset({"/dev/null"})
# The system's Python, which every researcher may run (the portal's own may sit in
# a folder only its account can enter); -I ignores PYTHON* variables and user
# site-packages. deploy/sudoers.medbay names this interpreter and READER_PATH.
READER_PYTHON = "/usr/bin/python3"
READER_PATH = os.path.abspath(reader.__file__)
# The reader's whole environment: nothing of the portal's (its PATH, its
# settings' secrets) reaches a process whose input the job's user controls.
READER_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
READER_ERRORS = {
    reader.EXIT_MISSING: JobFileError.MISSING,
    reader.EXIT_DENIED: JobFileError.DENIED,
    reader.EXIT_REFUSED: JobFileError.REFUSED,
    reader.EXIT_FAILED: JobFileError.FAILED,
}
# Slurm prints NO_VAL for %a in a job that is not part of an array.
NO_ARRAY_TASK = "4294967294"

SAFE_USER = re.compile(r"^[a-z_][a-z0-9_.-]*\$?$")
PATTERN = re.compile(r"%(\d*)([AaJjNnstux%])")


# ---------------------------------------------------------------- paths


def expand_output_pattern(
    pattern: str,
    *,
    job_id: int,
    user: str = "",
    name: str = "",
    workdir: str = "",
    array_job_id: int | None = None,
    array_task_id: int | None = None,
    node: str = "",
) -> str:
    """Slurm's --output/--error filename pattern, expanded as sbatch documents it.

    Some versions print the pattern unexpanded (22.05's `squeue --json`), others
    expand %j/%u/%x but not %N (22.05's `scontrol show job`). A backslash anywhere
    turns expansion off and is itself dropped. A relative path is the workdir's.
    """
    if "\\" in pattern:
        expanded = pattern.replace("\\", "")
    else:
        values = {
            "A": str(array_job_id or job_id),
            "a": NO_ARRAY_TASK if array_task_id is None else str(array_task_id),
            "J": str(job_id),
            "j": str(job_id),
            "N": node.split(",")[0] if node else "",
            "n": "0",  # the batch script runs as task 0 on the first node
            "t": "0",
            "u": user,
            "x": name,
        }

        def substitute(match: re.Match) -> str:
            width, letter = match.groups()
            if letter == "%":
                return "%"
            value = values.get(letter)
            if value is None or (letter == "N" and not value):
                return match.group(0)  # %s (step id) and an unknown node stay as written
            return value.zfill(int(width)) if width and value.isdigit() else value

        expanded = PATTERN.sub(substitute, pattern)
    if expanded and not expanded.startswith("/") and workdir:
        expanded = posixpath.join(workdir, expanded)
    return expanded


def output_paths_from_record(record: Mapping[str, str], job_id: int) -> JobOutputPaths:
    """StdOut/StdErr of one `scontrol -o show job` record, fully expanded."""
    user = (record.get("UserId") or "").split("(", 1)[0]
    fields = {
        "job_id": job_id,
        "user": user,
        "name": record.get("JobName", ""),
        "workdir": record.get("WorkDir", ""),
        "array_job_id": _int_or_none(record.get("ArrayJobId")),
        "array_task_id": _int_or_none(record.get("ArrayTaskId")),
        "node": record.get("BatchHost", ""),
    }
    stdout = expand_output_pattern(record.get("StdOut", ""), **fields)
    stderr = expand_output_pattern(record.get("StdErr", "") or record.get("StdOut", ""), **fields)
    return JobOutputPaths(stdout=stdout, stderr=stderr, user=user)


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


# ---------------------------------------------------------------- reading as the user


def run_lossless(
    args: Sequence[str],
    *,
    input_text: str | None = None,
    timeout: float = READ_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Like slurm_cli.run_command, but a file's bytes survive: stdout is decoded with
    surrogateescape so that it encodes back to exactly what the reader printed
    (output may be binary, and a byte limit may cut a UTF-8 character in half).

    The command gets a session of its own, and on timeout the whole group is
    stopped: killing only runuser or sudo would leave their child behind."""
    try:
        process = subprocess.Popen(
            list(args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            encoding="utf-8",
            errors="surrogateescape",
            env=dict(env) if env is not None else None,
            cwd="/",
            start_new_session=True,
        )
    except FileNotFoundError as error:
        raise BackendError(f"{args[0]} is not installed", permanent=True) from error
    try:
        stdout, stderr = process.communicate(input_text, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        stop_process_group(process)
        raise BackendError(f"{args[0]} timed out after {timeout:g}s", permanent=False) from error
    return CommandResult(tuple(args), process.returncode, stdout, stderr)


def stop_process_group(process: subprocess.Popen) -> None:
    """Every process of PROCESS's session, then PROCESS itself reaped. The leader is
    reaped only after SIGKILL, so its id, the group's, cannot be reused meanwhile."""
    for number in (signal.SIGTERM, signal.SIGKILL):
        # Gone already, or only processes of another user are left (not ours to signal).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, number)
        if number == signal.SIGTERM:
            time.sleep(STOP_GRACE_S)
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()  # never read: a survivor could hold the pipe open for ever
    process.wait()


def read_tail_as(
    user: str,
    path: str,
    max_bytes: int,
    *,
    runner: Runner = run_lossless,
    euid: Callable[[], int] = os.geteuid,
    lookup: Callable[[str], pwd.struct_passwd] = pwd.getpwnam,
) -> FileTail:
    """The last MAX_BYTES of PATH as USER may read it; JobFileError says why not."""
    entry = reader_account(user, lookup)
    path = checked_path(path)
    # One byte more than shown tells whether the file is longer than the tail.
    request = f"{max_bytes + 1}\0{path}"
    args = reader_command(user, as_self=entry.pw_uid == euid(), as_root=euid() == 0)
    try:
        result = runner(args, input_text=request, timeout=READ_TIMEOUT_S, env=READER_ENV)
    except BackendError as error:
        raise JobFileError(
            JobFileError.FAILED, f"Could not read {path}: {error.message}"
        ) from error
    if result.returncode != 0:
        raise _error_for(result, user, path)
    raw = result.stdout.encode("utf-8", "surrogateescape")[-(max_bytes + 1) :]
    truncated = len(raw) > max_bytes
    return FileTail(path=path, text=_display_text(raw[-max_bytes:], truncated), truncated=truncated)


def reader_command(user: str, *, as_self: bool, as_root: bool) -> list[str]:
    """The reader, run as USER; exactly the command deploy/sudoers.medbay allows."""
    if as_self:
        # The portal is the job's user: no wrapper, and its own interpreter will do.
        return [sys.executable, "-I", READER_PATH]
    wrapper = ["runuser", "-u", user] if as_root else ["sudo", "-n", "-u", user]
    return [*wrapper, "--", READER_PYTHON, "-I", READER_PATH]


def reader_account(user: str, lookup: Callable[[str], pwd.struct_passwd]) -> pwd.struct_passwd:
    if not SAFE_USER.match(user or ""):
        raise JobFileError(JobFileError.NO_USER, f"{user!r} is not a Unix user name.")
    try:
        entry = lookup(user)
    except KeyError:
        raise JobFileError(
            JobFileError.NO_USER,
            f"There is no Unix user {user} on the portal's machine, "
            "so Medbay cannot read files as them.",
        ) from None
    if entry.pw_uid < MIN_LOGIN_UID or entry.pw_uid == NOBODY_UID:
        raise JobFileError(
            JobFileError.REFUSED,
            f"Medbay does not read files as the system account {user} (uid {entry.pw_uid}).",
        )
    return entry


def checked_path(path: str) -> str:
    if not path or "\x00" in path or not path.startswith("/"):
        raise JobFileError(JobFileError.FAILED, f"{path!r} is not an absolute file path.")
    normal = posixpath.normpath(path)
    if normal in DISCARDED_PATHS:
        raise JobFileError(JobFileError.DISCARDED, f"The job sends this stream to {normal}.")
    if normal.startswith(UNREADABLE_PREFIXES):
        raise JobFileError(JobFileError.REFUSED, f"Medbay does not read {normal}.")
    return normal


def _error_for(result: CommandResult, user: str, path: str) -> JobFileError:
    message = " ".join(result.stderr.split())
    kind = READER_ERRORS.get(result.returncode)
    if kind == JobFileError.MISSING:
        return JobFileError(
            kind, f"{path} does not exist (yet): Slurm creates it when the job starts."
        )
    if kind == JobFileError.DENIED:
        return JobFileError(kind, f"{user} may not read {path} (permission denied).")
    if kind is not None:
        return JobFileError(kind, message)
    if message.startswith(("sudo:", "runuser:")):
        return JobFileError(
            JobFileError.FAILED, f"The portal could not run a command as {user}: {message}"
        )
    reason = message or f"the reader exited with status {result.returncode}"
    return JobFileError(JobFileError.FAILED, f"Could not read {path}: {reason}")


def _display_text(raw: bytes, truncated: bool) -> str:
    text = raw.decode("utf-8", "replace").replace("\x00", "\ufffd")
    if truncated and "\n" in text:
        # The first line was cut by the byte limit; show whole lines only.
        text = text.split("\n", 1)[1]
    return text
