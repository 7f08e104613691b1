# Debian roots for the Slurm versions the host does not ship (sourced by lib.sh).
#
# 24.11 comes from Debian trixie and 26.05 from Debian sid, each debootstrapped once
# into $ROOTS_DIR/<version> (outside the repo, kept across runs: CI on the same
# machine reuses it) with Slurm, munge and slurmrestd installed. Daemons and client
# tools run inside it through `enter` (see write_enter_script), in a private mount
# namespace that binds the host folders jobs and tests share (/home, /tmp, /var/tmp,
# /root, the state folder, the repo), so files and their owners agree on both sides.

ROOTS_DIR="${MEDBAY_MINICLUSTER_ROOTS:-/var/cache/medbay-minicluster/roots}"
DEBIAN_MIRROR="${MEDBAY_MINICLUSTER_MIRROR:-http://deb.debian.org/debian}"
# python3: jobs run inside the root, and the example trainers are Python (stdlib only).
ROOT_PACKAGES=(slurmctld slurmd slurm-client munge slurmrestd slurm-wlm-jwt-plugin
    slurmdbd slurm-wlm-mysql-plugin python3)

# Debian suite that ships each Slurm version; empty for the host's own (22.05).
suite_of_version() {
    case "$1" in
        22.05) echo "" ;;
        24.11) echo trixie ;;
        26.05) echo sid ;;
        *) return 1 ;;
    esac
}

root_of_version() {
    echo "$ROOTS_DIR/$1"
}

root_ready() {
    [ -f "$1/.medbay-root" ]
}

# A root built before a package joined ROOT_PACKAGES gets it added in place.
root_current() {
    root_ready "$1" && grep -qxF "packages=${ROOT_PACKAGES[*]}" "$1/.medbay-root"
}

install_root_packages() {
    local root="$1" suite="$2"
    log "installing ${ROOT_PACKAGES[*]} in the $suite root"
    run_in_build_root "$root" env DEBIAN_FRONTEND=noninteractive \
        sh -c 'apt-get update -q && apt-get install -y -q --no-install-recommends "$@"' \
        sh "${ROOT_PACKAGES[@]}" >&2 || die "installing Slurm in the $suite root failed"
    run_in_build_root "$root" apt-get clean >&2
    {
        echo "suite=$suite"
        echo "slurm=$(chroot "$root" dpkg-query -W -f='${Version}' slurmctld)"
        echo "packages=${ROOT_PACKAGES[*]}"
        echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    } >"$root/.medbay-root"
}

# Runs COMMAND inside ROOT with /proc, /dev and /sys from the host, in a private mount
# namespace so nothing stays mounted under the root afterwards.
run_in_build_root() {
    local root="$1"
    shift
    unshare --mount --propagation private -- sh -c '
        root="$1"; shift
        mount --rbind /proc "$root/proc" && mount --rbind /dev "$root/dev" &&
            mount --rbind /sys "$root/sys" || exit 1
        exec chroot "$root" "$@"' sh "$root" "$@"
}

# Builds the root for VERSION when it is missing. The build goes to <version>.building
# and is renamed when complete, so an interrupted build is resumed, never used.
ensure_root() {
    local version="$1" suite root building started
    suite="$(suite_of_version "$version")" || die "no Debian suite known for Slurm $version"
    root="$(root_of_version "$version")"
    root_current "$root" && return 0
    command -v debootstrap >/dev/null || install_host_packages debootstrap
    mkdir -p "$ROOTS_DIR"
    exec 8>"$ROOTS_DIR/.$version.lock"
    flock 8
    if root_current "$root"; then
        exec 8>&-
        return 0
    fi
    if root_ready "$root"; then
        install_root_packages "$root" "$suite"
        exec 8>&-
        return 0
    fi
    started="$EPOCHREALTIME"
    building="$root.building"
    if [ ! -f "$building/.debootstrap-done" ]; then
        log "building a Debian $suite root for Slurm $version in $root (once; ~1 min)"
        rm -rf "$building"
        debootstrap --variant=minbase "$suite" "$building" "$DEBIAN_MIRROR" >&2 ||
            die "debootstrap $suite failed (see above)"
        touch "$building/.debootstrap-done"
    fi
    # Nothing may start by itself while packages install: the daemons are ours to run.
    printf '#!/bin/sh\nexit 101\n' >"$building/usr/sbin/policy-rc.d"
    chmod 755 "$building/usr/sbin/policy-rc.d"
    cp /etc/resolv.conf "$building/etc/resolv.conf"
    # sid's Release files carry a Valid-Until that a mirror snapshot (or a clock
    # ahead of it) can pass; the packages are still signed and checked.
    echo 'Acquire::Check-Valid-Until "false";' >"$building/etc/apt/apt.conf.d/99medbay-valid-until"
    install_root_packages "$building" "$suite"
    mv "$building" "$root"
    log "root for Slurm $version ready in" \
        "$(awk "BEGIN { printf \"%.0f\", $EPOCHREALTIME - $started }")s ($(du -sh "$root" | cut -f1))"
    exec 8>&-
}

# The same user names and ids as on the host, so job files and their owners agree.
sync_root_users() {
    local root="$1" user uid gid home
    for user in alice bob; do
        uid="$(id -u "$user")"
        gid="$(id -g "$user")"
        home="$(getent passwd "$user" | cut -d: -f6)"
        if ! chroot "$root" getent group "$user" >/dev/null; then
            chroot "$root" groupadd --gid "$gid" "$user"
        fi
        if ! chroot "$root" id -u "$user" >/dev/null 2>&1; then
            chroot "$root" useradd --no-create-home --uid "$uid" --gid "$gid" \
                --home-dir "$home" --shell /bin/bash "$user"
        fi
        [ "$(chroot "$root" id -u "$user")" = "$uid" ] ||
            die "$user has uid $(chroot "$root" id -u "$user") in $root but $uid on the host"
    done
}

# Host folders bound into the root at the same path, one per line.
shared_folders() {
    local repo
    repo="$(cd "$HERE/../.." && pwd)"
    printf '%s\n' /home /tmp /var/tmp /root "$STATE_DIR" "$repo"
    if [ -n "${MEDBAY_MINICLUSTER_SHARE:-}" ]; then
        tr ':' '\n' <<<"$MEDBAY_MINICLUSTER_SHARE"
    fi
}

# $BIN_DIR/enter COMMAND...: runs COMMAND inside the root, as the caller, in the
# caller's folder. Root gets a private mount namespace; other users get a user
# namespace mapped to themselves (so munge still vouches for their own uid).
write_enter_script() {
    local root="$1" folder
    mkdir -p "$BIN_DIR"
    {
        echo '#!/bin/sh'
        echo "# Written by deploy/minicluster/up: runs a command inside $root."
        echo "ROOT=$root"
        echo "BIN_DIR=$BIN_DIR"
        printf 'SHARED="'
        shared_folders | sort -u | while read -r folder; do
            [ -d "$folder" ] && printf '%s ' "$folder"
        done
        echo '"'
        cat <<'EOF'
if [ "${MEDBAY_ENTERED:-}" != 1 ]; then
    # Outside any namespace: make one, bind the shared folders, then run this again.
    export MEDBAY_ENTERED=1
    if [ "$(id -u)" = 0 ]; then
        exec unshare --mount --propagation private -- "$0" "$@"
    fi
    # Not root: a user namespace in which the caller is root may mount; the command
    # then runs in a nested one mapped back to the caller's own ids (see below).
    MEDBAY_CALLER="$(id -u):$(id -g)"
    export MEDBAY_CALLER
    exec unshare --user --map-root-user --mount --propagation private -- "$0" "$@"
fi
unset MEDBAY_ENTERED
mount --rbind /proc "$ROOT/proc" && mount --rbind /dev "$ROOT/dev" &&
    mount --rbind /sys "$ROOT/sys" || exit 125
for folder in $SHARED; do
    mount --rbind "$folder" "$ROOT$folder" || exit 125
done
# The caller's PATH without any minicluster's bin folder (this one or another
# version's), so the tools inside the root are the root's.
kept=""
old_ifs="$IFS"
IFS=:
for folder in $PATH; do
    [ -n "$folder" ] && [ "$folder" != "$BIN_DIR" ] && [ ! -x "$folder/enter" ] &&
        kept="${kept:+$kept:}$folder"
done
IFS="$old_ifs"
PATH="${kept:+$kept:}/usr/sbin:/usr/bin:/sbin:/bin"
export PATH
here="$(pwd)"
[ -d "$ROOT$here" ] || here=/
if [ -n "${MEDBAY_CALLER:-}" ]; then
    caller="$MEDBAY_CALLER"
    unset MEDBAY_CALLER
    # Back to the caller's uid and gid, so munge vouches for them and not for root.
    # unshare changes root itself, after the mapping and before the exec: a process
    # mapped to a uid other than 0 loses its capabilities at exec, and a chrooted one
    # may not make a user namespace.
    exec unshare --user --map-user="${caller%:*}" --map-group="${caller#*:}" \
        --root="$ROOT" --wd="$here" -- "$@"
fi
exec chroot "$ROOT" sh -c 'cd "$1" && shift && exec "$@"' sh "$here" "$@"
EOF
    } >"$BIN_DIR/enter.new"
    chmod 755 "$BIN_DIR/enter.new"
    mv "$BIN_DIR/enter.new" "$BIN_DIR/enter"
    for folder in $(shared_folders | sort -u); do
        [ -d "$folder" ] && mkdir -p "$root$folder"
    done
    write_other_cluster_script
    local tool
    for tool in munge unmunge slurmctld slurmd slurmdbd slurmrestd; do
        printf '#!/bin/sh\nexec %s/enter %s "$@"\n' "$BIN_DIR" "$tool" >"$BIN_DIR/$tool"
        chmod 755 "$BIN_DIR/$tool"
    done
    # Client tools: this cluster's, unless SLURM_CONF names another cluster's slurm.conf
    # (see write_other_cluster_script). MEDBAY_OTHER_CLUSTER marks a call already
    # handed on once, so two spellings of one path can never hand it back and forth.
    for tool in $CLIENT_TOOLS; do
        cat >"$BIN_DIR/$tool" <<EOF
#!/bin/sh
if [ -n "\${SLURM_CONF:-}" ] && [ "\$SLURM_CONF" != "$SLURM_CONF_FILE" ] &&
    [ -z "\${MEDBAY_OTHER_CLUSTER:-}" ]; then
    exec $BIN_DIR/other-cluster $tool "\$@"
fi
exec $BIN_DIR/enter $tool "\$@"
EOF
        chmod 755 "$BIN_DIR/$tool"
    done
}

CLIENT_TOOLS="sinfo squeue scontrol sbatch scancel sacct sacctmgr sdiag srun salloc sstat
    sprio sshare sreport scrontrol"

# $BIN_DIR/other-cluster TOOL ARGS...: runs TOOL of the cluster whose slurm.conf
# SLURM_CONF names: the wrapper in that state folder's bin/ (another minicluster from a
# Debian root), else the host's own (22.05). So one PATH serves several clusters of
# different versions at once, as one portal syncing two clusters needs: each backend
# sets its own SLURM_CONF and runs the tools by name.
write_other_cluster_script() {
    cat >"$BIN_DIR/other-cluster.new" <<'EOF'
#!/bin/sh
tool="$1"
shift
MEDBAY_OTHER_CLUSTER=1
export MEDBAY_OTHER_CLUSTER
case "$SLURM_CONF" in
    */etc/slurm.conf) theirs="${SLURM_CONF%/etc/slurm.conf}/bin" ;;
    *) theirs="" ;;
esac
if [ -n "$theirs" ] && [ -x "$theirs/enter" ] && [ -x "$theirs/$tool" ]; then
    exec "$theirs/$tool" "$@"
fi
# The host's tool: PATH without any minicluster's bin folder.
kept=""
old_ifs="$IFS"
IFS=:
for folder in $PATH; do
    [ -n "$folder" ] && [ ! -x "$folder/enter" ] && kept="${kept:+$kept:}$folder"
done
IFS="$old_ifs"
PATH="$kept"
export PATH
exec "$tool" "$@"
EOF
    chmod 755 "$BIN_DIR/other-cluster.new"
    mv "$BIN_DIR/other-cluster.new" "$BIN_DIR/other-cluster"
}
