"""`manage.py run_engine`: one remediation engine worker; run several for more throughput."""

from __future__ import annotations

import contextlib
import signal
import threading
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from remediation.engine import DEFAULT_LEASE, Engine


class Command(BaseCommand):
    help = "Claim due remediation runs and advance them step by step."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="advance what is due, then exit")
        parser.add_argument("--worker-id", default=None, help="name in step rows and leases")
        parser.add_argument("--interval", type=float, default=0.5, help="seconds between polls")
        parser.add_argument(
            "--lease",
            type=float,
            default=DEFAULT_LEASE.total_seconds(),
            help="seconds a claimed run stays with this worker before another may take it over",
        )

    def handle(self, *args, once, worker_id, interval, lease, **options):
        if interval <= 0 or lease <= 0:
            raise CommandError("--interval and --lease must be positive")
        engine = Engine(worker_id, lease=timedelta(seconds=lease))
        if once:
            taken = engine.run_once()
            self.stdout.write(f"worker {engine.worker}: advanced {taken} step(s)")
            return
        # Built now, not at the first run: a misconfigured backend fails at start, and a
        # simulator of thousands of nodes is not laid out while a storm's first run waits.
        engine.backend, engine.fleet  # noqa: B018
        stop = threading.Event()
        # SIGTERM (systemd, docker stop) ends the loop between steps, never mid-step.
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        self.stdout.write(f"worker {engine.worker}: polling every {interval:g}s")
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a person stops it
            engine.run_forever(interval=interval, stop=stop)
        self.stdout.write(f"worker {engine.worker}: stopped")
