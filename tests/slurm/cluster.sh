#!/usr/bin/env bash
# A real single-node Slurm cluster (munge, MariaDB, slurmdbd, slurmctld, slurmd) for
# hpctune's tests and for trying hpctune on a workstation. See docs/slurm-dev-cluster.md.
#
#   tests/slurm/cluster.sh up            install packages if missing, write config, start, wait
#   tests/slurm/cluster.sh down [--wipe] cancel jobs, stop daemons; --wipe deletes all state
#   tests/slurm/cluster.sh status        daemon states + sinfo; exit 0 only if all are up
#   tests/slurm/cluster.sh env           shell exports for clients: eval "$(cluster.sh env)"
#
# Run as root: daemons run as the munge/mysql/slurm system users, default ports, no client
# setup needed. Run as another user: every daemon runs as that user with its own munge
# socket, MariaDB on a TCP port and its own Slurm ports (root must install the packages).
#
# Two configurations (HPCTUNE_SLURM_VARIANT): "default" (partitions debug and high, four fake
# GPUs, accounting in slurmdbd + MariaDB) and "site", a cluster configured unlike it (partitions
# scavenger and urgent with short MaxTimes, two fake GPUs, its own ports and munge socket, no
# accounting database, configuration only through SLURM_CONF, SBATCH_EXPORT=NONE for clients).
# Only one runs at a time: `up` of one stops the other first.
#
# Environment: HPCTUNE_SLURM_VARIANT  default | site (default: default)
#              HPCTUNE_SLURM_DIR      state directory of the default variant (default
#                                     /tmp/hpctune-slurm; when not root /tmp/hpctune-slurm-<user>,
#                                     or ~/.hpctune-slurm if /tmp is not writable); the site
#                                     variant uses the same path with "-site" appended
#              HPCTUNE_SLURM_PORT_BASE first of 6 ports (non-root only; default from the uid)
set -euo pipefail

PATH="${PATH:-/usr/bin:/bin}:/usr/sbin:/sbin"
export PATH
umask 022

VARIANT=${HPCTUNE_SLURM_VARIANT:-default}
# environment-modules: a module system, as sites load their Python with (tests' setup lines)
readonly PACKAGES=(munge slurm-client slurmctld slurmd slurmdbd mariadb-server environment-modules)
case $VARIANT in
default) OTHER_VARIANT=site ;;
site) OTHER_VARIANT=default ;;
*)
    echo "cluster.sh: error: HPCTUNE_SLURM_VARIANT must be default or site (got '$VARIANT')" >&2
    exit 2
    ;;
esac
readonly VARIANT OTHER_VARIANT
if [[ $VARIANT == site ]]; then ACCOUNTING=0; else ACCOUNTING=1; fi
readonly ACCOUNTING
readonly CLUSTER_NAME=hpctune
readonly DB_NAME=slurm_acct_db
readonly DB_USER=slurm
if ((ACCOUNTING)); then
    readonly FAKE_GPU_FILES=(/dev/null /dev/zero /dev/full /dev/urandom)
else
    readonly FAKE_GPU_FILES=(/dev/null /dev/zero)
fi
readonly MARKER=.hpctune-slurm-dir

# Timeouts (seconds)
readonly T_MUNGE=15 T_DB=60 T_DBD=30 T_CTLD=30 T_SLURMD=30 T_REGISTER=30
readonly T_QUEUE=60 T_STOP=30

CURRENT_USER=$(id -un)
if [[ $(id -u) -eq 0 ]]; then ROOT_MODE=1; else ROOT_MODE=0; fi
if ((ROOT_MODE)); then
    BASE_DIR=${HPCTUNE_SLURM_DIR:-/tmp/hpctune-slurm}
elif [[ -w /tmp ]]; then
    BASE_DIR=${HPCTUNE_SLURM_DIR:-/tmp/hpctune-slurm-$CURRENT_USER}
else
    BASE_DIR=${HPCTUNE_SLURM_DIR:-$HOME/.hpctune-slurm}
fi
if [[ $VARIANT == site ]]; then STATE_DIR=$BASE_DIR-site; else STATE_DIR=$BASE_DIR; fi
NODE_NAME=$(hostname -s)

ETC_DIR=$STATE_DIR/etc
SECRET_DIR=$STATE_DIR/secret
MUNGE_DIR=$STATE_DIR/munge
DB_DIR=$STATE_DIR/mariadb
DB_DATA=$DB_DIR/data
DB_TMP=$DB_DIR/tmp
LOG_DIR=$STATE_DIR/log
RUN_DIR=$STATE_DIR/run
CTLD_SPOOL=$STATE_DIR/spool/slurmctld
DBD_ARCHIVE=$STATE_DIR/spool/slurmdbd-archive
SLURMD_SPOOL=$STATE_DIR/spool/slurmd
SLURM_CONF=$ETC_DIR/slurm.conf
export SLURM_CONF

MUNGE_RUN=/run/munge
if ((ROOT_MODE)); then
    SLURM_USER=slurm
    MUNGE_USER=munge
    DB_OS_USER=mysql
    MUNGE_SOCKET=/run/munge/munge.socket.2 # the clients' compiled-in default
    DB_SOCKET=/run/mysqld/mysqld.sock      # the default slurmdbd's client library uses
    CTLD_PORT=6817 SLURMD_PORT=6818 DBD_PORT=6819 DB_PORT=3306
    if [[ $VARIANT == site ]]; then
        # its own ports and munge socket (named in AuthInfo, so clients need SLURM_CONF)
        MUNGE_RUN=$STATE_DIR/munge-run
        MUNGE_SOCKET=$MUNGE_RUN/munge.socket
        CTLD_PORT=6827 SLURMD_PORT=6828
    fi
else
    SLURM_USER=$CURRENT_USER
    MUNGE_USER=$CURRENT_USER
    DB_OS_USER=$CURRENT_USER
    MUNGE_SOCKET=$MUNGE_DIR/munge.socket
    DB_SOCKET=$DB_DIR/mysqld.sock
    port_base=${HPCTUNE_SLURM_PORT_BASE:-$((20000 + ($(id -u) % 2000) * 10))}
    if ! [[ $port_base =~ ^[0-9]{4,5}$ ]] || ((port_base < 1024 || port_base > 65530)); then
        echo "cluster.sh: error: HPCTUNE_SLURM_PORT_BASE must be a number in 1024..65530" >&2
        exit 2
    fi
    CTLD_PORT=$port_base SLURMD_PORT=$((port_base + 1))
    DBD_PORT=$((port_base + 2)) DB_PORT=$((port_base + 3))
    if [[ $VARIANT == site ]]; then CTLD_PORT=$((port_base + 4)) SLURMD_PORT=$((port_base + 5)); fi
fi

# Per daemon: process name (/proc/PID/comm), pid file, log file.
declare -A COMM=([munged]=munged [mariadbd]=mariadbd [slurmdbd]=slurmdbd
    [slurmctld]=slurmctld [slurmd]=slurmd)
declare -A PIDFILE=([munged]=$MUNGE_DIR/munged.pid [mariadbd]=$DB_DIR/mariadbd.pid
    [slurmdbd]=$RUN_DIR/slurmdbd.pid [slurmctld]=$RUN_DIR/slurmctld.pid
    [slurmd]=$RUN_DIR/slurmd.pid)
declare -A LOGFILE=([munged]=$MUNGE_DIR/munged.log [mariadbd]=$DB_DIR/mariadbd.log
    [slurmdbd]=$LOG_DIR/slurmdbd.log [slurmctld]=$LOG_DIR/slurmctld.log
    [slurmd]=$LOG_DIR/slurmd.log)
if ((ACCOUNTING)); then
    readonly DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)
else
    readonly DAEMONS=(munged slurmctld slurmd)
fi

# ---------------------------------------------------------------------------- helpers

log() { printf 'cluster.sh: %s\n' "$*" >&2; }
die() { printf 'cluster.sh: error: %s\n' "$*" >&2; exit 1; }

# die_with_log MESSAGE LOGFILE: fail and show the end of the daemon's log.
die_with_log() {
    printf 'cluster.sh: error: %s\n' "$1" >&2
    if [[ -r $2 ]]; then
        printf -- '---- last lines of %s ----\n' "$2" >&2
        tail -n 30 -- "$2" >&2 || true
        printf -- '----\n' >&2
    else
        printf 'cluster.sh: (no log file %s)\n' "$2" >&2
    fi
    exit 1
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

check_state_dir() {
    [[ $STATE_DIR =~ ^/[A-Za-z0-9._/-]+$ ]] ||
        die "HPCTUNE_SLURM_DIR must be an absolute path of [A-Za-z0-9._/-] (got '$STATE_DIR')"
    [[ $STATE_DIR == /?*/?* && $STATE_DIR != */ && $STATE_DIR != *//* &&
        $STATE_DIR != *..* ]] ||
        die "HPCTUNE_SLURM_DIR must be a plain path at least two levels deep (got '$STATE_DIR')"
    if [[ -e $STATE_DIR && ! -O $STATE_DIR ]]; then
        die "$STATE_DIR belongs to another user; choose another HPCTUNE_SLURM_DIR"
    fi
    # unix sockets are limited to 107 bytes
    ((${#STATE_DIR} <= 60)) || die "HPCTUNE_SLURM_DIR is too long (max 60 characters)"
}

# Is STATE_DIR ours (created by this script)? Refuse to use or delete anything else.
state_dir_is_ours() { [[ -f $STATE_DIR/$MARKER ]]; }

# process_is PID COMM: PID is a live process named COMM. A zombie counts as gone, unless
# other threads of it still run (the leader of an exiting multithreaded daemon shows Z).
process_is() {
    local key value state="" threads=1
    [[ $(cat "/proc/$1/comm" 2>/dev/null) == "$2" ]] || return 1
    while read -r key value _; do
        case $key in
        State:) state=$value ;;
        Threads:) threads=$value ;;
        esac
    done <"/proc/$1/status" 2>/dev/null || return 1
    [[ $state != Z ]] || ((threads > 1))
}

# daemon_pid NAME: print the PID of a running daemon, or fail.
daemon_pid() {
    local name=$1 pid
    [[ -r ${PIDFILE[$name]} ]] || return 1
    read -r pid <"${PIDFILE[$name]}" 2>/dev/null || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    process_is "$pid" "${COMM[$name]}" || return 1
    printf '%s\n' "$pid"
}

# wait_until TIMEOUT DAEMON WHAT CMD...: poll CMD until it succeeds; fail with the daemon's
# log tail on timeout or when the daemon's process is gone.
wait_until() {
    local timeout=$1 daemon=$2 what=$3
    shift 3
    local start=$SECONDS
    while ! "$@" >/dev/null 2>&1; do
        if [[ -e ${PIDFILE[$daemon]} ]] && ! daemon_pid "$daemon" >/dev/null &&
            ((SECONDS - start >= 2)); then
            die_with_log "$daemon died while waiting for $what" "${LOGFILE[$daemon]}"
        fi
        if ((SECONDS - start >= timeout)); then
            die_with_log "timed out after ${timeout}s waiting for $what" "${LOGFILE[$daemon]}"
        fi
        sleep 0.2
    done
}

# write_file PATH OWNER MODE < content: replace PATH if its content differs; return 0 if
# it changed, 1 if not.
write_file() {
    local path=$1 owner=$2 mode=$3 tmp
    tmp=$(mktemp "$path.XXXXXX")
    cat >"$tmp"
    if [[ -f $path ]] && cmp -s "$tmp" "$path"; then
        rm -f -- "$tmp"
        if ((ROOT_MODE)); then chown "$owner" "$path"; fi
        chmod "$mode" "$path"
        return 1
    fi
    if ((ROOT_MODE)); then chown "$owner" "$tmp"; fi
    chmod "$mode" "$tmp"
    mv -f -- "$tmp" "$path"
    return 0
}

# Readiness checks; each client call has its own timeout.
readonly T_CMD=10
munge_client_ok() {
    timeout "$T_CMD" munge -n -S "$MUNGE_SOCKET" |
        timeout "$T_CMD" unmunge -S "$MUNGE_SOCKET" >/dev/null
}
db_ping() { timeout "$T_CMD" mariadb-admin --no-defaults --socket="$DB_SOCKET" ping >/dev/null; }
dbd_ok() { timeout "$T_CMD" sacctmgr -n list cluster >/dev/null; }
ctld_ok() { [[ $(timeout "$T_CMD" scontrol ping) == *"is UP"* ]]; }
# one line per partition, all the same
node_state() { timeout "$T_CMD" sinfo -h -N -n "$NODE_NAME" -o %t | sort -u; }
node_ok() { [[ $(node_state) =~ ^(idle|mix|alloc|comp)$ ]]; }
cluster_registered() {
    # ControlHost is filled in once slurmctld has registered with slurmdbd.
    local out
    out=$(timeout "$T_CMD" sacctmgr -n -P list cluster format=Cluster,ControlHost) || return 1
    local name host
    while IFS='|' read -r name host; do
        [[ $name == "$CLUSTER_NAME" && -n $host ]] && return 0
    done <<<"$out"
    return 1
}

# ---------------------------------------------------------------------------- packages

packages_missing() {
    local p status missing=()
    for p in "${PACKAGES[@]}"; do
        status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
        [[ $status == installed ]] || missing+=("$p")
    done
    printf '%s\n' "${missing[@]}"
}

POLICY_RC=/usr/sbin/policy-rc.d
POLICY_RC_CREATED=0
remove_policy_rc() {
    if ((POLICY_RC_CREATED)); then
        rm -f -- "$POLICY_RC"
        POLICY_RC_CREATED=0
    fi
}
trap remove_policy_rc EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

install_packages() {
    local missing
    missing=$(packages_missing)
    [[ -z $missing ]] && return 0
    ((ROOT_MODE)) || die "missing packages: $(echo "$missing" | tr '\n' ' ')— as root run:
    apt-get install -y --no-install-recommends ${PACKAGES[*]}"
    local t0 apt_log=$STATE_DIR/apt.log
    t0=$(now)
    log "installing packages: $(echo "$missing" | tr '\n' ' ')(log: $apt_log)"
    if [[ ! -e $POLICY_RC ]]; then
        # keep the packages' maintainer scripts from starting services
        printf '#!/bin/sh\nexit 101\n' >"$POLICY_RC"
        chmod 0755 "$POLICY_RC"
        POLICY_RC_CREATED=1
    fi
    local -a apt_install=(apt-get install -y --no-install-recommends "${PACKAGES[@]}")
    if ! DEBIAN_FRONTEND=noninteractive "${apt_install[@]}" >"$apt_log" 2>&1; then
        log "apt-get install failed; running apt-get update and retrying"
        DEBIAN_FRONTEND=noninteractive apt-get update >>"$apt_log" 2>&1 ||
            die_with_log "apt-get update failed" "$apt_log"
        DEBIAN_FRONTEND=noninteractive "${apt_install[@]}" >>"$apt_log" 2>&1 ||
            die_with_log "apt-get install failed" "$apt_log"
    fi
    remove_policy_rc
    log "packages installed in $(elapsed "$t0") s"
}

# ---------------------------------------------------------------------------- config

make_dirs() {
    install -d -m 0755 "$ETC_DIR"
    install -d -m 0700 "$SECRET_DIR"
    install -d -m 0755 "$STATE_DIR/spool"
    install -d -m 0755 "$SLURMD_SPOOL"
    if ((ROOT_MODE)); then
        getent passwd "$SLURM_USER" >/dev/null || die "user $SLURM_USER missing (slurm packages?)"
        install -d -m 0700 -o "$MUNGE_USER" -g "$MUNGE_USER" "$MUNGE_DIR"
        install -d -m 0700 -o "$DB_OS_USER" -g "$DB_OS_USER" "$DB_DIR" "$DB_TMP"
        install -d -m 0755 -o "$SLURM_USER" -g "$SLURM_USER" "$LOG_DIR" "$RUN_DIR"
        install -d -m 0700 -o "$SLURM_USER" -g "$SLURM_USER" "$CTLD_SPOOL" "$DBD_ARCHIVE"
        install -d -m 0755 -o "$MUNGE_USER" -g "$MUNGE_USER" "$MUNGE_RUN"
        install -d -m 0755 -o "$DB_OS_USER" -g "$DB_OS_USER" /run/mysqld
    else
        install -d -m 0700 "$MUNGE_DIR" "$DB_DIR" "$DB_TMP" "$CTLD_SPOOL" "$DBD_ARCHIVE"
        install -d -m 0755 "$LOG_DIR" "$RUN_DIR"
    fi
}

random_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

make_secrets() {
    if [[ ! -s $MUNGE_DIR/munge.key ]]; then
        (umask 077 && head -c 1024 /dev/urandom >"$MUNGE_DIR/munge.key")
    fi
    if ((ROOT_MODE)); then chown "$MUNGE_USER:" "$MUNGE_DIR/munge.key"; fi
    chmod 0400 "$MUNGE_DIR/munge.key"
    if [[ ! -s $SECRET_DIR/db-password ]]; then
        (umask 077 && random_hex 16 >"$SECRET_DIR/db-password")
    fi
}

slurm_conf() {
    local auth_info=cred_expire=5 slurmd_user=root
    if ! ((ROOT_MODE)); then slurmd_user=$CURRENT_USER; fi
    if ! ((ROOT_MODE)) || [[ $VARIANT == site ]]; then auth_info+=",socket=$MUNGE_SOCKET"; fi
    cat <<EOF
# Generated by hpctune tests/slurm/cluster.sh; edits are overwritten by 'cluster.sh up'.
ClusterName=$CLUSTER_NAME
SlurmctldHost=$NODE_NAME(127.0.0.1)
SlurmUser=$SLURM_USER
SlurmdUser=$slurmd_user
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=$auth_info
StateSaveLocation=$CTLD_SPOOL
SlurmdSpoolDir=$SLURMD_SPOOL
SlurmctldPidFile=${PIDFILE[slurmctld]}
SlurmdPidFile=${PIDFILE[slurmd]}
SlurmctldLogFile=${LOGFILE[slurmctld]}
SlurmdLogFile=${LOGFILE[slurmd]}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
GresTypes=gpu
SlurmdParameters=config_overrides
$(accounting_conf)
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=1,bf_interval=1
KillWait=5
JobRequeue=1
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
ReturnToService=2
InactiveLimit=0
MailProg=/bin/true
NodeName=$NODE_NAME NodeAddr=127.0.0.1 CPUs=8 RealMemory=16000 Gres=gpu:${#FAKE_GPU_FILES[@]} State=UNKNOWN
$(partitions_conf)
EOF
}

accounting_conf() {
    if ! ((ACCOUNTING)); then
        echo "AccountingStorageType=accounting_storage/none"
        return 0
    fi
    cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStorageTRES=gres/gpu
EOF
    ((ROOT_MODE)) || echo "AccountingStoragePass=$MUNGE_SOCKET"
}

partitions_conf() {
    local node="Nodes=$NODE_NAME"
    if [[ $VARIANT == site ]]; then
        # preemptible default partition with a 4 h limit, a preempting one with 2 h
        echo "PartitionName=scavenger $node Default=YES PriorityTier=1 GraceTime=10 PreemptMode=REQUEUE MaxTime=04:00:00 DefaultTime=00:30:00 State=UP"
        echo "PartitionName=urgent $node PriorityTier=10 PreemptMode=OFF MaxTime=02:00:00 DefaultTime=00:30:00 State=UP"
        return 0
    fi
    echo "PartitionName=debug $node Default=YES PriorityTier=1 GraceTime=10 PreemptMode=REQUEUE MaxTime=2-00:00:00 DefaultTime=01:00:00 State=UP"
    echo "PartitionName=high $node PriorityTier=10 PreemptMode=OFF MaxTime=2-00:00:00 DefaultTime=01:00:00 State=UP"
}

gres_conf() {
    echo "# Generated by hpctune tests/slurm/cluster.sh: fake GPUs on distinct char devices."
    local dev
    for dev in "${FAKE_GPU_FILES[@]}"; do
        [[ -c $dev ]] || die "$dev is not a character device (needed as a fake GPU)"
        echo "NodeName=$NODE_NAME Name=gpu File=$dev"
    done
}

slurmdbd_conf() {
    local db_host=localhost
    ((ROOT_MODE)) || db_host=127.0.0.1
    cat <<EOF
# Generated by hpctune tests/slurm/cluster.sh; edits are overwritten by 'cluster.sh up'.
AuthType=auth/munge
$( ((ROOT_MODE)) || echo "AuthInfo=socket=$MUNGE_SOCKET")
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=$SLURM_USER
LogFile=${LOGFILE[slurmdbd]}
PidFile=${PIDFILE[slurmdbd]}
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=$db_host
StoragePort=$DB_PORT
StorageUser=$DB_USER
StoragePass=$(cat "$SECRET_DIR/db-password")
StorageLoc=$DB_NAME
ArchiveDir=$DBD_ARCHIVE
EOF
}

# Write all config files; set CONFIG_CHANGED=1 if any Slurm config changed. (Content is
# generated first, outside any `if`, so a failing generator stops the script.)
CONFIG_CHANGED=0
write_config() {
    local slurm_text gres_text dbd_text
    slurm_text=$(slurm_conf)
    gres_text=$(gres_conf)
    if write_file "$SLURM_CONF" root: 0644 <<<"$slurm_text"; then CONFIG_CHANGED=1; fi
    if write_file "$ETC_DIR/gres.conf" root: 0644 <<<"$gres_text"; then CONFIG_CHANGED=1; fi
    ((ACCOUNTING)) || return 0
    dbd_text=$(slurmdbd_conf)
    if write_file "$ETC_DIR/slurmdbd.conf" "$SLURM_USER:" 0600 <<<"$dbd_text"; then
        CONFIG_CHANGED=1
    fi
}

# As root, point /etc/slurm/slurm.conf at our config so plain sinfo/sbatch work without
# SLURM_CONF; never replace a file that is not ours.
link_client_config() {
    ((ROOT_MODE)) || return 0
    local link=/etc/slurm/slurm.conf target
    if [[ $VARIANT == site ]]; then
        # configuration only through SLURM_CONF: no client may find one by default
        if [[ -L $link ]]; then
            target=$(readlink -- "$link")
            if [[ $target == */etc/slurm.conf && -f ${target%/etc/slurm.conf}/$MARKER ]]; then
                rm -f -- "$link"
            fi
        fi
        return 0
    fi
    mkdir -p /etc/slurm
    if [[ -L $link ]]; then
        target=$(readlink -- "$link")
        [[ $target == "$SLURM_CONF" ]] && return 0
        if [[ $target == */etc/slurm.conf && -f ${target%/etc/slurm.conf}/$MARKER ]] ||
            [[ ! -e $target ]]; then
            ln -sfn -- "$SLURM_CONF" "$link"
            return 0
        fi
    elif [[ ! -e $link ]]; then
        ln -s -- "$SLURM_CONF" "$link"
        return 0
    fi
    log "warning: $link is not ours; clients need: eval \"\$($0 env)\""
}

unlink_client_config() {
    ((ROOT_MODE)) || return 0
    local link=/etc/slurm/slurm.conf
    if [[ -L $link && $(readlink -- "$link") == "$SLURM_CONF" ]]; then
        rm -f -- "$link"
    fi
}

# ---------------------------------------------------------------------------- start

# run_as USER CMD...: run CMD as USER (root mode) or directly.
run_as() {
    local user=$1
    shift
    if ((ROOT_MODE)) && [[ $user != root ]]; then
        runuser -u "$user" -- "$@"
    else
        "$@"
    fi
}

start_munged() {
    daemon_pid munged >/dev/null && return 0
    rm -f -- "${PIDFILE[munged]}"
    run_as "$MUNGE_USER" munged --force \
        --socket="$MUNGE_SOCKET" \
        --key-file="$MUNGE_DIR/munge.key" \
        --pid-file="${PIDFILE[munged]}" \
        --log-file="${LOGFILE[munged]}" \
        --seed-file="$MUNGE_DIR/munged.seed" 2>>"$STATE_DIR/start.log" ||
        die_with_log "munged failed to start" "${LOGFILE[munged]}"
    wait_until "$T_MUNGE" munged "munge -n | unmunge" munge_client_ok
}

start_mariadbd() {
    if ! daemon_pid mariadbd >/dev/null; then
        rm -f -- "${PIDFILE[mariadbd]}"
        local -a user_opt=()
        ((ROOT_MODE)) && user_opt=(--user="$DB_OS_USER")
        touch "${LOGFILE[mariadbd]}"
        if ((ROOT_MODE)); then chown "$DB_OS_USER:" "${LOGFILE[mariadbd]}"; fi
        if [[ ! -d $DB_DATA/mysql ]]; then
            rm -rf -- "$DB_DATA"
            TMPDIR=$DB_TMP mariadb-install-db --no-defaults "${user_opt[@]}" \
                --datadir="$DB_DATA" --tmpdir="$DB_TMP" --auth-root-authentication-method=socket \
                --auth-root-socket-user="$CURRENT_USER" --skip-test-db \
                >>"${LOGFILE[mariadbd]}" 2>&1 ||
                die_with_log "mariadb-install-db failed" "${LOGFILE[mariadbd]}"
        fi
        local -a net_opts=(--skip-networking)
        ((ROOT_MODE)) || net_opts=(--port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve)
        # mariadbd has no daemon mode: detach it into its own session.
        TMPDIR=$DB_TMP setsid -f mariadbd --no-defaults "${user_opt[@]}" \
            --datadir="$DB_DATA" --tmpdir="$DB_TMP" --socket="$DB_SOCKET" --pid-file="${PIDFILE[mariadbd]}" \
            --log-error="${LOGFILE[mariadbd]}" "${net_opts[@]}" \
            --innodb-flush-log-at-trx-commit=2 --innodb-lock-wait-timeout=900 \
            </dev/null >>"${LOGFILE[mariadbd]}" 2>&1
    fi
    wait_until "$T_DB" mariadbd "MariaDB on $DB_SOCKET" db_ping
    wait_until 10 mariadbd "the mariadbd pid file" daemon_pid mariadbd
    local password
    password=$(cat "$SECRET_DIR/db-password")
    mariadb --no-defaults --socket="$DB_SOCKET" -u "$CURRENT_USER" >>"${LOGFILE[mariadbd]}" 2>&1 <<EOF ||
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$password';
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$password';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$password';
ALTER USER '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$password';
GRANT ALL ON \`$DB_NAME\`.* TO '$DB_USER'@'localhost';
GRANT ALL ON \`$DB_NAME\`.* TO '$DB_USER'@'127.0.0.1';
EOF
        die_with_log "could not create the MariaDB user $DB_USER" "${LOGFILE[mariadbd]}"
}

# start_slurm_daemon NAME: start a Slurm daemon (they daemonize and write their pid file).
start_slurm_daemon() {
    local name=$1
    daemon_pid "$name" >/dev/null && return 0
    rm -f -- "${PIDFILE[$name]}"
    "$name" >>"$STATE_DIR/start.log" 2>&1 ||
        die_with_log "$name failed to start (see also $STATE_DIR/start.log)" "${LOGFILE[$name]}"
}

start_all() {
    start_munged
    if ((ACCOUNTING)); then
        start_mariadbd
        start_slurm_daemon slurmdbd
        wait_until "$T_DBD" slurmdbd "slurmdbd (sacctmgr list cluster)" dbd_ok
    fi
    start_slurm_daemon slurmctld
    wait_until "$T_CTLD" slurmctld "slurmctld (scontrol ping)" ctld_ok
    start_slurm_daemon slurmd
    wait_until "$T_SLURMD" slurmd "node $NODE_NAME idle in sinfo" node_ok
    if ((ACCOUNTING)); then
        wait_until "$T_REGISTER" slurmctld "cluster $CLUSTER_NAME registered in slurmdbd" \
            cluster_registered
    fi
}

readiness_checks() {
    if ((ACCOUNTING)); then
        echo munge_client_ok db_ping dbd_ok ctld_ok node_ok cluster_registered
    else
        echo munge_client_ok ctld_ok node_ok
    fi
}

all_ok() {
    local d
    for d in "${DAEMONS[@]}"; do daemon_pid "$d" >/dev/null || return 1; done
    for d in $(readiness_checks); do
        "$d" >/dev/null 2>&1 || return 1
    done
}

# The other variant cannot run beside this one (the same node, CPUs and fake GPUs): stop it.
stop_other_variant() {
    local other_dir=$BASE_DIR
    [[ $OTHER_VARIANT == site ]] && other_dir=$BASE_DIR-site
    [[ -f $other_dir/$MARKER ]] || return 0
    HPCTUNE_SLURM_VARIANT=$OTHER_VARIANT SLURM_CONF=$other_dir/etc/slurm.conf \
        bash "${BASH_SOURCE[0]}" down
}

cmd_up() {
    check_state_dir
    local t0
    t0=$(now)
    # mkdir, not install -d: install would chmod an existing parent such as /tmp
    mkdir -p -- "$(dirname -- "$STATE_DIR")"
    if [[ -d $STATE_DIR ]] && ! state_dir_is_ours && [[ -n $(ls -A -- "$STATE_DIR") ]]; then
        die "$STATE_DIR exists, is not empty and was not made by cluster.sh; choose another HPCTUNE_SLURM_DIR"
    fi
    stop_other_variant
    install -d -m 0755 "$STATE_DIR"
    touch "$STATE_DIR/$MARKER"
    install_packages
    make_dirs
    make_secrets
    write_config
    link_client_config
    if ((!CONFIG_CHANGED)) && all_ok; then
        log "cluster ($VARIANT) already up (state: $STATE_DIR); checked in $(elapsed "$t0") s"
        return 0
    fi
    if ((CONFIG_CHANGED)); then
        # Slurm daemons read their config at start (AuthInfo, GresTypes, accounting
        # changes need both slurmctld and slurmd restarted).
        local d
        for d in slurmd slurmctld slurmdbd; do stop_daemon "$d"; done
    fi
    start_all
    log "cluster ($VARIANT variant) up in $(elapsed "$t0") s (state: $STATE_DIR)"
    ((ROOT_MODE)) || log "clients need: eval \"\$($0 env)\""
}

# ---------------------------------------------------------------------------- stop

# stop_daemon NAME: SIGTERM by pid file (after checking /proc/PID/comm), SIGKILL on timeout.
stop_daemon() {
    local name=$1 pid start
    if ! pid=$(daemon_pid "$name"); then
        rm -f -- "${PIDFILE[$name]}"
        return 0
    fi
    local t0
    t0=$(now)
    kill -TERM "$pid" 2>/dev/null || true
    start=$SECONDS
    while process_is "$pid" "${COMM[$name]}"; do
        if ((SECONDS - start >= T_STOP)); then
            log "warning: $name (pid $pid) ignored SIGTERM for ${T_STOP}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.5
            break
        fi
        sleep 0.1
    done
    rm -f -- "${PIDFILE[$name]}"
    log "stopped $name (pid $pid) in $(elapsed "$t0") s"
}

cancel_all_jobs() {
    daemon_pid slurmctld >/dev/null || return 0
    ctld_ok 2>/dev/null || return 0
    local -a jobs
    mapfile -t jobs < <(timeout 10 squeue -h -o %F 2>/dev/null | sort -u)
    ((${#jobs[@]})) || return 0
    log "cancelling ${#jobs[@]} job(s)"
    timeout 30 scancel -- "${jobs[@]}" || log "warning: scancel failed"
    local start=$SECONDS
    while [[ -n $(timeout 10 squeue -h -o %i 2>/dev/null) ]]; do
        if ((SECONDS - start >= T_QUEUE)); then
            log "warning: the queue did not empty within ${T_QUEUE}s; stopping anyway"
            return 0
        fi
        sleep 0.2
    done
}

cmd_down() {
    local wipe=0
    while (($#)); do
        case $1 in
        --wipe) wipe=1 ;;
        *) die "unknown option for down: $1" ;;
        esac
        shift
    done
    check_state_dir
    local t0
    t0=$(now)
    if [[ -d $STATE_DIR ]]; then
        state_dir_is_ours || die "$STATE_DIR was not made by cluster.sh; not touching it"
        if command -v squeue >/dev/null; then cancel_all_jobs; fi
        local i
        for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do stop_daemon "${DAEMONS[i]}"; done
        if ((wipe)); then
            unlink_client_config
            rm -rf -- "$STATE_DIR"
            log "removed $STATE_DIR"
        fi
    fi
    log "cluster down in $(elapsed "$t0") s"
}

# ---------------------------------------------------------------------------- status, env

cmd_status() {
    check_state_dir
    local ok=1 d pid
    if [[ -n $(packages_missing) ]]; then
        echo "packages: missing $(packages_missing | tr '\n' ' ')"
        return 1
    fi
    echo "state dir: $STATE_DIR"
    for d in "${DAEMONS[@]}"; do
        if pid=$(daemon_pid "$d"); then
            printf '%-10s running (pid %s)\n' "$d:" "$pid"
        else
            printf '%-10s stopped\n' "$d:"
            ok=0
        fi
    done
    check() {
        local what=$1 daemon=$2
        shift 2
        if ! daemon_pid "$daemon" >/dev/null; then
            printf '%-34s skipped (%s stopped)\n' "$what:" "$daemon"
            ok=0
        elif "$@" >/dev/null 2>&1; then
            printf '%-34s ok\n' "$what:"
        else
            printf '%-34s FAILED\n' "$what:"
            ok=0
        fi
    }
    echo "variant: $VARIANT"
    check "munge -n | unmunge" munged munge_client_ok
    if ((ACCOUNTING)); then
        check "mariadb ping" mariadbd db_ping
        check "slurmdbd (sacctmgr list cluster)" slurmdbd dbd_ok
    fi
    check "slurmctld (scontrol ping)" slurmctld ctld_ok
    check "node $NODE_NAME up (sinfo)" slurmd node_ok
    if ((ACCOUNTING)); then
        check "cluster registered in slurmdbd" slurmdbd cluster_registered
    fi
    if daemon_pid slurmctld >/dev/null; then
        timeout 10 sinfo || true
    fi
    ((ok))
}

cmd_env() {
    check_state_dir
    printf 'export SLURM_CONF=%q\n' "$SLURM_CONF"
    printf 'export HPCTUNE_SLURM_VARIANT=%q\n' "$VARIANT"
    # the site variant's export policy, as a site sets it for its users
    if [[ $VARIANT == site ]]; then echo "export SBATCH_EXPORT=NONE"; fi
}

usage() {
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
}

main() {
    local cmd=${1:-}
    (($#)) && shift
    case $cmd in
    up) (($# == 0)) || die "up takes no arguments"; cmd_up ;;
    down) cmd_down "$@" ;;
    status) (($# == 0)) || die "status takes no arguments"; cmd_status ;;
    env) (($# == 0)) || die "env takes no arguments"; cmd_env ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
    esac
}

main "$@"
