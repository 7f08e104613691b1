"""Medbay's checkpoint contract, shared by checkpoint_loop.py and ddp_train.py.

Copy this file beside the trainer: it needs nothing but the standard library.
- checkpoints go to $MEDBAY_CHECKPOINT_DIR (or --checkpoint-dir), written atomically;
- SIGUSR1 saves a checkpoint at the next step and keeps training;
- SIGTERM saves a checkpoint and exits (Slurm sends it before killing a requeued job).
"""

from __future__ import annotations

import argparse
import os
import signal


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


def checkpoint_arguments(description: str, *, steps: int, save_every: int):
    """A parser with the options every trainer shares; `parse_checkpoint_args` reads it."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--save-every", type=int, default=save_every)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per step")
    parser.add_argument("--checkpoint-dir", default=os.environ.get("MEDBAY_CHECKPOINT_DIR"))
    return parser


def parse_checkpoint_args(parser, argv):
    args = parser.parse_args(argv)
    if not args.checkpoint_dir:
        parser.error("set --checkpoint-dir or MEDBAY_CHECKPOINT_DIR")
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    return args


def write_atomically(path, write):
    """WRITE(tmp) writes the checkpoint aside, then it is renamed over PATH: a kill
    mid-write must leave the previous checkpoint intact."""
    tmp = f"{path}.tmp"
    write(tmp)
    os.replace(tmp, path)


def progress_reporter():
    # Medbay's reporter is optional: the examples also run where medbay is not installed.
    try:
        from jobs.launcher import report_progress
    except ImportError:
        return lambda step, checkpoint_saved=False: False
    return report_progress
