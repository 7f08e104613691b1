"""Reads one number from Prometheus's HTTP API (`GET /api/v1/query`), or says why not.

The inference load is whatever the site's PromQL query says it is (a serving latency
p95, requests waiting): Medbay asks for an instant vector or scalar and takes its one
value. Every way that can fail becomes a sentence an admin can act on, never a number
Medbay made up: a query Prometheus cannot parse (HTTP 400, errorType bad_data), a
Prometheus that is down or slow, a query with no series or with several.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import requests

QUERY_PATH = "/api/v1/query"


@dataclass(frozen=True)
class QueryResult:
    """The query's one value, or why there is none (`missing`)."""

    value: float | None
    missing: str = ""


def query_value(base_url: str, promql: str, *, timeout_s: float = 5.0) -> QueryResult:
    """The single value of PROMQL at Prometheus's present, or the reason it is missing."""
    url = base_url.rstrip("/") + QUERY_PATH
    try:
        response = requests.get(url, params={"query": promql}, timeout=timeout_s)
    except requests.Timeout:
        return QueryResult(None, f"Prometheus at {base_url} did not answer within {timeout_s:g}s")
    except requests.RequestException as error:
        return QueryResult(None, f"Prometheus at {base_url} is unreachable: {_short(error)}")
    try:
        body = response.json()
    except ValueError:
        return QueryResult(
            None, f"Prometheus at {base_url} answered HTTP {response.status_code}, not its JSON"
        )
    if not isinstance(body, dict) or body.get("status") != "success":
        return QueryResult(None, _error_text(body, response.status_code))
    return _one_value(body.get("data") or {}, promql)


def _error_text(body, status: int) -> str:
    body = body if isinstance(body, dict) else {}
    kind, error = body.get("errorType", ""), str(body.get("error", ""))[:180]
    if kind == "bad_data":
        return f"the PromQL query does not parse: {error}"
    return f"Prometheus refused the query (HTTP {status}{', ' + kind if kind else ''}): {error}"


def _one_value(data: dict, promql: str) -> QueryResult:
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        return _number(result[1])
    if kind != "vector" or not isinstance(result, list):
        return QueryResult(None, f"the query gives a {kind or 'strange'} result, not one value")
    if not result:
        return QueryResult(None, f"the query {promql!r} returned no series (nothing scraped yet?)")
    if len(result) > 1:
        return QueryResult(
            None, f"the query returned {len(result)} series; aggregate it to one (max, sum)"
        )
    sample = result[0].get("value") if isinstance(result[0], dict) else None
    if not isinstance(sample, list) or len(sample) != 2:
        return QueryResult(None, "the query's series carries no value")
    return _number(sample[1])


def _number(text) -> QueryResult:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return QueryResult(None, f"the query's value {text!r} is not a number")
    if not math.isfinite(value):
        return QueryResult(None, f"the query's value is {text} (no traffic to measure?)")
    return QueryResult(value)


def _short(error: Exception) -> str:
    return str(error).splitlines()[0][:160] if str(error) else type(error).__name__
