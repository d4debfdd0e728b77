# shellcheck shell=bash
# The cluster of scripts/chaos and the faults it suffers. Sourced after services.sh and
# own-services.sh, never run.
#
# Why these shapes: a deployment runs each role under systemd with Restart=always, so a SIGKILL
# of a role here is a SIGKILL of the `shoal worker` process that a supervising loop (one per
# role) then starts again after RESTART_SEC, as systemd would; the broker and the database are
# killed by pid and started again on the same data, at once (a crash) or after an outage of a set
# length (a crash, or a clean stop, that lasts: issue 33), one server fault at a time so that each
# outage is measured alone. An eval worker lives in a network namespace
# joined to this host by a veth pair, so that it can be cut off silently (the host end of the
# link goes down: no reset, no error, packets just stop) and joined again, as a switch failure
# would do to a GPU host. Every wait here is bounded in count and in time.

# shellcheck disable=SC2034 # NET_NOTE is read by scripts/chaos
CHAOS_W=""             # the suite's directory (logs, pids, work dirs, env files)
RESTART_SEC=1          # the supervising loops' pause before a restart (systemd's RestartSec)
SUP_MAX_STARTS=500     # starts of one role at most, per run
SUP_MAX_SECS=7200      # and seconds (a loop also ends when the script that started it is gone)
NET_NS=""              # the namespace, or empty when namespaces are unavailable
NET_HOST_END=""        # the host end of the veth pair
NET_GATEWAY=""         # the host end's address, which the servers also listen on
NET_NOTE=""            # why there is no namespace

# --- supervised workers ------------------------------------------------------------------------

# supervise RUN NAME ENV_FILE COMMAND...: runs COMMAND (a `shoal worker …`, possibly behind
# `ip netns exec NS`) with the settings of ENV_FILE, and starts it again RESTART_SEC after it
# exits, whatever the exit, until $CHAOS_W/stop-RUN exists (or the bounds above are reached).
# The live worker's pid is in $CHAOS_W/pids/RUN-NAME; its output and the loop's notes go to
# $CHAOS_W/logs/RUN-NAME.log.
supervise() {
    local run=$1 name=$2 env=$3
    shift 3
    local log=$CHAOS_W/logs/$run-$name.log pidfile=$CHAOS_W/pids/$run-$name
    local parent=$$
    (
        set +e
        for ((start = 1; start <= SUP_MAX_STARTS && SECONDS < SUP_MAX_SECS; start++)); do
            [ ! -e "$CHAOS_W/stop-$run" ] && [ -d "/proc/$parent" ] || break
            (
                set -a
                # shellcheck disable=SC1090 # the role's settings, written by own_role_env
                . "$env"
                set +a
                export RUST_LOG=info NO_COLOR=1
                exec "$@" --work-dir "$CHAOS_W/work/$run-$name"
            ) </dev/null >>"$log" 2>&1 &
            child=$!
            proc_id "$child" >"$pidfile"
            wait "$child"
            rc=$?
            printf '%s supervise: %s (pid %s) exited with status %s after start %d\n' \
                "$(date +%T.%3N)" "$name" "$child" "$rc" "$start" >>"$log"
            [ ! -e "$CHAOS_W/stop-$run" ] || break
            sleep "$RESTART_SEC"
        done
        rm -f "$pidfile"
    ) 2>>"$log" &
    proc_id $! >"$pidfile.loop"
}

# worker_pid RUN NAME: the pid of the live worker NAME of RUN, or fails.
worker_pid() {
    local rec
    { read -r rec <"$CHAOS_W/pids/$1-$2"; } 2>/dev/null || return 1
    [ -n "$rec" ] && [ "$(proc_id "${rec%%:*}")" = "$rec" ] || return 1
    printf '%s\n' "${rec%%:*}"
}

# wait_started RUN NAME COUNT TIMEOUT_S: until NAME's log says "worker started" COUNT times.
wait_started() {
    local log=$CHAOS_W/logs/$1-$2.log deadline=$((SECONDS + $4)) n
    while :; do
        n=$(grep -c 'worker started' "$log" 2>/dev/null) || n=0
        [ "$n" -lt "$3" ] || return 0
        [ "$SECONDS" -lt "$deadline" ] || die "chaos: worker $2 of run $1 did not start within $4 s; see $log"
        sleep 0.2
    done
}

# stop_run RUN: stops RUN's workers as systemd stop would (SIGTERM, a drain), SIGKILL after 30 s,
# and waits for the supervising loops to end.
stop_run() {
    local run=$1 f name pid rec i
    touch "$CHAOS_W/stop-$run"
    for f in "$CHAOS_W/pids/$run-"*; do
        [ -e "$f" ] || continue
        name=${f##*/}
        name=${name#"$run"-}
        [[ $name != *.loop ]] || continue
        if pid=$(worker_pid "$run" "$name"); then kill -TERM "$pid" 2>/dev/null || true; fi
    done
    for ((i = 0; i < 300; i++)); do
        local alive=0
        for f in "$CHAOS_W/pids/$run-"*.loop; do
            [ -e "$f" ] || continue
            read -r rec <"$f" || continue
            if [ "$(proc_id "${rec%%:*}")" = "$rec" ]; then alive=1; fi
        done
        [ "$alive" -eq 1 ] || return 0
        if [ "$i" -eq 299 ]; then break; fi
        sleep 0.1
    done
    for f in "$CHAOS_W/pids/$run-"*; do
        [ -e "$f" ] || continue
        read -r rec <"$f" || continue
        if [ "$(proc_id "${rec%%:*}")" = "$rec" ]; then
            say "chaos: ${f##*/} did not stop within 30 s of SIGTERM; SIGKILL"
            kill -KILL "${rec%%:*}" 2>/dev/null || true
        fi
    done
}

# --- the network namespace ---------------------------------------------------------------------

# net_up: a namespace with one veth pair to this host on 10.214.N.0/24 (host end .1, namespace
# end .2), or a note in NET_NOTE when that is not possible (not root, no iproute2).
net_up() {
    local n try
    if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null 2>&1; then
        NET_NOTE="network namespaces need root and iproute2's ip"
        return 0
    fi
    for ((try = 0; try < 50; try++)); do
        n=$((($$ + try) % 200 + 20))
        ip -4 addr show 2>/dev/null | grep -q "inet 10\.214\.$n\." || break
    done
    NET_NS=shoal-chaos-$$
    NET_HOST_END=chx$$
    NET_GATEWAY=10.214.$n.1
    if ! {
        ip netns add "$NET_NS" &&
            ip link add "$NET_HOST_END" type veth peer name eth0 netns "$NET_NS" &&
            ip addr add "$NET_GATEWAY/24" dev "$NET_HOST_END" &&
            ip link set "$NET_HOST_END" up &&
            ip netns exec "$NET_NS" ip addr add "10.214.$n.2/24" dev eth0 &&
            ip netns exec "$NET_NS" ip link set eth0 up &&
            ip netns exec "$NET_NS" ip link set lo up
    } 2>"$CHAOS_W/logs/netns.log"; then
        NET_NOTE="creating network namespace $NET_NS failed ($(tr '\n' ' ' <"$CHAOS_W/logs/netns.log"))"
        net_down
        return 0
    fi
}

# net_cut / net_join: the namespace's host goes silent / comes back.
net_cut() { ip link set "$NET_HOST_END" down; }
net_join() { ip link set "$NET_HOST_END" up; }

net_down() {
    if [ -n "$NET_NS" ]; then ip netns del "$NET_NS" 2>/dev/null || true; fi
    if [ -n "$NET_HOST_END" ]; then ip link del "$NET_HOST_END" 2>/dev/null || true; fi
    NET_NS=""
    NET_HOST_END=""
    NET_GATEWAY=""
}

# --- faults ------------------------------------------------------------------------------------

fault_log() { printf '%s t=%6.1fs %s\n' "$(date +%T.%3N)" "$(awk -v a="$(date +%s%3N)" -v b="$CHAOS_T0_MS" 'BEGIN{print (a-b)/1000}')" "$*" >>"$CHAOS_W/logs/faults.log"; }

# server_fault_begin WHAT / server_fault_end: one fault of a server at a time (a lock directory,
# made atomically), so that no restart cuts an outage short and an outage's length is its own,
# and each at least SERVER_FAULT_GAP_S after the last one ended (a broker takes seconds to start,
# longer than the schedule can know: without the gap, a fault put off by the lock would strike
# a cluster still reconnecting). A fault still waiting when the load has finished (or after
# SERVER_FAULT_WAIT_S) is skipped.
SERVER_FAULT_WAIT_S=240
SERVER_FAULT_GAP_S=5
server_fault_begin() {
    local i last=0
    for ((i = 0; i < SERVER_FAULT_WAIT_S * 5; i++)); do
        if [ -e "$CHAOS_W/stop-monkey" ]; then
            if [ "$last" -ne 0 ]; then rmdir "$CHAOS_W/server-fault.lock"; fi
            fault_log "$1 skipped: the load finished first"
            return 1
        fi
        if [ "$last" -eq 0 ] && mkdir "$CHAOS_W/server-fault.lock" 2>/dev/null; then
            { read -r last <"$CHAOS_W/server-fault.last"; } 2>/dev/null || last=1
        fi
        if [ "$last" -ne 0 ] && [ "$(date +%s%3N)" -ge "$((last + SERVER_FAULT_GAP_S * 1000))" ]; then
            return 0
        fi
        sleep 0.2
    done
    if [ "$last" -ne 0 ]; then rmdir "$CHAOS_W/server-fault.lock"; fi
    fault_log "$1 skipped: another server fault still under way after ${SERVER_FAULT_WAIT_S}s"
    return 1
}
server_fault_end() {
    date +%s%3N >"$CHAOS_W/server-fault.last"
    rmdir "$CHAOS_W/server-fault.lock" 2>/dev/null || true
}

# What an outage is planned to take beyond its length (a restart; the broker's takes longer, which
# chaos_monkey makes up for): the schedule puts what follows an outage off by its length and this.
OUTAGE_SLACK_MS=5000

# outage SERVER SIGNAL SECS: SERVER (broker or database) is stopped with SIGNAL (KILL; TERM, a
# clean stop, waited for) and started again on the same data SECS after the signal (at once,
# once the load has finished). Its length, from the signal until the server answers again (a
# query, a login), goes to the timeline and, as "START END SERVER SIGNAL SECS" (ms after
# $CHAOS_T0_MS), to $CHAOS_W/outages. When it is over (or skipped), it writes the time to
# $CHAOS_W/outage-end and removes $CHAOS_W/outage-on, which chaos_monkey made.
outage() {
    local server=$1 sig=$2 secs=$3 name=rabbit pid t0 t1 i
    if [ "$server" = database ]; then name=mariadb; fi
    if ! server_fault_begin "outage of $server"; then
        outage_over
        return 0
    fi
    if [ "$server" = broker ] && [ "$CHAOS_BROKER_CLUSTER" = yes ]; then
        # One node of three away is no outage of the broker: the queues' leader is stopped for
        # the time, and the cluster must carry on (so outage_secs leaves it out).
        chaos_broker_cluster_outage "$sig" "$secs"
        server_fault_end
        outage_over
        return 0
    fi
    pid=$(own_pid "$name") || pid="?"
    t0=$(date +%s%3N)
    fault_log "outage of $server: SIG$sig (pid $pid), for ${secs}s"
    if ! own_kill "$name" "$sig" 60; then
        fault_log "outage of $server: pid $pid still there 60 s after SIG$sig; SIGKILL"
        own_kill "$name" KILL 10 || true
    fi
    for ((i = 0; i < secs * 10 + 10; i++)); do
        [ "$(($(date +%s%3N) - t0))" -lt "$((secs * 1000))" ] || break
        if [ -e "$CHAOS_W/stop-monkey" ]; then
            fault_log "outage of $server: cut short, the load has finished"
            break
        fi
        sleep 0.1
    done
    if [ "$server" = broker ]; then own_rabbit_start; else own_mariadb_start; fi
    t1=$(date +%s%3N)
    fault_log "outage of $server over: down $(awk -v a="$t1" -v b="$t0" 'BEGIN{printf "%.1f", (a-b)/1000}') s (SIG$sig, planned ${secs}s; pid $(own_pid "$name"))"
    printf '%d %d %s %s %s\n' "$((t0 - CHAOS_T0_MS))" "$((t1 - CHAOS_T0_MS))" "$server" "$sig" "$secs" >>"$CHAOS_W/outages"
    server_fault_end
    outage_over
}
outage_over() {
    printf '%d\n' "$(($(date +%s%3N) - CHAOS_T0_MS))" >"$CHAOS_W/outage-end"
    rm -f "$CHAOS_W/outage-on"
}

# fault ACTION [ARG...]: one fault of the faulted run.
fault() {
    local pid t
    case $1 in
    kill)
        if pid=$(worker_pid fx "$2"); then
            kill -KILL "$pid" 2>/dev/null && fault_log "SIGKILL $2 (pid $pid)"
        else
            fault_log "SIGKILL $2 skipped: not running (restarting)"
        fi
        ;;
    broker | database)
        if [ "$1" = broker ] && [ "$CHAOS_BROKER_CLUSTER" = yes ]; then
            chaos_broker_cluster_fault
            return 0
        fi
        local name=rabbit
        if [ "$1" = database ]; then name=mariadb; fi
        server_fault_begin "SIGKILL $1" || return 0
        pid=$(own_pid "$name") || pid="?"
        t=$(date +%s%3N)
        own_kill "$name" KILL 10 || fault_log "$1 (pid $pid) still there 10 s after SIGKILL"
        fault_log "SIGKILL $1 (pid $pid)"
        sleep "$RESTART_SEC"
        if [ "$1" = broker ]; then own_rabbit_start; else own_mariadb_start; fi
        fault_log "$1 back after $(($(date +%s%3N) - t)) ms (pid $(own_pid "$name"))"
        server_fault_end
        ;;
    outage)
        outage "$2" "$3" "$4"
        ;;
    cut)
        net_cut && fault_log "eval-net cut off (link $NET_HOST_END down)"
        ;;
    join)
        net_join && fault_log "eval-net joined again (link $NET_HOST_END up)"
        ;;
    hostile)
        local out
        if out=$(env SHOAL_BROKER="$(own_admin_broker fx)" SHOAL_DB="$(own_admin_db fx)" \
            SHOAL_NAMESPACE=chaos SHOAL_HMAC_KEY_FILE="$OWN_DIR/hmac.key" RUST_LOG=warn \
            "$SHOAL_BENCH" hostile --signed --marker "$CHAOS_W/pwned" \
            --export-to "$CHAOS_W/forged-export" 2>>"$CHAOS_W/logs/hostile.log"); then
            fault_log "$out"
        else
            fault_log "hostile: shoal-bench hostile failed; see $CHAOS_W/logs/hostile.log"
        fi
        # An eval host turned hostile: its own broker user and the deployment's key.
        if out=$(
            set -a
            # shellcheck disable=SC1090 # the insider's settings, written by own_role_env
            . "$(own_role_env fx eval.insider "${broker_pw[eval.insider]}" "${db_pw[eval]}")"
            set +a
            RUST_LOG=warn "$SHOAL_BENCH" hostile --insider --marker "$CHAOS_W/pwned" \
                --export-to "$CHAOS_W/forged-export" 2>>"$CHAOS_W/logs/hostile.log"
        ); then
            fault_log "$out"
        else
            fault_log "hostile: shoal-bench hostile --insider failed; see $CHAOS_W/logs/hostile.log"
        fi
        ;;
    *) die "chaos: unknown fault $1" ;;
    esac
}

# chaos_monkey SCHEDULE_FILE: applies each fault of SCHEDULE_FILE ("MS ACTION [ARG...]" lines, MS
# after $CHAOS_T0_MS, in order) at its time, until $CHAOS_W/stop-monkey exists. Run in the
# background; a server restart under way is finished before it returns.
#
# An outage under way holds the rest of the schedule (but the end of a network cut, whose length
# is its own), and the time it overran its plan (its length and OUTAGE_SLACK_MS after its time:
# a start put off behind another server fault, a slow restart) puts the rest off too, so that
# the load gets the progress planned between an outage and the next fault.
chaos_monkey() {
    local at action arg now when late=0 due=-1 end secs
    rm -f "$CHAOS_W/outage-on" "$CHAOS_W/outage-end"
    while read -r at action arg; do
        while :; do
            [ ! -e "$CHAOS_W/stop-monkey" ] || break 2
            now=$(($(date +%s%3N) - CHAOS_T0_MS))
            when=$at
            if [ "$action" != join ]; then
                if [ -e "$CHAOS_W/outage-on" ]; then
                    sleep 0.1
                    continue
                fi
                if [ "$due" -ge 0 ] && { read -r end <"$CHAOS_W/outage-end"; } 2>/dev/null; then
                    if [ "$end" -gt "$due" ]; then
                        late=$((late + end - due))
                        fault_log "the outage ended $(((end - due) / 1000)) s after its plan: the rest of the schedule put off by as much"
                    fi
                    due=-1
                fi
                when=$((at + late))
            fi
            [ "$now" -lt "$when" ] || break
            sleep 0.1
        done
        if [ "$action" = outage ]; then
            read -r _ _ secs <<<"$arg"
            due=$((when + secs * 1000 + OUTAGE_SLACK_MS))
            rm -f "$CHAOS_W/outage-end"
            touch "$CHAOS_W/outage-on"
        fi
        # A server restart takes seconds (an outage, a minute), and a hostile round waits for work
        # to forge about: each goes on beside the rest of the schedule.
        # shellcheck disable=SC2086 # ARG is words (an outage's server, signal and length) or none
        # Never the schedule as their stdin: a command that reads it (rabbitmqctl does) would eat
        # the rest of the schedule, and the faults after it would silently not happen.
        case $action in
        broker | database | hostile | outage) fault "$action" $arg </dev/null & ;;
        *) fault "$action" $arg </dev/null ;;
        esac
    done <"$1"
    wait
}
