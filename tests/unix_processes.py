"""Real Unix users and what processes are left: for tests of reading files as a user."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

import pytest


@contextlib.contextmanager
def unix_user(name: str, *, groups: tuple[str, ...] = ()):
    """A login account NAME (uid from 1000 up, no home) for the duration; removed
    afterwards unless it existed before. Needs root."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("creating Unix users needs root and useradd")
    existed = _exists(name)
    if not existed:
        command = ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
        if groups:
            command[1:1] = ["--groups", ",".join(groups)]
        subprocess.run(command, check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        if not existed:
            subprocess.run(["userdel", name], check=False, capture_output=True)


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def processes_using(path: str) -> list[str]:
    """Live processes that name PATH on their command line or hold it open."""
    found = []
    for pid in _pids():
        try:
            arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if os.fsencode(path) in arguments:
                found.append(f"{pid}: {b' '.join(arguments).decode(errors='replace')}")
                continue
            for descriptor in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{descriptor}") == path:
                    found.append(f"{pid} holds {path} open")
                    break
        except OSError:
            continue  # it ended while we looked
    return found


def session_members(session_id: int) -> list[int]:
    """Live (not zombie) processes whose session is SESSION_ID."""
    members = []
    for pid in _pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: split after it.
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) == session_id:
            members.append(pid)
    return members


def settled(probe, timeout_s: float = 2.0):
    """PROBE's answer once it is empty, or its last answer after TIMEOUT_S: a
    process sent SIGKILL takes a moment to go."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = probe()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _pids() -> list[int]:
    return [
        int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != os.getpid()
    ]
