"""`manage.py cluster add|edit|list|disable|enable`: the clusters one portal watches."""

from __future__ import annotations

import getpass

from django.core.management.base import BaseCommand, CommandError

from clusters import configure
from clusters.config import ClusterConfig, ClusterConfigError, FleetKind, Transport
from clusters.models import Cluster

# Option -> ClusterConfig field.
OPTIONS = {
    "transport": "transport",
    "slurm_conf": "slurm_conf",
    "slurmrestd_url": "slurmrestd_url",
    "jwt_key_file": "jwt_key_file",
    "fleet": "fleet",
    "kubeconfig": "kubeconfig",
    "kube_context": "kube_context",
    "sync_interval": "sync_interval_s",
}


def _actor() -> str:
    try:
        return f"cluster command ({getpass.getuser()})"
    except Exception:  # no login name (a container without a passwd entry)
        return "cluster command"


class Command(BaseCommand):
    help = "Add, edit, list, disable and enable the clusters this portal watches."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="a cluster configured by its row")
        add.add_argument("name", help="Slurm's ClusterName")
        self._config_arguments(add)
        edit = sub.add_parser(
            "edit", help="change a cluster's configuration (the environment's one too)"
        )
        edit.add_argument("name")
        self._config_arguments(edit)
        for action, what in (("disable", "stop watching it"), ("enable", "watch it again")):
            sub.add_parser(action, help=what).add_argument("name")
        sub.add_parser("list", help="each cluster and its configuration")

    @staticmethod
    def _config_arguments(parser) -> None:
        # No defaults: only what is given changes (add starts from ClusterConfig()).
        parser.add_argument("--transport", choices=Transport.values, help=Transport.__doc__)
        parser.add_argument("--slurm-conf", help="absolute path of the cluster's slurm.conf")
        parser.add_argument("--slurmrestd-url", help="such as http://slurm-head:6820")
        parser.add_argument(
            "--jwt-key-file", help="absolute path of the auth/jwt key file, never the key"
        )
        parser.add_argument("--fleet", choices=FleetKind.values, help=FleetKind.__doc__)
        parser.add_argument("--kubeconfig", help="absolute path (default: kubectl's own)")
        parser.add_argument("--kube-context")
        parser.add_argument("--sync-interval", type=float, help="seconds between polls")

    def handle(self, *args, **options):
        try:
            getattr(self, "_" + options["action"])(options)
        except (ClusterConfigError, configure.ClusterNotFound) as error:
            raise CommandError(str(error)) from None

    def _add(self, options) -> None:
        config = ClusterConfig().changed(**_given(options))
        cluster = configure.add_cluster(options["name"], config, by=_actor())
        self.stdout.write(f"Added cluster {cluster.name}: {describe(cluster)}.")
        self._warn_missing(cluster)

    def _edit(self, options) -> None:
        values = _given(options)
        # Without options, the environment's cluster moves into the table as it is.
        if not values and not configure.get_cluster(options["name"]).from_environment:
            raise CommandError("Nothing to change: give at least one option (see --help).")
        cluster = configure.edit_cluster(options["name"], by=_actor(), **values)
        self.stdout.write(f"Cluster {cluster.name} is now configured here: {describe(cluster)}.")
        self._warn_missing(cluster)

    def _disable(self, options) -> None:
        changed = configure.set_enabled(options["name"], False, by=_actor())
        name = options["name"]
        self.stdout.write(f"Disabled {name}." if changed else f"{name} was already disabled.")

    def _enable(self, options) -> None:
        changed = configure.set_enabled(options["name"], True, by=_actor())
        name = options["name"]
        self.stdout.write(f"Enabled {name}." if changed else f"{name} was already enabled.")

    def _list(self, options) -> None:
        clusters = list(Cluster.objects.order_by("name"))
        if not clusters:
            self.stdout.write("No clusters yet: the sync adds the environment's on its first run.")
            return
        for cluster in clusters:
            state = "enabled" if cluster.enabled else "disabled"
            self.stdout.write(f"{cluster.name}  {state}  {describe(cluster)}")
            problem = cluster.sync_problem()
            if problem:
                self.stdout.write(f"  {problem}")

    def _warn_missing(self, cluster: Cluster) -> None:
        # Not an error: the sync may run on another host than this command.
        for path in cluster.config().missing_files():
            self.stderr.write(f"Warning: this host has no file {path}.")


def describe(cluster: Cluster) -> str:
    """The configuration in one line; file paths only, never what the files hold."""
    config = cluster.config()
    parts = [f"transport {config.transport}"]
    parts += [f"{label} {value}" for label, value in _details(config) if value]
    parts.append(f"fleet {config.fleet}")
    if config.fleet == FleetKind.KUBERNETES:
        parts.append(f"kubeconfig {config.kubeconfig or '(default)'}")
        parts += [f"context {config.kube_context}"] if config.kube_context else []
    parts.append(f"every {config.sync_interval_s:g}s")
    if cluster.from_environment:
        parts.append("(from the environment)")
    return ", ".join(parts)


def _details(config: ClusterConfig) -> list[tuple[str, str]]:
    return [
        ("slurm.conf", config.slurm_conf),
        ("slurmrestd", config.slurmrestd_url),
        ("JWT key file", config.jwt_key_file),
    ]


def _given(options) -> dict:
    return {
        field: options[option] for option, field in OPTIONS.items() if options[option] is not None
    }
