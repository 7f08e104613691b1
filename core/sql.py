"""SQL helpers every layer may use: one array parameter instead of a long IN list, one
UPDATE for many rows."""

from __future__ import annotations

from django.db import connection
from django.db.models import F, Lookup, Q


class EqualsAny(Lookup):
    """`lhs = ANY(%s)` with the values as one PostgreSQL array parameter: as an IN
    list, 5,000 job ids cost more to send and plan than the query did to run."""

    lookup_name = "equals_any"
    prepare_rhs = False

    def as_sql(self, compiler, connection):
        lhs, params = self.process_lhs(compiler, connection)
        values = list(self.rhs)
        if all(type(value) is int for value in values):
            # Ids, as one array literal: psycopg renders a list of 60,000 ints into the
            # statement one by one in Python (a tenth of a 12,500-node sync cycle).
            return f"{lhs} = ANY(%s::bigint[])", [*params, "{" + ",".join(map(str, values)) + "}"]
        # Text (event ids, fold keys) as one text[] parameter: psycopg parses a statement
        # anew each time once it is too long for its cache (1,500 placeholders: 6 ms).
        return f"{lhs} = ANY(%s)", [*params, values]


def one_of(field: str, values: list) -> Q:
    """FIELD is one of VALUES: one array parameter on PostgreSQL, an IN list elsewhere."""
    if connection.vendor == "postgresql":
        return Q(EqualsAny(F(field), values))
    return Q(**{f"{field}__in": values})


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
