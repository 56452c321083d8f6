# shellcheck shell=bash
# scripts/faults/postgres.sh — sourced by scripts/fault_inject.sh (never run alone).
#
# Three servers on one PostgreSQL database under load spread over them; one
# server killed, then PostgreSQL restarted (immediate) mid-load.
# Needs PostgreSQL's server package; scripts/postgres_private.sh runs the cluster.
#
# Each scenario is a pair: plan_NAME prints what it does and expects, scenario_NAME
# runs it and reports through check; both use fault_inject.sh's helpers and state
# (BIN, WORK, PIDS, start_server, run_client, check, ...).

readonly PG_NODES_COUNT=3
readonly PG_LOOPS=6
readonly PG_CALLS_PER_LOOP=25
plan_postgres() {
  echo "postgres: a private PostgreSQL, $PG_NODES_COUNT servers on one database. $PG_LOOPS client"
  echo "  loops send $((PG_LOOPS * PG_CALLS_PER_LOOP)) charges with new keys, each request to the next node"
  echo "  in turn; a request refused (503) or unanswered is retried with the same key on the next"
  echo "  node. A third of the way in, node 0 is killed (-9); two thirds in, PostgreSQL is"
  echo "  restarted (pg_ctl restart -m immediate). Expect: every key acknowledged (2xx), every"
  echo "  acknowledged call in the database and succeeded, one effect per call, no 500, the"
  echo "  503s counted. Needs PostgreSQL (apt-get install -y postgresql)."
}

# pg_load_loop LOOP OUT: PG_CALLS_PER_LOOP new keys; request r of key i goes to node
# (LOOP + i + r) mod N, so the load is spread and a retry moves on. One line per
# request in OUT: key, node, HTTP status (or "none": no answer).
pg_load_loop() {
  local loop="$1" out="$2" i r key node http
  for ((i = 0; i < PG_CALLS_PER_LOOP; i++)); do
    key="pg-$$-$loop-$i"
    for ((r = 0; r < 300; r++)); do
      node=$(((loop + i + r) % PG_NODES_COUNT))
      http=$("$BIN/client" --base "${PG_NODE_BASES[$node]}" --key "$key" --tool charge \
        --amount 1 --timeout 10 --retries 0 2>/dev/null | head -n1 | field http)
      echo "$key $node ${http:-none}" >>"$out"
      [[ "$http" == 2?? ]] && break
      sleep 0.1
    done
  done
}

# The requests answered 2xx so far, over every loop.
pg_acknowledged() { cat "$WORK"/pg-load.* 2>/dev/null | awk '$3 ~ /^2/' | wc -l; }

# pg_wait_acknowledged N: until N requests were acknowledged (bounded).
pg_wait_acknowledged() {
  local deadline=$((SECONDS + STARTUP_SECONDS))
  while (($(pg_acknowledged) < $1 && SECONDS < deadline)); do sleep 0.05; done
}

pg_show_evidence() {
  local url="$1"
  log "calls by status and attempt (psql):"
  pg_psql "$url" -c "SELECT status, attempt, count(*) FROM calls GROUP BY 1, 2 ORDER BY 1, 2" | indent
  log "calls by the node that ran them (owner pid):"
  pg_psql "$url" -c "SELECT split_part(owner_seen, ':', 1) AS pid, count(*) FROM
      (SELECT substring(detail from '^[^ ]*') AS owner_seen FROM audit WHERE event = 'claimed') a
      GROUP BY 1 ORDER BY 1" | indent
  log "duplicate effects (must be empty):"
  pg_psql "$url" -c "SELECT call_id, count(*) FROM effects GROUP BY call_id HAVING count(*) > 1" | indent
  log "answers by HTTP status over all requests (none = no answer: the killed node):"
  cat "$WORK"/pg-load.* | awk '{print $3}' | sort | uniq -c | indent
}

scenario_postgres() {
  local url i loop pids=() total acknowledged deadline unfinished
  pg_available || { log "$(pg_bin_dir 2>&1)"; return 1; }
  pg_private_start "$WORK/pg" || return 1
  pg_psql "$PG_URL" -c "CREATE DATABASE idem" || return 1
  url="${PG_URL%/postgres}/idem"
  log "private PostgreSQL at $url"
  PG_NODE_BASES=()
  PG_NODE_PIDS=()
  for ((i = 0; i < PG_NODES_COUNT; i++)); do
    start_server "pg-node-$i" "$url" || return 1
    PG_NODE_BASES+=("$SERVER_BASE")
    PG_NODE_PIDS+=("$SERVER_PID")
  done
  total=$((PG_LOOPS * PG_CALLS_PER_LOOP))
  for ((loop = 0; loop < PG_LOOPS; loop++)); do
    pg_load_loop "$loop" "$WORK/pg-load.$loop" &
    pids+=($!)
    PIDS+=($!)
  done
  pg_wait_acknowledged $((total / 3))
  log "-- $(pg_acknowledged) acknowledged: kill -9 node 0 (pid ${PG_NODE_PIDS[0]})"
  kill -KILL "${PG_NODE_PIDS[0]}"
  pg_wait_acknowledged $((2 * total / 3))
  log "-- $(pg_acknowledged) acknowledged: pg_ctl restart -m immediate"
  pg_private_restart || log "PostgreSQL restart failed"
  log "-- PostgreSQL is back"
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    forget_pid "${pids[$i]}"
  done
  deadline=$((SECONDS + SETTLE_SECONDS))
  while :; do
    unfinished=$(pg_value "$url" "SELECT count(*) FROM calls WHERE status IN ('pending', 'running')")
    [[ "$unfinished" == 0 ]] || ((SECONDS >= deadline)) && break
    sleep 0.2
  done
  pg_show_evidence "$url"
  acknowledged=$(cat "$WORK"/pg-load.* | awk '$3 ~ /^2/ {print $1}' | sort -u | wc -l)
  check "keys acknowledged" "$acknowledged" "$total"
  check "acknowledged calls in the database (0 lost)" \
    "$(pg_value "$url" "SELECT count(*) FROM calls WHERE idem_key LIKE 'pg-$$-%'")" "$total"
  check "calls succeeded" "$(pg_value "$url" "SELECT count(*) FROM calls WHERE status = 'succeeded'")" "$total"
  check "effects" "$(pg_value "$url" "SELECT count(*) FROM effects")" "$total"
  check "calls with >1 effect" \
    "$(pg_value "$url" "SELECT count(*) FROM (SELECT call_id FROM effects GROUP BY call_id HAVING count(*) > 1) d")" 0
  check "answers other than 2xx, 503 or none" \
    "$(cat "$WORK"/pg-load.* | awk '$3 !~ /^(2..|503|none)$/' | wc -l)" 0
  log "503s while PostgreSQL was down: $(cat "$WORK"/pg-load.* | awk '$3 == 503' | wc -l)"
}
