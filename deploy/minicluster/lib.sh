# Shared helpers for deploy/minicluster/{up,down,status}. Sourced, not run.
#
# Everything the cluster writes lives under one state folder outside the repo, so
# several checkouts can share one machine and `rm -rf` of the folder is a full reset.

STATE_DIR="${MEDBAY_MINICLUSTER_STATE:-/var/tmp/medbay-minicluster}"
CTLD_PORT="${MEDBAY_MINICLUSTER_CTLD_PORT:-16817}"
DBD_PORT="${MEDBAY_MINICLUSTER_DBD_PORT:-16830}"
FIRST_NODE_PORT="${MEDBAY_MINICLUSTER_NODE_PORT:-17001}"
# One slurmdbd database per cluster, named after its slurmdbd port (unique on the
# machine): two clusters on one database would share job ids and accounts.
DBD_DATABASE="${MEDBAY_MINICLUSTER_DBD_DATABASE:-}"
CLUSTER_NAME="medbay"

log() {
    echo "minicluster: $*" >&2
}

die() {
    log "error: $*"
    exit 1
}

# Accepts `--state DIR` anywhere in the arguments; every script understands it.
parse_state_arg() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --state) STATE_DIR="$2"; shift 2 ;;
            --state=*) STATE_DIR="${1#--state=}"; shift ;;
            *) shift ;;
        esac
    done
}

set_paths() {
    ETC_DIR="$STATE_DIR/etc"
    RUN_DIR="$STATE_DIR/run"
    LOG_DIR="$STATE_DIR/log"
    SPOOL_DIR="$STATE_DIR/spool"
    DEV_DIR="$STATE_DIR/dev"
    SLURM_CONF_FILE="$ETC_DIR/slurm.conf"
    OPTIONS_FILE="$ETC_DIR/options"
    CTLD_PID_FILE="$RUN_DIR/slurmctld.pid"
    DBD_PID_FILE="$RUN_DIR/slurmdbd.pid"
    export SLURM_CONF="$SLURM_CONF_FILE"
}

# The pid in FILE when that process is alive and is the daemon we expect. A pid
# file left by a crash may name a pid that the kernel has since reused.
live_pid() {
    local pid_file="$1" expected_name="$2" pid
    [ -s "$pid_file" ] || return 1
    pid="$(tr -dc '0-9' <"$pid_file")"
    [ -n "$pid" ] || return 1
    [ -r "/proc/$pid/comm" ] || return 1
    [ "$(cat "/proc/$pid/comm")" = "$expected_name" ] || return 1
    echo "$pid"
}

slurmd_pid_file() {
    echo "$RUN_DIR/slurmd-$1.pid"
}

# Node names recorded by the last `up`, one per line.
configured_node_names() {
    [ -f "$ETC_DIR/nodes" ] && cat "$ETC_DIR/nodes"
}

controller_responds() {
    [ -f "$SLURM_CONF_FILE" ] || return 1
    timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP'
}

# Sends TERM, waits up to SECONDS for the process to go, then KILL.
stop_pid() {
    local pid="$1" seconds="${2:-15}" waited=0
    kill -TERM "$pid" 2>/dev/null || return 0
    while [ -d "/proc/$pid" ] && [ "$waited" -lt $((seconds * 10)) ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if [ -d "/proc/$pid" ]; then
        log "pid $pid ignored TERM for ${seconds}s, killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
}
