"""A small Slurm cluster of its own with slurmdbd on MariaDB, for the accounting tests.

Its ports, state folder and slurmdbd database are apart from the shared cluster's
(the `slurm` tests), so that one keeps its plain configuration; `.ci/services`
starts it with the same values. With CI=true a cluster that cannot start fails the
run; elsewhere the tests skip with the reason.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.plugins.slurm_cluster import (
    UP,
    cannot_run_cluster_reason,
    environment_from_up_output,
    in_ci,
)

ACCOUNTING_STATE = "/var/tmp/medbay-accounting"
ACCOUNTING_PORTS = {
    "MEDBAY_MINICLUSTER_CTLD_PORT": "27817",
    "MEDBAY_MINICLUSTER_NODE_PORT": "27901",
    "MEDBAY_MINICLUSTER_DBD_PORT": "27830",
}
ACCOUNTING_OPTIONS = ["--accounting", "--nodes", "2", "--spares", "0", "--infer", "1"]


@pytest.fixture(scope="session")
def accounting_cluster() -> dict[str, str]:
    """The environment `up` printed (SLURM_CONF) for the accounting cluster."""
    reason = cannot_run_cluster_reason()
    if reason:
        if in_ci():
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    completed = subprocess.run(
        [str(UP), "--state", ACCOUNTING_STATE, *ACCOUNTING_OPTIONS],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **ACCOUNTING_PORTS},
    )
    if completed.returncode != 0:
        pytest.fail(
            f"deploy/minicluster/up --accounting failed ({completed.returncode}):\n"
            f"{completed.stdout}\n{completed.stderr}"
        )
    environment = environment_from_up_output(completed.stdout)
    if "SLURM_CONF" not in environment:
        pytest.fail(f"deploy/minicluster/up printed no SLURM_CONF:\n{completed.stdout}")
    return environment
