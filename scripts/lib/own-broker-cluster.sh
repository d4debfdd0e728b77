# shellcheck shell=bash
# A RabbitMQ cluster of three nodes on this machine, for scripts/services-up --broker-cluster,
# scripts/chaos --broker-cluster and tests/broker_cluster.rs (through scripts/broker-cluster).
# Sourced after scripts/lib/services.sh and scripts/lib/own-services.sh, never run.
#
# Why: quorum queues are made for a replicated broker, and a deployment of any size runs three
# nodes; what Shoal does when the node leading its queues dies is only known by killing one. The
# machine's own RabbitMQ (5672, its node on the machine's epmd, 4369) is shared with other work
# and never touched: each node here has its own AMQP and distribution ports, and the three
# register with an Erlang port mapper of their own on a port of their own. Everything lives
# under one directory $OBC_DIR (node data, logs, configuration, the cluster's Erlang cookie in
# $OBC_DIR/home), every process started here has its pid recorded there (PID:STARTTIME, so that a
# reused pid is never signalled), and obc_stop stops those and nothing else.
#
# The nodes are <name>1@localhost, <name>2@localhost and <name>3@localhost. They form one cluster
# at their first start: node 1 starts alone, then nodes 2 and 3 start with node 1 as their only
# peer (peer discovery `classic_config`), so they can join nothing else; later starts find their
# cluster in their data. Quorum queues get a member on every node, and a leader on the node
# their declaring client was connected to (RabbitMQ 3.10's default `client-local`).
#
# Every wait here is bounded in count and in time.

OBC_DIR=""
OBC_NAME=""
OBC_PORTS=()      # AMQP port of each node (node i at index i-1)
OBC_DIST_PORTS=() # Erlang distribution port of each node
OBC_EPMD_PORT=""
OBC_COUNT=3
OBC_READY_TIMEOUT=${OBC_READY_TIMEOUT:-120}
# The user and password the readiness check logs in with (access to vhost / needed).
OBC_LOGIN_USER=""
OBC_LOGIN_PW=""
# Another address each node also listens on (the host end of a network namespace), or empty.
OBC_EXTRA_ADDR=""

# obc_init DIR NAME [AMQP_PORTS DIST_PORTS EPMD_PORT]: use DIR (private, created) for the cluster
# of nodes NAME1..NAME3. Ports: those given (three AMQP ports and three distribution ports, each
# list one word with spaces between), else the ones saved in DIR by an earlier start (the data
# belongs to them), else free ones in the 20000s. They are saved in DIR/ports.
obc_init() {
    local dir=$1 name=$2 i line
    [[ $name =~ ^[a-z][a-z0-9-]{0,30}$ ]] || die "broker cluster: node name prefix '$name' is not lower-case letters, digits and '-'"
    OBC_DIR=$dir
    OBC_NAME=$name
    mkdir -p "$OBC_DIR"/{pids,home}
    chmod 700 "$OBC_DIR"
    OBC_PORTS=() OBC_DIST_PORTS=() OBC_EPMD_PORT=""
    if [ $# -ge 5 ]; then
        read -ra OBC_PORTS <<<"$3"
        read -ra OBC_DIST_PORTS <<<"$4"
        OBC_EPMD_PORT=$5
    elif [ -f "$OBC_DIR/ports" ]; then
        while IFS= read -r line; do
            case $line in
            amqp=*) read -ra OBC_PORTS <<<"${line#amqp=}" ;;
            dist=*) read -ra OBC_DIST_PORTS <<<"${line#dist=}" ;;
            epmd=*) OBC_EPMD_PORT=${line#epmd=} ;;
            esac
        done <"$OBC_DIR/ports"
    else
        local taken=()
        for ((i = 0; i < OBC_COUNT; i++)); do
            OBC_PORTS+=("$(own_free_port "${taken[@]}")")
            taken+=("${OBC_PORTS[i]}")
            OBC_DIST_PORTS+=("$(own_free_port "${taken[@]}")")
            taken+=("${OBC_DIST_PORTS[i]}")
        done
        OBC_EPMD_PORT=$(own_free_port "${taken[@]}")
    fi
    if [ "${#OBC_PORTS[@]}" -ne "$OBC_COUNT" ] || [ "${#OBC_DIST_PORTS[@]}" -ne "$OBC_COUNT" ] ||
        ! [[ $OBC_EPMD_PORT =~ ^[0-9]+$ ]]; then
        die "broker cluster: need $OBC_COUNT AMQP ports, $OBC_COUNT distribution ports and an epmd port"
    fi
    for i in "${OBC_PORTS[@]}" "${OBC_DIST_PORTS[@]}"; do
        if ! [[ $i =~ ^[0-9]+$ ]] || [ "$i" -eq 5672 ] || [ "$i" -eq 25672 ]; then
            die "broker cluster: port '$i' is not a port of its own (5672 and 25672 are the shared broker's)"
        fi
    done
    [ "$OBC_EPMD_PORT" -ne 4369 ] || die "broker cluster: epmd port 4369 is the machine's own"
    printf 'amqp=%s\ndist=%s\nepmd=%s\n' "${OBC_PORTS[*]}" "${OBC_DIST_PORTS[*]}" "$OBC_EPMD_PORT" >"$OBC_DIR/ports"
    # The cluster's Erlang cookie, made once: every node and every rabbitmqctl here uses it.
    if [ ! -s "$OBC_DIR/home/.erlang.cookie" ]; then
        (umask 077 && gen_password >"$OBC_DIR/home/.erlang.cookie")
        chmod 400 "$OBC_DIR/home/.erlang.cookie"
    fi
}

obc_node() { printf '%s%s@localhost\n' "$OBC_NAME" "$1"; }

# obc_nodes_url USER PASSWORD VHOST [ADDR]: the node list as one URL (Shoal's form for a
# cluster), reaching the nodes at ADDR (default 127.0.0.1). VHOST as it goes in a URL (%2f for /).
obc_nodes_url() {
    local addr=${4:-127.0.0.1} hosts="" p
    for p in "${OBC_PORTS[@]}"; do hosts+="${hosts:+,}$addr:$p"; done
    printf 'amqp://%s:%s@%s/%s\n' "$1" "$2" "$hosts" "$3"
}

# obc_configure DEFINITIONS_FILE DEFAULT_USER DEFAULT_PASSWORD: each node's configuration:
# its listener, the definitions to load at every start (users, vhosts, permissions, policies),
# Shoal's message size limit, peer discovery, and a default user (the admin: without one a blank
# node creates guest/guest).
obc_configure() {
    local defs=$1 i dir
    for ((i = 1; i <= OBC_COUNT; i++)); do
        dir=$OBC_DIR/node$i
        mkdir -p "$dir"/{mnesia,log}
        {
            printf 'listeners.tcp.1 = 127.0.0.1:%s\n' "${OBC_PORTS[i - 1]}"
            if [ -n "$OBC_EXTRA_ADDR" ]; then printf 'listeners.tcp.2 = %s:%s\n' "$OBC_EXTRA_ADDR" "${OBC_PORTS[i - 1]}"; fi
            printf 'default_user = %s\ndefault_pass = %s\n' "$2" "$3"
            printf 'load_definitions = %s\n' "$defs"
            printf 'log.console = false\nlog.file.level = info\n'
            printf 'max_message_size = %s\n' "$SHOAL_MAX_MESSAGE_BYTES"
            printf 'cluster_formation.peer_discovery_backend = classic_config\n'
            if [ "$i" -gt 1 ]; then printf 'cluster_formation.classic_config.nodes.1 = %s\n' "$(obc_node 1)"; fi
        } >"$dir/rabbitmq.conf"
        chmod 600 "$dir/rabbitmq.conf"
        printf '[].\n' >"$dir/enabled_plugins"
        : >"$dir/rabbitmq-env.conf"
    done
}

# obc_pid NAME: the recorded pid of NAME (node1, node2, node3 or epmd) if it still runs (pid and
# start time match), else fails.
obc_pid() {
    local rec
    { read -r rec <"$OBC_DIR/pids/$1"; } 2>/dev/null || return 1
    [ -n "$rec" ] && [ "$(proc_id "${rec%%:*}")" = "$rec" ] || return 1
    printf '%s\n' "${rec%%:*}"
}

obc_record() { proc_id "$2" >"$OBC_DIR/pids/$1" || die "broker cluster: $1 (pid $2) exited at once; see $OBC_DIR"; }

# obc_epmd_start: the cluster's own Erlang port mapper, on 127.0.0.1 only.
obc_epmd_start() {
    obc_pid epmd >/dev/null && return 0
    own_spawn "$OBC_DIR/epmd.log" env ERL_EPMD_ADDRESS=127.0.0.1 epmd -port "$OBC_EPMD_PORT"
    obc_record epmd $!
}

# obc_spawn I: starts node I in the background and records its pid; does not wait.
obc_spawn() {
    local i=$1 dir=$OBC_DIR/node$1
    obc_epmd_start
    if obc_pid "node$i" >/dev/null; then return 0; fi
    # +sbwt none: schedulers that busy-wait would take the CPU of two cores from everything else.
    own_spawn "$dir/log/stdout.log" env -i PATH="$PATH" HOME="$OBC_DIR/home" LANG=C.UTF-8 LC_ALL=C.UTF-8 \
        RUNNING_UNDER_SYSTEMD=true \
        RABBITMQ_NODENAME="$(obc_node "$i")" RABBITMQ_NODE_PORT="${OBC_PORTS[i - 1]}" \
        RABBITMQ_DIST_PORT="${OBC_DIST_PORTS[i - 1]}" ERL_EPMD_PORT="$OBC_EPMD_PORT" \
        RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" \
        RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf" \
        RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
        RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config" RABBITMQ_PID_FILE="$dir/rabbit.pid" \
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1} +sbwt none +sbwtdcpu none +sbwtdio none" \
        /usr/lib/rabbitmq/bin/rabbitmq-server
    obc_record "node$i" $!
}

# obc_wait I: until node I takes a login on vhost / (it has booted, joined and has its users).
obc_wait() {
    local i=$1 pid deadline=$((SECONDS + OBC_READY_TIMEOUT))
    pid=$(obc_pid "node$i") || die "broker cluster: node $i is not running; see $OBC_DIR/node$i/log"
    until port_open "${OBC_PORTS[i - 1]}" &&
        SHOAL_AMQP_PORT=${OBC_PORTS[i - 1]} amqp_login_ok "$OBC_LOGIN_USER" "$OBC_LOGIN_PW"; do
        [ -d "/proc/$pid" ] || die "broker cluster: node $i (pid $pid) exited during start-up; see $OBC_DIR/node$i/log"
        [ "$SECONDS" -lt "$deadline" ] || die "broker cluster: node $i not ready after ${OBC_READY_TIMEOUT}s; see $OBC_DIR/node$i/log"
        sleep 0.2
    done
}

# obc_start_node I: starts node I (again, on its data) and waits until it is ready.
obc_start_node() {
    obc_spawn "$1"
    obc_wait "$1"
}

# obc_ctl I ARGS...: rabbitmqctl against node I, with the cluster's cookie and port mapper.
obc_ctl() {
    local i=$1
    shift
    env -i PATH="$PATH" HOME="$OBC_DIR/home" LANG=C.UTF-8 LC_ALL=C.UTF-8 ERL_EPMD_PORT="$OBC_EPMD_PORT" \
        timeout 60 /usr/lib/rabbitmq/bin/rabbitmqctl -n "$(obc_node "$i")" "$@"
}

# obc_start: starts every node that is not running and waits until all are ready and the
# cluster has three running members. The first time, node 1 starts alone first (the cluster
# forms around it); later, on their data, all start at once: a node that was not the last of its
# cluster to stop waits for its peers before it takes connections.
obc_start() {
    local i deadline n
    if [ ! -d "$OBC_DIR/node1/mnesia/$(obc_node 1)" ]; then obc_start_node 1; fi
    for ((i = 1; i <= OBC_COUNT; i++)); do obc_spawn "$i"; done
    for ((i = 1; i <= OBC_COUNT; i++)); do obc_wait "$i"; done
    deadline=$((SECONDS + 60))
    while :; do
        n=$(obc_ctl 1 -q eval 'length(rabbit_nodes:all_running()).' 2>/dev/null) || n=0
        [ "$n" != "$OBC_COUNT" ] || return 0
        [ "$SECONDS" -lt "$deadline" ] || die "broker cluster: $n of $OBC_COUNT nodes running in the cluster after 60 s; see $OBC_DIR/node*/log"
        sleep 1
    done
}

# obc_kill NAME SIGNAL [WAIT_S]: sends SIGNAL to NAME's recorded process (node1… or epmd) and
# waits for it to go.
obc_kill() {
    local pid k
    pid=$(obc_pid "$1") || return 0
    kill "-$2" "$pid" 2>/dev/null || return 0
    for ((k = 0; k < ${3:-30} * 10; k++)); do
        [ -d "/proc/$pid" ] || return 0
        [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 0
        sleep 0.1
    done
    return 1
}

# obc_stop: stops what obc_* started, by recorded pid (SIGTERM, then SIGKILL after 30 s).
obc_stop() {
    local i
    [ -n "$OBC_DIR" ] || return 0
    for ((i = 1; i <= OBC_COUNT; i++)); do obc_kill "node$i" TERM 30 || obc_kill "node$i" KILL 5 || true; done
    obc_kill epmd TERM 5 || obc_kill epmd KILL 5 || true
}

# obc_leader VHOST [QUEUE_PATTERN]: the index of the node that leads the most quorum queues of
# VHOST whose names match the extended regex QUEUE_PATTERN (default: all), asked of the first node
# that runs.
obc_leader() {
    local vhost=$1 pattern=${2:-.} i out name type leader best="" max=0
    local -A led=()
    for ((i = 1; i <= OBC_COUNT; i++)); do
        obc_pid "node$i" >/dev/null || continue
        out=$(obc_ctl "$i" -q list_queues -p "$vhost" --no-table-headers name type leader 2>/dev/null) || continue
        while IFS=$'\t' read -r name type leader; do
            if [ "$type" != quorum ] || ! [[ $name =~ $pattern ]]; then continue; fi
            [[ $leader =~ ^$OBC_NAME([0-9]+)@ ]] || continue
            led[${BASH_REMATCH[1]}]=$((${led[${BASH_REMATCH[1]}]:-0} + 1))
        done <<<"$out"
        break
    done
    for i in "${!led[@]}"; do
        if [ "${led[$i]}" -gt "$max" ]; then max=${led[$i]} best=$i; fi
    done
    [ -n "$best" ] || return 1
    printf '%s\n' "$best"
}
