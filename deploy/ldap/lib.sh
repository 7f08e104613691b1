# Shared helpers for deploy/ldap/{up,down,status}. Sourced, not run.
#
# The directory lives under one state folder outside the repo (config, database,
# pid file, log): the system's own slapd configuration (/etc/ldap) is never read
# or written, and `rm -rf` of the folder is a full reset.

STATE_DIR="${MEDBAY_LDAP_STATE:-/var/tmp/medbay-ldap}"
PORT="${MEDBAY_LDAP_PORT:-3389}"
SUFFIX="dc=medbay,dc=test"
ADMIN_DN="cn=admin,$SUFFIX"
# Test passwords of a test directory on 127.0.0.1: printed by `up` on purpose.
ADMIN_PASSWORD="medbay-ldap-admin"
PORTAL_DN="cn=portal,ou=services,$SUFFIX"
PORTAL_PASSWORD="medbay-ldap-portal"
PEOPLE_PASSWORD_SUFFIX="-directory-pw"   # alice's password is alice-directory-pw

log() {
    echo "ldap: $*" >&2
}

die() {
    log "error: $*"
    exit 1
}

parse_state_arg() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --state) STATE_DIR="$2"; shift 2 ;;
            --state=*) STATE_DIR="${1#--state=}"; shift ;;
            --port) PORT="$2"; shift 2 ;;
            --port=*) PORT="${1#--port=}"; shift ;;
            *) shift ;;
        esac
    done
}

set_paths() {
    CONF_FILE="$STATE_DIR/slapd.conf"
    DATA_DIR="$STATE_DIR/data"
    PID_FILE="$STATE_DIR/slapd.pid"
    LOG_FILE="$STATE_DIR/slapd.log"
    SEED_STAMP="$STATE_DIR/seed.sha256"
    URI="ldap://127.0.0.1:$PORT"
}

# The pid in the pid file when that process is alive and is slapd (a pid file
# left by a crash may name a pid the kernel has since reused).
live_pid() {
    local pid
    [ -s "$PID_FILE" ] || return 1
    pid="$(tr -dc '0-9' <"$PID_FILE")"
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
    [ "$(cat "/proc/$pid/comm")" = "slapd" ] || return 1
    echo "$pid"
}

answers() {
    timeout 5 ldapsearch -x -LLL -H "$URI" -b "" -s base namingContexts >/dev/null 2>&1
}

stop_slapd() {
    local pid waited=0
    pid="$(live_pid)" || { rm -f "$PID_FILE"; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    while [ -d "/proc/$pid" ] && [ "$waited" -lt 150 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if [ -d "/proc/$pid" ]; then
        log "slapd $pid ignored TERM for 15s, killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PID_FILE"
}
