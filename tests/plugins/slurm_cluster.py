"""Starts the local Slurm cluster (deploy/minicluster/up) once per test session.

`MEDBAY_TEST_SLURM=24.11` (or 26.05) runs the session against that Slurm version
(`up --slurm ...`, from its Debian root); unset, the host's 22.05 as always.

With CI=true a cluster that cannot start fails the run: integration tests must
never be skipped there. Elsewhere they are skipped, with the reason, when this
machine cannot run the cluster (not root, no apt-get and no Slurm).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from clusters.backends.slurm import SlurmBackend

REPO = Path(__file__).resolve().parents[2]
UP = REPO / "deploy" / "minicluster" / "up"
TEST_REASON_PREFIX = "medbay-test"
SLURM_VERSIONS = ("22.05", "24.11", "26.05")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def cannot_run_cluster_reason() -> str:
    if os.geteuid() != 0:
        return "the Slurm minicluster needs root (it installs packages and starts daemons)"
    if not shutil.which("slurmctld") and not shutil.which("apt-get"):
        return "Slurm is not installed and apt-get is not available to install it"
    return ""


def requested_slurm_version() -> str:
    """The version MEDBAY_TEST_SLURM asks for, or "" for up's default (22.05)."""
    version = os.environ.get("MEDBAY_TEST_SLURM", "").strip()
    if version and version not in SLURM_VERSIONS:
        pytest.fail(f"MEDBAY_TEST_SLURM={version!r}: expected one of {', '.join(SLURM_VERSIONS)}")
    return version


def environment_from_up_output(stdout: str) -> dict[str, str]:
    """The `export K=V` lines `up` printed; `$PATH` in a value is this process's PATH
    (a version from a Debian root puts its client wrappers first)."""
    environment = {}
    for line in stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line.removeprefix("export ").partition("=")
            value = value.strip().replace("$PATH", os.environ.get("PATH", ""))
            environment[key.strip()] = value
    return environment


def start_minicluster() -> dict[str, str]:
    """Runs `up` and returns the environment it printed; fails loudly on error."""
    version = requested_slurm_version()
    command = [str(UP), "--slurm", version] if version else [str(UP)]
    # Building a version's Debian root the first time takes about a minute.
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if completed.returncode != 0:
        pytest.fail(
            f"deploy/minicluster/up failed ({completed.returncode}):\n"
            f"{completed.stdout}\n{completed.stderr}"
        )
    environment = environment_from_up_output(completed.stdout)
    if "SLURM_CONF" not in environment:
        pytest.fail(f"deploy/minicluster/up printed no SLURM_CONF:\n{completed.stdout}")
    return environment


def pytest_collection_modifyitems(config, items):
    """22.05's minicluster runs no slurmrestd: its tests are left out of that session
    (deselected, never skipped; `make test-slurm-versions` runs them on 24.11/26.05)."""
    if requested_slurm_version() not in ("", "22.05"):
        return
    kept = [item for item in items if item.get_closest_marker("slurmrestd") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


@pytest.fixture(scope="session")
def minicluster():
    reason = cannot_run_cluster_reason()
    if reason:
        if in_ci():
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    started = time.monotonic()
    environment = start_minicluster()
    previous = {key: os.environ.get(key) for key in environment}
    os.environ.update(environment)
    environment["startup_seconds"] = f"{time.monotonic() - started:.2f}"
    yield environment
    for key, value in previous.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def slurm(request, minicluster):
    """A backend on the minicluster, in its known state (cluster_state.py) before the
    test, whatever ran before or started it; brought back to it afterwards, and the
    test fails naming what it left behind if that cannot be done in time."""
    from clusters.backends.slurm import SlurmBackend
    from tests.plugins.cluster_state import bring_to_known_state

    backend = SlurmBackend(minicluster["SLURM_CONF"])
    bring_to_known_state(backend, f"before {request.node.name}")
    yield backend
    # A test that stops slurmctld starts it again itself (in a finally, or in a fixture
    # torn down before this one); left stopped, every later test would fail instead.
    if not backend.controller_up():
        pytest.fail(f"{request.node.name} left slurmctld stopped", pytrace=False)
    bring_to_known_state(backend, f"after {request.node.name}")


def clean_up(backend: SlurmBackend) -> None:
    """The known state now, for a test that needs it mid-way (cluster_state.py)."""
    from tests.plugins.cluster_state import bring_to_known_state

    if not backend.controller_up():
        return
    bring_to_known_state(backend, "in clean_up")


def wait_for_empty_queue(backend: SlurmBackend, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        active = [
            job for job in backend.jobs() if job.state in {"COMPLETING", "RUNNING", "PENDING"}
        ]
        if not active:
            return
        time.sleep(0.2)
