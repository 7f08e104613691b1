"""Processes for the crash-recovery test: seed, work (the real run_engine command), report.

The simulator normally lives in one process's memory; here its state is kept in
a file, locked around every call, so that a worker killed with SIGKILL and the
worker that takes over see the same cluster, as two engine hosts see one Slurm.
With MEDBAY_CRASH_AFTER=<method> the worker stops dead right after that call
has changed the cluster and before the engine could record it, which is where
a crash hurts most.

    python tests/remediation/crash_worker.py seed|work|report  (STATE dir in MEDBAY_CRASH_STATE)
"""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STATE_FIELDS = ("_nodes", "_partitions", "_jobs", "_next_job_id", "now")
ACTIONS = frozenset({"drain_node", "fail_node", "signal_job", "requeue_job", "replace", "cordon"})


class FileBackedCluster:
    """A SimulatedCluster whose state is loaded from and saved to a file on every call."""

    name = "simulated"

    def __init__(self, folder: Path):
        self.folder = folder
        self.state = folder / "sim.pickle"
        self.calls = folder / "calls.log"

    def save(self, sim) -> None:
        self.state.write_bytes(pickle.dumps({name: getattr(sim, name) for name in STATE_FIELDS}))

    def load(self):
        from clusters.backends.simulated import SimulatedCluster

        sim = SimulatedCluster(seed=1, fault_rate_per_gpu_day=0)
        for name, value in pickle.loads(self.state.read_bytes()).items():
            setattr(sim, name, value)
        return sim

    # The simulator's capabilities, defined here and not only forwarded: from Python
    # 3.12, isinstance() looks a capability up on the class, where __getattr__ is unseen.
    def nodes_named(self, names):
        return self.__getattr__("nodes_named")(names)

    def gpu_health(self, node):
        return self.__getattr__("gpu_health")(node)

    def repair_gpu(self, node, gpu):
        return self.__getattr__("repair_gpu")(node, gpu)

    def __getattr__(self, name):
        from clusters.backends.simulated import SimulatedCluster

        if name.startswith("_") or not callable(getattr(SimulatedCluster, name, None)):
            raise AttributeError(name)

        def call(*args, **kwargs):
            with open(self.folder / "lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                sim = self.load()
                result = getattr(sim, name)(*args, **kwargs)
                self.save(sim)
                if name in ACTIONS:
                    with open(self.calls, "a") as log:
                        log.write(json.dumps([name, os.getpid(), [str(a) for a in args]]) + "\n")
            if name == os.environ.get("MEDBAY_CRASH_AFTER"):
                (self.folder / "crash-point").write_text(str(os.getpid()))
                time.sleep(3600)  # the test kills us here with SIGKILL
            return result

        return call


def setup_django() -> FileBackedCluster:
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    return FileBackedCluster(Path(os.environ["MEDBAY_CRASH_STATE"]))


def seed(cluster_file: FileBackedCluster) -> None:
    from django.core.management import call_command

    from clusters.backends.base import JobSubmission
    from clusters.backends.simulated import SimulatedCluster
    from clusters.models import Cluster, Node
    from remediation.services import create_run
    from sync.cycle import apply_snapshot

    call_command("migrate", verbosity=0)
    sim = SimulatedCluster.standard(train=4, infer=1, spare=2, seed=7)
    sim.fault_rate_per_gpu_day = 0
    script = "#!/bin/bash\n#SBATCH --partition=train\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:8\n"
    sim.submit_job(JobSubmission(script=script + "srun train\n", user="alice"))
    sim.advance(__import__("datetime").timedelta(seconds=1))
    cluster_file.save(sim)
    cluster = Cluster.objects.create(name="crash", backend="simulated")
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())
    run = create_run(
        Node.objects.get(name="gpu-02"),
        "replace",
        trigger="admin",
        reason="crash test",
        context={"grace_s": 0, "verify_after_s": 0},
    )
    print(run.pk)


def work(cluster_file: FileBackedCluster, argv: list[str]) -> None:
    from django.core.management import call_command

    from clusters.backends import registry

    registry.use(cluster_file, cluster_file)
    call_command("run_engine", *argv)


def report(cluster_file: FileBackedCluster) -> None:
    from remediation.models import Remediation

    run = Remediation.objects.get()
    sim = cluster_file.load()
    calls = cluster_file.calls.read_text().splitlines() if cluster_file.calls.exists() else []
    print(
        json.dumps(
            {
                "status": run.status,
                "message": run.message,
                "replacement": run.context.get("replacement"),
                "steps": list(run.steps.values_list("name", "outcome", "attempt", "worker")),
                "replace_calls": sum(json.loads(line)[0] == "replace" for line in calls),
                "requeue_calls": sum(json.loads(line)[0] == "requeue_job" for line in calls),
                "spares": sim.spare_capacity(),
            }
        )
    )


if __name__ == "__main__":
    files = setup_django()
    command, rest = sys.argv[1], sys.argv[2:]
    {
        "seed": lambda: seed(files),
        "work": lambda: work(files, rest),
        "report": lambda: report(files),
    }[command]()
