# shellcheck shell=bash
# scripts/faults/postgres_ha.sh — sourced by scripts/fault_inject.sh (never run alone).
#
# PostgreSQL failing over and partitioned (issue 35):
#   pg-failover   a primary and its synchronous streaming standby (pg_basebackup -R);
#                 two servers on the multi-host URL; under load the primary is killed
#                 (kill -9 of every process) and the standby promoted
#   pg-partition  one server reaches PostgreSQL through tcp_proxy, the other directly;
#                 the proxy black-holes the first (then resets it), and heals
# Both use the reference downstream behind an http tool, which counts the arrivals
# of every effect id, and print the figures: time to 503, time to recover, calls
# acknowledged, lost, re-run, effects per key.
#
# Each scenario is a pair: plan_NAME prints what it does and expects, scenario_NAME
# runs it and reports through check; both use fault_inject.sh's helpers and state
# (BIN, WORK, PIDS, start_server, check, ...), crash.sh's tools file template and
# postgres_private.sh's cluster.

readonly PGF_LOOPS=4
readonly PGF_CALLS_PER_LOOP=15

# seconds_since EPOCH: now minus EPOCH (both `date +%s.%N`), two decimals.
seconds_since() { awk -v t0="$1" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.2f", t1 - t0 }'; }

# pg_ha_downstream NAME [FLAGS...]: the reference downstream and a tools file with
# the http tool `refund` pointing at it; sets HA_DS_BASE and HA_TOOLS.
pg_ha_downstream() {
  local name="$1"
  shift
  start_listening "downstream did not start" "$WORK/$name-ds.out" "$WORK/$name-ds.err" \
    'listening on http://' "$BIN/downstream" --port 0 --db "$WORK/$name-ds.db" "$@" || return 1
  HA_DS_BASE="http://$STARTED_ADDR"
  HA_TOOLS="$WORK/$name-tools.json"
  printf '%s\n' "${DOWNSTREAM_TOOLS_FILE_TEMPLATE/DOWNSTREAM_URL/$HA_DS_BASE/refunds}" >"$HA_TOOLS"
  log "downstream on $HA_DS_BASE ${*:-answering at once}"
}

# pg_ha_post BASE KEY AMOUNT: one POST of refund AMOUNT; prints "HTTP SECONDS"
# (HTTP "none": no answer).
pg_ha_post() {
  local t0 http
  t0=$(date +%s.%N)
  http=$("$BIN/client" --base "$1" --key "$2" --tool refund --amount "$3" --timeout 10 \
    --retries 0 2>/dev/null | head -n1 | field http)
  echo "${http:-none} $(seconds_since "$t0")"
}

# pg_ha_answered_in ERRFILE KEY: how long the server took to answer the POST of KEY,
# in seconds, from its access log (the client binary also looks a refused key up by
# key before it exits, which its own time would include).
pg_ha_answered_in() {
  local line tries
  for ((tries = 0; tries < 50; tries++)); do # the access log is written a moment later
    line=$(grep -h "\"idem_key\":\"$2\"" "$1" | grep -o '"duration_ms":[0-9.]*' | head -n1)
    [[ -n "$line" ]] && break
    sleep 0.1
  done
  awk -F: -v line="$line" 'BEGIN { split(line, f, ":"); printf "%.2f", f[2] / 1000 }'
}

# pg_ha_figures URL NAME: the figures over every call of the database at URL and
# the downstream at HA_DS_BASE; checks that nothing acknowledged is lost or ran
# its effect other than once. ACKED (keys answered 2xx) is the caller's.
pg_ha_figures() {
  local url="$1" name="$2" acked="$3" calls succeeded effects keys requests
  calls=$(pg_value "$url" "SELECT count(*) FROM calls")
  succeeded=$(pg_value "$url" "SELECT count(*) FROM calls WHERE status = 'succeeded'")
  effects=$(pg_value "$url" "SELECT count(*) FROM effects")
  keys=$("$BIN/client" --base "$HA_DS_BASE" --get /stats --timeout 10 | field keys)
  requests=$("$BIN/client" --base "$HA_DS_BASE" --get /stats --timeout 10 | field requests)
  log "figures $name: acknowledged $acked, in the database $calls, succeeded $succeeded;" \
    "downstream: $keys effect ids, $requests arrivals (re-run $((requests - keys)))," \
    "effects per key $(awk -v e="$("$BIN/client" --base "$HA_DS_BASE" --get /stats --timeout 10 |
      field effects)" -v k="$keys" 'BEGIN { print (e == k ? "all 1" : e "/" k) }')"
  check "acknowledged calls in the database (0 lost)" "$calls" "$acked"
  check "calls succeeded" "$succeeded" "$acked"
  check "local effects, one per call" "$effects" "$acked"
  check "downstream effect ids" "$keys" "$acked"
  check "downstream effects, one per effect id" \
    "$("$BIN/client" --base "$HA_DS_BASE" --get /stats --timeout 10 | field effects)" "$acked"
}

# pg_ha_settle URL: until no call of the database is pending or running (bounded).
pg_ha_settle() {
  local deadline=$((SECONDS + SETTLE_SECONDS))
  while (($(pg_value "$1" "SELECT count(*) FROM calls WHERE status IN ('pending', 'running')") > 0)); do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# ---------------------------------------------------------------- pg-failover

plan_pg_failover() {
  echo "pg-failover (issue 35): a private PostgreSQL and a streaming standby (pg_basebackup -R),"
  echo "  synchronous (synchronous_standby_names='*'); two servers on the multi-host URL"
  echo "  postgresql://…@127.0.0.1:P1,127.0.0.1:P2/idem?target_session_attrs=read-write with an"
  echo "  http tool on the reference downstream. $PGF_LOOPS client loops send $((PGF_LOOPS * PGF_CALLS_PER_LOOP))"
  echo "  refunds with new keys, alternating servers, a refused one retried with the same key."
  echo "  A third of the way in every process of the primary is killed (kill -9) and the standby"
  echo "  promoted. Expect: every key acknowledged, 0 acknowledged calls lost, every call"
  echo "  succeeded, one effect per key downstream, no 500; the time each server took to serve"
  echo "  again printed."
}

# pgf_send KEY FIRST AMOUNT OUT: POST KEY until a server answers it 2xx (bounded),
# server FIRST mod 2 first, then the other in turn. One line per request in OUT:
# key, server, HTTP status (or none), time (epoch).
pgf_send() {
  local key="$1" first="$2" amount="$3" out="$4" answer node r
  for ((r = 0; r < 300; r++)); do
    node=$(((first + r) % 2))
    answer=$(pg_ha_post "${PGF_BASES[$node]}" "$key" "$amount")
    echo "$key $node ${answer%% *} $(date +%s.%N)" >>"$out"
    [[ "$answer" == 2??\ * ]] && return 0
    sleep 0.1
  done
}

# pgf_load_loop LOOP OUT: PGF_CALLS_PER_LOOP new keys, spread over both servers.
pgf_load_loop() {
  local i
  for ((i = 0; i < PGF_CALLS_PER_LOOP; i++)); do
    pgf_send "pgf-$$-$1-$i" $(($1 + i)) $((i + 1)) "$2"
  done
}

pgf_acknowledged() { cat "$WORK"/pgf-load.* 2>/dev/null | awk '$3 ~ /^2/' | wc -l; }

scenario_pg_failover() {
  local url new_primary i loop pids=() total deadline killed_at promoted
  pg_available || { log "$(pg_bin_dir 2>&1)"; return 1; }
  pg_private_start "$WORK/pgf-primary" || return 1
  pg_psql "$PG_URL" -c "CREATE DATABASE idem" || return 1
  pg_standby_start "$WORK/pgf-standby" || return 1
  pg_psql "$PG_URL" -c "ALTER SYSTEM SET synchronous_standby_names = '*'" || return 1
  pg_psql "$PG_URL" -c "SELECT pg_reload_conf()" >/dev/null || return 1
  deadline=$((SECONDS + STARTUP_SECONDS))
  until [[ "$(pg_value "$PG_URL" "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")" == 1 ]]; do
    ((SECONDS < deadline)) || { log "the standby never became synchronous"; return 1; }
    sleep 0.1
  done
  url="postgresql://postgres@127.0.0.1:$PG_PRIVATE_PORT,127.0.0.1:$PG_STANDBY_PORT/idem?target_session_attrs=read-write"
  new_primary="postgresql://postgres@127.0.0.1:$PG_STANDBY_PORT/idem"
  log "primary on $PG_PRIVATE_PORT, synchronous standby on $PG_STANDBY_PORT"
  pg_ha_downstream pgf || return 1
  PGF_BASES=()
  for i in 0 1; do
    start_server "pgf-node-$i" "$url" --tools "$HA_TOOLS" --lease-secs 2 || return 1
    PGF_BASES+=("$SERVER_BASE")
  done
  total=$((PGF_LOOPS * PGF_CALLS_PER_LOOP))
  for ((loop = 0; loop < PGF_LOOPS; loop++)); do
    pgf_load_loop "$loop" "$WORK/pgf-load.$loop" &
    pids+=($!)
    PIDS+=($!)
  done
  deadline=$((SECONDS + STARTUP_SECONDS))
  while (($(pgf_acknowledged) < total / 3 && SECONDS < deadline)); do sleep 0.05; done
  log "-- $(pgf_acknowledged) acknowledged: kill -9 of every process of the primary"
  pg_private_kill || log "could not kill the primary"
  killed_at=$(date +%s.%N)
  pg_standby_promote || log "promotion failed"
  promoted=$(seconds_since "$killed_at")
  log "-- the standby is the primary ${promoted} s after the kill"
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    forget_pid "${pids[$i]}"
  done
  pg_ha_settle "$new_primary" || log "calls still unfinished after ${SETTLE_SECONDS}s"
  log "answers by HTTP status over all requests:"
  cat "$WORK"/pgf-load.* | awk '{print $3}' | sort | uniq -c | indent
  for i in 0 1; do
    log "server $i served again $(cat "$WORK"/pgf-load.* | awk -v n="$i" -v t0="$killed_at" \
      '$2 == n && $3 ~ /^2/ && $4 > t0 { d = $4 - t0; if (!m || d < m) m = d } END { printf "%.2f", m }') s after the kill"
  done
  log "503s during the failover: $(cat "$WORK"/pgf-load.* | awk '$3 == 503' | wc -l)"
  check "keys acknowledged" "$(cat "$WORK"/pgf-load.* | awk '$3 ~ /^2/ {print $1}' | sort -u | wc -l)" "$total"
  pg_ha_figures "$new_primary" pg-failover "$total"
  check "answers other than 2xx, 503 or none" \
    "$(cat "$WORK"/pgf-load.* | awk '$3 !~ /^(2..|503|none)$/' | wc -l)" 0
}

# ---------------------------------------------------------------- pg-partition

plan_pg_partition() {
  echo "pg-partition (issue 35): a private PostgreSQL; server x reaches it through tcp_proxy, server"
  echo "  a directly (--lease-secs 1.5), an http tool on the reference downstream answering after"
  echo "  1.5 s. Three refunds are posted to each; while they run, the proxy black-holes x"
  echo "  (kill -USR1). Expect: x answers 503 within its deadline (--db-timeout-ms, 4 s) and claims"
  echo "  nothing; a goes on; a takes x's three calls back once x's heartbeat is 5 s stale and runs"
  echo "  them again under the same effect ids; after the heal (kill -HUP) x's late completions"
  echo "  are fenced (3 stale_completion). Then resets (kill -USR2): x answers 503 at once. Every"
  echo "  key acknowledged succeeded, 0 lost, one effect per key downstream."
}

scenario_pg_partition() {
  local url via_proxy proxy_pid x a x_pid i node answer took cut_at taken keys=() key x_ids moved deadline
  pg_available || { log "$(pg_bin_dir 2>&1)"; return 1; }
  pg_private_start "$WORK/pgp-pg" || return 1
  pg_psql "$PG_URL" -c "CREATE DATABASE idem" || return 1
  url="postgresql://postgres@127.0.0.1:$PG_PRIVATE_PORT/idem"
  pg_ha_downstream pgp --delay-ms 3000 || return 1
  start_listening "tcp_proxy did not start" "$WORK/tcp_proxy.out" "$WORK/tcp_proxy.err" \
    'listening on ' "$BIN/tcp_proxy" --listen 127.0.0.1:0 --upstream "127.0.0.1:$PG_PRIVATE_PORT" ||
    return 1
  proxy_pid=$STARTED_PID
  via_proxy="postgresql://postgres@$STARTED_ADDR/idem"
  local flags=(--tools "$HA_TOOLS" --lease-secs 1.5 --recover-interval-ms 100)
  start_server pgp-x "$via_proxy" "${flags[@]}" || return 1
  x=$SERVER_BASE
  x_pid=$SERVER_PID
  start_server pgp-a "$url" "${flags[@]}" || return 1
  a=$SERVER_BASE
  for i in 1 2 3; do
    for node in x a; do
      key="pgp-$$-$node-$i"
      keys+=("$key")
      answer=$(pg_ha_post "${!node}" "$key" "$i")
      check "$node accepted $key" "${answer%% *}" 202
    done
  done
  deadline=$((SECONDS + STARTUP_SECONDS))
  until [[ "$("$BIN/client" --base "$HA_DS_BASE" --get /stats --timeout 10 | field in_flight)" == 6 ]]; do
    ((SECONDS < deadline)) || { log "the six refunds never reached the downstream"; return 1; }
    sleep 0.05
  done
  kill -USR1 "$proxy_pid"
  cut_at=$(date +%s.%N)
  log "-- x black-holed (kill -USR1)"
  answer=$(pg_ha_post "$x" "pgp-$$-x-cut" 1)
  took=$(pg_ha_answered_in "$WORK/pgp-x.err" "pgp-$$-x-cut")
  log "x answered ${answer%% *} in $took s while cut off"
  check "x answers 503 while cut off" "${answer%% *}" 503
  check "x answered within 5 s" "$(awk -v s="$took" 'BEGIN { print (s <= 5 ? "yes" : s) }')" yes
  keys+=("pgp-$$-x-cut")
  # Which of x's calls the cut caught is read, not assumed: on a slow machine x
  # may have committed its first call just before the cut.
  x_ids=$(pg_value "$url" "SELECT string_agg(quote_literal(call_id), ',') FROM calls
    WHERE idem_key LIKE 'pgp-$$-x-_' AND status NOT IN ('succeeded', 'failed', 'cancelled')")
  caught=$(pg_value "$url" "SELECT count(*) FROM calls WHERE call_id IN (${x_ids:-NULL})")
  log "the cut caught $caught of x's 3 calls running"
  check "the cut caught some of x's calls" "$(( caught > 0 ))" 1
  answer=$(pg_ha_post "$a" "pgp-$$-a-cut" 4)
  check "a goes on while x is cut off" "${answer%% *}" 202
  keys+=("pgp-$$-a-cut")
  deadline=$((SECONDS + SETTLE_SECONDS))
  until [[ "$(pg_value "$url" "SELECT count(*) FROM calls WHERE attempt = 2 AND call_id IN (${x_ids:-NULL})")" == "$caught" ]]; do
    ((SECONDS < deadline)) || break
    sleep 0.05
  done
  taken=$(seconds_since "$cut_at")
  moved=$(pg_value "$url" "SELECT count(*) FROM calls WHERE attempt = 2 AND call_id IN (${x_ids:-NULL})")
  log "x's calls taken over by a $taken s after the cut"
  check "x's running calls taken over by a" "$moved" "$caught"
  check "x claimed nothing while cut off" "$(pg_value "$url" "SELECT count(*) FROM audit
    WHERE event = 'claimed' AND detail LIKE '$x_pid:%' AND ts > extract(epoch FROM now()) - $taken")" 0
  kill -HUP "$proxy_pid"
  log "-- healed"
  pg_ha_settle "$url" || log "calls still unfinished after ${SETTLE_SECONDS}s"
  deadline=$((SECONDS + SETTLE_SECONDS))
  until [[ "$(pg_value "$url" "SELECT count(*) FROM audit WHERE event = 'stale_completion' AND attempt = 1 AND call_id IN (${x_ids:-NULL})")" == "$caught" ]]; do
    ((SECONDS < deadline)) || break
    sleep 0.1
  done
  check "x's late completions fenced (stale_completion)" \
    "$(pg_value "$url" "SELECT count(*) FROM audit WHERE event = 'stale_completion' AND attempt = 1 AND call_id IN (${x_ids:-NULL})")" "$caught"
  kill -USR2 "$proxy_pid"
  log "-- x reset (kill -USR2)"
  answer=$(pg_ha_post "$x" "pgp-$$-x-reset" 2)
  log "x answered ${answer%% *} in $(pg_ha_answered_in "$WORK/pgp-x.err" "pgp-$$-x-reset") s while reset"
  check "x answers 503 while reset" "${answer%% *}" 503
  keys+=("pgp-$$-x-reset")
  kill -HUP "$proxy_pid"
  for key in "pgp-$$-x-cut" "pgp-$$-x-reset"; do
    deadline=$((SECONDS + SETTLE_SECONDS))
    until [[ "$(pg_ha_post "$x" "$key" 1)" == 2??\ * ]]; do
      ((SECONDS < deadline)) || break
      sleep 0.2
    done
  done
  pg_ha_settle "$url" || log "calls still unfinished after ${SETTLE_SECONDS}s"
  log "calls by status and attempt (psql):"
  pg_psql "$url" -c "SELECT status, attempt, count(*) FROM calls GROUP BY 1, 2 ORDER BY 1, 2" | indent
  pg_ha_figures "$url" pg-partition "${#keys[@]}"
}
