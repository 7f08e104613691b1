"""Where a Slurm job writes its output, and reading the end of it as the job's user.

Plain Python (no Django), like the rest of the backends. The portal often runs
as root, which could read anyone's files; it must not. A researcher's output is
read with `runuser -u USER -- tail` (as root) or `sudo -n -u USER -- tail`
(otherwise), the same way `SlurmBackend.submit_job` submits as them, so the
kernel decides what they may read, not Medbay. System accounts are refused.
"""

from __future__ import annotations

import os
import posixpath
import pwd
import re
import stat
import subprocess
from collections.abc import Callable, Mapping, Sequence

from clusters.backends.base import BackendError, FileTail, JobFileError, JobOutputPaths
from clusters.backends.slurm_cli import CommandResult, Runner

# login.defs' UID_MIN: accounts below it are the system's, never a researcher's.
MIN_LOGIN_UID = 1000
NOBODY_UID = 65534
READ_TIMEOUT_S = 5.0
# Reading these would not end (/dev/zero) or would show the machine, not the job.
UNREADABLE_PREFIXES = ("/dev/", "/proc/", "/sys/")
DISCARDED_PATHS = frozenset({"/dev/null"})
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
    surrogateescape so that it encodes back to exactly what tail printed (output
    may be binary, and `tail -c` may cut a UTF-8 character in half)."""
    try:
        completed = subprocess.run(
            list(args),
            input=input_text,
            capture_output=True,
            encoding="utf-8",
            errors="surrogateescape",
            timeout=timeout,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise BackendError(f"{args[0]} timed out after {timeout:g}s", permanent=False) from error
    except FileNotFoundError as error:
        raise BackendError(f"{args[0]} is not installed", permanent=True) from error
    return CommandResult(tuple(args), completed.returncode, completed.stdout, completed.stderr)


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
    if entry.pw_uid == euid():
        raw = _read_own_file(path, max_bytes + 1)
    else:
        wrapper = ["runuser", "-u", user] if euid() == 0 else ["sudo", "-n", "-u", user]
        args = [*wrapper, "--", "tail", "-c", str(max_bytes + 1), "--", path]
        raw = _run_tail(args, user, path, runner)
    # One byte more than shown tells whether the file is longer than the tail.
    truncated = len(raw) > max_bytes
    return FileTail(path=path, text=_display_text(raw[-max_bytes:], truncated), truncated=truncated)


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


def _run_tail(args: list[str], user: str, path: str, runner: Runner) -> bytes:
    # LC_ALL=C keeps tail's messages in English, which is what is matched below.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    try:
        result = runner(args, input_text=None, timeout=READ_TIMEOUT_S, env=env)
    except BackendError as error:
        raise JobFileError(
            JobFileError.FAILED, f"Could not read {path}: {error.message}"
        ) from error
    if result.returncode != 0:
        raise _error_for(result.stderr, user, path)
    return result.stdout.encode("utf-8", "surrogateescape")


def _error_for(stderr: str, user: str, path: str) -> JobFileError:
    message = " ".join(stderr.split())
    if "No such file or directory" in message:
        return JobFileError(
            JobFileError.MISSING,
            f"{path} does not exist (yet): Slurm creates it when the job starts.",
        )
    if "Permission denied" in message:
        return JobFileError(JobFileError.DENIED, f"{user} may not read {path} (permission denied).")
    if message.startswith("sudo:") or message.startswith("runuser:"):
        return JobFileError(
            JobFileError.FAILED, f"The portal could not run a command as {user}: {message}"
        )
    return JobFileError(JobFileError.FAILED, f"Could not read {path}: {message or 'tail failed'}")


def _read_own_file(path: str, count: int) -> bytes:
    """The portal runs as the job's user: read it directly, regular files only."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise _error_for("No such file or directory", "", path) from None
    except PermissionError:
        raise JobFileError(
            JobFileError.DENIED, f"The job's user may not read {path} (permission denied)."
        ) from None
    except OSError as error:
        raise JobFileError(JobFileError.FAILED, f"Could not read {path}: {error}") from None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise JobFileError(JobFileError.REFUSED, f"{path} is not a regular file.")
        handle.seek(max(info.st_size - count, 0))
        return handle.read(count)


def _display_text(raw: bytes, truncated: bool) -> str:
    text = raw.decode("utf-8", "replace").replace("\x00", "\ufffd")
    if truncated and "\n" in text:
        # The first line was cut by the byte limit; show whole lines only.
        text = text.split("\n", 1)[1]
    return text
