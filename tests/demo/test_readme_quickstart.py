"""The README's "Quick start" block, run as written, recovers a GPU on the real Slurm.

The commands between `<!-- quickstart:begin -->` and `<!-- quickstart:end -->`
are run by bash (`set -euo pipefail`) from the repository's root against the
shared minicluster, with three substitutions so that it cannot collide with
anyone: its own SQLite database (DATABASE_URL, which the block leaves to the
environment), its own port instead of 8000 and its own folder instead of
/tmp/medbay-agent. The recovery is then read from the API as the admin the
block created, and from Slurm. Afterwards the portal and agent it left running
are stopped and the nodes are given back as they were found.

Run it under `flock /tmp/minicluster.lock`, like every test on the shared cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.conftest import free_port
from tests.plugins.slurm_cluster import clean_up

pytestmark = [pytest.mark.slurm, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- quickstart:begin -->", "<!-- quickstart:end -->"
RECOVERY_TIMEOUT_S = 120


def quickstart_block(readme: str) -> str:
    """The shell commands inside the marked fenced block."""
    assert readme.count(BEGIN) == 1 and readme.count(END) == 1, "one marked quick start"
    marked = readme.split(BEGIN, 1)[1].split(END, 1)[0]
    fenced = re.fullmatch(r"\s*```sh\n(.*?)```\s*", marked, re.S)
    assert fenced, "the quick start markers surround exactly one ```sh block"
    return fenced.group(1)


def test_the_quick_start_block_is_found_and_names_every_step():
    block = quickstart_block((REPO / "README.md").read_text())
    for step in (
        "deploy/minicluster/up",
        "manage.py migrate",
        "manage.py medbay_user add alice --role researcher --unix-user alice",
        "manage.py medbay_user add admin --role admin",
        "manage.py serve",
        "manage.py node_token gpu-02",
        "medbay-agent run --portal http://127.0.0.1:8000 --node gpu-02",
        "NVRM: Xid",
    ):
        assert step in block, step


def snapshot(backend) -> dict:
    """What the test must give back: each node's partitions, state and reason."""
    nodes = {node.name: (node.state, sorted(node.flags), node.reason) for node in backend.nodes()}
    partitions = {p.name: tuple(p.nodes) for p in backend.partitions()}
    return {"nodes": nodes, "partitions": partitions}


def api(url: str, token: str | None = None, data: dict | None = None) -> dict:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    body = json.dumps(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def wait_for_recovery(portal: str, token: str, log: Path) -> dict:
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    runs = []
    while time.monotonic() < deadline:
        runs = api(f"{portal}/api/v1/remediations/?node=gpu-02", token)["results"]
        if any(run["status"] in ("succeeded", "failed", "needs_attention") for run in runs):
            return runs[0]
        time.sleep(1)
    raise AssertionError(
        f"no finished run for gpu-02 within {RECOVERY_TIMEOUT_S}s: {runs}\n"
        f"{log.read_text()[-3000:] if log.exists() else ''}"
    )


@pytest.fixture
def nodes_given_back(slurm):
    before = snapshot(slurm)
    assert not before["nodes"]["gpu-02"][1], f"gpu-02 is not idle to begin with: {before}"
    yield before
    clean_up(slurm)
    deadline = time.monotonic() + 30
    while snapshot(slurm) != before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert snapshot(slurm) == before, "the nodes were not given back as they were found"


def test_the_readme_quick_start_recovers_gpu_02_with_a_spare(tmp_path, nodes_given_back, slurm):
    port = free_port()
    folder = tmp_path / "agent"
    serve_log = tmp_path / "serve.log"
    script = (
        quickstart_block((REPO / "README.md").read_text())
        .replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        .replace("/tmp/medbay-agent", str(folder))
        .replace("> medbay-serve.log", f"> {serve_log}")
    )
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'quickstart.sqlite3'}"
    started = time.monotonic()
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # serve and the agent it leaves running: one group to stop
    )
    try:
        output, _ = process.communicate(timeout=180)
        assert process.returncode == 0, f"the quick start failed:\n{output[-4000:]}"
        passwords = re.findall(r"^Password: (\S+)$", output, re.M)
        assert len(passwords) == 2, output
        portal = f"http://127.0.0.1:{port}"
        token = api(
            f"{portal}/api/v1/auth/token/", data={"username": "admin", "password": passwords[1]}
        )["token"]

        run = wait_for_recovery(portal, token, serve_log)
        elapsed = time.monotonic() - started
        assert run["action"] == "replace" and run["trigger"] != "manual", run
        assert run["status"] == "succeeded", (run, serve_log.read_text()[-3000:])
        events = api(f"{portal}/api/v1/health/events/?node=gpu-02", token)["results"]
        assert any(event["xid"] == 79 for event in events), events
        train = next(p for p in slurm.partitions() if p.name == "train")
        assert "gpu-05" in train.nodes and "gpu-02" not in train.nodes, train
        print(f"quick start: XID to replaced in {elapsed:.1f}s")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
