"""The real test OpenID provider (deploy/oidc-provider: panva's oidc-provider on Node.js).

`start_provider` installs its pinned packages (once: npm ci from the committed
lock, skipped when already installed), starts it on a free port with a copy of
the people file, and returns a handle to change someone's groups between two
log-ins, stop it (the provider down) and start it again on the same port.

Outside CI the tests skip, with the reason, when Node.js is missing; with
CI=true they fail instead.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROVIDER = ROOT / "deploy" / "oidc-provider"
CLIENT_ID = "medbay"
CLIENT_SECRET = "medbay-test-secret"
START_TIMEOUT_S = 60
# The test people's passwords are in deploy/oidc-provider/people.json.
PASSWORDS = {
    name: person["password"]
    for name, person in json.loads((PROVIDER / "people.json").read_text()).items()
}
ROLE_GROUPS = "researcher=ml-users;admin=hpc-admins;manager=leads"


def require_node() -> None:
    missing = [tool for tool in ("node", "npm") if not shutil.which(tool)]
    if missing:
        message = f"the OIDC tests need {' and '.join(missing)} (apt-get install nodejs npm)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def install() -> None:
    completed = subprocess.run(
        [str(PROVIDER / "install")], capture_output=True, text=True, timeout=300, check=False
    )
    if completed.returncode != 0:
        pytest.fail(f"deploy/oidc-provider/install failed:\n{completed.stderr[-3000:]}")


@dataclass
class Provider:
    """A running provider: its issuer, its people file, and how to stop and restart it."""

    port: int
    redirects: list[str]
    folder: Path
    process: subprocess.Popen | None = None
    start_seconds: float = 0.0
    starts: list[float] = field(default_factory=list)

    @property
    def issuer(self) -> str:
        return f"http://localhost:{self.port}"

    @property
    def people_file(self) -> Path:
        return self.folder / "people.json"

    def portal_settings(self, **overrides) -> dict[str, str]:
        """The portal's environment for log-in through this provider."""
        return {
            "MEDBAY_OIDC_ISSUER": self.issuer,
            "MEDBAY_OIDC_CLIENT_ID": CLIENT_ID,
            "MEDBAY_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "MEDBAY_OIDC_NAME": "Example Lab SSO",
            "MEDBAY_OIDC_ROLE_GROUPS": ROLE_GROUPS,
            **overrides,
        }

    def set_groups(self, username: str, groups: list[str]) -> None:
        """Change a person's groups at the provider; their next log-in carries them."""
        self.update(username, groups=groups)

    def update(self, username: str, **fields) -> None:
        """Change what the provider says about a person (groups, posix_username, ...)."""
        people = json.loads(self.people_file.read_text())
        people.setdefault(username, {"password": f"{username}-test-pw"}).update(fields)
        self._write(people)

    def reset_people(self) -> None:
        shutil.copyfile(PROVIDER / "people.json", self.people_file)

    def _write(self, people: dict) -> None:
        # Replaced whole, so the provider never reads a half-written file.
        temporary = self.people_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(people, indent=1))
        temporary.replace(self.people_file)

    def start(self) -> None:
        command = ["node", str(PROVIDER / "server.mjs"), "--port", str(self.port)]
        command += ["--people", str(self.people_file), "--client", CLIENT_ID]
        command += ["--secret", CLIENT_SECRET]
        for redirect in self.redirects:
            command += ["--redirect", redirect]
        started = time.monotonic()
        log = (self.folder / "provider.log").open("a")
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, text=True, cwd=PROVIDER
        )
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(self.process.stdout, lines), daemon=True).start()
        try:
            first = lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            first = ""
        if not first.startswith("OIDC-READY"):
            self.stop()
            log_text = (self.folder / "provider.log").read_text()[-3000:]
            pytest.fail(f"the test OpenID provider did not start: {first!r}\n{log_text}")
        self.start_seconds = time.monotonic() - started
        self.starts.append(self.start_seconds)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line.strip())


def start_provider(folder: Path, port: int, redirects: list[str]) -> Provider:
    require_node()
    install()
    folder.mkdir(parents=True, exist_ok=True)
    provider = Provider(port=port, redirects=redirects, folder=folder)
    shutil.copyfile(PROVIDER / "people.json", provider.people_file)
    provider.start()
    return provider


def sso_log_in(page, portal_url: str, username: str, *, provider_name: str = "Example Lab SSO"):
    """Log in as a person would: the portal's button, then the provider's own form.

    When the provider still has a session for this browser it sends it straight
    back without the form, as a real single sign-on does.
    """
    from playwright.sync_api import expect

    page.goto(f"{portal_url}/login/")
    page.get_by_role("link", name=f"Log in with {provider_name}").click()
    form = page.get_by_role("heading", name="Medbay test identity provider")
    back = page.locator("header .who")
    expect(form.or_(back).or_(page.locator("section.login h1"))).to_be_visible()
    if form.is_visible():
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(PASSWORDS.get(username, f"{username}-test-pw"))
        page.get_by_role("button", name="Sign in").click()
