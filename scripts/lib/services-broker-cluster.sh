# shellcheck shell=bash
# The three-node RabbitMQ cluster of `scripts/services-up --broker-cluster`, and its stop in
# scripts/services-down. Sourced after services.sh, own-services.sh and own-broker-cluster.sh,
# never run.
#
# The cluster is the single broker's twin on other ports: the same users with the same passwords
# (the admin `shoal` of the credentials file, each role's and each worker host's user of the role
# files), the same permissions on vhost /, the same topology of namespace shoal and the same
# bound on its dead-letter queue, and the same message size limit; so that a deployment tried on
# one broker is tried on a cluster by changing nothing but SHOAL_BROKER. Its nodes are
# shoal1@localhost, shoal2@localhost and shoal3@localhost, on 127.0.0.1:5681, 5682 and 5683
# (SHOAL_BROKER_CLUSTER_PORTS), distribution ports 20000 above those and a port mapper of their
# own on 4381 (SHOAL_BROKER_CLUSTER_EPMD_PORT): never the machine's broker (5672) nor its epmd
# (4369). Data, logs and pids are under $(shoal_state_dir)/broker-cluster and are kept across
# services-down and services-up (the nodes rejoin their cluster on their data).
#
# The node list goes into the credentials file and every role file as SHOAL_BROKER_CLUSTER (the
# same user as the file's SHOAL_BROKER, whose value it can replace):
#   set -a; . ~/.config/shoal/roles/eval.env; set +a; export SHOAL_BROKER=$SHOAL_BROKER_CLUSTER

broker_cluster_dir() { printf '%s/broker-cluster\n' "$(shoal_state_dir)"; }

# broker_cluster_ports: "AMQP_PORTS|DIST_PORTS|EPMD_PORT", checked.
broker_cluster_ports() {
    local amqp=${SHOAL_BROKER_CLUSTER_PORTS:-5681 5682 5683} epmd=${SHOAL_BROKER_CLUSTER_EPMD_PORT:-4381}
    local p dist="" n=0
    for p in $amqp; do
        if ! [[ $p =~ ^[0-9]{4,5}$ ]] || [ "$p" -lt 1024 ] || [ "$p" -gt 45535 ] || [ "$p" -eq 5672 ]; then
            die "SHOAL_BROKER_CLUSTER_PORTS: '$p' is not a port from 1024 to 45535 other than 5672 (the machine's broker)"
        fi
        dist+="${dist:+ }$((p + 20000))"
        n=$((n + 1))
    done
    [ "$n" -eq 3 ] || die "SHOAL_BROKER_CLUSTER_PORTS: three AMQP ports, one per node, not '$amqp'"
    if ! [[ $epmd =~ ^[0-9]{4,5}$ ]] || [ "$epmd" -eq 4369 ]; then
        die "SHOAL_BROKER_CLUSTER_EPMD_PORT: '$epmd' is not a port other than 4369 (the machine's epmd)"
    fi
    printf '%s|%s|%s\n' "$amqp" "$dist" "$epmd"
}

# broker_cluster_definitions FILE ADMIN_PASSWORD: users, permissions, topology and policy, as a
# definitions file (mode 600; passwords as salted SHA-256 hashes only).
broker_cluster_definitions() {
    local file=$1 admin_pw=$2 ns key p conf write read sep=""
    ns=$(shoal_role_namespace)
    local -a user_defs=() perm_defs=()
    user_defs+=("$(printf '{"name": "shoal", "password_hash": "%s", "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []}' "$(own_rabbit_hash "$admin_pw")")")
    perm_defs+=('{"user": "shoal", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}')
    while IFS= read -r key; do
        [ -n "$key" ] || continue
        p=$(role_passwords "$(role_file "$key")") || die "broker cluster: $(role_file "$key") has no passwords; run services-up without --broker-cluster first"
        user_defs+=("$(printf '{"name": "shoal_%s", "password_hash": "%s", "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []}' "$key" "$(own_rabbit_hash "${p%% *}")")")
        IFS=$'\t' read -r conf write read < <(shoal_role_broker_perms "${key%%.*}" "$ns")
        perm_defs+=("$(printf '{"user": "shoal_%s", "vhost": "/", "configure": %s, "write": %s, "read": %s}' \
            "$key" "$(own_json_str "$conf")" "$(own_json_str "$write")" "$(own_json_str "$read")")")
    done < <(printf '%s\n' "${SHOAL_ROLES[@]}"; shoal_host_users)
    (
        umask 077
        {
            printf '{"users": ['
            for p in "${user_defs[@]}"; do printf '%s%s' "$sep" "$p" && sep=", "; done
            printf '],\n "vhosts": [{"name": "/"}],\n "permissions": ['
            sep=""
            for p in "${perm_defs[@]}"; do printf '%s%s' "$sep" "$p" && sep=", "; done
            printf '],\n'
            shoal_topology_json "$ns" /
            printf ',\n "policies": [%s]}\n' "$(shoal_dead_policy_json "$ns" /)"
        } >"$file"
    )
    chmod 600 "$file"
}

# env_file_set FILE KEY VALUE: FILE (ours, private) gets the line KEY=VALUE instead of any it
# had for KEY; rewritten atomically, mode 600.
env_file_set() {
    local file=$1 key=$2 value=$3 tmp
    tmp=$(umask 077 && mktemp "$(dirname "$file")/.env.XXXXXX")
    { grep -v "^$key=" "$file" || true; } >"$tmp"
    printf '%s=%s\n' "$key" "$value" >>"$tmp"
    chmod 600 "$tmp"
    mv -f "$tmp" "$file"
}

# broker_cluster_up CREDENTIALS_FILE: starts the cluster (or checks the one running), gives it
# the users of the credentials and role files, and writes SHOAL_BROKER_CLUSTER into every one of
# those files. Says what it did on stderr.
broker_cluster_up() {
    local creds=$1 dir ports pw running=0 i status key file p user amqp dist epmd
    for i in epmd ss; do command -v "$i" >/dev/null 2>&1 || die "broker cluster: $i is missing"; done
    [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || die "broker cluster: /usr/lib/rabbitmq/bin/rabbitmq-server is missing (apt-get install rabbitmq-server)"
    pw=$(credentials_password "$creds") || die "broker cluster: no admin password in $creds"
    dir=$(broker_cluster_dir)
    mkdir -p "$(shoal_state_dir)"
    take_lock "$(shoal_state_dir)/services.lock"
    ports=$(broker_cluster_ports)
    IFS='|' read -r amqp dist epmd <<<"$ports"
    obc_init "$dir" shoal "$amqp" "$dist" "$epmd"
    # shellcheck disable=SC2034 # read by own-broker-cluster.sh
    OBC_LOGIN_USER=shoal OBC_LOGIN_PW=$pw
    for ((i = 1; i <= OBC_COUNT; i++)); do
        if obc_pid "node$i" >/dev/null; then running=$((running + 1)); fi
    done
    # A port taken by anything but our own node is someone else's.
    if [ "$running" -eq 0 ]; then
        for p in "${OBC_PORTS[@]}" "${OBC_DIST_PORTS[@]}"; do
            ! port_open "$p" || die "broker cluster: port $p is in use by another program; choose others with SHOAL_BROKER_CLUSTER_PORTS"
        done
    fi
    broker_cluster_definitions "$dir/definitions.json" "$pw"
    obc_configure "$dir/definitions.json" shoal "$pw"
    if [ "$running" -eq "$OBC_COUNT" ]; then
        # Users or permissions may have changed since the nodes started.
        obc_ctl 1 -q import_definitions "$dir/definitions.json" >/dev/null ||
            die "broker cluster: importing the definitions into the running cluster failed"
        status="already running"
    else
        obc_start
        status="started"
    fi
    for ((i = 1; i <= OBC_COUNT; i++)); do
        SHOAL_AMQP_PORT=${OBC_PORTS[i - 1]} amqp_login_ok shoal "$pw" ||
            die "broker cluster: user shoal cannot log in to node $i; see $dir/node$i/log"
    done
    env_file_set "$creds" SHOAL_BROKER_CLUSTER "$(obc_nodes_url shoal "$pw" %2f)"
    while IFS= read -r key; do
        [ -n "$key" ] || continue
        file=$(role_file "$key")
        p=$(role_passwords "$file") || continue
        user=shoal_$key
        SHOAL_AMQP_PORT=${OBC_PORTS[0]} amqp_login_ok "$user" "${p%% *}" ||
            die "broker cluster: role user $user cannot log in to node 1"
        env_file_set "$file" SHOAL_BROKER_CLUSTER "$(obc_nodes_url "$user" "${p%% *}" %2f)"
    done < <(printf '%s\n' "${SHOAL_ROLES[@]}"; shoal_host_users)
    if p=$(role_passwords "$(role_file cli)"); then
        env_file_set "$(role_file operator)" SHOAL_BROKER_CLUSTER "$(obc_nodes_url shoal_cli "${p%% *}" %2f)"
    fi
    say "rabbitmq cluster: $status: nodes $(obc_node 1), $(obc_node 2), $(obc_node 3) on 127.0.0.1:${OBC_PORTS[*]} (pids $(obc_pid node1) $(obc_pid node2) $(obc_pid node3); services-down stops them), same users, permissions and topology as the broker on 5672"
    say "rabbitmq cluster: its node list is SHOAL_BROKER_CLUSTER in $creds and in every role file; to use it: set -a; . FILE; set +a; export SHOAL_BROKER=\$SHOAL_BROKER_CLUSTER"
}

# broker_cluster_down: stops the nodes and the port mapper broker_cluster_up started, by their
# recorded pids; keeps their data.
broker_cluster_down() {
    local dir i
    dir=$(broker_cluster_dir)
    if [ ! -d "$dir/pids" ]; then
        say "rabbitmq cluster: not started by services-up --broker-cluster, nothing to stop"
        return 0
    fi
    take_lock "$(shoal_state_dir)/services.lock"
    obc_init "$dir" shoal
    for ((i = 1; i <= OBC_COUNT; i++)); do
        if obc_pid "node$i" >/dev/null; then
            obc_kill "node$i" TERM 60 || obc_kill "node$i" KILL 5 || true
            say "rabbitmq cluster: node $(obc_node "$i") stopped"
        fi
    done
    obc_kill epmd TERM 5 || obc_kill epmd KILL 5 || true
}
