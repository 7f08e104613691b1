"""A real portal (daphne) and real node agents in subprocesses, for end-to-end tests.

The pytest database is invisible to another process, so the server gets its own:
a SQLite file in a temporary folder, or a fresh PostgreSQL database beside the
one `DATABASE_URL` names when that is PostgreSQL (as in CI).
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from tests import waiting

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 15


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, timeout_s: float, what: str, interval_s: float = 0.05):
    """tests.waiting.wait_for, polling finely: these tests time how fast things arrive."""
    return waiting.wait_for(predicate, timeout_s, what, interval_s)


def kernel_log_line(node: str, at: datetime, pci: str, xid: int, message: str) -> str:
    """A `journalctl -k -o short-iso` NVRM line, as the driver prints it."""
    return (
        f"{at.isoformat(timespec='microseconds')} {node} kernel: "
        f"NVRM: Xid (PCI:{pci}): {xid}, pid=4242, name=python, {message}\n"
    )


@dataclass
class ServerDatabase:
    """The server's own database: a SQLite file, or a PostgreSQL database made for it."""

    url: str
    admin_url: str = ""
    name: str = ""

    @classmethod
    def create(cls, folder: Path) -> ServerDatabase:
        configured = os.environ.get("DATABASE_URL", "")
        if not configured.startswith(("postgres://", "postgresql://")):
            return cls(url=f"sqlite:///{folder / 'portal.sqlite3'}")
        parts = urllib.parse.urlsplit(configured)
        name = f"{parts.path.lstrip('/') or 'medbay'}_health_e2e_{os.getpid()}"
        admin_url = urllib.parse.urlunsplit(parts._replace(path="/postgres"))
        database = cls(
            url=urllib.parse.urlunsplit(parts._replace(path=f"/{name}")),
            admin_url=admin_url,
            name=name,
        )
        database._postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        database._postgres_admin(f'CREATE DATABASE "{name}"')
        return database

    def _postgres_admin(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as connection:
            connection.execute(statement)

    def scalar(self, query: str, *params):
        """One value from the server's database (read-only inspection by the test)."""
        if not self.name:
            path = self.url.removeprefix("sqlite:///")
            with sqlite3.connect(path, timeout=20) as connection:
                return connection.execute(query.replace("%s", "?"), params).fetchone()[0]
        import psycopg

        with psycopg.connect(self.url) as connection:
            return connection.execute(query, params).fetchone()[0]

    def drop(self) -> None:
        if self.name:
            self._postgres_admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


@dataclass
class PortalServer:
    """`daphne portal.asgi:application` on a fixed port, restartable on that port."""

    database: ServerDatabase
    folder: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.folder / "daphne.log"

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "DATABASE_URL": self.database.url,
            "DEBUG": "false",
            "MEDBAY_BACKEND": "simulated",
            "PYTHONUNBUFFERED": "1",
        }

    def manage(self, *args: str) -> str:
        completed = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if completed.returncode != 0:
            raise AssertionError(
                f"manage.py {' '.join(args)} failed:\n{completed.stdout}\n{completed.stderr}"
            )
        return completed.stdout

    def seed(self, nodes: int = 8) -> dict[str, str]:
        """Migrate and sync a fault-free simulated cluster; returns {role: (user, password)}."""
        output = self.manage(
            "demo", "--no-serve", "--nodes", str(nodes), "--fault-boost", "0", "--history-days", "0"
        )
        users = re.findall(r"^\s*(\w+)\s+user (\S+)\s+password (\S+)\s*$", output, re.M)
        return {role: (username, password) for role, username, password in users}

    def issue_token(self, node: str) -> Path:
        path = self.folder / f"{node}.token"
        self.manage("node_token", node, "--output", str(path))
        return path

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port)]
            + ["portal.asgi:application"],
            cwd=REPO,
            env=self.environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        wait_for(
            self._answers, START_TIMEOUT_S, f"daphne on port {self.port} (see {self.log_path})"
        )

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"daphne exited:\n{self.log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/login/", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        # The port must really be free before the test writes "while the portal is down".
        wait_for(lambda: not _port_open(self.port), 10, f"port {self.port} to close")

    def log_in(self, username: str, password: str) -> str:
        """Log in through the real login form; returns the `Cookie` header value."""
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        page = opener.open(f"{self.url}/login/", timeout=10).read().decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[1]
        form = {"username": username, "password": password, "csrfmiddlewaretoken": token}
        opener.open(f"{self.url}/login/", urllib.parse.urlencode(form).encode(), timeout=10)
        cookies = {cookie.name: cookie.value for cookie in jar}
        if "sessionid" not in cookies:
            raise AssertionError(f"logging in as {username} did not give a session")
        return "; ".join(f"{name}={value}" for name, value in cookies.items())

    def get_region(self, path: str, target: str, cookie: str) -> str:
        """What an open page's live region fetches when it is poked (static/js/live.js)."""
        headers = {"Cookie": cookie, "HX-Request": "true", "HX-Target": target}
        request = urllib.request.Request(f"{self.url}{path}", headers=headers)
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.read().decode()

    def get_json(self, path: str, cookie: str) -> dict:
        request = urllib.request.Request(f"{self.url}{path}", headers={"Cookie": cookie})
        with urllib.request.urlopen(request, timeout=10) as reply:
            return json.loads(reply.read())


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


def agent_command() -> list[str]:
    """The installed `medbay-agent` console script (what nodes run)."""
    script = Path(sys.executable).with_name("medbay-agent")
    if not script.exists():
        raise AssertionError(f"{script} is missing: install the project (pip install -e .)")
    return [str(script)]


@dataclass
class AgentProcess:
    """`medbay-agent run` following a kernel-log file for one node."""

    node: str
    portal_url: str
    token_file: Path
    kmsg: Path
    spool: Path
    from_start: bool = False
    process: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.spool.with_suffix(".log")

    def start(self) -> None:
        self.kmsg.touch()
        argv = [
            *agent_command(), "run", "--portal", self.portal_url,
            "--token-file", str(self.token_file), "--kmsg", str(self.kmsg),
            "--node", self.node, "--spool", str(self.spool),
        ]  # fmt: skip
        if self.from_start:
            argv.append("--from-start")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        # It logs "following ..." once the log file is open at its end: lines after count.
        wait_for(lambda: "following" in self.output(), 20, f"the agent for {self.node}")

    def output(self) -> str:
        if self.process is not None and self.process.poll() not in (None, 0):
            raise AssertionError(f"the agent exited:\n{self.log_path.read_text()[-3000:]}")
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def write(self, line: str) -> None:
        with open(self.kmsg, "a", encoding="utf-8") as log:
            log.write(line)
            log.flush()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
