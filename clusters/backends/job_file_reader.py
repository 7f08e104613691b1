"""Medbay's reader of a job's output file, run as the job's own Unix user.

`clusters/backends/job_files.py` starts it as `/usr/bin/python3 -I <this file>`
through runuser (as root) or sudo (deploy/sudoers.medbay allows exactly that
command), so it stays a standalone script: standard library only, nothing of
Medbay imported, nothing read from the environment. It reads `COUNT\\0PATH` on
stdin and writes the last COUNT bytes of PATH, at most, on stdout. Otherwise it
writes one sentence on stderr and exits with one of the codes below.

The rules, all decided on the file actually opened, never on what the path says:
- a symbolic link as the last component is refused (O_NOFOLLOW), whatever it
  points to: a job that swaps its output for a link gets a refusal, not the
  target. Links in the directories above are followed, as Slurm follows them.
- only a regular file is read: FIFOs (which would hold the reader), devices,
  sockets and directories are refused; O_NONBLOCK keeps the open of a FIFO from
  waiting for a writer.
- a file on /proc, /sys or /dev, or on any proc, sysfs, devtmpfs or kindred
  filesystem however it was reached, is refused: its "contents" are a process's
  environment or the machine's state, not a job's output.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys

EXIT_MISSING = 10
EXIT_DENIED = 11
EXIT_REFUSED = 12
EXIT_FAILED = 13

# The portal gives up after 5 s; the reader must not outlive it, even where the
# portal may not signal it (sudo relays SIGTERM but cannot relay SIGKILL).
DEADLINE_S = 10
MAX_REQUEST_BYTES = 8192
CHUNK_BYTES = 1 << 20
SPECIAL_MOUNTS = ("/proc", "/sys", "/dev")
SPECIAL_FILESYSTEMS = frozenset(
    {
        "proc",
        "sysfs",
        "devtmpfs",
        "devpts",
        "debugfs",
        "tracefs",
        "securityfs",
        "configfs",
        "cgroup",
        "cgroup2",
        "bpf",
        "efivarfs",
        "pstore",
        "fusectl",
        "binfmt_misc",
        "mqueue",
    }
)
FILE_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class Refusal(Exception):
    """Why the file is not read: an exit code and a sentence for the researcher."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def main() -> int:
    signal.alarm(DEADLINE_S)
    try:
        count, path = parse_request(sys.stdin.buffer.read(MAX_REQUEST_BYTES))
        data = read_tail(path, count)
    except Refusal as refusal:
        sys.stderr.write(refusal.message + "\n")
        return refusal.code
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


def parse_request(request: bytes) -> tuple[int, str]:
    count, _, path = request.partition(b"\0")
    if not count.isdigit() or not path.startswith(b"/") or b"\0" in path:
        raise Refusal(EXIT_FAILED, "The reader expects COUNT, a NUL and an absolute path.")
    return int(count), os.fsdecode(path)


def read_tail(path: str, count: int) -> bytes:
    descriptor = open_without_following(path)
    try:
        info = os.fstat(descriptor)
        check_opened_file(path, info)
        return read_end(descriptor, info.st_size, count)
    finally:
        os.close(descriptor)


def open_without_following(path: str) -> int:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        raise Refusal(EXIT_MISSING, f"{path} does not exist.") from None
    except PermissionError:
        raise Refusal(EXIT_DENIED, f"{path}: permission denied.") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            # realpath only names the target for the message; it decides nothing.
            raise Refusal(
                EXIT_REFUSED,
                f"{path} is a symbolic link (to {os.path.realpath(path)}); "
                "Medbay reads only the job's own file, not what a link points to.",
            ) from None
        raise Refusal(EXIT_FAILED, f"Could not open {path}: {error.strerror}.") from None


def check_opened_file(path: str, info: os.stat_result) -> None:
    for test, kind in FILE_KINDS:
        if test(info.st_mode):
            raise Refusal(
                EXIT_REFUSED, f"{path} is {kind}, not a regular file; Medbay reads only files."
            )
    if not stat.S_ISREG(info.st_mode):
        raise Refusal(EXIT_REFUSED, f"{path} is not a regular file; Medbay reads only files.")
    where = special_filesystem(info.st_dev)
    if where:
        raise Refusal(
            EXIT_REFUSED,
            f"{path} is on {where} ({os.path.realpath(path)}): it shows the machine or a "
            "process, not the job's output, so Medbay does not read it.",
        )


def special_filesystem(device: int) -> str:
    """Which special filesystem holds DEVICE, or "" for an ordinary one."""
    for mount in SPECIAL_MOUNTS:
        try:
            if os.stat(mount).st_dev == device:
                return f"the filesystem mounted at {mount}"
        except OSError:
            continue
    # Another mount of proc or sysfs (a container's, or one reached through
    # /proc/PID/root) has its own device number: ask the mount table its type.
    kind = filesystem_type(device)
    return f"a {kind} filesystem" if kind in SPECIAL_FILESYSTEMS else ""


def filesystem_type(device: int) -> str:
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) > 2 and fields[2] == wanted and " - " in line:
                    return line.split(" - ", 1)[1].split()[0]
    except OSError:
        pass
    # Not in the table (overlayfs and btrfs subvolumes report other numbers): ordinary.
    return ""


def read_end(descriptor: int, size: int, count: int) -> bytes:
    os.lseek(descriptor, max(size - count, 0), os.SEEK_SET)
    chunks, left = [], count
    # A file that grows meanwhile still yields no more than COUNT bytes.
    while left > 0:
        chunk = os.read(descriptor, min(left, CHUNK_BYTES))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


if __name__ == "__main__":
    sys.exit(main())
