"""Following the kernel log: a regular file (syslog, kern.log) or the /dev/kmsg device.

Both followers block in `wait()` (select on /dev/kmsg, a short sleep for files) so an idle
agent costs almost nothing.
"""

import errno
import os
import select
import time
from pathlib import Path

FILE_POLL_S = 0.5


class FileFollower:
    """Tails a log file across rotation (new inode) and truncation (size shrinks)."""

    def __init__(self, path: str | Path, *, from_start: bool = False):
        self.path = Path(path)
        self._file = None
        self._inode = None
        self._partial = b""
        self._open(at_end=not from_start)

    def _open(self, *, at_end: bool) -> None:
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - kept open while following
        except FileNotFoundError:
            return
        if at_end:
            handle.seek(0, os.SEEK_END)
        self._file, self._inode = handle, os.fstat(handle.fileno()).st_ino
        self._partial = b""

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def read_lines(self) -> list[str]:
        """Complete lines written since the last call (a torn last line waits for its end)."""
        if self._file is None:
            self._open(at_end=False)
            if self._file is None:
                return []
        lines = self._read_available()
        if self._rotated():
            # Finish the old file first: lines written just before rotation still count.
            lines += self._read_available()
            self.close()
            self._open(at_end=False)
            lines += self._read_available()
        elif self._truncated():
            self._file.seek(0)
            self._partial = b""
            lines += self._read_available()
        return lines

    def _read_available(self) -> list[str]:
        if self._file is None:
            return []
        data = self._partial + self._file.read()
        *complete, self._partial = data.split(b"\n")
        return [line.decode("utf-8", errors="replace") for line in complete]

    def _rotated(self) -> bool:
        try:
            return os.stat(self.path).st_ino != self._inode
        except FileNotFoundError:
            return False

    def _truncated(self) -> bool:
        try:
            return os.stat(self.path).st_size < self._file.tell()
        except FileNotFoundError:
            return False

    def wait(self, timeout_s: float) -> None:
        time.sleep(min(timeout_s, FILE_POLL_S))


class KmsgFollower:
    """Reads /dev/kmsg records (one per read) without blocking; waits with select()."""

    def __init__(self, path: str | Path = "/dev/kmsg", *, from_start: bool = False):
        self.path = str(path)
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        if not from_start:
            os.lseek(self._fd, 0, os.SEEK_END)

    def close(self) -> None:
        os.close(self._fd)

    def read_lines(self) -> list[str]:
        lines = []
        while True:
            try:
                record = os.read(self._fd, 8192)
            except BlockingIOError:
                return lines
            except OSError as error:
                # EPIPE: the ring buffer overwrote records we had not read yet; go on.
                if error.errno == errno.EPIPE:
                    continue
                raise
            if not record:
                return lines
            # A record may carry " KEY=value" continuation lines; the message is the first.
            lines.append(record.decode("utf-8", errors="replace").split("\n", 1)[0])

    def wait(self, timeout_s: float) -> None:
        select.select([self._fd], [], [], timeout_s)


def open_follower(path: str, *, from_start: bool = False):
    if path.startswith("/dev/"):
        return KmsgFollower(path, from_start=from_start)
    return FileFollower(path, from_start=from_start)
