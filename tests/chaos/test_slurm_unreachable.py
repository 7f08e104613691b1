"""Chaos, without a cluster: what 22.05's `--json` commands print while slurmctld is down.

Captured from the minicluster with slurmctld stopped: `squeue --json` and `sinfo
--json` exit 0 with an error in the body and empty lists. The backend must raise
a transient error, never report "no jobs, no nodes" (the engine would conclude
the jobs had finished and skip their requeue). The live version of this is
tests/chaos/test_slurmctld_restart.py.
"""

from __future__ import annotations

import json
from pathlib import Path

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


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def backend_of(version: str, respond) -> SlurmBackend:
    def runner(args, *, input_text=None, timeout=None, env=None):
        if "--version" in args:
            return CommandResult(tuple(args), 0, f"slurm-wlm {version}.5\n", "")
        return respond(tuple(args))

    return SlurmBackend("/etc/test/slurm.conf", runner=runner)


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_a_newer_scontrol_that_exits_0_with_no_jobs_while_slurmctld_is_down_is_an_outage(version):
    """Captured with slurmctld stopped: exit 0, `"jobs": []`, no errors, last_update 0."""
    recorded = (FIXTURES / version / "scontrol_show_job_controller_down.json").read_text()
    assert json.loads(recorded)["errors"] == []  # the body itself says nothing is wrong
    backend = backend_of(version, lambda args: CommandResult(args, 0, recorded, ""))
    with pytest.raises(BackendError) as raised:
        backend.jobs()
    assert not raised.value.permanent
    assert "Unable to contact slurm controller" in raised.value.message


def test_a_live_controller_with_no_jobs_is_an_empty_list():
    recorded = json.loads(
        (FIXTURES / "26.05" / "scontrol_show_job_controller_down.json").read_text()
    )
    recorded["last_update"] = {"set": True, "infinite": False, "number": 1796150000}
    text = json.dumps(recorded)
    backend = backend_of("26.05", lambda args: CommandResult(args, 0, text, ""))
    assert backend.jobs() == []


def test_a_read_that_times_out_while_ping_says_down_is_named_an_outage():
    """24.11+ clients retry a stopped slurmctld ~10 s, past the backend's timeout."""

    def respond(args):
        if args[:2] == ("scontrol", "ping"):
            return CommandResult(args, 1, "Slurmctld(primary) at vm is DOWN\n", "")
        raise BackendError(f"{args[0]} timed out after 10s", permanent=False)

    with pytest.raises(BackendError) as raised:
        backend_of("26.05", respond).nodes()
    assert not raised.value.permanent
    assert "Unable to contact slurm controller" in raised.value.message
    assert "timed out" in raised.value.message


def test_a_read_that_times_out_while_ping_says_up_keeps_its_own_message():
    def respond(args):
        if args[:2] == ("scontrol", "ping"):
            return CommandResult(args, 0, "Slurmctld(primary) at vm is UP\n", "")
        raise BackendError(f"{args[0]} timed out after 10s", permanent=False)

    with pytest.raises(BackendError) as raised:
        backend_of("26.05", respond).nodes()
    assert raised.value.message == "scontrol timed out after 10s"
