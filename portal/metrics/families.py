"""Building blocks for Medbay's collectors: buckets and metric families from plain values.

Every figure is read from the database (or the shared cache) when Prometheus scrapes,
so the families are built afresh each time with `prometheus_client`'s *MetricFamily
classes rather than kept in process-local counters: several web processes must give
the same answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

# From a decision taken in the same request as the report (under a second) and a quick
# cordon (seconds) to a drain that waits for jobs to end or an approval that waits for a
# person (hours).
RECOVERY_BUCKETS_S = (
    0.1,
    0.25,
    0.5,
    1,
    5,
    15,
    30,
    60,
    120,
    300,
    600,
    1800,
    3600,
    7200,
    14400,
    43200,
    86400,
)


def bound(value: float) -> str:
    """A bucket bound as Prometheus writes it: 1, 0.05, +Inf."""
    if math.isinf(value):
        return "+Inf"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """Seconds from START to END; never negative (a node's clock may run ahead of ours)."""
    if start is None or end is None:
        return None
    return max((end - start) / timedelta(seconds=1), 0.0)


def cumulative(values: Sequence[float], buckets: Sequence[float]) -> list[tuple[str, float]]:
    ordered = sorted(values)
    counts, index = [], 0
    for upper in buckets:
        while index < len(ordered) and ordered[index] <= upper:
            index += 1
        counts.append((bound(upper), index))
    counts.append(("+Inf", len(ordered)))
    return counts


def histogram(
    name: str,
    documentation: str,
    labelnames: Sequence[str],
    observations: Mapping[tuple[str, ...], Sequence[float]],
    buckets: Sequence[float] = RECOVERY_BUCKETS_S,
) -> HistogramMetricFamily:
    """A histogram family with one series per label tuple of OBSERVATIONS (an empty list
    gives a series of zeros, so that rate() sees the first observation arrive)."""
    family = HistogramMetricFamily(name, documentation, labels=list(labelnames))
    for labels, values in sorted(observations.items()):
        family.add_metric(list(labels), cumulative(values, buckets), float(sum(values)))
    return family


def count_every_choice(
    name: str, documentation: str, queryset, field: str, choices: Iterable
) -> GaugeMetricFamily:
    """One sample per choice of FIELD, zero included, labelled with the field's name."""
    family = GaugeMetricFamily(name, documentation, labels=[field])
    counts = dict(queryset.values_list(field).annotate(n=Count("id")).order_by())
    for choice in choices:
        family.add_metric([choice.value], counts.get(choice.value, 0))
    return family
