"""Which Slurm a backend reaches: its ClusterName and version, and one row per Slurm.

Two table rows configured with the same slurm.conf or slurmrestd URL (a copied
configuration, a forgotten edit) would reconcile one cluster's nodes and jobs
twice, under two names. The first row to sync claims the ClusterName its
controller reports; a second row whose controller reports the same name is
refused before anything is read into it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from django.db import IntegrityError, transaction

from clusters.backends.base import BackendError, ClusterBackend
from clusters.backends.capabilities import RunsSlurmCommands
from clusters.models import Cluster

DEFAULT_CLUSTER_NAME = "slurm"
CONFIG_VALUE = re.compile(r"^\s*(ClusterName|SLURM_VERSION)\s*=\s*(\S+)", re.MULTILINE)
CONF_CLUSTER_NAME = re.compile(r"^\s*ClusterName\s*=\s*(\S+)", re.MULTILINE | re.IGNORECASE)
VERSION_NUMBER = re.compile(r"\d+\.\d+(?:\.\d+)?")


class SlurmIdentity(NamedTuple):
    """The cluster's name and the installed Slurm version ("" when unknown)."""

    name: str
    version: str


class SameSlurmAsAnother(BackendError):
    """This row's controller is a Slurm another row already syncs."""

    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=True)


def slurm_identity(backend: ClusterBackend) -> SlurmIdentity:
    """Name and version from `scontrol show config`; while the controller is
    down, from slurm.conf and `sinfo --version`, which need no controller. A backend
    that runs no Slurm commands (the simulator) is the default name, version unknown."""
    if not isinstance(backend, RunsSlurmCommands):
        return SlurmIdentity(DEFAULT_CLUSTER_NAME, "")
    try:
        values = dict(CONFIG_VALUE.findall(backend.run(["scontrol", "show", "config"])))
    except BackendError:
        values = {}
    name = values.get("ClusterName") or _conf_cluster_name(backend) or DEFAULT_CLUSTER_NAME
    return SlurmIdentity(name, values.get("SLURM_VERSION") or _installed_version(backend.run))


def reported_cluster_name(backend: RunsSlurmCommands) -> str:
    """The ClusterName the controller itself reports; BackendError when it does not answer."""
    values = dict(CONFIG_VALUE.findall(backend.run(["scontrol", "show", "config"])))
    return values.get("ClusterName", "").lower()


def claim_slurm_name(cluster: Cluster, backend: ClusterBackend) -> None:
    """Record the ClusterName CLUSTER's controller reports, once; SameSlurmAsAnother
    when another row already claimed it. Asked only until the claim is made (and
    again after the row's configuration changes), so a steady sync runs no
    extra command. The simulator is no Slurm: each simulated row is its own."""
    if cluster.slurm_cluster_name or not isinstance(backend, RunsSlurmCommands):
        return
    try:
        name = reported_cluster_name(backend)
    except BackendError as error:
        if not error.permanent:
            raise  # an outage: recorded as one
        return  # this Slurm cannot say (an older scontrol, no rights): nothing to compare
    if not name:
        return
    other = (
        Cluster.objects.filter(slurm_cluster_name=name)
        .exclude(pk=cluster.pk)
        .values_list("name", flat=True)
        .first()
    )
    if other is not None:
        raise SameSlurmAsAnother(
            f"This controller reports ClusterName={name}, the Slurm cluster {other} already "
            f"syncs: both rows reach one Slurm. Nothing was read into {cluster.name}; point it "
            f"at its own slurm.conf or slurmrestd (manage.py cluster edit {cluster.name}) "
            f"or disable it."
        )
    try:
        # Two loops may claim at once (serve starts them together): the unique
        # index lets only one win, and the loser is refused at its next cycle.
        with transaction.atomic():
            Cluster.objects.filter(pk=cluster.pk).update(slurm_cluster_name=name)
    except IntegrityError:
        raise BackendError(
            f"Another cluster just claimed ClusterName={name}; checking again", permanent=False
        ) from None
    cluster.slurm_cluster_name = name


def _conf_cluster_name(backend: RunsSlurmCommands) -> str:
    path = Path(backend.slurm_conf or "/etc/slurm/slurm.conf")
    try:
        match = CONF_CLUSTER_NAME.search(path.read_text())
    except OSError:
        return ""
    return match.group(1) if match else ""


def _installed_version(run) -> str:
    try:
        match = VERSION_NUMBER.search(run(["sinfo", "--version"]))
    except BackendError:
        return ""
    return match.group(0) if match else ""
