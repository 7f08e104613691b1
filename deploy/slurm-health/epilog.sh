#!/bin/sh
# Example Slurm Epilog: check the node after a job released it, before the next one lands.
# A non-zero exit makes slurmd drain the node ("Epilog error"); the job itself stays COMPLETED.
set -u

MEDBAY_AGENT=${MEDBAY_AGENT:-/opt/medbay/venv/bin/medbay-agent}
CONFIG=${MEDBAY_EPILOG_CONFIG:-/etc/medbay/epilog.toml}

[ -x "$MEDBAY_AGENT" ] || exit 0

if ! reason=$(/usr/bin/timeout 120 "$MEDBAY_AGENT" check --once --config "$CONFIG"); then
    /usr/bin/logger -t medbay-epilog "after job ${SLURM_JOB_ID:-?} on ${SLURMD_NODENAME:-?}: $reason"
    exit 1
fi
exit 0
