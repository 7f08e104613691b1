"""Saving a row whose every change is kept: who changed it, when, and from what.

A row that opts in has `audited_values()` (the fields a person sets), `updated_by`
and `updated_at`; its app keeps the append-only change rows and says how to write one.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction
from django.utils import timezone


def save_audited(row, *, user, record_change: Callable[[dict, dict], object]):
    """Save ROW if what a person sets differs from what is stored, stamped with USER and
    the time, and call RECORD_CHANGE(before, after) in the same transaction; an unchanged
    row is left alone and the stored one returned."""
    with transaction.atomic():
        stored = type(row).objects.select_for_update().filter(pk=row.pk).first()
        before = stored.audited_values() if stored else {}
        after = row.audited_values()
        if before == after:
            return stored
        row.updated_by = user
        row.updated_at = timezone.now()
        row.save()
        record_change(before, after)
    return row
