"""Adding, editing and disabling the clusters one portal watches (`manage.py cluster`).

Each change is one transaction that writes the row and its ClusterChange audit
row together. Editing the environment's cluster starts from what the
environment configures and makes the row the configuration from then on.
"""

from __future__ import annotations

from dataclasses import asdict

from django.db import IntegrityError, transaction

from clusters.config import ClusterConfig, ClusterConfigError, validate_name
from clusters.models import Cluster, ClusterChange

CONFIG_FIELDS = tuple(ClusterConfig.__dataclass_fields__)


class ClusterNotFound(LookupError):
    """No cluster has that name."""


def get_cluster(name: str) -> Cluster:
    try:
        return Cluster.objects.get(name=name)
    except Cluster.DoesNotExist:
        known = ", ".join(Cluster.objects.order_by("name").values_list("name", flat=True))
        raise ClusterNotFound(
            f"No cluster named {name!r}" + (f" (known: {known})." if known else ".")
        ) from None


def add_cluster(name: str, config: ClusterConfig, *, by: str) -> Cluster:
    """A new cluster configured by its row; ClusterConfigError when anything is wrong."""
    validate_name(name)
    config.validate()
    try:
        with transaction.atomic():
            cluster = Cluster.objects.create(
                name=name, from_environment=False, backend=_backend_name(config), **asdict(config)
            )
            ClusterChange.objects.create(cluster=cluster, after=_audited(cluster), changed_by=by)
    except IntegrityError:
        raise ClusterConfigError({"name": f"A cluster named {name!r} already exists."}) from None
    return cluster


def edit_cluster(name: str, *, by: str, enabled: bool | None = None, **values) -> Cluster:
    """Change some of a cluster's configuration; values a new transport or fleet no
    longer uses are cleared."""
    cluster = get_cluster(name)
    unknown = set(values) - set(CONFIG_FIELDS)
    if unknown:
        raise ValueError(f"not configuration: {sorted(unknown)}")
    config = cluster.config().changed(**values).validate()
    also = {} if enabled is None else {"enabled": enabled}
    if _reaches(config) != _reaches(cluster.config()) or cluster.from_environment:
        # Maybe another Slurm now: its ClusterName is claimed afresh at the next sync.
        also["slurm_cluster_name"] = ""
    return _save(cluster, by=by, from_environment=False, **asdict(config), **also)


def set_enabled(name: str, enabled: bool, *, by: str) -> bool:
    """Enable or disable a cluster; False when it already was."""
    cluster = get_cluster(name)
    if cluster.enabled == enabled:
        return False
    _save(cluster, by=by, enabled=enabled)
    return True


def _save(cluster: Cluster, *, by: str, **values) -> Cluster:
    before = _audited(cluster)
    for key, value in values.items():
        setattr(cluster, key, value)
    if not cluster.from_environment:
        cluster.backend = _backend_name(cluster.config())
    with transaction.atomic():
        cluster.save(update_fields=[*values, "backend"])
        after = _audited(cluster)
        if after != before:
            ClusterChange.objects.create(cluster=cluster, before=before, after=after, changed_by=by)
    return cluster


def _reaches(config: ClusterConfig) -> tuple:
    return (config.transport, config.slurm_conf, config.slurmrestd_url)


def _audited(cluster: Cluster) -> dict:
    return {
        "from_environment": cluster.from_environment,
        "enabled": cluster.enabled,
        **asdict(cluster.config()),
    }


def _backend_name(config: ClusterConfig) -> str:
    # Cluster.backend keeps the name the backends give themselves (base.name).
    return "simulated" if config.transport == "simulated" else "slurm"
