"""Chaos, without a cluster: what 22.05's `--json` commands print while slurmctld is down.

Captured from the minicluster with slurmctld stopped: `squeue --json` and `sinfo
--json` exit 0 with an error in the body and empty lists. The backend must raise
a transient error, never report "no jobs, no nodes" (the engine would conclude
the jobs had finished and skip their requeue). The live version of this is
tests/slurm_integration/test_chaos_slurmctld.py.
"""

from __future__ import annotations

import json

import pytest

from clusters.backends.base import BackendError
from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm_cli import CommandResult

SQUEUE_CONTROLLER_DOWN = {
    "meta": {"Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}}},
    "errors": [
        {
            "description": "Failed while looking for jobs",
            "error_number": -1,
            "error": "Unspecified error",
            "source": "slurm_load_jobs",
        }
    ],
    "jobs": [],
}
SINFO_CONTROLLER_DOWN = {"errors": [{"error": "Unspecified error", "errno": -1}], "nodes": []}


def backend_printing(payloads: dict[str, dict]) -> SlurmBackend:
    def runner(args, *, input_text=None, timeout=None, env=None):
        if "--version" in args:
            return CommandResult(tuple(args), 0, "slurm 22.05.8\n", "")
        return CommandResult(tuple(args), 0, json.dumps(payloads[args[0]]), "")

    return SlurmBackend("/etc/test/slurm.conf", runner=runner)


def test_an_unreachable_controller_makes_listing_jobs_a_transient_error_not_an_empty_list():
    backend = backend_printing({"squeue": SQUEUE_CONTROLLER_DOWN})
    with pytest.raises(BackendError) as raised:
        backend.jobs()
    assert not raised.value.permanent
    assert "Failed while looking for jobs" in raised.value.message


def test_an_unreachable_controller_makes_listing_nodes_a_transient_error_not_an_empty_list():
    backend = backend_printing({"sinfo": SINFO_CONTROLLER_DOWN})
    with pytest.raises(BackendError) as raised:
        backend.nodes()
    assert not raised.value.permanent
    assert "Unspecified error" in raised.value.message


def test_an_empty_errors_list_is_a_normal_answer():
    backend = backend_printing({"squeue": {**SQUEUE_CONTROLLER_DOWN, "errors": []}})
    assert backend.jobs() == []
