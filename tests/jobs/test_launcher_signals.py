"""medbay-launch with real processes: signals reach the trainer and exit codes come back."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs import launcher

LAUNCHER = launcher.__file__
SAMPLES = Path(__file__).parent / "samples"

# A stand-in trainer: reports ready with its environment, then on USR1 or TERM writes
# which signal it got and exits with TRAINER_EXIT.
TRAINER = """\
import json, os, pathlib, signal, sys, time
def on_signal(signum, _frame):
    pathlib.Path(os.environ["MARKER"]).write_text(signal.Signals(signum).name)
    sys.exit(int(os.environ.get("TRAINER_EXIT", "0")))
signal.signal(signal.SIGUSR1, on_signal)
signal.signal(signal.SIGTERM, on_signal)
pathlib.Path(os.environ["READY"]).write_text(json.dumps(dict(os.environ)))
time.sleep(60)
"""

# Like torchrun: starts the worker in its own session, installs no USR1 handler, and
# exits with the worker's status. Records the arguments it was given.
FAKE_TORCHRUN = """\
import json, os, subprocess, sys
with open(os.environ["TORCHRUN_ARGV"], "w") as f:
    json.dump(sys.argv[1:], f)
script_and_args = sys.argv[11:]
worker = subprocess.Popen([sys.executable, *script_and_args], start_new_session=True)
sys.exit(worker.wait())
"""

# Like srun inside an allocation: drops its own options and runs the task as node 0.
FAKE_SRUN = """\
import os, sys
args = sys.argv[1:]
while args[0].startswith("--"):
    args.pop(0)
os.environ["SLURM_NODEID"] = "0"
os.execv(args[0], args)
"""


@pytest.fixture
def trainer(tmp_path):
    path = tmp_path / "trainer.py"
    path.write_text(TRAINER)
    return path


def make_bin(tmp_path, **scripts):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(body if body.startswith("#!") else f"#!{sys.executable}\n{body}")
        path.chmod(0o755)
    return bin_dir


def start(argv, tmp_path, bin_dir=None, **env):
    path = f"{bin_dir}:{os.environ['PATH']}" if bin_dir else os.environ["PATH"]
    full_env = {
        **os.environ,
        "PATH": path,
        "MARKER": str(tmp_path / "marker"),
        "READY": str(tmp_path / "ready"),
        **env,
    }
    return subprocess.Popen([sys.executable, LAUNCHER, *argv], env=full_env, cwd=tmp_path)


def wait_ready(tmp_path, timeout=20):
    ready = tmp_path / "ready"
    deadline = time.monotonic() + timeout
    while not ready.exists() or not ready.read_text():
        assert time.monotonic() < deadline, "the trainer never started"
        time.sleep(0.05)
    return json.loads(ready.read_text())


def test_usr1_sent_to_the_launcher_reaches_the_trainer(tmp_path, trainer):
    proc = start(["--inner", "--", sys.executable, str(trainer)], tmp_path)
    wait_ready(tmp_path)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=20) == 0
    assert (tmp_path / "marker").read_text() == "SIGUSR1"


def test_term_sent_to_the_launcher_reaches_the_trainer(tmp_path, trainer):
    proc = start(["--inner", "--", sys.executable, str(trainer)], tmp_path)
    wait_ready(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert (tmp_path / "marker").read_text() == "SIGTERM"


def test_the_trainers_exit_code_is_the_launchers(tmp_path, trainer):
    proc = start(["--inner", "--", sys.executable, str(trainer)], tmp_path, TRAINER_EXIT="3")
    wait_ready(tmp_path)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=20) == 3


def test_a_trainer_killed_by_a_signal_exits_128_plus_the_signal(tmp_path, trainer):
    proc = start(["--inner", "--", sys.executable, str(trainer)], tmp_path)
    wait_ready(tmp_path)
    (trainer_pid,) = launcher.child_pids(proc.pid)
    os.kill(trainer_pid, signal.SIGKILL)
    assert proc.wait(timeout=20) == 128 + signal.SIGKILL


def test_a_missing_command_exits_127(tmp_path):
    proc = start(["--inner", "--", str(tmp_path / "no-such-trainer")], tmp_path)
    assert proc.wait(timeout=20) == 127


def test_under_torchrun_usr1_reaches_workers_in_their_own_session_and_torchrun_lives(
    tmp_path, trainer
):
    bin_dir = make_bin(tmp_path, torchrun=FAKE_TORCHRUN)
    argv_log = tmp_path / "torchrun-argv.json"
    proc = start(
        ["--inner", "--torchrun", "--nproc-per-node", "2", "--", str(trainer), "--lr", "1"],
        tmp_path,
        bin_dir,
        TORCHRUN_ARGV=str(argv_log),
        NNODES="2",
        SLURM_NODEID="1",
        MASTER_ADDR="gpu-01",
        MASTER_PORT="20003",
        TRAINER_EXIT="4",
    )
    wait_ready(tmp_path)
    proc.send_signal(signal.SIGUSR1)
    # torchrun surviving USR1 is what lets the worker's exit code come back.
    assert proc.wait(timeout=20) == 4
    assert (tmp_path / "marker").read_text() == "SIGUSR1"
    assert json.loads(argv_log.read_text()) == [
        "--nnodes", "2", "--node_rank", "1", "--master_addr", "gpu-01",
        "--master_port", "20003", "--nproc_per_node", "2", str(trainer), "--lr", "1",
    ]  # fmt: skip


def test_the_batch_launcher_runs_srun_with_the_fresh_nodes_and_forwards_usr1(tmp_path, trainer):
    scontrol_line = SAMPLES / "scontrol_22.05_o_show_job_3_requeued.txt"
    bin_dir = make_bin(
        tmp_path,
        srun=FAKE_SRUN,
        scontrol=f"#!/bin/sh\ncat {scontrol_line}\n",
    )
    proc = start(
        ["--", sys.executable, str(trainer)],
        tmp_path,
        bin_dir,
        SLURM_JOB_ID="3",
        SLURM_JOB_NODELIST="gpu-[01-02]",
        SLURM_RESTART_COUNT="1",
    )
    env = wait_ready(tmp_path)
    assert env["MASTER_ADDR"] == "gpu-01"
    assert env["MASTER_PORT"] == "20003"
    assert env["NNODES"] == "2"
    assert env["NODE_RANK"] == "0"
    assert env["MEDBAY_RESTART_COUNT"] == "1"
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=20) == 0
    assert (tmp_path / "marker").read_text() == "SIGUSR1"
