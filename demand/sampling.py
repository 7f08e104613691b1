"""Sampling the demand signals into their append-only history.

Each sample pass reads every source of a cluster once and appends one row per figure
(a missing figure is a row too, with its reason), all stamped with the same moment, so
that a chart, a decision and a replay read one consistent snapshot per moment.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from clusters.backends.base import ClusterBackend, FleetProvider
from clusters.models import Cluster
from demand.models import DemandSample
from demand.sources import DemandSource, SourceContext, sources_for

logger = logging.getLogger(__name__)


def interval() -> timedelta:
    return timedelta(seconds=settings.MEDBAY_DEMAND_SAMPLE_S)


def last_sampled_at(cluster: Cluster) -> datetime | None:
    latest = DemandSample.objects.filter(cluster=cluster).order_by("-sampled_at").first()
    return latest.sampled_at if latest else None


def due(cluster: Cluster, now: datetime) -> bool:
    """Whether the cluster's last sample is an interval old (or there is none). A sample
    a little early is harmless; a clock step backwards samples again at once."""
    last = last_sampled_at(cluster)
    return last is None or not (now - interval() < last <= now)


def sample(
    cluster: Cluster,
    backend: ClusterBackend | None,
    fleet: FleetProvider | None,
    *,
    now: datetime | None = None,
    sources: list[DemandSource] | None = None,
) -> list[DemandSample]:
    """Read every source of the cluster once and store what each said, at one moment."""
    now = now or timezone.now()
    context = SourceContext(cluster, backend, fleet, now)
    rows = []
    for source in sources if sources is not None else sources_for(backend, fleet):
        try:
            readings = source.read(context)
        except Exception:  # a bug in one source must leave the others' figures
            logger.exception("Demand source %s failed on cluster %s", source.name, cluster.name)
            continue
        rows += [
            DemandSample(
                cluster=cluster,
                metric=reading.metric,
                scope=reading.scope[:64],
                value=reading.value,
                unit=reading.unit,
                missing="" if reading.value is not None else (reading.missing or "not read")[:255],
                sampled_at=now,
            )
            for reading in readings
        ]
    return DemandSample.objects.bulk_create(rows)
