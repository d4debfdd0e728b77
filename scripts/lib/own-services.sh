# shellcheck shell=bash
# A private RabbitMQ node and a private MariaDB server under one temporary directory, for
# scripts/chaos. Sourced after scripts/lib/services.sh, never run.
#
# Why: the chaos suite SIGKILLs the broker and the database. The machine's own servers (5672,
# 3306) are shared with other work and must never be touched, so the suite starts servers of its
# own, on free ports in the 20000s, with their data, logs, sockets and pid files under
# $OWN_DIR, and stops only what it started (own_stop_services, from the caller's trap). Each
# server's pid is recorded when it starts; a fault is a SIGKILL of that pid, and a restart starts
# the same binary again on the same directory and port, as systemd would.
#
# Identities are those of scripts/services-up (its functions, reused): one broker user and one
# database user per role (shoal_role_broker_perms, shoal_role_db_grants), generated passwords
# that reach the servers only as hashes, and one admin (chaos_admin) for migrating, loading the
# hostile tool and counting. Each run of the suite gets its own vhost and database.

OWN_DIR=""
OWN_AMQP_PORT=""
# The AMQP ports of a broker cluster's nodes (scripts/chaos --broker-cluster), or empty for the
# one node on OWN_AMQP_PORT: the settings written below then list every node.
OWN_BROKER_PORTS=()
OWN_DIST_PORT=""
OWN_EPMD_PORT=""
OWN_MYSQL_PORT=""
OWN_NODE=""
OWN_ADMIN_PW=""
# Extra address both servers also listen on (the host end of a network namespace), or empty.
OWN_EXTRA_ADDR=""
# Runs (vhost and database suffixes) the identities are created for.
OWN_RUNS=()
# Extra mariadbd options, after the defaults below (a later option wins): the tests' servers keep
# MariaDB's default 128 MiB buffer pool, which their small databases fit; scripts/bench-dispatch
# --own-mariadb gives its server the settings of deploy/mysql/60-shoal.cnf here.
OWN_MARIADB_OPTS=()
OWN_READY_TIMEOUT=90

# own_init DIR: use DIR (private, created) for everything; picks the ports.
own_init() {
    OWN_DIR=$1
    mkdir -p "$OWN_DIR"/{pids,rabbit/home,rabbit/mnesia,rabbit/log,mysql,env}
    chmod 700 "$OWN_DIR"
    OWN_AMQP_PORT=$(own_free_port)
    OWN_DIST_PORT=$(own_free_port "$OWN_AMQP_PORT")
    OWN_EPMD_PORT=$(own_free_port "$OWN_AMQP_PORT" "$OWN_DIST_PORT")
    OWN_MYSQL_PORT=$(own_free_port "$OWN_AMQP_PORT" "$OWN_DIST_PORT" "$OWN_EPMD_PORT")
    OWN_NODE="chaos$$@localhost"
    OWN_ADMIN_PW=$(gen_password)
    # services.sh's mysql_as and amqp_login_ok read these.
    # shellcheck disable=SC2034
    SHOAL_AMQP_PORT=$OWN_AMQP_PORT
    # shellcheck disable=SC2034
    SHOAL_MYSQL_PORT=$OWN_MYSQL_PORT
}

# own_free_port [TAKEN...]: a port in 20000-29999 that nothing listens on and that is not TAKEN.
own_free_port() {
    local try p used
    used=$(ss -Htan 2>/dev/null | awk '{print $4}' | sed 's/.*://') || used=""
    for ((try = 0; try < 200; try++)); do
        p=$((20000 + RANDOM % 10000))
        if [[ " $* " == *" $p "* ]] || grep -qx "$p" <<<"$used"; then continue; fi
        printf '%s\n' "$p"
        return 0
    done
    die "own-services: found no free port in 20000-29999 after 200 tries"
}

# own_pid NAME: the recorded pid of NAME if that process still runs (pid and start time
# match), else fails.
own_pid() {
    local rec
    { read -r rec <"$OWN_DIR/pids/$1"; } 2>/dev/null || return 1
    [ -n "$rec" ] && [ "$(proc_id "${rec%%:*}")" = "$rec" ] || return 1
    printf '%s\n' "${rec%%:*}"
}
# own_spawn LOG COMMAND...: COMMAND in the background, its output appended to LOG, stdin from
# /dev/null and no other descriptor of ours (a server must not hold a pipe of whoever called us);
# it is exec'd, so $! is its pid.
own_spawn() {
    local log=$1
    shift
    (
        for fd in /proc/"$BASHPID"/fd/*; do
            fd=${fd##*/}
            if [[ $fd =~ ^[0-9]+$ ]] && [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
        done
        exec "$@"
    ) </dev/null >>"$log" 2>&1 &
    # Out of the job table: its SIGKILL is a planned fault, not news for the terminal.
    disown "$!"
}

own_record() { proc_id "$2" >"$OWN_DIR/pids/$1" || die "own-services: $1 (pid $2) exited at once; see $OWN_DIR"; }

# own_kill NAME SIGNAL [WAIT_S]: send SIGNAL to NAME's recorded process and wait for it to go.
own_kill() {
    local pid i
    pid=$(own_pid "$1") || return 0
    kill "-$2" "$pid" 2>/dev/null || return 0
    for ((i = 0; i < ${3:-30} * 10; i++)); do
        [ -d "/proc/$pid" ] || return 0
        # A zombie child of ours: gone for every purpose but the reaping.
        [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 0
        sleep 0.1
    done
    return 1
}

# --- RabbitMQ ----------------------------------------------------------------------------------

# own_hex_bytes HEX: the bytes HEX spells, on stdout.
own_hex_bytes() {
    local esc="" i
    for ((i = 0; i < ${#1}; i += 2)); do esc+="\\x${1:i:2}"; done
    # shellcheck disable=SC2059 # the format is made of \xHH escapes on purpose
    printf "$esc"
}

# own_rabbit_hash PASSWORD: RabbitMQ's rabbit_password_hashing_sha256 of PASSWORD,
# base64(salt || SHA-256(salt || password)), so the definitions file holds no password.
own_rabbit_hash() {
    local salt h
    salt=$(od -An -tx1 -N4 -v /dev/urandom | tr -d ' \n')
    h=$({ own_hex_bytes "$salt" && printf '%s' "$1"; } | sha256sum)
    own_hex_bytes "$salt${h%% *}" | base64 -w0
}

own_json_str() { # STRING: as a JSON string (the regexes carry backslashes)
    local s=${1//\\/\\\\}
    printf '"%s"' "${s//\"/\\\"}"
}

# own_rabbit_setup PASSWORDS_VAR: the node's config and definitions. PASSWORDS_VAR names an
# associative array user -> broker password, a user being a role (`eval`: the broker user
# shoal_eval, shared by every host of the role) or a role and a host (`eval.e1`: shoal_eval.e1,
# the identity of host e1 alone); every user gets its role's permissions on every run's vhost, for the namespace `chaos`, whose dead-letter queue gets services-up's bound; the node
# refuses messages past Shoal's decoder limit (max_message_size).
own_rabbit_setup() {
    local -n pws=$1
    local dir=$OWN_DIR/rabbit role run sep="" conf write read
    {
        printf 'listeners.tcp.1 = 127.0.0.1:%s\n' "$OWN_AMQP_PORT"
        if [ -n "$OWN_EXTRA_ADDR" ]; then printf 'listeners.tcp.2 = %s:%s\n' "$OWN_EXTRA_ADDR" "$OWN_AMQP_PORT"; fi
        printf 'default_user = chaos_admin\ndefault_pass = %s\n' "$OWN_ADMIN_PW"
        printf 'load_definitions = %s/definitions.json\n' "$dir"
        printf 'log.console = false\nlog.file.level = info\n'
        # The broker refuses what Shoal's decoder would (services-up sets the same).
        printf 'max_message_size = %s\n' "$SHOAL_MAX_MESSAGE_BYTES"
    } >"$dir/rabbitmq.conf"
    chmod 600 "$dir/rabbitmq.conf"
    printf '[].\n' >"$dir/enabled_plugins"
    : >"$dir/rabbitmq-env.conf"
    {
        printf '{"users": ['
        printf '{"name": "chaos_admin", "password_hash": "%s", "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["administrator"]}' \
            "$(own_rabbit_hash "$OWN_ADMIN_PW")"
        for role in "${!pws[@]}"; do
            printf ', {"name": "shoal_%s", "password_hash": "%s", "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []}' \
                "$role" "$(own_rabbit_hash "${pws[$role]}")"
        done
        printf '],\n "vhosts": [{"name": "/"}'
        for run in "${OWN_RUNS[@]}"; do printf ', {"name": "%s"}' "$run"; done
        printf '],\n "permissions": ['
        for run in / "${OWN_RUNS[@]}"; do
            printf '%s{"user": "chaos_admin", "vhost": "%s", "configure": ".*", "write": ".*", "read": ".*"}' "$sep" "$run"
            sep=", "
            [ "$run" != / ] || continue
            for role in "${!pws[@]}"; do
                IFS=$'\t' read -r conf write read < <(shoal_role_broker_perms "${role%%.*}" chaos)
                printf ', {"user": "shoal_%s", "vhost": "%s", "configure": %s, "write": %s, "read": %s}' \
                    "$role" "$run" "$(own_json_str "$conf")" "$(own_json_str "$write")" "$(own_json_str "$read")"
            done
        done
        # The dead-letter queue of every run's namespace is bounded as services-up bounds it.
        printf '],\n "policies": ['
        sep=""
        for run in "${OWN_RUNS[@]}"; do
            printf '%s%s' "$sep" "$(shoal_dead_policy_json chaos "$run")"
            sep=", "
        done
        printf ']}\n'
    } >"$dir/definitions.json"
    chmod 600 "$dir/definitions.json"
}

# own_epmd_start: the node's own Erlang port mapper on 127.0.0.1:$OWN_EPMD_PORT (the machine's
# epmd on 4369 belongs to the shared broker).
own_epmd_start() {
    own_pid epmd >/dev/null && return 0
    own_spawn "$OWN_DIR/rabbit/log/epmd.log" env ERL_EPMD_ADDRESS=127.0.0.1 epmd -port "$OWN_EPMD_PORT"
    own_record epmd $!
}

# own_rabbit_start: starts the node (again) on its directory and port; returns once a login
# and the opening of a vhost succeed.
own_rabbit_start() {
    local dir=$OWN_DIR/rabbit pid deadline
    own_epmd_start
    own_spawn "$dir/log/stdout.log" env -i PATH="$PATH" HOME="$dir/home" LANG=C.UTF-8 LC_ALL=C.UTF-8 \
        RUNNING_UNDER_SYSTEMD=true \
        RABBITMQ_NODENAME="$OWN_NODE" RABBITMQ_NODE_PORT="$OWN_AMQP_PORT" \
        RABBITMQ_DIST_PORT="$OWN_DIST_PORT" ERL_EPMD_PORT="$OWN_EPMD_PORT" \
        RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" \
        RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf" \
        RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
        RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config" RABBITMQ_PID_FILE="$dir/rabbit.pid" \
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
        /usr/lib/rabbitmq/bin/rabbitmq-server
    pid=$!
    own_record rabbit "$pid"
    deadline=$((SECONDS + OWN_READY_TIMEOUT))
    until port_open "$OWN_AMQP_PORT" && amqp_login_ok chaos_admin "$OWN_ADMIN_PW"; do
        [ -d "/proc/$pid" ] || die "own-services: the private RabbitMQ (pid $pid) exited during start-up; see $dir/log"
        [ "$SECONDS" -lt "$deadline" ] || die "own-services: the private RabbitMQ not ready after ${OWN_READY_TIMEOUT}s; see $dir/log"
        sleep 0.2
    done
}

# --- MariaDB -----------------------------------------------------------------------------------

# own_mysql_root [mariadb options...]: the client as the server's superuser over its socket: the
# OS user who installed it (root, or whoever runs the suite), authenticated by unix_socket.
own_mysql_root() {
    mariadb --no-defaults --socket="$OWN_DIR/mysql/mysqld.sock" -u"$(id -un)" --connect-timeout=5 "$@"
}

# own_mariadb_setup: a fresh data directory (its superusers authenticate by unix socket only).
own_mariadb_setup() {
    local dir=$OWN_DIR/mysql
    mariadb-install-db --no-defaults --user="$(id -un)" --datadir="$dir/data" \
        --auth-root-authentication-method=socket --skip-test-db >"$dir/install.log" 2>&1 ||
        die "own-services: mariadb-install-db failed; see $dir/install.log"
}

# own_mariadb_start: starts the server (again) on its data directory and port; returns once root
# can run a query.
own_mariadb_start() {
    local dir=$OWN_DIR/mysql pid deadline bind=127.0.0.1
    if [ -n "$OWN_EXTRA_ADDR" ]; then bind+=",$OWN_EXTRA_ADDR"; fi
    own_spawn "$dir/stdout.log" mariadbd --no-defaults --user="$(id -un)" --datadir="$dir/data" \
        --socket="$dir/mysqld.sock" --port="$OWN_MYSQL_PORT" --bind-address="$bind" \
        --pid-file="$dir/mysqld.pid" --log-error="$dir/error.log" --skip-name-resolve \
        --max-connections=600 --innodb-buffer-pool-size=128M "${OWN_MARIADB_OPTS[@]}"
    pid=$!
    own_record mariadb "$pid"
    deadline=$((SECONDS + OWN_READY_TIMEOUT))
    until own_mysql_root -N -B -e 'SELECT 1' >/dev/null 2>&1; do
        [ -d "/proc/$pid" ] || die "own-services: the private MariaDB (pid $pid) exited during start-up; see $dir/error.log"
        [ "$SECONDS" -lt "$deadline" ] || die "own-services: the private MariaDB not ready after ${OWN_READY_TIMEOUT}s; see $dir/error.log"
        sleep 0.2
    done
}

# own_mariadb_admin: the admin user (from 127.0.0.1 only), with everything on chaos_* databases.
own_mariadb_admin() {
    {
        printf "CREATE USER IF NOT EXISTS 'chaos_admin'@'127.0.0.1' IDENTIFIED BY PASSWORD '%s';\n" \
            "$(mysql_native_hash "$OWN_ADMIN_PW")"
        printf "GRANT ALL PRIVILEGES ON \`chaos\\\\_%%\`.* TO 'chaos_admin'@'127.0.0.1';\n"
    } | own_mysql_root -N -B || die "own-services: creating the admin of the private MariaDB failed"
}

# own_mariadb_users PASSWORDS_VAR HOST...: role users on each HOST (patterns such as
# 10.214.3.%), with each role's grants on every run's database. The databases must be migrated
# first (table grants name existing tables): see own_database.
own_mariadb_users() {
    local -n pws=$1
    shift
    local host role run privs table hash
    {
        for role in "${!pws[@]}"; do
            hash=$(mysql_native_hash "${pws[$role]}")
            for host in "$@"; do
                printf "CREATE USER IF NOT EXISTS 'shoal_%s'@'%s' IDENTIFIED BY PASSWORD '%s';\n" "$role" "$host" "$hash"
                for run in "${OWN_RUNS[@]}"; do
                    while IFS=$'\t' read -r privs table; do
                        # shellcheck disable=SC2016 # backquotes are SQL identifier quotes
                        printf 'GRANT %s ON `chaos_%s`.`%s` TO '\''shoal_%s'\''@'\''%s'\'';\n' \
                            "$privs" "$run" "$table" "$role" "$host"
                    done < <(shoal_role_db_grants "$role")
                done
            done
        done
    } | own_mysql_root -N -B || die "own-services: creating the users of the private MariaDB failed"
}

# own_admin_db RUN: the admin's URL of run RUN's database.
own_admin_db() { printf 'mysql://chaos_admin:%s@127.0.0.1:%s/chaos_%s\n' "$OWN_ADMIN_PW" "$OWN_MYSQL_PORT" "$1"; }
own_admin_broker() { printf 'amqp://chaos_admin:%s@%s/%s\n' "$OWN_ADMIN_PW" "$(own_broker_hosts 127.0.0.1)" "$1"; }

# own_broker_hosts ADDR: the broker's hosts as a URL names them: ADDR:PORT, or every node of a
# cluster, ADDR:PORT1,ADDR:PORT2,... (Shoal's form for a node list).
own_broker_hosts() {
    local p hosts=""
    if [ "${#OWN_BROKER_PORTS[@]}" -eq 0 ]; then
        printf '%s:%s' "$1" "$OWN_AMQP_PORT"
        return 0
    fi
    for p in "${OWN_BROKER_PORTS[@]}"; do hosts+="${hosts:+,}$1:$p"; done
    printf '%s' "$hosts"
}

# own_database RUN SHOAL: creates run RUN's database and migrates it with the shoal binary.
own_database() {
    # shellcheck disable=SC2016 # backquotes are SQL identifier quotes
    printf 'CREATE DATABASE IF NOT EXISTS `chaos_%s` CHARACTER SET utf8mb4;\n' "$1" | own_mysql_root ||
        die "own-services: creating database chaos_$1 failed"
    SHOAL_DB=$(own_admin_db "$1") RUST_LOG=warn "$2" db migrate >/dev/null ||
        die "own-services: migrating database chaos_$1 failed"
}

# own_role_env RUN USER PASSWORD_BROKER PASSWORD_DB [ADDR]: writes the settings of USER (a role,
# or ROLE.HOST: that host's broker user, with the role's database user) for run RUN, reaching
# the servers at ADDR (default 127.0.0.1), mode 600; prints the file's path.
own_role_env() {
    local run=$1 role=$2 addr=${5:-127.0.0.1} file
    file=$OWN_DIR/env/$run-$role${5:+-$5}.env
    (
        umask 077
        {
            printf 'SHOAL_BROKER=amqp://shoal_%s:%s@%s/%s\n' "$role" "$3" "$(own_broker_hosts "$addr")" "$run"
            printf 'SHOAL_DB=mysql://shoal_%s:%s@%s:%s/chaos_%s\n' "${role%%.*}" "$4" "$addr" "$OWN_MYSQL_PORT" "$run"
            printf 'SHOAL_NAMESPACE=chaos\nSHOAL_HMAC_KEY_FILE=%s/hmac.key\n' "$OWN_DIR"
        } >"$file"
    )
    printf '%s\n' "$file"
}

# own_stop_services: stops what own_*_start started (SIGTERM, then SIGKILL after 30 s).
own_stop_services() {
    [ -n "$OWN_DIR" ] || return 0
    own_kill rabbit TERM 30 || own_kill rabbit KILL 5 || true
    own_kill mariadb TERM 30 || own_kill mariadb KILL 5 || true
    own_kill epmd TERM 5 || own_kill epmd KILL 5 || true
}
