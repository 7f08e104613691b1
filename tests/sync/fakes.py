"""Test doubles for the sync tests: a Slurm CLI that answers from the real
22.05 samples, and the simulator with the slurm.conf it otherwise lacks."""

from __future__ import annotations

from pathlib import Path

from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm_cli import CommandResult

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
SAMPLES_22_05 = SAMPLES / "22.05"
SAMPLES_24_11 = SAMPLES / "24.11"
UNREACHABLE = "slurm_load_partitions: Unable to contact slurm controller (connect failure)"
SLURM_CONF = """\
ClusterName=lab
SlurmctldHost=localhost
PartitionName=gpu Nodes=gpu-[01-04] Default=YES MaxTime=INFINITE State=UP
PartitionName=spare Nodes=gpu-[05-06,09] Default=NO MaxTime=INFINITE State=UP
"""


class SampleSlurm:
    """A runner for SlurmBackend answering each read with a captured 22.05 output."""

    def __init__(self) -> None:
        self.controller_up = True
        self.outputs = {
            ("sinfo", "--version"): "slurm-wlm 22.05.8\n",
            ("scontrol", "show", "config"): (
                "Configuration data as of 2026-11-29T08:20:00\n"
                "AccountingStorageType   = (null)\n"
                "ClusterName             = lab\n"
                "SLURM_VERSION           = 22.05.8\n"
            ),
            ("scontrol", "-o", "show", "partition"): sample("scontrol_show_partition.txt"),
            ("sinfo", "--json"): sample("sinfo.json"),
            ("squeue", "--json"): sample("squeue.json"),
        }

    def __call__(self, args, *, input_text=None, timeout=None, env=None) -> CommandResult:
        args = tuple(args)
        # `sinfo --version` is answered by the client alone, controller or not.
        if not self.controller_up and args != ("sinfo", "--version"):
            return CommandResult(args, 1, "", UNREACHABLE + "\n")
        if args not in self.outputs:
            return CommandResult(args, 1, "", f"unexpected command {args}\n")
        return CommandResult(args, 0, self.outputs[args], "")


def sample(name: str) -> str:
    return (SAMPLES_22_05 / name).read_text()


def sample_backend(tmp_path) -> tuple[SlurmBackend, SampleSlurm]:
    conf = tmp_path / "slurm.conf"
    conf.write_text(SLURM_CONF)
    runner = SampleSlurm()
    return SlurmBackend(str(conf), runner=runner), runner


class SimWithSlurmConf:
    """The simulator plus slurm.conf and a controller restart, which revert
    every partition to the membership it started with."""

    def __init__(self, sim) -> None:
        self.sim = sim
        self.conf = {p.name: p.nodes for p in sim.partitions()}
        self.boots = 0

    def controller_generation(self) -> str:
        return f"boot {self.boots}"

    def __getattr__(self, name):
        return getattr(self.sim, name)

    def configured_partitions(self) -> dict[str, tuple[str, ...]]:
        return dict(self.conf)

    def restart_controller(self) -> None:
        self.boots += 1
        for name, nodes in self.conf.items():
            self.sim.set_partition_nodes(name, nodes)

    def move(self, node: str, source: str, target: str) -> None:
        members = {p.name: list(p.nodes) for p in self.sim.partitions()}
        self.sim.set_partition_nodes(target, [*members[target], node])
        self.sim.set_partition_nodes(source, [n for n in members[source] if n != node])
