"""A cluster's configuration: how Medbay reaches its Slurm and which fleet provides spares.

A `Cluster` row holds it (set with `manage.py cluster` or read on the admin page);
the row the sync creates for the environment's single cluster instead reads it
from MEDBAY_BACKEND, MEDBAY_FLEET and the other variables, exactly as before the
table existed. Secrets (the slurmrestd JWT key, a kubeconfig) are only ever
file paths here: their contents are read by the backend when it connects, and
no page or command prints them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from django.conf import settings
from django.db import models


class Transport(models.TextChoices):
    """How Medbay talks to the cluster's Slurm."""

    SIMULATED = "simulated", "simulator"
    CLI = "cli", "Slurm CLI"
    REST = "rest", "slurmrestd"


class FleetKind(models.TextChoices):
    """Who provides spare nodes and applies cordons."""

    SIMULATED = "simulated", "simulator"
    SLURM_SPARES = "slurm-spares", "spares in Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"


# Slurm folds ClusterName to lower case; a name written otherwise could never
# match the cluster's own.
CLUSTER_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
SYNC_INTERVAL_MIN_S = 0.5
SYNC_INTERVAL_MAX_S = 3600.0


class ClusterConfigError(ValueError):
    """Configuration that cannot work, said in words for the person who wrote it."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("; ".join(errors.values()))


@dataclass(frozen=True)
class ClusterConfig:
    """One cluster's transport, fleet and sync interval (hashable: it keys the backends' cache)."""

    transport: str = Transport.SIMULATED
    slurm_conf: str = ""
    slurmrestd_url: str = ""
    jwt_key_file: str = ""
    fleet: str = FleetKind.SIMULATED
    kubeconfig: str = ""
    kube_context: str = ""
    sync_interval_s: float = 2.0

    @classmethod
    def from_environment(cls) -> ClusterConfig:
        """What MEDBAY_BACKEND, MEDBAY_SLURM_API, MEDBAY_FLEET and friends configure."""
        if settings.MEDBAY_BACKEND != "slurm":
            transport = Transport.SIMULATED
        elif settings.MEDBAY_SLURM_API == "rest":
            transport = Transport.REST
        else:
            transport = Transport.CLI
        return cls(
            transport=str(transport),
            slurm_conf=settings.SLURM_CONF or "",
            slurmrestd_url=os.environ.get("MEDBAY_SLURMRESTD_URL", ""),
            jwt_key_file=os.environ.get("MEDBAY_SLURM_JWT_KEY", ""),
            fleet=_environment_fleet(transport),
            kubeconfig=os.environ.get("KUBECONFIG", ""),
            kube_context=os.environ.get("MEDBAY_K8S_CONTEXT", ""),
            sync_interval_s=settings.MEDBAY_SYNC_INTERVAL_S,
        )

    def changed(self, **values) -> ClusterConfig:
        """This configuration with some values replaced, the ones a new transport
        or fleet no longer uses cleared (a stale key path must not linger unseen), and
        the fleet, when not given, following the transport in and out of the simulator."""
        config = replace(self, **values)
        if "fleet" not in values and config.transport == Transport.SIMULATED:
            config = replace(config, fleet=FleetKind.SIMULATED)
        elif "fleet" not in values and config.fleet == FleetKind.SIMULATED:
            config = replace(config, fleet=FleetKind.SLURM_SPARES)
        if config.transport != Transport.REST:
            config = replace(config, slurmrestd_url="", jwt_key_file="")
        if config.transport == Transport.SIMULATED:
            config = replace(config, slurm_conf="")
        if config.fleet != FleetKind.KUBERNETES:
            config = replace(config, kubeconfig="", kube_context="")
        return config

    def validate(self) -> ClusterConfig:
        """This configuration, or ClusterConfigError naming each field that is wrong."""
        errors = {**_transport_errors(self), **_fleet_errors(self)}
        if not SYNC_INTERVAL_MIN_S <= self.sync_interval_s <= SYNC_INTERVAL_MAX_S:
            errors["sync_interval_s"] = (
                f"The sync interval must be between {SYNC_INTERVAL_MIN_S:g} and "
                f"{SYNC_INTERVAL_MAX_S:g} seconds, not {self.sync_interval_s:g}."
            )
        if errors:
            raise ClusterConfigError(errors)
        return self

    def missing_files(self) -> list[str]:
        """Configured files this host cannot see (a warning: the sync may run elsewhere)."""
        paths = (self.slurm_conf, self.jwt_key_file, self.kubeconfig)
        return [path for path in paths if path and not os.path.exists(path)]


def _environment_fleet(transport: str) -> str:
    # MEDBAY_FLEET defaults to the simulator even with MEDBAY_BACKEND=slurm; the
    # registry then uses spares in Slurm, so that is what the cluster says it has.
    if settings.MEDBAY_FLEET == FleetKind.SIMULATED and transport != Transport.SIMULATED:
        return str(FleetKind.SLURM_SPARES)
    return settings.MEDBAY_FLEET


def validate_name(name: str) -> str:
    if not CLUSTER_NAME.match(name or ""):
        raise ClusterConfigError(
            {
                "name": f"A cluster name is Slurm's ClusterName: lower-case letters, digits, "
                f"'-' and '_', at most 64, not {name!r}."
            }
        )
    return name


def _transport_errors(config: ClusterConfig) -> dict[str, str]:
    errors = {}
    if config.transport not in Transport.values:
        return {"transport": f"Unknown transport {config.transport!r}: {_choices(Transport)}."}
    if config.slurm_conf and not os.path.isabs(config.slurm_conf):
        errors["slurm_conf"] = f"slurm.conf must be an absolute path, not {config.slurm_conf!r}."
    if config.transport != Transport.REST:
        return errors
    url = urlsplit(config.slurmrestd_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        errors["slurmrestd_url"] = (
            "slurmrestd needs its URL, such as http://slurm-head:6820, "
            f"not {config.slurmrestd_url!r}."
        )
    if not config.jwt_key_file:
        errors["jwt_key_file"] = "slurmrestd needs the path of the site's JWT key file."
    elif not os.path.isabs(config.jwt_key_file):
        errors["jwt_key_file"] = (
            "The JWT key is given as the absolute path of its file, never as the key itself."
        )
    return errors


def _fleet_errors(config: ClusterConfig) -> dict[str, str]:
    if config.fleet not in FleetKind.values:
        return {"fleet": f"Unknown fleet {config.fleet!r}: {_choices(FleetKind)}."}
    # The simulator's spares live inside the simulated cluster; a real Slurm has none.
    if (config.fleet == FleetKind.SIMULATED) != (config.transport == Transport.SIMULATED):
        return {"fleet": "The simulated fleet goes with the simulated transport, and only with it."}
    if config.fleet != FleetKind.KUBERNETES:
        return {}
    if config.kubeconfig and not os.path.isabs(config.kubeconfig):
        return {"kubeconfig": f"kubeconfig must be an absolute path, not {config.kubeconfig!r}."}
    return {}


def _choices(choices: type[models.TextChoices]) -> str:
    return ", ".join(choices.values)
