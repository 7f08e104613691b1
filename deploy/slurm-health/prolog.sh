#!/bin/sh
# Example Slurm Prolog: validate the node before a job starts on it.
# A non-zero exit makes slurmd drain the node ("Prolog error") and requeue the job held, so
# keep this to passive checks that finish in seconds.
set -u

MEDBAY_AGENT=${MEDBAY_AGENT:-/opt/medbay/venv/bin/medbay-agent}
CONFIG=${MEDBAY_PROLOG_CONFIG:-/etc/medbay/health.toml}

[ -x "$MEDBAY_AGENT" ] || exit 0

if ! reason=$(/usr/bin/timeout 30 "$MEDBAY_AGENT" check --once --config "$CONFIG" \
        --fail-file /etc/medbay/force-drain); then
    /usr/bin/logger -t medbay-prolog "job ${SLURM_JOB_ID:-?} on ${SLURMD_NODENAME:-?}: $reason"
    exit 1
fi
exit 0
