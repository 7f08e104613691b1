"""`manage.py lemon_nodes [--days N] [--suggest]`: nodes that fail far more than the fleet.

Prints the nodes the lemon test flags (reports/lemons.py: leave-one-out
Poisson test, Bonferroni at 1 %) over the last N days; `--suggest` puts a
quarantine of each into the approval queue (an admin approves or rejects it
there), skipping nodes that already have an active run.
"""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from clusters.models import Node
from remediation.models import Action, Mode, Trigger
from remediation.services import NodeBusy, create_run
from reports.lemons import ALPHA, lemon_nodes
from reports.params import ReportQuery


def suggest_quarantine(node: Node, tested) -> str:
    """An approval-queue run that quarantines NODE; says what happened."""
    reason = (
        f"lemon node: {tested.faults} faults where the fleet's rate expects "
        f"{tested.expected:.2f} (p = {tested.p_value:.2g})"
    )
    try:
        run = create_run(
            node,
            Action.DRAIN,
            trigger=Trigger.POLICY,
            reason=reason,
            mode=Mode.APPROVAL,
            steps=["quarantine"],
            context={"lemon": {"faults": tested.faults, "p_value": tested.p_value}},
            actor="lemon-nodes",
        )
    except NodeBusy as busy:
        existing = busy.existing.pk if busy.existing else "?"
        return f"{node.name}: already has active run {existing}, nothing suggested"
    return f"{node.name}: quarantine suggested, run {run.pk} awaits approval"


class Command(BaseCommand):
    help = "List lemon nodes (faults far above the fleet's rate) and optionally suggest quarantine."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=30, help="window, in days (default 30)")
        parser.add_argument(
            "--suggest", action="store_true", help="queue a quarantine of each for approval"
        )

    def handle(self, *args, **options):
        days = options["days"]
        if not 1 <= days <= 366:
            raise CommandError("--days must be between 1 and 366")
        today = timezone.localdate()
        query = ReportQuery(today - timedelta(days=days - 1), today, bucket="day", group="")
        lemons = [tested for tested in lemon_nodes(query.span()) if tested.lemon]
        if not lemons:
            self.stdout.write(f"No lemon nodes in the last {days} days (test at {ALPHA:.0%}).")
            return
        nodes = {node.name: node for node in Node.objects.filter(name__in=[t.name for t in lemons])}
        for tested in lemons:
            line = (
                f"{tested.name}: {tested.faults} faults, {tested.expected:.2f} expected, "
                f"p = {tested.p_value:.2g}"
            )
            if options["suggest"] and tested.name in nodes:
                line += " -> " + suggest_quarantine(nodes[tested.name], tested)
            self.stdout.write(line)
