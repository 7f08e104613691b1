"""A worker killed with SIGKILL mid-step is taken over by another, and nothing is done twice.

Real processes on a file-backed SQLite database: `run_engine` (through
crash_worker.py, which only swaps in a simulator that survives the process)
is killed right after the replace step moved the spare and before it could
record that; a second worker waits out the lease, re-runs the step, sees the
swap already made and finishes the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.waiting import wait_for

WORKER = Path(__file__).with_name("crash_worker.py")
LEASE_S = "2"


@pytest.fixture
def crash_env(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path}/crash.sqlite3",
        "MEDBAY_CRASH_STATE": str(tmp_path),
        "DEBUG": "true",
        "MEDBAY_BACKEND": "simulated",
    }
    env.pop("MEDBAY_CRASH_AFTER", None)
    subprocess.run([sys.executable, str(WORKER), "seed"], env=env, check=True, timeout=180)
    return env


def report(env) -> dict:
    done = subprocess.run(
        [sys.executable, str(WORKER), "report"],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def start_worker(env, worker_id: str, **extra) -> subprocess.Popen:
    args = ["work", "--worker-id", worker_id, "--lease", LEASE_S, "--interval", "0.1"]
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        env={**env, **extra},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_a_worker_killed_mid_replace_is_recovered_by_another_exactly_once(crash_env, tmp_path):
    doomed = start_worker(crash_env, "doomed", MEDBAY_CRASH_AFTER="replace")
    try:
        wait_for(lambda: (tmp_path / "crash-point").exists(), 90, "the replace call")
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=10)
    crashed = report(crash_env)
    assert crashed["status"] == "running"
    assert crashed["steps"][-1] == ["replace", "started", 1, "doomed"]
    assert crashed["replace_calls"] == 1 and crashed["spares"] == ["gpu-07"]

    rescuer = start_worker(crash_env, "rescuer")
    try:
        final = wait_for(
            lambda: (lambda r: r if r["status"] not in ("running", "waiting") else None)(
                report(crash_env)
            ),
            90,
            "the second worker to finish the run",
        )
    finally:
        rescuer.kill()
        rescuer.wait(timeout=10)
    assert final["status"] == "succeeded", final
    assert final["replace_calls"] == 1
    assert final["requeue_calls"] == 1
    assert final["spares"] == ["gpu-07"] and final["replacement"] == "gpu-06"
    replace_rows = [step for step in final["steps"] if step[0] == "replace"]
    assert replace_rows == [
        ["replace", "started", 1, "doomed"],
        ["replace", "skipped", 2, "rescuer"],
    ]
    rescued = [step[0] for step in final["steps"] if step[3] == "rescuer"]
    assert rescued[0] == "replace" and "validate" in rescued and rescued[-1] == "release_jobs"
