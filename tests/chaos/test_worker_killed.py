"""Chaos: an engine worker killed with SIGKILL mid requeue, another finishes the run once.

tests/remediation/test_crash_recovery.py kills a worker right after the spare swap;
this one kills it right after Slurm requeued the job and before the engine could
record it, the step whose repeat would restart a user's training twice. The
processes are real `run_engine` workers (tests/remediation/crash_worker.py keeps
the simulated cluster in a file so that it outlives them).
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.remediation.test_crash_recovery import report, start_worker, wait_for

pytestmark = pytest.mark.integration


def finished(env) -> dict | None:
    state = report(env)
    return state if state["status"] not in ("running", "waiting") else None


def test_a_worker_killed_right_after_requeueing_is_recovered_without_a_second_requeue(
    crash_env, tmp_path
):
    doomed = start_worker(crash_env, "doomed", MEDBAY_CRASH_AFTER="requeue_job")
    try:
        wait_for(lambda: (tmp_path / "crash-point").exists(), 60, "the requeue call")
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=10)
    crashed = report(crash_env)
    assert crashed["status"] == "running"
    assert crashed["steps"][-1] == ["requeue_jobs", "started", 1, "doomed"]
    assert (crashed["requeue_calls"], crashed["replace_calls"]) == (1, 0)

    rescuer = start_worker(crash_env, "rescuer")
    try:
        final = wait_for(lambda: finished(crash_env), 60, "the second worker to finish the run")
    finally:
        rescuer.kill()
        rescuer.wait(timeout=10)
    assert final["status"] == "succeeded", final
    assert (final["requeue_calls"], final["replace_calls"]) == (1, 1)
    requeue_rows = [step for step in final["steps"] if step[0] == "requeue_jobs"]
    assert requeue_rows[0] == ["requeue_jobs", "started", 1, "doomed"]
    assert requeue_rows[1][1:] == ["succeeded", 2, "rescuer"]
    assert len(requeue_rows) == 2
    assert final["replacement"] == "gpu-06" and final["spares"] == ["gpu-07"]
