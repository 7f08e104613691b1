"""SQL helpers every layer may use: one array parameter instead of a long IN list."""

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
