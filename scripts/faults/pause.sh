# shellcheck shell=bash
# scripts/faults/pause.sh — sourced by scripts/fault_inject.sh (never run alone).
#
# A whole server paused with SIGSTOP (a frozen VM, a stopped container) while its
# worker waits for an http tool's downstream, beside a second server on the same
# database. The paused server's lease runs out, the other one takes the call and
# runs it again under the same effect_id; the downstream applies the effect once.
# Resumed with SIGCONT, the paused server's late completion is fenced off.
#
# Each scenario is a pair: plan_NAME prints what it does and expects, scenario_NAME
# runs it and reports through check; both use fault_inject.sh's helpers and state
# (BIN, WORK, PIDS, start_server, run_client, check, ...), and crash.sh's tools file.

readonly PAUSE_ROUNDS=3 # a pause that lands inside the server's write transaction is retried

plan_pause() {
  echo "pause: the reference downstream answering after 2 s, two servers A and B on one db"
  echo "  (--lease-secs 1 --tools FILE, an http tool 'refund'). The client posts refund 5 to A;"
  echo "  once the downstream has A's request, A is paused (SIGSTOP). Its lease runs out, B"
  echo "  takes the call (attempt 2) and sends it again under the same Idempotency-Key; then A"
  echo "  is resumed (SIGCONT) and its completion of attempt 1 is fenced off (stale_completion)."
  echo "  Expect: succeeded on attempt 2; the downstream saw 2 requests under one key and"
  echo "  applied 1 effect; calls=1, effects=1."
}

# pause_until_taken_over DB KEY PID: stop PID until the call of KEY is on attempt 2.
# A pause that landed inside PID's write transaction holds SQLite's write lock, so
# the other server cannot take the call: resume, and pause again (PAUSE_ROUNDS).
pause_until_taken_over() {
  local db="$1" key="$2" pid="$3" round deadline
  for ((round = 1; round <= PAUSE_ROUNDS; round++)); do
    kill -STOP "$pid"
    log "server A (pid $pid) paused, round $round"
    deadline=$((SECONDS + 10))
    while ((SECONDS < deadline)); do
      [[ "$(db_value "$db" "SELECT attempt FROM calls WHERE idem_key='$key'")" == 2 ]] && return 0
      sleep 0.1
    done
    kill -CONT "$pid"
    sleep 0.2
  done
  return 1
}

scenario_pause() {
  local db="$WORK/pause.db" ds_db="$WORK/pause-downstream.db" key="pause-$$-$RANDOM"
  local ds_err="$WORK/pause-downstream.err" tools="$WORK/pause-tools.json"
  local out="$WORK/pause.client" ds_base a_pid effect_id
  local flags=(--lease-secs 1 --recover-interval-ms 100 --tools "$tools")
  start_listening "downstream did not start" "$WORK/pause-downstream.out" "$ds_err" \
    'listening on http://' "$BIN/downstream" --port 0 --db "$ds_db" --delay-ms 2000 || return 1
  ds_base="http://$STARTED_ADDR"
  log "downstream on $ds_base, answering after 2 s"
  printf '%s\n' "${DOWNSTREAM_TOOLS_FILE_TEMPLATE/DOWNSTREAM_URL/$ds_base/refunds}" >"$tools"
  start_server pause-b "$db" "${flags[@]}" || return 1
  start_server pause-a "$db" "${flags[@]}" || return 1
  a_pid=$SERVER_PID

  run_client "$out.1" --base "$SERVER_BASE" --key "$key" --tool refund --amount 5 \
    --timeout 10 --retries 0 # exits 1: the call is still running, which is the point
  check "A accepted the call" "$(head -n1 "$out.1" | field http)" 202
  wait_for_line "$ds_err" "key=" "$a_pid" || log "the downstream never saw A's request"
  pause_until_taken_over "$db" "$key" "$a_pid"
  check "B took the call over while A was paused" "$?" 0
  kill -CONT "$a_pid"
  log "server A resumed"

  run_client "$out.2" --base "$SERVER_BASE" --key "$key" --tool refund --amount 5 \
    --timeout 10 --retries 3 --poll --poll-timeout 30
  check "client exit" "$?" 0
  check "status" "$(tail -n1 "$out.2" | field status)" succeeded
  check "attempt" "$(db_value "$db" "SELECT attempt FROM calls WHERE idem_key='$key'")" 2
  check_count_settles "$db" "A's attempt 1 fenced off" \
    "SELECT count(*) FROM audit WHERE event='stale_completion' AND attempt=1" 1
  effect_id=$(db_value "$db" "SELECT effect_id FROM calls WHERE idem_key='$key'")
  show_evidence "$db" "$SERVER_BASE"
  log "downstream log (one line per request):"
  indent <"$ds_err"
  check "downstream requests for $effect_id" \
    "$("$BIN/client" --base "$ds_base" --get "/requests/$effect_id" --timeout 10 | field requests)" 2
  check "downstream effects in all" \
    "$("$BIN/client" --base "$ds_base" --get /stats --timeout 10 | field effects)" 1
  check_invariant "$db" 1 1
}
