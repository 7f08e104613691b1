"""Links to the site's Grafana: the Medbay dashboard (deploy/grafana/medbay.json, whose
uid is `medbay`) filtered to one node, or to a run's time window.

MEDBAY_GRAFANA_URL names the Grafana; unset, there are no links and these return "".
"""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.conf import settings

DASHBOARD_PATH = "/d/medbay/medbay"
# Some minutes either side of a run, so the fault before it and the recovery after it show.
RUN_MARGIN = timedelta(minutes=15)


def node_dashboard_url(cluster: str, node: str) -> str:
    return _dashboard({"var-cluster": cluster, "var-node": node})


def run_dashboard_url(cluster: str, node: str, start: datetime, end: datetime | None) -> str:
    """The run's window: from before it was created to after it ended (to now while it
    is active, so the dashboard keeps following it)."""
    window = {"from": _epoch_ms(start - RUN_MARGIN)}
    window["to"] = _epoch_ms(end + RUN_MARGIN) if end else "now"
    return _dashboard({**window, "var-cluster": cluster, "var-node": node})


def _dashboard(params: dict) -> str:
    base = settings.MEDBAY_GRAFANA_URL
    if not base:
        return ""
    return f"{base}{DASHBOARD_PATH}?{urlencode(params)}"


def _epoch_ms(moment: datetime) -> str:
    return str(round(moment.timestamp() * 1000))
