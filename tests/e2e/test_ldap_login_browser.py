"""Log-in with the site's directory, in Chromium, on a real slapd and the real local Slurm.

alice, dave and erin exist only in the test directory (deploy/ldap/up); the
portal's one local account is `admin`. Alice logs in with her directory
password, submits a job from the form and Slurm runs it as Unix user alice;
dave is an admin and erin a manager because of their groups; taken out of
ml-users, alice's next log-in has no researcher role; frank's disabled account
cannot log in; with slapd stopped the log-in page says so and the local admin
still logs in.
"""

from __future__ import annotations

import pwd
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    expect,
    free_port,
    job_workdir,
    launch_slurm_portal,
    log_in,
    require_browser,
    watch_for_problems,
)
from tests.e2e.portal_server import PASSWORD
from tests.identity import directory as ldap_directory
from tests.identity.directory import (
    add_member,
    directory,  # noqa: F401 (fixture)
    password_of,
    remove_member,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slurm, pytest.mark.ldap, pytest.mark.integration]

BODY = "id -un\nsleep 300\n"
NO_ROLE = "You do not have permission to see this page."  # the 403 page


@pytest.fixture(scope="module")
def ldap_portal(request, minicluster, directory, tmp_path_factory):  # noqa: F811
    require_browser()
    port = free_port()
    portal_settings = {
        name: value
        for name, value in directory.items()
        if name.startswith("MEDBAY_LDAP_") and "ADMIN" not in name and name != "MEDBAY_LDAP_STATE"
    }
    yield from launch_slurm_portal(
        request,
        tmp_path_factory.mktemp("ldap-portal"),
        script="tests/e2e/ldap_portal_server.py",
        port=port,
        **portal_settings,
    )


@pytest.fixture
def workdir():
    with job_workdir("ldap") as path:
        yield path


def directory_log_in(page, portal, username: str) -> float:
    """Logs in with the directory password; returns the seconds until the next page loaded."""
    started = time.monotonic()
    log_in(page, portal, username, password_of(username))
    page.wait_for_load_state("load")
    return time.monotonic() - started


def who(page):
    return page.locator(".topbar .who")


def log_out(page) -> None:
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/login/"))


def submit_from_the_form(page, portal, workdir: Path) -> int:
    page.goto(f"{portal.url}/jobs/new")
    page.get_by_label("Job name").fill("ldap-alice")
    page.get_by_label("Partition").select_option("train")
    page.get_by_label("Nodes").fill("1")
    page.get_by_label("GPUs per node").fill("1")
    page.get_by_label("Time limit (minutes)").fill("10")
    page.get_by_label("Working directory").fill(str(workdir))
    page.get_by_label("Template", exact=True).select_option("custom")
    page.get_by_label("Command or script body").fill(BODY)
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/[\w.-]+/\d+/$"), timeout=30_000)
    return int(page.url.rstrip("/").rsplit("/", 1)[1])


def test_alice_logs_in_with_her_directory_password_and_slurm_runs_her_job_as_alice(
    page, ldap_portal, slurm, workdir
):
    problems = watch_for_problems(page)

    seconds = directory_log_in(page, ldap_portal, "alice")

    expect(page).to_have_url(f"{ldap_portal.url}/")
    expect(who(page)).to_have_text("alice · researcher")
    print(f"alice's directory log-in took {seconds:.2f} s in the browser")
    job_id = submit_from_the_form(page, ldap_portal, workdir)
    wait_for(lambda: slurm.job(job_id).state == "RUNNING", 60, "alice's job to start")
    shown = subprocess.run(
        ["scontrol", "show", "job", str(job_id)], capture_output=True, text=True, check=True
    ).stdout
    alice_uid = pwd.getpwnam("alice").pw_uid
    assert f"UserId=alice({alice_uid})" in shown, shown
    output = workdir / f"ldap-alice-{job_id}.out"  # the form's --output=%x-%j.out
    wait_for(lambda: output.exists() and output.read_text().strip(), 60, "the job's output")
    assert output.read_text().splitlines()[0] == "alice"
    assert output.stat().st_uid == alice_uid
    unix_user = page.locator("dt", has_text="Unix user").locator("xpath=following-sibling::dd[1]")
    expect(unix_user).to_have_text("alice", timeout=15_000)
    problems.assert_none()


@pytest.mark.parametrize(
    ("username", "shown", "reports"),
    [("dave", "dave · admin", True), ("erin", "erin · manager", True)],
)
def test_directory_groups_make_dave_an_admin_and_erin_a_manager(
    page, ldap_portal, username, shown, reports
):
    problems = watch_for_problems(page)

    directory_log_in(page, ldap_portal, username)

    expect(page).to_have_url(f"{ldap_portal.url}/")
    expect(who(page)).to_have_text(shown)
    expect(page.get_by_role("link", name="Reports")).to_be_visible()
    problems.assert_none()


def test_taken_out_of_ml_users_alice_logs_in_next_time_without_the_researcher_role(
    page,
    ldap_portal,
    directory,  # noqa: F811
):
    directory_log_in(page, ldap_portal, "alice")
    expect(who(page)).to_have_text("alice · researcher")
    log_out(page)
    remove_member(directory, "ml-users", "alice")
    try:
        directory_log_in(page, ldap_portal, "alice")
        # The board is for Medbay's roles: she is logged in, and told she has none.
        expect(who(page)).to_have_text("alice")
        expect(page.locator(".error")).to_contain_text(NO_ROLE)
        page.goto(f"{ldap_portal.url}/jobs/new")
        expect(page.locator(".error")).to_contain_text(NO_ROLE)
        log_out(page)
    finally:
        add_member(directory, "ml-users", "alice")

    directory_log_in(page, ldap_portal, "alice")
    expect(who(page)).to_have_text("alice · researcher")


def test_a_disabled_account_cannot_log_in_and_the_page_says_why(page, ldap_portal):
    problems = watch_for_problems(page)

    directory_log_in(page, ldap_portal, "frank")

    expect(page).to_have_url(re.compile(r"/login/$"))
    expect(page.get_by_role("alert")).to_have_text(
        "This account is disabled in the site directory."
    )
    expect(who(page)).to_have_count(0)
    problems.assert_none()


def test_with_the_directory_down_the_log_in_page_says_so_and_the_local_admin_still_logs_in(
    page, ldap_portal
):
    problems = watch_for_problems(page)
    ldap_directory.down()
    try:
        directory_log_in(page, ldap_portal, "alice")
        expect(page).to_have_url(re.compile(r"/login/$"))
        expect(page.get_by_role("alert")).to_contain_text(
            "The site directory cannot be reached, so directory accounts cannot log in right now."
        )
        log_in(page, ldap_portal, "admin", PASSWORD)
        expect(page).to_have_url(f"{ldap_portal.url}/")
        expect(who(page)).to_have_text("admin · admin")
    finally:
        ldap_directory.up()
    problems.assert_none()
    completed = subprocess.run(
        [str(ldap_directory.REPO / "deploy" / "ldap" / "status")], capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stdout
