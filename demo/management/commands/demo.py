"""`manage.py demo`: migrate, seed a simulated cluster and serve it live."""

from __future__ import annotations

import os
from datetime import timedelta

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from clusters.backends import registry
from clusters.backends.simulated import SimulatedCluster
from clusters.models import Cluster
from demo.demand import create_demo_policy
from demo.past import FIELD_RATE, generate_history
from demo.simulation import SimulationLoop
from identity.accounts import create_demo_users
from portal.server import parse_addr as _parse_addr
from portal.server import serve as _serve
from portal.server import start_engine
from reports.params import DEFAULT_DAYS

# At the field rate a month of a 32-node demo holds one or two faults, and the
# reliability report would read zeros; the live demo's own boost (200x) would
# replace a node a day. 20x gives a few dozen faults a month.
HISTORY_BOOST = 20.0


class Command(BaseCommand):
    help = "Run the portal on a simulated cluster (what `make demo` runs)."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000", help="host:port to serve on")
        parser.add_argument("--nodes", type=int, default=32, help="total nodes (8 GPUs each)")
        parser.add_argument("--seed", type=int, default=settings.MEDBAY_SIM_SEED)
        parser.add_argument(
            "--time-scale",
            type=float,
            default=settings.MEDBAY_SIM_TIME_SCALE,
            help="simulated seconds per real second",
        )
        parser.add_argument(
            "--fault-boost",
            type=float,
            default=200.0,
            help="multiplier on the Llama 3 field fault rate, so a demo shows faults",
        )
        parser.add_argument("--no-serve", action="store_true", help="seed and exit")
        parser.add_argument(
            "--history-days",
            type=int,
            # As many days as a report shows by default, so that none opens on zeros.
            default=DEFAULT_DAYS,
            help="first write this many days of synthetic past for the reports "
            f"(default {DEFAULT_DAYS}; 0 for none)",
        )

    def handle(self, *args, **options):
        host, port = _parse_addr(options["addr"])
        if options["nodes"] < 4:
            raise CommandError("--nodes must be at least 4")
        _point_jobs_at(host, port)
        call_command("migrate", interactive=False, verbosity=0)
        sim = _build_simulator(options)
        # A new simulator knows nothing of a previous demo's nodes, jobs and runs,
        # so the demo cluster starts afresh on every start.
        Cluster.objects.filter(name="demo").delete()
        cluster = Cluster.objects.create(name="demo", backend="simulated")
        registry.use(sim)
        loop = SimulationLoop(sim, cluster)
        loop.warm_up(timedelta(minutes=30))
        if options["history_days"] > 0:
            stats = generate_history(
                cluster,
                options["history_days"],
                seed=options["seed"],
                fault_rate_per_gpu_day=FIELD_RATE * min(options["fault_boost"], HISTORY_BOOST),
            )
            self.stdout.write(f"History: {stats}")
        users = create_demo_users()
        create_demo_policy(cluster)
        self._print_welcome(host, port, users)
        if options["no_serve"]:
            return
        loop.start()
        # One remediation worker in the demo process, on the same simulated cluster.
        start_engine("demo-engine")
        _serve(host, port)

    def _print_welcome(self, host, port, users) -> None:
        self.stdout.write(self.style.SUCCESS(f"Medbay demo at http://{host}:{port}/"))
        self.stdout.write("Demo users (passwords are new on every start):")
        for username, role, password in users:
            self.stdout.write(f"  {role:<10} user {username:<8} password {password}")


def _point_jobs_at(host: str, port: int) -> None:
    """The demo's job scripts report progress to this portal, wherever --addr put it,
    unless MEDBAY_PORTAL_URL says where (a proxy in front, another name)."""
    if "MEDBAY_PORTAL_URL" in os.environ:
        return
    reachable = "127.0.0.1" if host in ("0.0.0.0", "::", "[::]") else host  # noqa: S104
    settings.MEDBAY_PORTAL_URL = f"http://{reachable}:{port}"


def _build_simulator(options) -> SimulatedCluster:
    total = options["nodes"]
    infer = spare = max(1, total // 8)
    sim = SimulatedCluster.standard(
        train=total - infer - spare,
        infer=infer,
        spare=spare,
        seed=options["seed"],
        time_scale=options["time_scale"],
        start=timezone.now(),
    )
    sim.fault_rate_per_gpu_day *= options["fault_boost"]
    # A daily inference curve (at its trough now) and bursts of training work, so that
    # the demo's reallocation policy has something to propose within minutes.
    sim.demand_mode()
    sim.generate_workload()
    return sim
