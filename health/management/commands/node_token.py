"""`manage.py node_token NODE`: issue (or rotate) a node agent's token."""

from django.core.management.base import BaseCommand, CommandError

from clusters.models import Node
from health.models import NodeToken


class Command(BaseCommand):
    help = "Issue a new agent token for a node, revoking its old ones; prints it once."

    def add_arguments(self, parser):
        parser.add_argument("node")
        parser.add_argument("--output", help="write the token to this file (mode 0600)")

    def handle(self, *args, **options):
        node = Node.objects.filter(name=options["node"]).first()
        if node is None:
            raise CommandError(f"Unknown node {options['node']!r}; run a sync first.")
        _, raw = NodeToken.issue(node)
        if options["output"]:
            import os

            fd = os.open(options["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(raw + "\n")
            self.stdout.write(f"Token for {node.name} written to {options['output']}")
        else:
            self.stdout.write(raw)
