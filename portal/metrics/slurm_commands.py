"""Slurm command latency and errors, counted by whichever process ran the command.

`slurm_sync` and the engine run Slurm's tools in other processes than the web server,
so each process adds its counts to the Django cache (Redis in production, shared by
every process) and the collector reads them back at scrape time.
"""

from __future__ import annotations

import logging

from django.core.cache import cache
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from clusters.backends.slurm_cli import SLURM_TOOLS
from core import counters
from portal.metrics.families import bound

logger = logging.getLogger(__name__)

# Slurm answers in milliseconds when healthy and in seconds when struggling.
SLURM_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SLURM_KEY = "medbay:metrics:slurm:{tool}:{field}"
TOOLS = (*SLURM_TOOLS, "other")
FIELDS = (*(f"b{i}" for i in range(len(SLURM_BUCKETS_S) + 1)), "sum_us", "errors")


def record_slurm_command(tool: str, seconds: float, failed: bool) -> None:
    """Count one Slurm command in the shared cache (a slurm_cli observer)."""
    tool = tool if tool in SLURM_TOOLS else "other"
    bucket = next(
        (i for i, upper in enumerate(SLURM_BUCKETS_S) if seconds <= upper), len(SLURM_BUCKETS_S)
    )
    counters.incr(SLURM_KEY.format(tool=tool, field=f"b{bucket}"))
    counters.incr(SLURM_KEY.format(tool=tool, field="sum_us"), round(seconds * 1_000_000))
    if failed:
        counters.incr(SLURM_KEY.format(tool=tool, field="errors"))


class SlurmCommandCollector(Collector):
    """medbay_slurm_command_duration_seconds and medbay_slurm_command_errors_total."""

    def collect(self):
        keys = [SLURM_KEY.format(tool=tool, field=name) for tool in TOOLS for name in FIELDS]
        try:
            stored = cache.get_many(keys)
        except Exception:  # Redis down: scrape the database figures rather than fail with a 500
            logger.warning("Slurm command metrics left out: no cache", exc_info=True)
            return
        latency = HistogramMetricFamily(
            "medbay_slurm_command_duration_seconds",
            "Wall time of Slurm CLI commands run by any Medbay process, by tool.",
            labels=["command"],
        )
        errors = CounterMetricFamily(
            "medbay_slurm_command_errors",
            "Slurm CLI commands that exited non-zero, timed out or were missing, by tool.",
            labels=["command"],
        )
        for tool in TOOLS:
            value = {
                name: stored.get(SLURM_KEY.format(tool=tool, field=name), 0) for name in FIELDS
            }
            counts = [value[f"b{i}"] for i in range(len(SLURM_BUCKETS_S) + 1)]
            if not any(counts):
                continue
            running, buckets = 0, []
            for upper, count in zip(SLURM_BUCKETS_S, counts, strict=False):
                running += count
                buckets.append((bound(upper), running))
            buckets.append(("+Inf", sum(counts)))
            latency.add_metric([tool], buckets, value["sum_us"] / 1_000_000)
            errors.add_metric([tool], value["errors"])
        yield latency
        yield errors
