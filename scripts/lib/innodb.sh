# shellcheck shell=bash
# InnoDB sized for Shoal's store: the sizes for this machine, the drop-in that carries them
# (deploy/mysql/60-shoal.cnf, the one source of the settings and of the reasons for them), the
# same settings as server options (for a private server), and growing a running server's buffer
# pool. Sourced after scripts/lib/services.sh (say, die), never run.

INNODB_CNF_TEMPLATE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/deploy/mysql/60-shoal.cnf"
INNODB_MIB=$((1024 * 1024))

# innodb_size_bytes SIZE: SIZE (bytes, or a number with M or G) in bytes; fails on anything else.
innodb_size_bytes() {
    [[ $1 =~ ^([0-9]{1,12})([MG]?)$ ]] || return 1
    case ${BASH_REMATCH[2]} in
    G) printf '%s\n' "$((10#${BASH_REMATCH[1]} * 1024 * INNODB_MIB))" ;;
    M) printf '%s\n' "$((10#${BASH_REMATCH[1]} * INNODB_MIB))" ;;
    *) printf '%s\n' "$((10#${BASH_REMATCH[1]}))" ;;
    esac
}

# innodb_pool_bytes [MEMINFO]: the buffer pool for this machine: SHOAL_DB_BUFFER_POOL if set,
# else a quarter of MemTotal (MEMINFO, default /proc/meminfo), at least 128 MiB (MariaDB's
# default) and at most 16 GiB, in whole 128 MiB (older servers resize in chunks of that size).
# A quarter: services-up's machine also runs the broker, the workers and their builds; a
# database host of its own can give 50-70 % (deploy/README.md, "Sizing InnoDB").
innodb_pool_bytes() {
    local kib pool chunk=$((128 * INNODB_MIB))
    if [ -n "${SHOAL_DB_BUFFER_POOL:-}" ]; then
        innodb_size_bytes "$SHOAL_DB_BUFFER_POOL" ||
            die "SHOAL_DB_BUFFER_POOL must be bytes or a number with M or G, not '$SHOAL_DB_BUFFER_POOL'"
        return 0
    fi
    kib=$(awk '$1 == "MemTotal:" { print $2 }' "${1:-/proc/meminfo}")
    [[ $kib =~ ^[0-9]+$ ]] || die "innodb: no MemTotal in ${1:-/proc/meminfo}"
    pool=$((kib * 1024 / 4 / chunk * chunk))
    if [ "$pool" -lt "$chunk" ]; then pool=$chunk; fi
    if [ "$pool" -gt $((16 * 1024 * INNODB_MIB)) ]; then pool=$((16 * 1024 * INNODB_MIB)); fi
    printf '%s\n' "$pool"
}

# innodb_log_bytes POOL: the redo log for a pool of POOL bytes: a quarter of it, 256 MiB to
# 2 GiB, in whole MiB.
innodb_log_bytes() {
    local log=$(($1 / 4 / INNODB_MIB * INNODB_MIB))
    if [ "$log" -lt $((256 * INNODB_MIB)) ]; then log=$((256 * INNODB_MIB)); fi
    if [ "$log" -gt $((2048 * INNODB_MIB)) ]; then log=$((2048 * INNODB_MIB)); fi
    printf '%s\n' "$log"
}

# innodb_human BYTES: BYTES as MiB or GiB, as the config file writes them.
innodb_human() {
    if [ $(($1 % (1024 * INNODB_MIB))) -eq 0 ]; then
        printf '%sG\n' "$(($1 / 1024 / INNODB_MIB))"
    else
        printf '%sM\n' "$(($1 / INNODB_MIB))"
    fi
}

# innodb_cnf POOL LOG: the drop-in, deploy/mysql/60-shoal.cnf with its two sizes set to POOL and
# LOG bytes and a first line saying who wrote it.
innodb_cnf() {
    [ -r "$INNODB_CNF_TEMPLATE" ] || die "innodb: $INNODB_CNF_TEMPLATE is missing"
    printf '# Written by scripts/services-up from deploy/mysql/60-shoal.cnf for this machine (%s GiB\n# of memory); it writes it again when that file or the machine changes.\n' \
        "$(awk '$1 == "MemTotal:" { printf "%.1f", $2 / 1048576 }' /proc/meminfo)"
    sed -e "s/^innodb_buffer_pool_size = .*/innodb_buffer_pool_size = $(innodb_human "$1")/" \
        -e "s/^innodb_log_file_size = .*/innodb_log_file_size = $(innodb_human "$2")/" \
        "$INNODB_CNF_TEMPLATE"
}

# innodb_server_args POOL LOG: the drop-in's settings as mariadbd options, one a line.
innodb_server_args() {
    innodb_cnf "$1" "$2" | awk -F' *= *' '/^innodb_[a-z_]+ *= */ { gsub("_", "-", $1); print "--" $1 "=" $2 }'
}

# innodb_grow_online POOL CLIENT...: grows the running server's buffer pool to POOL bytes with
# SET GLOBAL, through CLIENT (a mariadb client command line with the rights to set globals);
# prints what happened as a phrase. Never shrinks (a shrink can hang or crash MariaDB 10.11,
# MDEV-37263), never past innodb_buffer_pool_size_max (10.11.12 and later refuse that with a
# warning, and the pool stays), and only with the memory free for it (the new pages are
# committed at once on those versions, MDEV-37557). Transactions wait while it runs.
innodb_grow_online() {
    local pool=$1 current max avail status i
    shift
    current=$("$@" -N -B -e 'SELECT @@innodb_buffer_pool_size' 2>/dev/null) ||
        { printf 'not grown (cannot read the server'"'"'s buffer pool size)'; return 0; }
    if [ "$current" -ge "$pool" ]; then
        printf 'buffer pool already %s' "$(innodb_human "$current")"
        return 0
    fi
    max=$("$@" -N -B -e 'SELECT @@innodb_buffer_pool_size_max' 2>/dev/null) || max=""
    if [[ $max =~ ^[0-9]+$ ]] && [ "$max" -lt "$pool" ]; then
        printf 'not grown online: the server allows at most %s until it restarts (innodb_buffer_pool_size_max)' "$(innodb_human "$max")"
        return 0
    fi
    avail=$(awk '$1 == "MemAvailable:" { print $2 * 1024 }' /proc/meminfo)
    if [ "$((avail - (pool - current)))" -lt $((1024 * INNODB_MIB)) ]; then
        printf 'not grown online: %s available, %s more needed and 1G to spare' \
            "$(innodb_human "$((avail / INNODB_MIB * INNODB_MIB))")" "$(innodb_human "$((pool - current))")"
        return 0
    fi
    "$@" -N -B -e "SET GLOBAL innodb_buffer_pool_size = $pool" >/dev/null 2>&1 ||
        { printf 'not grown: SET GLOBAL innodb_buffer_pool_size failed'; return 0; }
    for ((i = 0; i < 600; i++)); do
        current=$("$@" -N -B -e 'SELECT @@innodb_buffer_pool_size' 2>/dev/null) || current=0
        status=$("$@" -N -B -e "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_resize_status'" 2>/dev/null | cut -f2)
        if [ "$current" -ge "$pool" ] && [[ $status != *[Rr]esizing* ]]; then
            printf 'buffer pool grown online to %s' "$(innodb_human "$current")"
            return 0
        fi
        sleep 0.1
    done
    printf 'buffer pool resize still running after 60 s (SHOW GLOBAL STATUS LIKE '"'"'Innodb_buffer_pool_resize_status'"'"')'
}

# innodb_setting NAME: NAME's value in deploy/mysql/60-shoal.cnf.
innodb_setting() { awk -F' *= *' -v n="$1" '$1 == n { print $2 }' "$INNODB_CNF_TEMPLATE"; }

# innodb_dropin_file: where services-up writes the drop-in: Debian's directory for the server's
# own settings, read after 50-server.cnf (SHOAL_MARIADB_CONF_DIR overrides the directory).
innodb_dropin_file() { printf '%s/60-shoal.cnf\n' "${SHOAL_MARIADB_CONF_DIR:-/etc/mysql/mariadb.conf.d}"; }

# innodb_dropin_current WANT: the drop-in holds WANT already.
innodb_dropin_current() { [ "$(cat "$(innodb_dropin_file)" 2>/dev/null)" = "$1" ]; }

# innodb_dropin_write WANT: writes WANT as the drop-in, mode 644 (as_root: need_root first).
innodb_dropin_write() {
    local file
    file=$(innodb_dropin_file)
    if ! { as_root install -d -m 755 "${file%/*}" &&
        printf '%s\n' "$1" | as_root tee "$file.tmp" >/dev/null &&
        as_root chmod 644 "$file.tmp" && as_root mv -f "$file.tmp" "$file"; }; then
        die "mariadb: cannot write $file"
    fi
}

# innodb_dropin_read POOL: whether this machine's mariadbd reads the drop-in: the options it
# would start with (`mariadbd --print-defaults`, which reads the files as the server does) carry
# its buffer pool size, POOL bytes, as the drop-in writes it.
innodb_dropin_read() {
    mariadbd --print-defaults 2>/dev/null | tr ' ' '\n' |
        grep -qx -- "--innodb_buffer_pool_size=$(innodb_human "$1")"
}

# innodb_running POOL LOG CLIENT...: the running server's four settings against the drop-in's
# (POOL and LOG bytes, and the file's two others), as a phrase; CLIENT is a mariadb client
# command line (any user may read these variables).
innodb_running() {
    local pool=$1 log=$2 vals p l c m
    shift 2
    vals=$("$@" -N -B -e 'SELECT @@innodb_buffer_pool_size, @@innodb_log_file_size, @@innodb_flush_log_at_trx_commit, @@innodb_flush_method' 2>/dev/null) ||
        { printf 'running settings not read'; return 0; }
    read -r p l c m <<<"$vals"
    if [ "$p" = "$pool" ] && [ "$l" = "$log" ] && [ "$c" = "$(innodb_setting innodb_flush_log_at_trx_commit)" ] &&
        [ "$m" = "$(innodb_setting innodb_flush_method)" ]; then
        printf 'in effect'
        return 0
    fi
    printf 'the server runs with buffer pool %s, redo log %s, innodb_flush_log_at_trx_commit %s, innodb_flush_method %s: the file takes effect at its next restart' \
        "$(innodb_human "$p")" "$(innodb_human "$l")" "$c" "$m"
}

have_mariadb() { [ -x /usr/sbin/mariadbd ]; }

# innodb_plan: sets INNODB_POOL and INNODB_LOG (bytes) and INNODB_WANT (the drop-in) for this
# machine.
innodb_plan() {
    INNODB_POOL=$(innodb_pool_bytes /proc/meminfo)
    INNODB_LOG=$(innodb_log_bytes "$INNODB_POOL")
    INNODB_WANT=$(innodb_cnf "$INNODB_POOL" "$INNODB_LOG")
}

# innodb_step GROW [CLIENT...] (after innodb_plan): the drop-in written where this machine's
# MariaDB reads it (as root, only when it differs), the running server's settings read through
# CLIENT, and with GROW=yes its pool grown online; prints what it found as a phrase.
innodb_step() {
    local grow=$1 file phrase
    shift
    file=$(innodb_dropin_file)
    if ! have_mariadb; then
        printf 'InnoDB settings not written (no mariadbd on this machine; size its server as deploy/mysql/60-shoal.cnf says)'
        return 0
    fi
    if innodb_dropin_current "$INNODB_WANT"; then
        phrase="$file current"
    else
        need_root "write $file"
        innodb_dropin_write "$INNODB_WANT"
        phrase="$file written"
    fi
    phrase+=" (buffer pool $(innodb_human "$INNODB_POOL"), redo log $(innodb_human "$INNODB_LOG"))"
    if ! innodb_dropin_read "$INNODB_POOL"; then
        phrase+=", warning: mariadbd does not read it (not in mariadbd --print-defaults: add '!includedir ${file%/*}/' to /etc/mysql/my.cnf)"
    fi
    if [ "$#" -gt 0 ]; then phrase+=", $(innodb_running "$INNODB_POOL" "$INNODB_LOG" "$@")"; fi
    if [ "$grow" = yes ]; then
        need_root "grow the buffer pool"
        phrase+=", $(innodb_grow_online "$INNODB_POOL" mysql_root)"
    fi
    printf '%s' "$phrase"
}
