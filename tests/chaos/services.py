"""Private Redis and PostgreSQL instances that the chaos tests may stop at will.

Other suites use the shared services on 6379 and 5432 at the same time, so an
outage there would fail them; these instances run on their own ports, in a
temporary folder, and are always stopped at the end. With CI=true a missing
server program fails the test (integration tests never skip there).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REDIS_PORT = 16399
POSTGRES_PORT = 15433
START_TIMEOUT_S = 30


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require(program: str, path: str | None = None) -> str:
    """The program's path; fails under CI, skips elsewhere, when it is not installed."""
    found = path if path and Path(path).exists() else shutil.which(program)
    if found:
        return found
    reason = f"{program} is not installed; the chaos suite needs it to start a private instance"
    if in_ci():
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(0.1)


@dataclass
class PrivateRedis:
    """redis-server on its own port with no persistence."""

    folder: Path
    port: int = REDIS_PORT

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _cli(self, *args: str) -> subprocess.CompletedProcess:
        cli = require("redis-cli")
        return subprocess.run(
            [cli, "-h", "127.0.0.1", "-p", str(self.port), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )

    def answers(self) -> bool:
        return self._cli("ping").stdout.strip() == "PONG"

    def start(self) -> None:
        if self.answers():
            return
        server = require("redis-server")
        subprocess.run(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--daemonize", "yes"]
            + ["--save", "", "--appendonly", "no", "--dir", str(self.folder)]
            + ["--pidfile", str(self.folder / "redis.pid")]
            + ["--logfile", str(self.folder / "redis.log")],
            check=True,
            timeout=30,
        )
        wait_until(self.answers, START_TIMEOUT_S, f"redis on port {self.port}")

    def stop(self) -> None:
        self._cli("shutdown", "nosave")
        wait_until(lambda: not self.answers(), START_TIMEOUT_S, f"redis {self.port} to stop")


def postgres_bin(program: str) -> str:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for folder in versions:
        if (folder / program).exists():
            return str(folder / program)
    return require(program)


@dataclass
class PrivatePostgres:
    """A throwaway PostgreSQL cluster (initdb into a temporary folder), trust auth.

    PostgreSQL refuses to run as root, so the server runs as the `postgres` user
    when the tests run as root.
    """

    folder: Path
    port: int = POSTGRES_PORT

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        if os.geteuid() == 0:
            argv = ("runuser", "-u", "postgres", "--", *argv)
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=check)

    def answers(self) -> bool:
        ready = postgres_bin("pg_isready")
        argv = [ready, "-h", "127.0.0.1", "-p", str(self.port), "-t", "1"]
        return subprocess.run(argv, capture_output=True, timeout=10, check=False).returncode == 0

    def init(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        initdb = postgres_bin("initdb")
        self._run(initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")

    def start(self) -> None:
        if self.answers():
            return
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            postgres_bin("pg_ctl"), "-D", str(self.data), "-o", options,
            "-l", str(self.folder / "postgres.log"), "-w", "start",
        )  # fmt: skip
        wait_until(self.answers, START_TIMEOUT_S, f"PostgreSQL on port {self.port}")

    def stop(self) -> None:
        self._run(postgres_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        wait_until(lambda: not self.answers(), START_TIMEOUT_S, f"PostgreSQL {self.port} to stop")

    def create_database(self, name: str) -> str:
        self._run(postgres_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                  "-U", "postgres", name)  # fmt: skip
        return self.url(name)
