"""Reconciles what the backend reports into the database, in bulk.

One cycle reads the whole snapshot, diffs it against the rows in a constant
number of queries, writes history rows only for real changes and publishes the
changed nodes and jobs after the transaction commits. A failed read changes
nothing: an unreachable controller is recorded as an outage, never read as
"every node is gone" (the Slinky operator once killed jobs that way).

The cycle is in cycle.py; what it writes of partitions and nodes in nodes.py, of
jobs in jobs.py; the bulk SQL they share in core/sql.py; the polling loop in loop.py.
"""
