"""Reconciles what the backend reports into the database, in bulk.

One cycle reads the whole snapshot, diffs it against the rows in a constant
number of queries, writes history rows only for real changes and publishes the
changed nodes and jobs after the transaction commits. A failed read changes
nothing: an unreachable controller is recorded as an outage, never read as
"every node is gone" (the Slinky operator once killed jobs that way).

The cycle is in cycle.py; what it writes of partitions and nodes in nodes.py, of
jobs in jobs.py; the bulk SQL they share in sql.py; the polling loop in loop.py.
"""

from clusters.sync.cycle import SyncResult, apply_snapshot, read_snapshot, record_outage, sync_once
from clusters.sync.loop import SyncLoop, backoff_delay, ensure_cluster, slurm_identity
from clusters.sync.nodes import HGX_8_GPU_BUS_IDS, default_pci_bus_id

__all__ = [
    "HGX_8_GPU_BUS_IDS",
    "SyncLoop",
    "SyncResult",
    "apply_snapshot",
    "backoff_delay",
    "default_pci_bus_id",
    "ensure_cluster",
    "read_snapshot",
    "record_outage",
    "slurm_identity",
    "sync_once",
]
