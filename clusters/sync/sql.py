"""Bulk SQL the sync shares: one UPDATE for many rows."""

from __future__ import annotations

from django.db import connection


def bulk_write(model, rows: list, fields: list[str]) -> None:
    """Write FIELDS of saved ROWS in one statement.

    Django's `bulk_update` builds one `CASE WHEN id = ... THEN ...` per column,
    which PostgreSQL evaluates row by row and Django takes long to compile; on
    PostgreSQL an `UPDATE ... FROM (VALUES ...)` join does the same in one pass.
    """
    if not rows or not fields:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_update(rows, fields)
        return
    meta = model._meta
    columns = [meta.get_field(name) for name in fields]
    quote = connection.ops.quote_name
    assignments = ", ".join(
        f"{quote(field.column)} = v.{quote(field.column)}::{field.db_type(connection)}"
        for field in columns
    )
    aliases = ", ".join(quote(field.column) for field in [meta.pk, *columns])
    row_sql = "(" + ", ".join(["%s"] * (len(columns) + 1)) + ")"
    params = []
    for row in rows:
        params.append(row.pk)
        params.extend(
            field.get_db_prep_save(getattr(row, field.attname), connection) for field in columns
        )
    table, pk = quote(meta.db_table), quote(meta.pk.column)
    # Only quoted names from the model's metadata are formatted in; values are parameters.
    values_sql = ", ".join([row_sql] * len(rows))
    sql = f"UPDATE {table} SET {assignments} FROM (VALUES {values_sql}) AS v({aliases})"  # noqa: S608
    sql += f" WHERE {table}.{pk} = v.{pk}"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
