"""A training loop without torch that keeps Medbay's checkpoint contract.

The contract, shared with ddp_train.py (checkpointing.py, copied beside it, holds
the shared part):
- checkpoints go to $MEDBAY_CHECKPOINT_DIR (or --checkpoint-dir), written atomically;
- SIGUSR1 saves a checkpoint at the next step and keeps training;
- SIGTERM saves a checkpoint and exits (Slurm sends it before killing a requeued job);
- a restart resumes from the latest checkpoint and prints `resumed from step N`;
- every step prints `step=N loss=X`.

Gradient descent on f(x) = x**2 stands in for a model, so fast tests can run it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from checkpointing import (
    SignalFlags,
    checkpoint_arguments,
    parse_checkpoint_args,
    progress_reporter,
    write_atomically,
)

CHECKPOINT_NAME = "checkpoint.json"
LEARNING_RATE = 0.05


def parse_args(argv):
    parser = checkpoint_arguments(__doc__.splitlines()[0], steps=100, save_every=10)
    return parse_checkpoint_args(parser, argv)


def load_checkpoint(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def save_checkpoint(path, state):
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())

    write_atomically(path, write)


def train_step(state):
    state["x"] -= LEARNING_RATE * 2 * state["x"]
    state["step"] += 1
    state["loss"] = state["x"] ** 2


def main(argv=None):
    args = parse_args(argv)
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
