"""Waiting for something a real process, daemon or server does in its own time."""

from __future__ import annotations

import time

import pytest


def wait_for(
    predicate, timeout_s: float = 60, what: str = "", interval_s: float = 0.3, explain=None
):
    """Calls PREDICATE until it returns something truthy and returns that; fails
    after TIMEOUT_S naming WHAT (else the predicate's docstring) and, when given,
    what EXPLAIN() says about the state it was left in."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = f"; found {explain()}" if explain else ""
            pytest.fail(
                f"timed out after {timeout_s:g}s waiting for {what or predicate.__doc__}{seen}"
            )
        time.sleep(interval_s)
