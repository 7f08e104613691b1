"""A small PyTorch DDP training run that keeps Medbay's checkpoint contract.

Linear regression on synthetic data (fixed seed), CPU and the gloo backend. Runs under
torchrun (`torchrun --nproc_per_node 2 examples/ddp_train.py`) or as a single process.

The contract, shared with checkpoint_loop.py (checkpointing.py, beside it, holds the
shared part):
- checkpoints (step, model, optimizer, last loss) go to $MEDBAY_CHECKPOINT_DIR (or
  --checkpoint-dir), written atomically, every --save-every steps and on SIGUSR1;
- SIGTERM saves a checkpoint and exits (Slurm sends it before killing a requeued job);
- a restart resumes from the latest checkpoint and prints `resumed from step N`;
- every step prints `step=N loss=X` (rank 0).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from checkpointing import (
    SignalFlags,
    checkpoint_arguments,
    parse_checkpoint_args,
    progress_reporter,
    write_atomically,
)
from torch.nn.parallel import DistributedDataParallel

CHECKPOINT_NAME = "checkpoint.pt"
FEATURES = 8
SAMPLES = 1024
BATCH = 32


def parse_args(argv):
    parser = checkpoint_arguments(__doc__.splitlines()[0], steps=200, save_every=50)
    parser.add_argument("--lr", type=float, default=0.1)
    return parse_checkpoint_args(parser, argv)


def setup_distributed():
    # torchrun sets WORLD_SIZE; a plain `python ddp_train.py` trains alone.
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def make_shard(rank, world_size):
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(SAMPLES, FEATURES, generator=generator)
    true_weights = torch.linspace(-1.0, 1.0, FEATURES).unsqueeze(1)
    targets = inputs @ true_weights + 0.5 + 0.01 * torch.randn(SAMPLES, 1, generator=generator)
    return inputs[rank::world_size], targets[rank::world_size]


def batch_for(step, inputs, targets):
    # The batch depends only on the step, so a resumed run sees the data it would have seen.
    index = (step * BATCH + torch.arange(BATCH)) % len(inputs)
    return inputs[index], targets[index]


def agree(flags, world_size):
    """Every rank must checkpoint or stop at the same step, even if one got the signal."""
    wanted = torch.tensor([float(flags.take_save()), float(flags.stop)])
    if world_size > 1:
        dist.all_reduce(wanted, op=dist.ReduceOp.MAX)
    return bool(wanted[0]), bool(wanted[1])


def load_checkpoint(path, model, optimizer):
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["step"]


def save_checkpoint(path, step, model, optimizer, loss):
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "loss": loss,
    }
    write_atomically(path, lambda tmp: torch.save(state, tmp))


def train(args, rank, world_size):
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
    path = os.path.join(args.checkpoint_dir, CHECKPOINT_NAME)
    step = load_checkpoint(path, model, optimizer)
    if step and rank == 0:
        print(f"resumed from step {step}", flush=True)
    ddp_model = DistributedDataParallel(model) if world_size > 1 else model
    inputs, targets = make_shard(rank, world_size)
    flags, report = SignalFlags(), progress_reporter()
    while step < args.steps:
        batch_inputs, batch_targets = batch_for(step, inputs, targets)
        loss = torch.nn.functional.mse_loss(ddp_model(batch_inputs), batch_targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if rank == 0:
            print(f"step={step} loss={loss.item():.6f}", flush=True)
        save, stop = agree(flags, world_size)
        due = save or stop or step % args.save_every == 0 or step == args.steps
        # Ranks hold identical weights after each step, so rank 0 saves for everyone.
        if due and rank == 0:
            save_checkpoint(path, step, model, optimizer, loss.item())
            print(f"checkpoint saved step={step}", flush=True)
            report(step, checkpoint_saved=True)
        if stop:
            return 128 + signal.SIGTERM
        time.sleep(args.sleep)
    return 0


def main(argv=None):
    args = parse_args(argv)
    rank, world_size = setup_distributed()
    try:
        return train(args, rank, world_size)
    finally:
        if world_size > 1:
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
