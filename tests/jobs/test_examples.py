"""The example trainers keep the checkpoint contract: save on USR1, resume after a kill."""

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class Output:
    """Collects a process's stdout lines on a thread so tests can wait with a deadline."""

    def __init__(self, proc):
        self.lines, self._queue = [], queue.Queue()
        threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True).start()

    def _pump(self, stream):
        for line in stream:
            self._queue.put(line.rstrip("\n"))

    def wait_for(self, pattern, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines:
                if match := re.fullmatch(pattern, line):
                    return match
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no line matching {pattern!r} in {self.lines[-5:]}"
            try:
                self.lines.append(self._queue.get(timeout=remaining))
            except queue.Empty:
                continue


def start_loop(checkpoint_dir, *args):
    argv = [sys.executable, str(EXAMPLES / "checkpoint_loop.py"), "--checkpoint-dir"]
    proc = subprocess.Popen([*argv, str(checkpoint_dir), *args], stdout=subprocess.PIPE, text=True)
    return proc, Output(proc)


def test_checkpoint_loop_saves_on_usr1_and_resumes_after_being_killed(tmp_path):
    proc, out = start_loop(
        tmp_path, "--steps", "100000", "--save-every", "100000", "--sleep", "0.01"
    )
    out.wait_for(r"step=5 loss=.*")
    proc.send_signal(signal.SIGUSR1)
    saved = int(out.wait_for(r"checkpoint saved step=(\d+)").group(1))
    # A hard kill, as when a node dies: only what was checkpointed survives.
    proc.kill()
    proc.wait(timeout=10)
    assert saved >= 5
    assert json.loads((tmp_path / "checkpoint.json").read_text())["step"] == saved

    proc, out = start_loop(tmp_path, "--steps", str(saved + 3), "--sleep", "0")
    assert proc.wait(timeout=30) == 0
    out.wait_for(rf"step={saved + 3} loss=.*")
    steps = [line.split()[0] for line in out.lines if line.startswith("step=")]
    assert out.lines[0] == f"resumed from step {saved}"
    assert steps == [f"step={saved + n}" for n in (1, 2, 3)]


def test_checkpoint_loop_keeps_training_after_a_usr1_checkpoint(tmp_path):
    proc, out = start_loop(
        tmp_path, "--steps", "100000", "--save-every", "100000", "--sleep", "0.01"
    )
    out.wait_for(r"step=3 loss=.*")
    proc.send_signal(signal.SIGUSR1)
    saved = int(out.wait_for(r"checkpoint saved step=(\d+)").group(1))
    out.wait_for(rf"step={saved + 2} loss=.*")
    proc.kill()
    proc.wait(timeout=10)


def test_checkpoint_loop_saves_and_exits_on_term(tmp_path):
    proc, out = start_loop(
        tmp_path, "--steps", "100000", "--save-every", "100000", "--sleep", "0.01"
    )
    out.wait_for(r"step=3 loss=.*")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM
    saved = int(out.wait_for(r"checkpoint saved step=(\d+)").group(1))
    assert json.loads((tmp_path / "checkpoint.json").read_text())["step"] == saved


def test_checkpoint_loop_saves_every_n_steps(tmp_path):
    proc, out = start_loop(tmp_path, "--steps", "7", "--save-every", "3")
    assert proc.wait(timeout=30) == 0
    out.wait_for(r"checkpoint saved step=7")
    saves = [line for line in out.lines if line.startswith("checkpoint saved")]
    assert saves == [f"checkpoint saved step={n}" for n in (3, 6, 7)]


def test_checkpoint_loop_takes_its_directory_from_medbay_checkpoint_dir(tmp_path):
    script = str(EXAMPLES / "checkpoint_loop.py")
    env = {"MEDBAY_CHECKPOINT_DIR": str(tmp_path / "ckpt"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, script, "--steps", "2"], env=env, timeout=30)
    assert result.returncode == 0
    assert json.loads((tmp_path / "ckpt" / "checkpoint.json").read_text())["step"] == 2


def start_batch_script(folder, restart_count: int):
    """examples/checkpoint_job.sbatch run by bash in FOLDER, as slurmd would run it."""
    for name in ("checkpoint_loop.py", "checkpointing.py"):  # the trainer and its helper
        shutil.copy(EXAMPLES / name, folder / name)
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_RESTART_COUNT": str(restart_count),
        "SLURM_JOB_NODELIST": "gpu-[01-02]",
        "TRAIN_STEPS": "100000",
        "STEP_SLEEP_S": "0.01",
    }
    script = str(EXAMPLES / "checkpoint_job.sbatch")
    proc = subprocess.Popen(
        ["bash", script], cwd=folder, env=env, stdout=subprocess.PIPE, text=True
    )
    return proc, Output(proc)


def test_the_example_batch_script_forwards_usr1_and_term_and_resumes_when_requeued(tmp_path):
    proc, out = start_batch_script(tmp_path, restart_count=0)
    out.wait_for(r"attempt restart_count=0 nodes=gpu-\[01-02\]")
    out.wait_for(r"step=3 loss=.*")
    proc.send_signal(signal.SIGUSR1)  # what `scancel --signal=USR1 --batch` does
    saved = int(out.wait_for(r"checkpoint saved step=(\d+)").group(1))
    out.wait_for(rf"step={saved + 2} loss=.*")  # and it keeps training
    proc.send_signal(signal.SIGTERM)  # what Slurm sends when it requeues the job
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM  # the trainer's own status
    last = int(out.wait_for(rf"checkpoint saved step=(?!{saved}$)(\d+)").group(1))
    assert last > saved
    assert (tmp_path / "checkpoints" / "checkpoint.json").exists()

    proc, out = start_batch_script(tmp_path, restart_count=1)
    out.wait_for(r"attempt restart_count=1 nodes=.*")
    out.wait_for(rf"resumed from step {last}")
    proc.kill()
    proc.wait(timeout=10)


def run_ddp(checkpoint_dir, steps):
    pytest.importorskip("torch")
    argv = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        str(EXAMPLES / "ddp_train.py"), "--steps", str(steps), "--save-every", "2",
        "--checkpoint-dir", str(checkpoint_dir),
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def test_ddp_train_on_two_processes_checkpoints_and_resumes(tmp_path):
    first = run_ddp(tmp_path, steps=4)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "checkpoint saved step=4" in first.stdout
    assert "resumed from" not in first.stdout
    assert (tmp_path / "checkpoint.pt").exists()

    second = run_ddp(tmp_path, steps=6)
    assert second.returncode == 0, second.stderr[-2000:]
    lines = second.stdout.splitlines()
    assert lines[0] == "resumed from step 4"
    assert [line.split()[0] for line in lines if line.startswith("step=")] == ["step=5", "step=6"]
