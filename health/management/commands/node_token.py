"""`manage.py node_token NODE [--cluster NAME]`: issue (or rotate) a node agent's token."""

import os

from django.core.management.base import BaseCommand, CommandError

from health.node_tokens import NodeTokenError, issue_node_token


class Command(BaseCommand):
    help = "Issue a new agent token for a node, revoking its old ones; prints it once."

    def add_arguments(self, parser):
        parser.add_argument("node")
        parser.add_argument(
            "--cluster",
            default="",
            help="the node's cluster (needed when several clusters have a node of that name)",
        )
        parser.add_argument("--output", help="write the token to this file (mode 0600)")

    def handle(self, *args, **options):
        try:
            token, raw = issue_node_token(options["node"], cluster=options["cluster"])
        except NodeTokenError as error:
            raise CommandError(str(error)) from None
        if options["output"]:
            fd = os.open(options["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(raw + "\n")
            self.stdout.write(
                f"Token for {token.node.name} of cluster {token.node.cluster.name} "
                f"written to {options['output']}"
            )
        else:
            self.stdout.write(raw)
