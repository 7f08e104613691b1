"""Prometheus metrics at `/metrics`: the figures an operator alerts on.

Built with `prometheus_client` collectors that read the database at scrape time (and,
for the Slurm command counters, the shared cache), so every web process gives the same
answer. The families are listed in the README ("Prometheus and Grafana").
"""

from __future__ import annotations

import hmac
import ipaddress
import logging

from django.conf import settings
from django.http import HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_safe
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from portal.metrics.fleet import FleetCollector
from portal.metrics.recovery import RecoveryCollector
from portal.metrics.remediation import RemediationCollector
from portal.metrics.slurm_commands import SlurmCommandCollector

logger = logging.getLogger(__name__)

# The classic text format: Medbay's names need none of 1.0.0's UTF-8 names.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


def medbay_registry(clock=timezone.now) -> CollectorRegistry:
    """A registry of Medbay's collectors. auto_describe is off: describing a collector
    runs its collect(), and that would query the database at import time."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in (
        FleetCollector(clock),
        RemediationCollector(clock),
        RecoveryCollector(clock),
        SlurmCommandCollector(),
    ):
        registry.register(collector)
    return registry


REGISTRY = medbay_registry()


def client_allowed(request) -> bool:
    """From an address in MEDBAY_METRICS_ALLOW, or with the MEDBAY_METRICS_TOKEN bearer."""
    token = settings.MEDBAY_METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header.removeprefix("Bearer ").strip(), token)
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return any(
        address in ipaddress.ip_network(entry, strict=False)
        for entry in settings.MEDBAY_METRICS_ALLOW
    )


@require_safe
def metrics_view(request):
    if not client_allowed(request):
        return HttpResponse(
            "Metrics are served to addresses in MEDBAY_METRICS_ALLOW, "
            "or with the MEDBAY_METRICS_TOKEN bearer token.\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE)
