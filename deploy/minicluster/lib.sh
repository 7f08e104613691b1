# Shared helpers for deploy/minicluster/{up,down,status}. Sourced, not run.
#
# Everything the cluster writes lives under one state folder outside the repo, so
# several checkouts can share one machine and `rm -rf` of the folder is a full reset.
# Slurm 22.05 runs on the host (Debian bookworm's packages); 24.11 and 26.05 run
# inside Debian roots built once (root.sh), each version with its own default state
# folder and ports so that they never collide with the host's 22.05 cluster.

DEFAULT_SLURM_VERSION=22.05
SLURM_VERSIONS="22.05 24.11 26.05"
SLURM_VERSION=""
STATE_DIR=""
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

# Accepts `--state DIR` and `--slurm VERSION` anywhere in the arguments; every
# script understands them.
parse_state_arg() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --state) STATE_DIR="$2"; shift 2 ;;
            --state=*) STATE_DIR="${1#--state=}"; shift ;;
            --slurm) SLURM_VERSION="$2"; shift 2 ;;
            --slurm=*) SLURM_VERSION="${1#--slurm=}"; shift ;;
            *) shift ;;
        esac
    done
}

check_slurm_version() {
    case " $SLURM_VERSIONS " in
        *" $1 "*) ;;
        *) die "unknown Slurm version '$1' (one of: $SLURM_VERSIONS)" ;;
    esac
}

# The state folder when no --state is given. Without --slurm: $MEDBAY_MINICLUSTER_STATE
# or the host cluster's folder, as always. With --slurm: $MEDBAY_MINICLUSTER_STATE only
# if it is that version's (or new), else the version's own folder, so that a
# `--slurm 26.05` never takes over the shared 22.05 cluster's folder.
default_state_dir() {
    local version="$1" from_env="${MEDBAY_MINICLUSTER_STATE:-}" recorded
    if [ -n "$from_env" ]; then
        recorded="$(recorded_slurm_version "$from_env")"
        if [ -z "$version" ] || [ "${recorded:-$DEFAULT_SLURM_VERSION}" = "$version" ] ||
            [ ! -f "$from_env/etc/slurm.conf" ]; then
            echo "$from_env"
            return 0
        fi
    fi
    if [ -z "$version" ] || [ "$version" = "$DEFAULT_SLURM_VERSION" ]; then
        echo /var/tmp/medbay-minicluster
    else
        echo "/var/tmp/medbay-minicluster-$version"
    fi
}

# The version recorded in a state folder by the last `up`, or nothing.
recorded_slurm_version() {
    [ -f "$1/etc/options" ] || return 0
    sed -n 's/^prev_slurm=//p' "$1/etc/options"
}

# Ports of each version's cluster (the environment overrides them for any version).
set_ports() {
    local ctld node dbd restd
    case "$1" in
        22.05) ctld=16817 node=17001 dbd=16830 restd=16820 ;;
        24.11) ctld=17817 node=17901 dbd=17830 restd=17820 ;;
        26.05) ctld=18817 node=18901 dbd=18830 restd=18820 ;;
    esac
    CTLD_PORT="${MEDBAY_MINICLUSTER_CTLD_PORT:-$ctld}"
    FIRST_NODE_PORT="${MEDBAY_MINICLUSTER_NODE_PORT:-$node}"
    DBD_PORT="${MEDBAY_MINICLUSTER_DBD_PORT:-$dbd}"
    RESTD_PORT="${MEDBAY_MINICLUSTER_RESTD_PORT:-$restd}"
}

# Settles STATE_DIR and SLURM_VERSION from the arguments, the environment and what the
# state folder recorded, then the paths and ports under them.
set_paths() {
    if [ -z "$STATE_DIR" ]; then
        STATE_DIR="$(default_state_dir "$SLURM_VERSION")"
    fi
    RECORDED_SLURM_VERSION="$(recorded_slurm_version "$STATE_DIR")"
    SLURM_VERSION="${SLURM_VERSION:-${RECORDED_SLURM_VERSION:-$DEFAULT_SLURM_VERSION}}"
    check_slurm_version "$SLURM_VERSION"
    set_ports "$SLURM_VERSION"
    ETC_DIR="$STATE_DIR/etc"
    RUN_DIR="$STATE_DIR/run"
    LOG_DIR="$STATE_DIR/log"
    SPOOL_DIR="$STATE_DIR/spool"
    DEV_DIR="$STATE_DIR/dev"
    SLURM_CONF_FILE="$ETC_DIR/slurm.conf"
    OPTIONS_FILE="$ETC_DIR/options"
    CTLD_PID_FILE="$RUN_DIR/slurmctld.pid"
    DBD_PID_FILE="$RUN_DIR/slurmdbd.pid"
    RESTD_PID_FILE="$RUN_DIR/slurmrestd.pid"
    JWT_KEY_FILE="$ETC_DIR/jwt_hs256.key"
    BIN_DIR="$STATE_DIR/bin"
    export SLURM_CONF="$SLURM_CONF_FILE"
    # A version inside a Debian root is reached through the wrappers in bin/, which
    # come first on PATH for every command these scripts run.
    if in_root; then
        PATH="$BIN_DIR:$PATH"
    fi
}

# True when this cluster's Slurm runs inside a Debian root rather than on the host.
in_root() {
    [ "$SLURM_VERSION" != "$DEFAULT_SLURM_VERSION" ]
}

# The pid in FILE when that process is alive and is the daemon we expect. A pid
# file left by a crash may name a pid that the kernel has since reused.
live_pid() {
    local pid_file="$1" expected_name="$2" pid
    [ -s "$pid_file" ] || return 1
    pid="$(tr -dc '0-9' <"$pid_file")"
    [ -n "$pid" ] || return 1
    [ -r "/proc/$pid/comm" ] || return 1
    # Debian sid names the binaries slurmctld-wlm, slurmd-wlm (the plain names are
    # alternatives pointing at them), and the kernel reports the real name.
    case "$(cat "/proc/$pid/comm")" in
        "$expected_name" | "$expected_name-wlm") echo "$pid" ;;
        *) return 1 ;;
    esac
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

# shellcheck source=root.sh
. "$(dirname "${BASH_SOURCE[0]}")/root.sh"
