# shellcheck shell=bash
# Helpers shared by scripts/services-up and scripts/services-down. Sourced, never run.
# scripts/test (or anyone) may source it for `shoal_credentials_file`.
#
# Secrets: the shoal password only ever travels through bash builtins (printf, read), pipes,
# stdin and a mode-600 file. No external command gets it in its argv or environment.

# shellcheck disable=SC2034 # used by the scripts that source this file
SHOAL_AMQP_PORT=5672
SHOAL_MYSQL_PORT=3306
SHOAL_EPMD_PORT=4369

# The broker's max_message_size: Shoal's decoder limit, shoal_model::envelope::MAX_MESSAGE_BYTES
# (4 MiB), so that the broker refuses what every consumer would dead-letter.
SHOAL_MAX_MESSAGE_BYTES=4194304

# The bound of the dead-letter queue <ns>.dead, a policy (shoal_dead_policy_json): at most
# SHOAL_DEAD_MAX_LENGTH messages (default 10000), none older than SHOAL_DEAD_MAX_AGE_S seconds
# (default 7 days), the oldest dropped first (overflow drop-head). `shoal dead-letters` reads
# the same variables to say how close the queue is to its bound.
shoal_dead_max_length() { printf '%s\n' "${SHOAL_DEAD_MAX_LENGTH:-10000}"; }
shoal_dead_max_age_s() { printf '%s\n' "${SHOAL_DEAD_MAX_AGE_S:-604800}"; }

# check_dead_bound: the two settings are whole numbers RabbitMQ takes (a TTL is at most 2^32-1 ms).
check_dead_bound() {
    local n a
    n=$(shoal_dead_max_length) a=$(shoal_dead_max_age_s)
    [[ $n =~ ^[1-9][0-9]{0,9}$ ]] && [ "$n" -le 2147483647 ] ||
        die "SHOAL_DEAD_MAX_LENGTH must be a count of messages from 1 to 2147483647, not '$n'"
    [[ $a =~ ^[1-9][0-9]{0,6}$ ]] && [ "$a" -le 4294967 ] ||
        die "SHOAL_DEAD_MAX_AGE_S must be a number of seconds from 1 to 4294967 (49 days), not '$a'"
}

# shoal_dead_policy_json NAMESPACE VHOST: the policy bounding <ns>.dead, as an element of a
# definitions file's "policies". Quorum queues (which <ns>.dead is) take all three keys on
# RabbitMQ 3.10 (message-ttl since 3.10; overflow drop-head and reject-publish, not
# reject-publish-dlx). A policy, not queue arguments: operators change it with
# `rabbitmqctl set_policy` (or services-up with other values) without redeclaring the queue.
shoal_dead_policy_json() {
    local pattern="^${1//./\\\\.}\\\\.dead\$"
    printf '{"vhost": "%s", "name": "%s-dead-bound", "pattern": "%s", "apply-to": "queues", "priority": 0, "definition": {"max-length": %d, "message-ttl": %d, "overflow": "drop-head"}}' \
        "$2" "$1" "$pattern" "$(shoal_dead_max_length)" "$(($(shoal_dead_max_age_s) * 1000))"
}

# shoal_topology_json NAMESPACE VHOST: the namespace's fixed topology, declared as Shoal declares
# it (so that roles that may not create a queue's first instance find it), as the "exchanges",
# "queues" and "bindings" members of a definitions file (no braces around them).
shoal_topology_json() {
    local ns=$1 vhost=$2 work
    work='"x-queue-type": "quorum", "x-delivery-limit": 4, "x-dead-letter-exchange": "'$ns'.dlx",
      "x-dead-letter-routing-key": "'$ns'.dead", "x-dead-letter-strategy": "at-least-once",
      "x-overflow": "reject-publish"'
    cat <<JSON
  "exchanges": [
    {"name": "$ns.events", "vhost": "$vhost", "type": "topic", "durable": true, "auto_delete": false, "internal": false, "arguments": {}},
    {"name": "$ns.control", "vhost": "$vhost", "type": "topic", "durable": true, "auto_delete": false, "internal": false, "arguments": {}},
    {"name": "$ns.dlx", "vhost": "$vhost", "type": "direct", "durable": true, "auto_delete": false, "internal": false, "arguments": {}}
  ],
  "queues": [
    {"name": "$ns.dead", "vhost": "$vhost", "durable": true, "auto_delete": false, "arguments": {"x-queue-type": "quorum"}},
    {"name": "$ns.results", "vhost": "$vhost", "durable": true, "auto_delete": false, "arguments": {
      $work}},
    {"name": "$ns.commands", "vhost": "$vhost", "durable": true, "auto_delete": false, "arguments": {
      $work}}
  ],
  "bindings": [
    {"source": "$ns.dlx", "vhost": "$vhost", "destination": "$ns.dead", "destination_type": "queue", "routing_key": "$ns.dead", "arguments": {}}
  ]
JSON
}

# Where the credentials are kept (KEY=VALUE lines, mode 600). SHOAL_CREDENTIALS_FILE overrides.
shoal_credentials_file() {
    printf '%s\n' "${SHOAL_CREDENTIALS_FILE:-${XDG_CONFIG_HOME:-$HOME/.config}/shoal/credentials.env}"
}

# Where services-up records what it started, for services-down. SHOAL_SERVICES_STATE_DIR overrides.
shoal_state_dir() {
    printf '%s\n' "${SHOAL_SERVICES_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/shoal}"
}

say() { printf '%s\n' "$*" >&2; }
die() {
    printf '%s: error: %s\n' "${0##*/}" "$*" >&2
    exit 1
}

# --- privileges --------------------------------------------------------------------------------

SHOAL_AS_ROOT=()
# need_root WHAT: make as_root work (root itself, or sudo), or die naming what needed it.
need_root() {
    if [ "$(id -u)" -eq 0 ]; then
        SHOAL_AS_ROOT=()
    elif command -v sudo >/dev/null 2>&1; then
        SHOAL_AS_ROOT=(sudo)
    else
        die "need root or sudo to $1 (run as root, or install and configure sudo)"
    fi
}
as_root() { "${SHOAL_AS_ROOT[@]}" "$@"; }

# run_detached COMMAND...: run COMMAND (a function is fine) with stdin from /dev/null and every
# descriptor above 2 closed, so that a daemon it leaves behind holds neither our lock file nor a
# pipe of whoever called us (beam.smp keeps inherited descriptors; seen with the lock).
run_detached() {
    (
        for fd in /proc/"$BASHPID"/fd/*; do
            fd=${fd##*/}
            if [[ $fd =~ ^[0-9]+$ ]] && [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
        done
        "$@"
    ) </dev/null
}

# take_lock FILE: serialise services-up and services-down (descriptor 9; run_detached closes it).
take_lock() {
    exec 9>"$1"
    flock -w 600 9 || die "another services-up or services-down holds $1"
}

# --- probes ------------------------------------------------------------------------------------

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
    # shellcheck disable=SC2016 # $1 is expanded by the inner bash
    timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

systemd_is_init() { [ -d /run/systemd/system ]; }

# proc_id PID: "PID:STARTTIME" of a live process (STARTTIME tells a reused pid apart), or fails.
proc_id() {
    local stat rest fields
    [[ $1 =~ ^[0-9]+$ ]] || return 1
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    rest=${stat##*) }
    read -ra fields <<<"$rest"
    [ "${#fields[@]}" -gt 19 ] || return 1
    printf '%s:%s\n' "$1" "${fields[19]}"
}

# listener_pid PORT: pid of the process listening on 127.0.0.1:PORT (needs ss; run as root).
listener_pid() {
    local out
    command -v ss >/dev/null 2>&1 || return 1
    out=$(as_root ss -ltnpH "sport = :$1" 2>/dev/null) || return 1
    [[ $out =~ pid=([0-9]+) ]] || return 1
    printf '%s\n' "${BASH_REMATCH[1]}"
}

# --- credentials -------------------------------------------------------------------------------

# gen_password: 32 random characters from [A-Za-z0-9] (safe in URLs, SQL and option files).
gen_password() {
    local raw=""
    while [ "${#raw}" -lt 32 ]; do
        raw+=$(head -c 48 /dev/urandom | base64 -w0)
        raw=${raw//[^A-Za-z0-9]/}
    done
    printf '%s' "${raw:0:32}"
}

# credentials_password FILE: the password kept in FILE (from its SHOAL_DB line), or fails.
credentials_password() {
    local line
    [ -r "$1" ] || return 1
    while IFS= read -r line; do
        if [[ $line =~ ^SHOAL_DB=mysql://shoal:([A-Za-z0-9._~-]+)@ ]]; then
            printf '%s' "${BASH_REMATCH[1]}"
            return 0
        fi
    done <"$1"
    return 1
}

# credentials_private FILE: FILE belongs to us and nobody else can read it.
credentials_private() {
    [ -f "$1" ] && [ "$(stat -c '%u %a' "$1")" = "$(id -u) 600" ]
}

# write_credentials FILE PASSWORD: atomically (re)write FILE, mode 600.
write_credentials() {
    local file=$1 pw=$2 dir tmp
    dir=$(dirname "$file")
    (umask 077 && mkdir -p "$dir")
    tmp=$(umask 077 && mktemp "$dir/.credentials.env.XXXXXX")
    {
        printf '# Shoal service credentials, written by scripts/services-up. Keep this file private (mode 600).\n'
        printf '# Load into a shell with: set -a; . %s; set +a\n' "$file"
        printf 'SHOAL_BROKER=amqp://shoal:%s@127.0.0.1:%s/%%2f\n' "$pw" "$SHOAL_AMQP_PORT"
        printf 'SHOAL_DB=mysql://shoal:%s@127.0.0.1:%s/shoal\n' "$pw" "$SHOAL_MYSQL_PORT"
        printf 'SHOAL_TEST_AMQP=amqp://shoal:%s@127.0.0.1:%s/%%2f\n' "$pw" "$SHOAL_AMQP_PORT"
        printf 'SHOAL_TEST_MYSQL=mysql://shoal:%s@127.0.0.1:%s\n' "$pw" "$SHOAL_MYSQL_PORT"
        printf 'SHOAL_HMAC_KEY_FILE=%s\n' "$(shoal_hmac_key_file)"
    } >"$tmp"
    chmod 600 "$tmp"
    mv -f "$tmp" "$file"
}

# --- MariaDB -----------------------------------------------------------------------------------

# mysql_as USER PASSWORD [mariadb options...]: the mariadb client over TCP to 127.0.0.1, with the
# password in an option file on a pipe (process substitution: only /dev/fd/N is in argv).
mysql_as() {
    local user=$1 pw=$2
    shift 2
    mariadb --defaults-file=<(printf '[client]\nuser=%s\npassword=%s\nhost=127.0.0.1\nport=%s\nprotocol=tcp\nconnect-timeout=5\n' \
        "$user" "$pw" "$SHOAL_MYSQL_PORT") "$@"
}

# mysql_shoal_ok PASSWORD: user shoal logs in over TCP, sees database shoal and may create shoal_*.
mysql_shoal_ok() {
    local grants
    command -v mariadb >/dev/null 2>&1 || return 1
    grants=$(mysql_as shoal "$1" -N -B -r -D shoal -e 'SHOW GRANTS FOR CURRENT_USER()' 2>/dev/null) || return 1
    # shellcheck disable=SC2016 # backquotes are SQL identifier quotes
    [[ $grants == *'`shoal\_%`'* ]]
}

# mysql_native_hash PASSWORD: '*' + upper hex SHA1(SHA1(pw)), what MariaDB's PASSWORD() returns,
# so that the plain password is never sent to the server (nor shows in its process list).
mysql_native_hash() {
    local h esc="" i
    h=$(printf '%s' "$1" | sha1sum)
    h=${h%% *}
    for ((i = 0; i < 40; i += 2)); do esc+="\\x${h:i:2}"; done
    # shellcheck disable=SC2059 # the format is made of \xHH escapes on purpose
    h=$(printf "$esc" | sha1sum)
    h=${h%% *}
    printf '*%s' "${h^^}"
}

# mysql_root [mariadb options...]: the mariadb client as the server's root through its unix socket
# (Debian's root@localhost authenticates by unix_socket: it must run as OS root).
mysql_root() { as_root mariadb --connect-timeout=5 -uroot "$@"; }

# --- AMQP --------------------------------------------------------------------------------------
# A real AMQP 0-9-1 handshake in bash: PLAIN login, open vhost "/", close. It needs neither a
# client library nor rabbitmqctl (nor root), and takes a few milliseconds.

_amqp_hex() { # STRING -> hex of its bytes
    local s=$1 out="" c i
    for ((i = 0; i < ${#s}; i++)); do
        printf -v c '%02x' "'${s:i:1}"
        out+=$c
    done
    printf '%s' "$out"
}
_amqp_shortstr() { printf '%02x%s' "${#1}" "$(_amqp_hex "$1")"; }
_amqp_send() { # FD PAYLOAD_HEX: send one method frame on channel 0
    local hex esc="" i
    hex="010000$(printf '%08x' $((${#2} / 2)))${2}ce"
    for ((i = 0; i < ${#hex}; i += 2)); do esc+="\\x${hex:i:2}"; done
    # shellcheck disable=SC2059 # the format is made of \xHH escapes on purpose
    printf "$esc" >&"$1"
}
_amqp_recv() { # FD: read one frame; sets AMQP_BODY (decimal bytes of its payload)
    local hdr b size
    hdr=$(timeout 5 dd bs=7 count=1 iflag=fullblock status=none <&"$1" | od -An -tu1 -v) || return 1
    read -ra b <<<"$hdr"
    [ "${#b[@]}" -eq 7 ] && [ "${b[0]}" -eq 1 ] || return 1
    size=$(((b[3] << 24) | (b[4] << 16) | (b[5] << 8) | b[6]))
    [ "$size" -ge 4 ] && [ "$size" -le 1048576 ] || return 1
    hdr=$(timeout 5 dd bs=$((size + 1)) count=1 iflag=fullblock status=none <&"$1" | od -An -tu1 -v) || return 1
    # shellcheck disable=SC2206 # od prints plain decimal numbers
    AMQP_BODY=($hdr)
    [ "${#AMQP_BODY[@]}" -eq $((size + 1)) ]
}
_amqp_is() { # CLASS METHOD: the last frame received is that method
    [ "${#AMQP_BODY[@]}" -ge 4 ] &&
        [ $(((AMQP_BODY[0] << 8) | AMQP_BODY[1])) -eq "$1" ] &&
        [ $(((AMQP_BODY[2] << 8) | AMQP_BODY[3])) -eq "$2" ]
}

# amqp_login_ok USER PASSWORD: USER can log in to the broker on 127.0.0.1 and open vhost "/".
amqp_login_ok() (
    local user=$1 pw=$2 resp tune
    exec 3<>"/dev/tcp/127.0.0.1/$SHOAL_AMQP_PORT" || exit 1
    printf 'AMQP\x00\x00\x09\x01' >&3
    _amqp_recv 3 && _amqp_is 10 10 || exit 1 # connection.start
    resp="00$(_amqp_hex "$user")00$(_amqp_hex "$pw")"
    _amqp_send 3 "000a000b00000000$(_amqp_shortstr PLAIN)$(printf '%08x' $((${#resp} / 2)))${resp}$(_amqp_shortstr en_US)"
    _amqp_recv 3 && _amqp_is 10 30 || exit 1 # connection.tune: the login was accepted
    # tune-ok: the server's channel-max and frame-max back, no heartbeats
    tune=$(printf '%02x' "${AMQP_BODY[@]:4:6}")
    _amqp_send 3 "000a001f${tune}0000"
    _amqp_send 3 "000a0028$(_amqp_shortstr /)0000" # connection.open "/"
    _amqp_recv 3 && _amqp_is 10 41 || exit 1       # connection.open-ok: vhost access granted
    _amqp_send 3 "000a003200c80000000000"          # connection.close 200
    _amqp_recv 3 || true                           # close-ok
    exit 0
) 2>/dev/null

# --- state of what services-up started ----------------------------------------------------------
# One KEY=VALUE per line: rabbitmq_how (systemd|pid), rabbitmq_proc (PID:STARTTIME),
# rabbitmq_epmd_proc, mariadb_how, mariadb_proc.

declare -A SHOAL_STATE=()
state_file() { printf '%s/services.state\n' "$(shoal_state_dir)"; }
state_load() {
    local f line
    f=$(state_file)
    SHOAL_STATE=()
    [ -f "$f" ] || return 0
    while IFS= read -r line; do
        if [[ $line =~ ^([a-z_]+)=([A-Za-z0-9:]*)$ ]]; then
            SHOAL_STATE[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
        fi
    done <"$f"
}
state_save() {
    local f dir tmp k
    f=$(state_file)
    dir=$(dirname "$f")
    mkdir -p "$dir"
    if [ "${#SHOAL_STATE[@]}" -eq 0 ]; then
        rm -f "$f"
        return 0
    fi
    tmp=$(mktemp "$dir/.services.state.XXXXXX")
    for k in "${!SHOAL_STATE[@]}"; do
        if [ -n "${SHOAL_STATE[$k]}" ]; then printf '%s=%s\n' "$k" "${SHOAL_STATE[$k]}"; fi
    done | sort >"$tmp"
    mv -f "$tmp" "$f"
}

# --- per-role identities (least privilege) -------------------------------------------------------
# services-up creates, besides the admin/test identity `shoal` above (which also migrates), one
# broker user and one database user per role, named shoal_<role>, with only what that role's code
# does (see deploy/README.md, "Least privilege"). scripts/check-privileges proves the grants.

# shellcheck disable=SC2034 # used by the scripts that source this file
SHOAL_ROLES=(scheduler compile eval exporter cli)

shoal_config_dir() { printf '%s\n' "${XDG_CONFIG_HOME:-$HOME/.config}/shoal"; }
# Where the per-role files are kept (mode 700 directory, mode 600 files). SHOAL_ROLES_DIR overrides.
shoal_roles_dir() { printf '%s\n' "${SHOAL_ROLES_DIR:-$(shoal_config_dir)/roles}"; }
# The deployment's message-signing key (64 hex characters, mode 600). SHOAL_HMAC_KEY_PATH overrides.
shoal_hmac_key_file() { printf '%s\n' "${SHOAL_HMAC_KEY_PATH:-$(shoal_config_dir)/hmac.key}"; }
# The namespace the role users' broker permissions are written for.
shoal_role_namespace() { printf '%s\n' "${SHOAL_ROLE_NAMESPACE:-shoal}"; }
# The database the role users are granted on.
SHOAL_ROLE_DATABASE=shoal

# The hosts the database users are created for: localhost and 127.0.0.1 (this server may match a
# TCP client from 127.0.0.1 to either, depending on skip_name_resolve), plus the cluster network
# of SHOAL_CLUSTER_NET (e.g. 10.0.0.% or 10.0.0.0/255.255.255.0), never '%'.
# SHOAL_CLUSTER_NET is remembered in the state directory (file cluster-net) once given, so that a
# later run without it keeps those users; SHOAL_CLUSTER_NET=none removes them.
cluster_net() {
    local net=${SHOAL_CLUSTER_NET:-}
    if [ -z "$net" ]; then { read -r net <"$(shoal_state_dir)/cluster-net"; } 2>/dev/null || net=""; fi
    if [ "$net" = none ]; then net=""; fi
    printf '%s' "$net"
}
shoal_db_hosts() {
    local net
    net=$(cluster_net)
    printf '%s\n' localhost 127.0.0.1
    if [ -n "$net" ]; then printf '%s\n' "$net"; fi
}
check_cluster_net() {
    local net
    net=$(cluster_net)
    [ -z "$net" ] && return 0
    [[ $net =~ ^[0-9A-Za-z.%_/:-]+$ ]] || die "SHOAL_CLUSTER_NET='$net': use a host pattern such as 10.0.0.% or 10.0.0.0/255.255.255.0"
    [ "$net" != % ] || die "SHOAL_CLUSTER_NET='%' would grant to every host; name the cluster's network"
}

# shoal_role_db_grants ROLE: what ROLE may do in database shoal, one "PRIVILEGES<TAB>TABLE" line
# per table (table-level grants; UPDATE (columns) where an upsert needs it). Every role reads and
# "creates" schema_version because every shoal process migrates on start: with the schema
# current that is one CREATE TABLE IF NOT EXISTS schema_version, which needs CREATE on that
# table (and nothing else); a pending migration fails for a role and must run as the admin.
# INSERT ... ON DUPLICATE KEY UPDATE needs UPDATE on every column it inserts (MariaDB 10.11).
# Every worker role writes its own presence row (worker: an upsert, which MariaDB checks for
# SELECT on the columns it updates); the cli reads them (`shoal workers`).
SHOAL_JOB_INSERT_COLUMNS='id, session_id, config_id, solver_id, compile_step, eval_step, identity_hash, compile_params, run_params, build_key, state, created_ms, updated_ms'
shoal_role_db_grants() {
    local t=$'\t'
    printf 'SELECT, CREATE%sschema_version\n' "$t"
    case $1 in
    scheduler)
        # sessions/session (open work, backends), config (building), jobs: claim, sweep, counts,
        # in_flight, apply (SELECT … FOR UPDATE + compare-and-set UPDATE); result rows and
        # build records written by apply; builds() read before compiling; the outbox (requests
        # owed: written by apply, read by the sender, cleared once the broker confirmed).
        # Operators' commands (shoal tune --cluster: find/create the session, upsert configs,
        # tags and the solver, insert jobs), each recorded once in command; the files shipped
        # with a spec (stored in parts, read back to check, forgotten when they do not hash).
        # Labels: the strings job and result rows name by id, written before the rows (an
        # upsert that leaves an existing one alone) and read with them.
        printf '%s\n' "SELECT, INSERT${t}session" "SELECT, INSERT, UPDATE${t}config" \
            "SELECT, INSERT, UPDATE${t}config_tag" "SELECT, INSERT, UPDATE${t}solver" \
            "SELECT, INSERT, UPDATE${t}job" "SELECT, INSERT, UPDATE${t}label" \
            "INSERT${t}result" "SELECT, INSERT, UPDATE${t}build" "SELECT, INSERT, DELETE${t}outbox" \
            "SELECT, INSERT, UPDATE${t}worker" "SELECT, INSERT${t}command" \
            "SELECT, INSERT${t}session_cancel" "SELECT, INSERT, DELETE${t}shipped_file_part"
        ;;
    compile)
        # session (backend; a shipped spec's files), put_artifact (INSERT … ON DUPLICATE KEY UPDATE hash = hash, which
        # reads the column hash: SELECT on it, not on the bytes), a job's state and attempt (is a
        # redelivered request still current? job_progress: those columns and no other).
        printf '%s\n' "SELECT${t}session" "SELECT (hash), INSERT, UPDATE${t}artifact" \
            "SELECT, INSERT, UPDATE${t}worker" "SELECT${t}shipped_file_part" \
            "SELECT (id, state, attempt)${t}job"
        ;;
    eval)
        # session (backend; a shipped spec's files), job and its labels (is the attempt still
        # current?), artifact (fetch).
        printf '%s\n' "SELECT${t}session" "SELECT${t}job" "SELECT${t}label" "SELECT${t}artifact" \
            "SELECT, INSERT, UPDATE${t}worker" "SELECT${t}shipped_file_part"
        ;;
    exporter)
        # session, final_results (job ⋈ config ⋈ solver ⟕ result); a MIOpen session's kernel
        # db from its jobs' artifacts.
        printf '%s\n' "SELECT${t}session" "SELECT${t}job" "SELECT${t}label" "SELECT${t}config" \
            "SELECT${t}solver" "SELECT${t}result" "SELECT${t}artifact" \
            "SELECT, INSERT, UPDATE${t}worker" \
            "SELECT${t}shipped_file_part"
        ;;
    cli)
        # Reads only: in cluster mode what changes the schedule goes to the Scheduler as a
        # command over the broker (shoal tune --cluster). shoal tune --cluster watches
        # (state_counts) and exports (final_results); status, sessions, workers, export read;
        # miopen imports and miopen report read the imported MIOpen databases.
        printf '%s\n' "SELECT${t}session" "SELECT${t}config" "SELECT${t}config_tag" \
            "SELECT${t}solver" "SELECT${t}applicability" "SELECT${t}job" "SELECT${t}label" \
            "SELECT${t}result" "SELECT${t}artifact" "SELECT${t}worker" "SELECT${t}session_cancel" \
            "SELECT${t}shipped_file_part" "SELECT${t}db_import" "SELECT${t}db_record"
        ;;
    *) return 1 ;;
    esac
}

# shoal_role_broker_perms ROLE NAMESPACE: "CONFIGURE<TAB>WRITE<TAB>READ" regexes on the vhost.
# Every connection declares <ns>.events, <ns>.control (topic), <ns>.dlx (direct) and the queue
# <ns>.dead, and binds <ns>.dead to <ns>.dlx (configure on all four, write on the queue, read on
# the exchange). Work and results go through the default exchange (write on amq.default), so
# the broker cannot tell which queue a publisher may fill: that is why messages are signed.
# A consumer that dead-letters publishes to <ns>.dlx. Declaring a queue that does not exist yet
# with a dead-letter exchange needs read on the queue and write on <ns>.dlx. A topic subscriber
# declares a server-named exclusive queue (amq.gen-…), binds it to the topic and consumes it.
shoal_role_broker_perms() {
    local n=${2//./\\.} c w r
    local topo="$n\\.events|$n\\.control|$n\\.dlx|$n\\.dead"
    local sub='amq\.gen-.*'
    case $1 in
    scheduler)
        # Also consumes operators' commands, answers on their reply queues (amq.default), and
        # reports sessions' progress on <ns>.events.
        c="$topo|$n\\.results|$n\\.commands|$n\\.compile\\..+|$n\\.eval\\..+|$sub"
        w="amq\\.default|$n\\.dlx|$n\\.dead|$n\\.events|$sub"
        r="$n\\.results|$n\\.commands|$n\\.compile\\..+|$n\\.eval\\..+|$n\\.dlx|$n\\.control|$sub"
        ;;
    compile)
        c="$topo|$n\\.results|$n\\.compile\\..+|$sub"
        w="amq\\.default|$n\\.dlx|$n\\.dead|$sub"
        r="$n\\.compile\\..+|$n\\.dlx|$n\\.control|$sub"
        ;;
    eval)
        # The GpuMonitor of an eval worker publishes health events and pause/resume controls.
        c="$topo|$n\\.results|$n\\.eval\\..+|$sub"
        w="amq\\.default|$n\\.dlx|$n\\.dead|$n\\.events|$n\\.control|$sub"
        r="$n\\.eval\\..+|$n\\.dlx|$n\\.control|$sub"
        ;;
    exporter)
        c="$topo|$sub"
        w="$n\\.dead|$sub"
        r="$n\\.dlx|$n\\.control|$sub"
        ;;
    cli)
        # shoal control …, shoal export --cluster: publish on <ns>.control. shoal tune
        # --cluster: publish a command to <ns>.commands (through amq.default, which cannot be
        # narrowed to one queue: the command's signature is what the Scheduler trusts), and
        # declare and consume its own reply queue <ns>.reply.<random> (with a dead-letter
        # exchange: write on <ns>.dlx); it declares <ns>.commands too (which exists: that needs
        # configure only), so that a command waits there while no Scheduler runs. It may not
        # consume the commands queue or any work. It follows progress reports on <ns>.events
        # (a subscription: its own server-named queue).
        c="$topo|$n\\.commands|$n\\.reply\\..+|$sub"
        w="amq\\.default|$n\\.dead|$n\\.dlx|$n\\.control|$sub"
        r="$n\\.dlx|$n\\.reply\\..+|$n\\.events|$sub"
        ;;
    *) return 1 ;;
    esac
    printf '^(%s)$\t^(%s)$\t^(%s)$\n' "$c" "$w" "$r"
}

# role_file ROLE: the env file of ROLE.
role_file() { printf '%s/%s.env\n' "$(shoal_roles_dir)" "$1"; }

# shoal_host_users: the broker users of the hosts named in SHOAL_WORKER_HOSTS (spaces or commas
# between names): compile.<host> and eval.<host> for each, each the identity of that host alone
# (shoal_<role>.<host>: its replies may name only that host's workers; ARCHITECTURE.md, Trust).
# A host's worker is started with `--host <host>` and that user's file, roles/<role>.<host>.env.
shoal_host_users() {
    local h hosts=${SHOAL_WORKER_HOSTS:-}
    for h in ${hosts//,/ }; do
        printf 'compile.%s\neval.%s\n' "$h" "$h"
    done
}

# check_worker_hosts: every name in SHOAL_WORKER_HOSTS is a host name Shoal takes (`--host`).
check_worker_hosts() {
    local h hosts=${SHOAL_WORKER_HOSTS:-}
    for h in ${hosts//,/ }; do
        [[ $h =~ ^[A-Za-z0-9_-]{1,64}$ ]] ||
            die "SHOAL_WORKER_HOSTS: '$h' is not a host name of letters, digits, '-' and '_'"
    done
}

# role_passwords FILE: "BROKER_PASSWORD DB_PASSWORD" kept in a role file, or fails.
role_passwords() {
    local line bpw="" dpw=""
    [ -r "$1" ] || return 1
    while IFS= read -r line; do
        if [[ $line =~ ^SHOAL_BROKER=amqp://shoal_[a-z]+(\.[A-Za-z0-9_-]+)?:([A-Za-z0-9]+)@ ]]; then bpw=${BASH_REMATCH[2]}; fi
        if [[ $line =~ ^SHOAL_DB=mysql://shoal_[a-z]+:([A-Za-z0-9]+)@ ]]; then dpw=${BASH_REMATCH[1]}; fi
    done <"$1"
    [ -n "$bpw" ] && [ -n "$dpw" ] || return 1
    printf '%s %s' "$bpw" "$dpw"
}

# write_role_file ROLE BROKER_PASSWORD DB_PASSWORD: atomically (re)write the role's file, mode 600.
# ROLE may be ROLE.HOST (a host's own broker user, shoal_ROLE.HOST, with the role's database user).
write_role_file() {
    local role=$1 bpw=$2 dpw=$3 file dir tmp
    file=$(role_file "$role")
    dir=$(dirname "$file")
    (umask 077 && mkdir -p "$dir")
    chmod 700 "$dir"
    tmp=$(umask 077 && mktemp "$dir/.$role.env.XXXXXX")
    {
        printf '# Shoal role "%s", written by scripts/services-up: this role'\''s own broker and database\n' "$role"
        printf '# users, with only the permissions the role needs. Keep private (mode 600).\n'
        printf 'SHOAL_BROKER=amqp://shoal_%s:%s@127.0.0.1:%s/%%2f\n' "$role" "$bpw" "$SHOAL_AMQP_PORT"
        printf 'SHOAL_DB=mysql://shoal_%s:%s@127.0.0.1:%s/%s\n' "${role%%.*}" "$dpw" "$SHOAL_MYSQL_PORT" "$SHOAL_ROLE_DATABASE"
        printf 'SHOAL_NAMESPACE=%s\n' "$(shoal_role_namespace)"
        printf 'SHOAL_HMAC_KEY_FILE=%s\n' "$(shoal_hmac_key_file)"
    } >"$tmp"
    chmod 600 "$tmp"
    mv -f "$tmp" "$file"
}

# write_operator_file BROKER_PASSWORD: atomically (re)write operator.env, mode 600: the cli role's
# broker user, the namespace and the key, and no database user at all. What an operator who only
# sends commands (tune --cluster, import-configs --cluster, session cancel --cluster …) and
# follows progress on the events topic needs; cli.env adds the read-only database user for
# status, sessions, workers and local exports.
write_operator_file() {
    local bpw=$1 file dir tmp
    file=$(role_file operator)
    dir=$(dirname "$file")
    tmp=$(umask 077 && mktemp "$dir/.operator.env.XXXXXX")
    {
        printf '# Shoal operator, written by scripts/services-up: the cli role'\''s broker user and the\n'
        printf '# signing key, and no database credentials. Keep private (mode 600).\n'
        printf 'SHOAL_BROKER=amqp://shoal_cli:%s@127.0.0.1:%s/%%2f\n' "$bpw" "$SHOAL_AMQP_PORT"
        printf 'SHOAL_NAMESPACE=%s\n' "$(shoal_role_namespace)"
        printf 'SHOAL_HMAC_KEY_FILE=%s\n' "$(shoal_hmac_key_file)"
    } >"$tmp"
    chmod 600 "$tmp"
    mv -f "$tmp" "$file"
}

# file_has_line FILE LINE: FILE has exactly that line.
file_has_line() { grep -qxF -- "$2" "$1" 2>/dev/null; }

# hmac_key_ok FILE: FILE is ours, mode 600, and holds 64 hex characters.
hmac_key_ok() {
    local key
    credentials_private "$1" || return 1
    { read -r key <"$1"; } 2>/dev/null || return 1
    [[ $key =~ ^[0-9a-f]{64}$ ]]
}

# ensure_hmac_key FILE: create the key once (32 bytes from /dev/urandom, as hex); never replace it.
ensure_hmac_key() {
    local file=$1 dir tmp
    if [ -e "$file" ]; then
        hmac_key_ok "$file" || die "$file exists but is not a private (mode 600) file of 64 hex characters; fix or remove it"
        return 0
    fi
    dir=$(dirname "$file")
    (umask 077 && mkdir -p "$dir")
    tmp=$(umask 077 && mktemp "$dir/.hmac.key.XXXXXX")
    od -An -tx1 -N32 -v /dev/urandom | tr -d ' \n' >"$tmp"
    printf '\n' >>"$tmp"
    chmod 600 "$tmp"
    hmac_key_ok "$tmp" || die "generating $file failed"
    mv -n "$tmp" "$file"
    rm -f "$tmp"
    say "services-up: created the message-signing key $file"
}

# shoal_schema_version: the newest migration of this checkout (schemas/mysql/NNNN_*.sql), a number.
shoal_schema_version() {
    local newest
    newest=$(find "$(dirname "${BASH_SOURCE[0]}")/../../schemas/mysql" -name '[0-9][0-9][0-9][0-9]_*.sql' -printf '%f\n' | sort | tail -n 1)
    printf '%d\n' "$((10#${newest:0:4}))"
}

# privileges_fingerprint: a hash of every role's grants and permissions, of the dead-letter
# policy and of the schema version, as this script wants them, so that the fast path notices a
# change of this file (or of SHOAL_CLUSTER_NET, SHOAL_DEAD_MAX_LENGTH, SHOAL_DEAD_MAX_AGE_S) or a
# new migration (which the full path runs: `shoal db migrate`).
privileges_fingerprint() {
    local role ns
    ns=$(shoal_role_namespace)
    {
        printf 'schema %s\n' "$(shoal_schema_version)"
        shoal_db_hosts
        printf '%s\n' "$ns" "$SHOAL_ROLE_DATABASE"
        shoal_dead_policy_json "$ns" /
        for role in "${SHOAL_ROLES[@]}"; do
            printf '[%s]\n' "$role"
            shoal_role_db_grants "$role"
            shoal_role_broker_perms "$role" "$ns"
        done
        printf 'host users: %s\n' "$(shoal_host_users | tr '\n' ' ')"
    } | sha256sum | cut -d' ' -f1
}
