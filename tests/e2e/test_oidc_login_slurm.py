"""Alice logs in with the site's identity provider and her job runs as her own Unix account.

Everything is real: the provider (deploy/oidc-provider) whose form she signs in
on, the portal on the local Slurm (slurm_portal_server.py), and Slurm, which
reports the job as alice's and runs it as alice: the job prints `id -un`, and
her job page shows that output. Run it under `flock /tmp/minicluster.lock`.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.e2e.conftest import (
    expect,
    free_port,
    job_workdir,
    launch_slurm_portal,
    require_browser,
    watch_for_problems,
)
from tests.oidc_provider import sso_log_in, start_provider
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slurm, pytest.mark.oidc]


@pytest.fixture
def oidc_slurm_portal(request, slurm, tmp_path):
    # On `slurm`: the portal stops before the cluster is brought back to its known state.
    require_browser()
    port = free_port()
    provider = start_provider(
        tmp_path / "provider", free_port(), [f"http://127.0.0.1:{port}/oidc/callback/"]
    )
    try:
        yield from launch_slurm_portal(request, tmp_path, port=port, **provider.portal_settings())
    finally:
        provider.stop()


@pytest.fixture
def workdir():
    with job_workdir("oidc") as path:
        yield path


def test_alice_logs_in_through_the_provider_and_slurm_runs_her_job_as_alice(
    page, oidc_slurm_portal, slurm, workdir
):
    portal = oidc_slurm_portal
    problems = watch_for_problems(page)
    started = time.monotonic()
    sso_log_in(page, portal.url, "alice")
    expect(page.locator("header .who")).to_have_text("alice · researcher")
    print(f"OIDC log-in round trip on the Slurm portal: {time.monotonic() - started:.2f} s")

    page.goto(f"{portal.url}/jobs/new")
    page.get_by_label("Job name").fill("oidc-whoami")
    page.get_by_label("Partition").select_option("train")
    page.get_by_label("Nodes").fill("1")
    page.get_by_label("GPUs per node").fill("1")
    page.get_by_label("Time limit (minutes)").fill("5")
    page.get_by_label("Working directory").fill(str(workdir))
    page.get_by_label("Template", exact=True).select_option("custom")
    page.get_by_label("Command or script body").fill('echo "running as $(id -un)"\nsleep 30')
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/[\w.-]+/\d+/$"), timeout=30_000)
    job_id = int(page.url.rstrip("/").rsplit("/", 1)[1])

    wait_for(lambda: slurm.job(job_id).state == "RUNNING", 60, "the job to start")
    assert slurm.job(job_id).user == "alice"
    output = workdir / f"oidc-whoami-{job_id}.out"  # the form's --output=%x-%j.out
    wait_for(lambda: output.exists() and "running as" in output.read_text(), 60, "its output")
    assert output.read_text().strip() == "running as alice"
    assert output.owner() == "alice"

    page.reload()
    expect(page.locator("#job-facts dt:text-is('Unix user') + dd")).to_have_text("alice")
    expect(page.locator("#job-output-stdout")).to_contain_text("running as alice", timeout=15_000)
    problems.assert_none()
