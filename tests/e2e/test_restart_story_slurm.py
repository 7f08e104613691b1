"""The researcher's story on the real local Slurm, in Chromium, as alice lives it.

Alice submits a checkpointing 2-node job from the form. An XID 79 line appears
in gpu-02's kernel log, where the real node agent (`medbay-agent run`) reads it
and posts it to the portal; the XID 79 policy replaces gpu-02 with spare gpu-05
through the engine (drain, USR1, grace, requeue, replace, validate, release).
Without a reload her job page then says why the job restarted — XID 79, the
GPU, the node, the spare and the step it resumed from — and its restart count
is the one `scontrol show job` prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import timezone

from clusters.backends.base import JobSubmission
from sync.nodes import HGX_8_GPU_BUS_IDS
from tests.e2e.conftest import (
    WATCH_SOCKET,
    expect,
    job_workdir,
    launch_slurm_portal,
    log_in,
    require_browser,
    wait_for_socket,
    watch_for_problems,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slurm, pytest.mark.slurm_versions]

REPO = Path(__file__).resolve().parents[2]
# The trainer in the background, so this shell runs its traps at once
# (examples/checkpoint_job.sbatch explains why).
BODY = """python3 checkpoint_loop.py --steps 1000000 --save-every 100000 --sleep 0.02 &
child=$!
trap 'kill -USR1 $child' USR1
trap 'kill -TERM $child' TERM
while kill -0 $child 2>/dev/null; do wait $child; done
"""
BLOCKER = """#!/bin/bash
#SBATCH --job-name=e2e-blocker
#SBATCH --output=/dev/null
#SBATCH --partition=train
#SBATCH --nodes=2
#SBATCH --gres=gpu:8
sleep 600
"""


@pytest.fixture
def slurm_portal(request, slurm, tmp_path):
    # On `slurm`, not only the minicluster: the portal's sync and engine then stop
    # before the cluster is brought back to its known state, instead of racing it.
    require_browser()
    yield from launch_slurm_portal(request, tmp_path)


@pytest.fixture
def workdir():
    # The trainer and its helper; the job writes its checkpoints and output here.
    with job_workdir("journey", "checkpoint_loop.py", "checkpointing.py") as path:
        yield path


@pytest.fixture
def agent(slurm_portal, tmp_path):
    """Runs the real node agent for a node, following a kernel log file."""
    started = []

    def start(node: str, kernel_log: Path) -> subprocess.Popen:
        token = slurm_portal.command("agent_token", node=node)["token"]
        token_file = tmp_path / f"{node}.token"
        token_file.write_text(token)
        process = subprocess.Popen(
            [
                sys.executable, "-m", "agent.cli", "run",
                "--portal", slurm_portal.url, "--token-file", str(token_file),
                "--kmsg", str(kernel_log), "--from-start", "--node", node,
                "--spool", str(tmp_path / f"spool-{node}"),
            ],
            cwd=REPO,
            env={**os.environ, "TZ": "UTC"},
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / f"agent-{node}.log").open("w"),
        )  # fmt: skip
        started.append(process)
        return process

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=10)


def submit_from_the_form(page, portal, workdir: Path) -> int:
    page.goto(f"{portal.url}/jobs/new")
    page.get_by_label("Job name").fill("journey-llm")
    page.get_by_label("Partition").select_option("train")
    page.get_by_label("Nodes").fill("2")
    page.get_by_label("GPUs per node").fill("8")
    page.get_by_label("Time limit (minutes)").fill("30")
    page.get_by_label("Working directory").fill(str(workdir))
    # The job's python3 reports its checkpoints with Medbay's reporter (jobs.launcher).
    page.get_by_label("Environment set-up lines").fill(f"export PYTHONPATH={REPO}")
    page.get_by_label("Template", exact=True).select_option("custom")
    page.get_by_label("Command or script body").fill(BODY)
    page.get_by_label("Checkpoint dir").fill(str(workdir / "checkpoints"))
    page.get_by_label("Auto resume").select_option("yes")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/[\w.-]+/\d+/$"), timeout=30_000)
    return int(page.url.rstrip("/").rsplit("/", 1)[1])


def test_alice_reads_why_her_job_restarted_after_an_xid_79_on_real_slurm(
    page,
    slurm_portal,
    slurm,
    workdir,
    agent,
):
    problems = watch_for_problems(page)
    page.add_init_script(WATCH_SOCKET)
    log_in(page, slurm_portal, "alice")
    job_id = submit_from_the_form(page, slurm_portal, workdir)
    wait_for(lambda: slurm.job(job_id).state == "RUNNING", 60, "the job to start")
    assert slurm.job(job_id).nodes == ("gpu-01", "gpu-02")
    output = workdir / f"journey-llm-{job_id}.out"  # the form's --output=%x-%j.out
    wait_for(lambda: output.exists() and "step=50 " in output.read_text(), 60, "training")
    blocker = slurm.submit_job(JobSubmission(script=BLOCKER, user="bob"))
    wait_for(lambda: slurm.job(blocker).state == "RUNNING", 60, "gpu-03/04 to fill up")
    summary = page.locator("#timeline-summary")
    expect(summary).to_contain_text(f"Job {job_id} has not restarted", timeout=15_000)
    wait_for_socket(page)

    kernel_log = workdir / "gpu-02-kern.log"
    stamp = timezone.now().strftime("%b %d %H:%M:%S")
    kernel_log.write_text(
        f"{stamp} gpu-02 kernel: NVRM: Xid (PCI:{HGX_8_GPU_BUS_IDS[3]}): 79, pid='<unknown>',"
        " name=<unknown>, GPU has fallen off the bus.\n"
    )
    agent("gpu-02", kernel_log)

    expect(summary).to_contain_text("It resumed at", timeout=240_000)
    text = summary.text_content()
    assert "because GPU 3 on gpu-02 reported XID 79 (GPU has fallen off the bus)" in text, text
    assert "replaced gpu-02 with spare gpu-05" in text, text
    assert "on gpu-01 and gpu-05" in text, text
    log = wait_for(
        lambda: (lambda t: t if "resumed from step" in t else None)(output.read_text()),
        60,
        "the job to resume",
    )
    resumed = int(re.search(r"resumed from step (\d+)", log).group(1))
    # The checkpoint the job wrote on TERM may be reported after the restart is
    # shown: the open page follows it, without a reload.
    try:
        expect(summary).to_contain_text(f"from the checkpoint at step {resumed:,}", timeout=30_000)
    except AssertionError as error:
        story = slurm_portal.command("job_story", job=job_id)
        raise AssertionError(f"{error}\nWhat the portal recorded: {story}") from None
    restarts = slurm.job(job_id).restart_count
    assert restarts == 1
    expect(page.locator("#job-restarts")).to_have_text(str(restarts))
    assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"
    problems.assert_none()
