"""A training loop without torch that keeps Medbay's checkpoint contract.

The contract, shared with ddp_train.py:
- checkpoints go to $MEDBAY_CHECKPOINT_DIR (or --checkpoint-dir), written atomically;
- SIGUSR1 saves a checkpoint at the next step and keeps training;
- SIGTERM saves a checkpoint and exits (Slurm sends it before killing a requeued job);
- a restart resumes from the latest checkpoint and prints `resumed from step N`;
- every step prints `step=N loss=X`.

Gradient descent on f(x) = x**2 stands in for a model, so fast tests can run it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

CHECKPOINT_NAME = "checkpoint.json"
LEARNING_RATE = 0.05


class SignalFlags:
    """Signals only set flags; the loop acts on them between steps, never mid-update."""

    def __init__(self):
        self.save = False
        self.stop = False
        signal.signal(signal.SIGUSR1, self._on_usr1)
        signal.signal(signal.SIGTERM, self._on_term)

    def _on_usr1(self, _signum, _frame):
        self.save = True

    def _on_term(self, _signum, _frame):
        self.stop = True

    def take_save(self):
        # Clear on read, so a USR1 arriving while we save asks for one more checkpoint.
        save, self.save = self.save, False
        return save


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per step")
    parser.add_argument("--checkpoint-dir", default=os.environ.get("MEDBAY_CHECKPOINT_DIR"))
    args = parser.parse_args(argv)
    if not args.checkpoint_dir:
        parser.error("set --checkpoint-dir or MEDBAY_CHECKPOINT_DIR")
    return args


def load_checkpoint(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def save_checkpoint(path, state):
    # Write aside and rename: a kill mid-write must leave the previous checkpoint intact.
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def progress_reporter():
    # Medbay's reporter is optional: the example also runs where medbay is not installed.
    try:
        from jobs.launcher import report_progress
    except ImportError:
        return lambda step, checkpoint_saved=False: False
    return report_progress


def train_step(state):
    state["x"] -= LEARNING_RATE * 2 * state["x"]
    state["step"] += 1
    state["loss"] = state["x"] ** 2


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    path = os.path.join(args.checkpoint_dir, CHECKPOINT_NAME)
    state = load_checkpoint(path)
    if state is None:
        state = {"step": 0, "x": 10.0, "loss": 100.0}
    else:
        print(f"resumed from step {state['step']}", flush=True)
    flags = SignalFlags()
    report = progress_reporter()
    while state["step"] < args.steps:
        train_step(state)
        print(f"step={state['step']} loss={state['loss']:.6f}", flush=True)
        due = state["step"] % args.save_every == 0 or state["step"] == args.steps
        if flags.take_save() or due or flags.stop:
            save_checkpoint(path, state)
            print(f"checkpoint saved step={state['step']}", flush=True)
            report(state["step"], checkpoint_saved=True)
        if flags.stop:
            return 128 + signal.SIGTERM
        time.sleep(args.sleep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
