"""A portal on the simulator for Prometheus to scrape while an XID storm plays.

    DATABASE_URL=sqlite:////tmp/x.sqlite3 python tests/portal/metrics_portal_server.py PORT

The e2e portal (tests/e2e/portal_server.py: its stdin commands, its engine thread and
daphne) on a larger simulated cluster, with a clock thread that moves simulated time on
and syncs, as `slurm_sync` would, so that drained nodes empty, spares come in and
requeued jobs start again without the test stepping them.
"""

from __future__ import annotations

import os
import sys
import threading
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.e2e import portal_server as e2e  # noqa: E402

TICK_S = 0.5
SIMULATED_PER_TICK = timedelta(seconds=5)


def main(port: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    cluster, sim = seed()
    lock = threading.Lock()
    commands = {name: locked(handler, lock) for name, handler in e2e.COMMANDS.items()}
    commands["slurm_version"] = slurm_version
    threading.Thread(target=e2e.follow_commands, args=(commands, cluster, sim), daemon=True).start()
    threading.Thread(target=tick, args=(cluster, sim, lock), daemon=True).start()
    threading.Thread(target=e2e.run_engine, daemon=True).start()
    e2e.serve(port)


def seed():
    from django.core.management import call_command
    from django.utils import timezone

    from clusters.backends import registry
    from clusters.backends.simulated import SimulatedCluster
    from clusters.models import Cluster, Partition
    from sync.cycle import apply_snapshot

    call_command("migrate", interactive=False, verbosity=0)
    sim = SimulatedCluster.standard(
        train=10, infer=1, spare=3, seed=5, prefix=e2e.NODE_PREFIX, start=timezone.now()
    )
    sim.fault_rate_per_gpu_day = 0
    registry.use(sim)
    cluster, _ = Cluster.objects.update_or_create(name="e2e", defaults={"backend": "simulated"})
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())
    Partition.objects.filter(cluster=cluster).update(checkpoint_grace_s=1)
    return cluster, sim


def locked(handler, lock):
    def run(*args):
        with lock:
            return handler(*args)

    return run


def tick(cluster, sim, lock) -> None:
    from django.db import connection

    while True:
        threading.Event().wait(TICK_S)
        try:
            with lock:
                sim.advance(SIMULATED_PER_TICK)
                e2e.sync(cluster, sim)
        except Exception as error:  # report and keep the clock going
            print(f"E2E-TICK-ERROR {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        finally:
            connection.close()


def slurm_version(cluster, sim, command) -> dict:
    """Runs `sinfo --version` through the Slurm CLI backend (the test puts a stand-in on
    PATH): the command counters then hold what a real cluster's sync adds to them."""
    from clusters.backends.slurm import SlurmBackend

    return {"output": SlurmBackend(slurm_conf="").run(["sinfo", "--version"])}


if __name__ == "__main__":
    main(int(sys.argv[1]))
