# shellcheck shell=bash
# scripts/chaos --broker-cluster: the suite's broker is a three-node cluster of its own
# (scripts/lib/own-broker-cluster.sh) instead of one node, and its `broker` fault SIGKILLs the
# node that leads the faulted run's quorum queues, then starts it again on its data. Sourced
# after own-services.sh, own-broker-cluster.sh and chaos-cluster.sh, never run.
#
# Why the leader: killing a follower costs the queues nothing; killing the leader makes every
# queue elect a new one, and every client connected to that node (all of them: they connect to
# the first node of their list) fail over to the next node. That is the fault a cluster is for.

# shellcheck disable=SC2034 # read by scripts/chaos and chaos-cluster.sh
CHAOS_BROKER_CLUSTER=no

# chaos_broker_cluster_start: the nodes under $OWN_DIR/brokers, with the users, vhosts,
# permissions and policies own_rabbit_setup wrote; the workers' settings then name the three
# nodes (own_role_env, own_admin_broker). Node 1 takes the ports own_init picked for the single
# node (so the kernel probe's broker port, CHAOS_PROBE, is a node's), the others free ones.
chaos_broker_cluster_start() {
    local a2 a3 d2 d3
    a2=$(own_free_port "$OWN_AMQP_PORT" "$OWN_DIST_PORT" "$OWN_EPMD_PORT" "$OWN_MYSQL_PORT")
    a3=$(own_free_port "$OWN_AMQP_PORT" "$OWN_DIST_PORT" "$OWN_EPMD_PORT" "$OWN_MYSQL_PORT" "$a2")
    d2=$(own_free_port "$OWN_AMQP_PORT" "$OWN_DIST_PORT" "$OWN_EPMD_PORT" "$OWN_MYSQL_PORT" "$a2" "$a3")
    d3=$(own_free_port "$OWN_AMQP_PORT" "$OWN_DIST_PORT" "$OWN_EPMD_PORT" "$OWN_MYSQL_PORT" "$a2" "$a3" "$d2")
    obc_init "$OWN_DIR/brokers" chaos "$OWN_AMQP_PORT $a2 $a3" "$OWN_DIST_PORT $d2 $d3" "$OWN_EPMD_PORT"
    # shellcheck disable=SC2034,SC2153 # read by own-broker-cluster.sh; OWN_* are own-services.sh's
    OBC_EXTRA_ADDR=$OWN_EXTRA_ADDR
    # shellcheck disable=SC2034 # read by own-broker-cluster.sh
    OBC_LOGIN_USER=chaos_admin OBC_LOGIN_PW=$OWN_ADMIN_PW
    obc_configure "$OWN_DIR/rabbit/definitions.json" chaos_admin "$OWN_ADMIN_PW"
    obc_start
    # shellcheck disable=SC2034 # read by own-services.sh's own_broker_hosts
    OWN_BROKER_PORTS=("${OBC_PORTS[@]}")
}

# chaos_broker_cluster_fault: the `broker` fault of a cluster (run by fault(), logged as it logs
# the single broker's, so that the tally counts it): the leader of the most quorum queues of the
# faulted run's namespace SIGKILLed, and started again RESTART_SEC later.
chaos_broker_cluster_fault() {
    local n pid t
    n=$(obc_leader fx '^chaos\.') || n=1
    pid=$(obc_pid "node$n") || pid="?"
    t=$(date +%s%3N)
    obc_kill "node$n" KILL 10 || fault_log "broker node $n (pid $pid) still there 10 s after SIGKILL"
    fault_log "SIGKILL broker (node $n of 3, the queues' leader, pid $pid)"
    sleep "$RESTART_SEC"
    obc_start_node "$n"
    fault_log "broker back after $(($(date +%s%3N) - t)) ms (node $n, pid $(obc_pid "node$n"))"
}

# chaos_broker_cluster_outage SIGNAL SECS: the node leading the queues stopped with SIGNAL for
# SECS (cut short once the load has finished), then started again.
chaos_broker_cluster_outage() {
    local sig=$1 secs=$2 n pid t i
    n=$(obc_leader fx '^chaos\.') || n=1
    pid=$(obc_pid "node$n") || pid="?"
    t=$(date +%s%3N)
    obc_kill "node$n" "$sig" 60 || obc_kill "node$n" KILL 10 ||
        fault_log "broker node $n (pid $pid) still there after SIG$sig and SIGKILL"
    fault_log "outage of broker node $n of 3 (the queues' leader, pid $pid): SIG$sig, for ${secs}s"
    for ((i = 0; i < secs * 10 + 10; i++)); do
        if [ "$(($(date +%s%3N) - t))" -ge "$((secs * 1000))" ] || [ -e "$CHAOS_W/stop-monkey" ]; then break; fi
        sleep 0.1
    done
    obc_start_node "$n"
    fault_log "broker node $n back after $(($(date +%s%3N) - t)) ms (pid $(obc_pid "node$n")); the cluster served meanwhile"
}

# chaos_broker_cluster_heal: every node that is not running started again (after the faults).
chaos_broker_cluster_heal() {
    local i
    for ((i = 1; i <= OBC_COUNT; i++)); do obc_spawn "$i"; done
    for ((i = 1; i <= OBC_COUNT; i++)); do obc_wait "$i"; done
}

# chaos_broker_cluster_note: how the servers line names the broker.
chaos_broker_cluster_note() {
    printf 'private RabbitMQ cluster on 127.0.0.1:%s (nodes %s, pids %s %s %s)' "$(
        IFS=,
        printf '%s' "${OBC_PORTS[*]}"
    )" "$(obc_node 1)…3" "$(obc_pid node1)" "$(obc_pid node2)" "$(obc_pid node3)"
}
