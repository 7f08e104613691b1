#!/bin/sh
# Slurm HealthCheckProgram wrapper: install as /usr/local/sbin/medbay-healthcheck (mode 0755).
# slurmd gives us no PATH, so every program is named by absolute path.
set -u

MEDBAY_AGENT=${MEDBAY_AGENT:-/opt/medbay/venv/bin/medbay-agent}
CONFIG=${MEDBAY_HEALTH_CONFIG:-/etc/medbay/health.toml}
FORCE_DRAIN_FILE=${MEDBAY_FORCE_DRAIN_FILE:-/etc/medbay/force-drain}
SCONTROL=${MEDBAY_SCONTROL:-/usr/bin/scontrol}
SLURM_CONF_FILE=${SLURM_CONF:-/etc/slurm/slurm.conf}

if [ ! -x "$MEDBAY_AGENT" ]; then
    /usr/bin/logger -t medbay-healthcheck "agent $MEDBAY_AGENT missing; not checking" 2>/dev/null
    exit 0
fi

set -- check --once --drain \
    --scontrol "$SCONTROL" \
    --slurm-conf "$SLURM_CONF_FILE" \
    --fail-file "$FORCE_DRAIN_FILE"
if [ -r "$CONFIG" ]; then
    set -- "$@" --config "$CONFIG"
fi

# Stay under slurmd's 60 s kill: the checks themselves have their own shorter timeouts.
exec /usr/bin/timeout 55 "$MEDBAY_AGENT" "$@"
