"""Slurm's HealthCheckProgram running `medbay-agent check --once --drain` on the real cluster.

slurmd runs the program as root with only SLURMD_NODENAME in its environment, so the
wrapper written here names everything by absolute path, as a real node's would, and
hands over to the shipped deploy/slurm-health/healthcheck.sh.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.plugins.slurm_cluster import REPO, UP

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions]

INTERVAL_S = 5
# A check that fails drains within one interval; slurmd adds up to a few seconds.
DRAIN_TIMEOUT_S = 4 * INTERVAL_S
WATCHED = "gpu-02"


def write_wrapper(folder: Path, slurm_conf: str) -> Path:
    agent = Path(sys.executable).with_name("medbay-agent")
    assert agent.exists(), f"{agent} is missing: install the project (pip install -e .)"
    # Only the operator switch: the other default checks would judge this VM, not a GPU node.
    (folder / "health.toml").write_text('checks = ["force_drain"]\n')
    wrapper = folder / "medbay-healthcheck"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"export MEDBAY_AGENT={agent}\n"
        f"export MEDBAY_HEALTH_CONFIG={folder / 'health.toml'}\n"
        f'export MEDBAY_FORCE_DRAIN_FILE="{folder}/force-drain-$SLURMD_NODENAME"\n'
        f"export SLURM_CONF={slurm_conf}\n"
        f"exec {REPO / 'deploy' / 'slurm-health' / 'healthcheck.sh'}\n"
    )
    wrapper.chmod(0o755)
    folder.chmod(0o755)
    return wrapper


def run_up(*args: str) -> None:
    completed = subprocess.run(
        [str(UP), *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 0, f"up {' '.join(args)} failed:\n{completed.stderr}"


@pytest.fixture
def health_checked(slurm, minicluster, tmp_path):
    """The minicluster restarted with the Medbay health check; restored without it after."""
    wrapper = write_wrapper(tmp_path, minicluster["SLURM_CONF"])
    run_up("--healthcheck", str(wrapper), "--healthcheck-interval", str(INTERVAL_S))
    yield tmp_path
    for fail_file in tmp_path.glob("force-drain-*"):
        fail_file.unlink()
    run_up()
    for node in slurm.nodes():
        if node.reason.startswith("medbay:"):
            slurm.resume_node(node.name)


def medbay_drains(slurm) -> dict[str, str]:
    return {
        node.name: node.reason
        for node in slurm.nodes()
        if "drain" in node.flags and node.reason.startswith("medbay:")
    }


def test_a_failing_check_drains_only_its_node_with_a_medbay_reason(slurm, health_checked):
    # Every node runs the check at slurmd start and then each interval: let one round pass.
    time.sleep(INTERVAL_S + 1)
    assert medbay_drains(slurm) == {}
    (health_checked / f"force-drain-{WATCHED}").write_text("GPU 3 fell off the bus\n")

    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while WATCHED not in medbay_drains(slurm):
        assert time.monotonic() < deadline, f"{WATCHED} not drained in {DRAIN_TIMEOUT_S}s"
        time.sleep(0.5)
    drains = medbay_drains(slurm)
    assert list(drains) == [WATCHED]
    assert drains[WATCHED].startswith("medbay: force_drain: force-drain file")
    assert drains[WATCHED].endswith("present: GPU 3 fell off the bus")


def test_a_plain_up_leaves_the_health_check_out(slurm, minicluster):
    config = Path(minicluster["SLURM_CONF"]).read_text()
    assert "HealthCheckProgram" not in config
