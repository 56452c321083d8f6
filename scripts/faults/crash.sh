# shellcheck shell=bash
# scripts/faults/crash.sh — sourced by scripts/fault_inject.sh (never run alone).
#
# A server that dies in the middle of a call: right after or right before its
# commit (crash), and after an http tool's downstream applied the effect but before
# the local commit (downstream). Restarted on the same database, the same
# key gets the original result, or the call is recovered and re-run once.
#
# Each scenario is a pair: plan_NAME prints what it does and expects, scenario_NAME
# runs it and reports through check; both use fault_inject.sh's helpers and state
# (BIN, WORK, PIDS, start_server, run_client, check, ...).

plan_crash() {
  echo "crash: server --chaos --lease-secs 1; charge with _crash_after_commit (the server dies"
  echo "  after committing), restart on the same db, retry the same key -> the original result;"
  echo "  then _crash_before_commit (dies after the tool ran, before commit), restart, retry and"
  echo "  poll -> recovered and re-run once. Expect: calls=2, effects=2, one effect per call."
}

# crash_round DB N HOOK KEY OUT LABEL FLAGS...: a charge of KEY with the chaos HOOK
# kills server N (the running one) before it answers; server N+1 starts on DB with
# FLAGS, and the same KEY, retried and polled, must succeed (checks named LABEL).
# Returns non-zero only when server N+1 does not start.
crash_round() {
  local db="$1" round="$2" hook="$3" key="$4" out="$5" label="$6" crashed=$SERVER_PID
  local args="{\"amount\":100,\"$hook\":true}"
  shift 6
  run_client "$out.1" --base "$SERVER_BASE" --key "$key" --tool charge \
    --args "$args" --timeout 10 --wait 5 --retries 0
  wait_exit "$crashed"
  check "server $round crashed" "$?" 0
  start_server "crash-server-$((round + 1))" "$db" "$@" || return 1
  run_client "$out.2" --base "$SERVER_BASE" --key "$key" --tool charge \
    --args "$args" --timeout 10 --retries 3 --poll --poll-timeout 30
  check "$label: client exit" "$?" 0
  check "$label: status" "$(tail -n1 "$out.2" | field status)" succeeded
}

scenario_crash() {
  local db="$WORK/crash.db" out="$WORK/crash.client"
  local flags=(--chaos --lease-secs 1 --recover-interval-ms 200)
  local after="crash-after-$$-$RANDOM" before="crash-before-$$-$RANDOM"
  start_server crash-server-1 "$db" "${flags[@]}" || return 1
  log "-- crash after commit (key $after): the first attempt cannot get an answer"
  crash_round "$db" 1 _crash_after_commit "$after" "$out.after" "same key after restart" \
    "${flags[@]}" || return 1

  log "-- crash before commit (key $before): the tool ran but nothing was committed"
  crash_round "$db" 2 _crash_before_commit "$before" "$out.before" "recovered call" \
    "${flags[@]}" || return 1
  show_evidence "$db" "$SERVER_BASE"
  check_invariant "$db" 2 2
  check "effects of the crash-after-commit call" \
    "$(db_value "$db" "SELECT count(*) FROM effects e JOIN calls c ON c.call_id=e.call_id WHERE c.idem_key='$after'")" 1
  check "effects of the crash-before-commit call" \
    "$(db_value "$db" "SELECT count(*) FROM effects e JOIN calls c ON c.call_id=e.call_id WHERE c.idem_key='$before'")" 1
}

readonly DOWNSTREAM_TOOLS_FILE_TEMPLATE='{"tools": {"refund": {"kind": "http",
  "url": "DOWNSTREAM_URL", "max_attempts": 3,
  "input_schema": {"type": "object", "required": ["amount"],
                   "properties": {"amount": {"type": "integer", "minimum": 1}},
                   "additionalProperties": false}}}}'
plan_downstream() {
  echo "downstream: the reference downstream (deduplicating on Idempotency-Key) and a"
  echo "  server --chaos --lease-secs 1 --tools FILE with an http tool 'refund' pointing at it."
  echo "  The client posts refund 5 with _crash_before_commit: the downstream applies the effect,"
  echo "  the server dies before its local commit. Restart on the same db; the same key is"
  echo "  retried and polled. Expect: the call succeeded on attempt 2; the downstream saw 2"
  echo "  requests with one Idempotency-Key (the call's effect_id) and applied 1 effect; 1 local effect."
}
scenario_downstream() {
  local db="$WORK/downstream-service.db" ds_db="$WORK/downstream.db" key="refund-$$-$RANDOM"
  local ds_out="$WORK/downstream.out" ds_err="$WORK/downstream.err" tools="$WORK/tools.json"
  local out="$WORK/downstream.client" ds_base crashed effect_id
  local args='{"amount":5,"_crash_before_commit":true}'
  local flags=(--chaos --lease-secs 1 --tools "$tools")
  start_listening "downstream did not start" "$ds_out" "$ds_err" 'listening on http://' \
    "$BIN/downstream" --port 0 --db "$ds_db" || return 1
  ds_base="http://$STARTED_ADDR"
  log "downstream on $ds_base (db $(basename "$ds_db"))"
  printf '%s\n' "${DOWNSTREAM_TOOLS_FILE_TEMPLATE/DOWNSTREAM_URL/$ds_base/refunds}" >"$tools"
  log "tools file:"
  indent <"$tools"

  start_server downstream-server-1 "$db" "${flags[@]}" || return 1
  crashed=$SERVER_PID
  log "-- the first attempt reaches the downstream; the server dies before its commit"
  run_client "$out.1" --base "$SERVER_BASE" --key "$key" --tool refund --args "$args" \
    --timeout 10 --wait 5 --retries 0
  wait_exit "$crashed"
  check "server 1 crashed" "$?" 0
  start_server downstream-server-2 "$db" "${flags[@]}" || return 1
  log "-- after the restart, the same key"
  run_client "$out.2" --base "$SERVER_BASE" --key "$key" --tool refund --args "$args" \
    --timeout 10 --retries 3 --poll --poll-timeout 30
  check "client exit" "$?" 0
  check "status" "$(tail -n1 "$out.2" | field status)" succeeded
  check "attempts" "$(db_value "$db" "SELECT attempt FROM calls WHERE idem_key='$key'")" 2
  effect_id=$(db_value "$db" "SELECT effect_id FROM calls WHERE idem_key='$key'")
  show_evidence "$db" "$SERVER_BASE"
  log "local effect detail (what the downstream answered):"
  db_value "$db" "SELECT detail FROM effects" | indent
  log "downstream log (one line per request):"
  indent <"$ds_err"
  log "downstream per key and in all:"
  "$BIN/client" --base "$ds_base" --get "/requests/$effect_id" --timeout 10 2>&1 | indent
  "$BIN/client" --base "$ds_base" --get /stats --timeout 10 2>&1 | indent
  check "downstream requests for $effect_id" \
    "$("$BIN/client" --base "$ds_base" --get "/requests/$effect_id" --timeout 10 | field requests)" 2
  check "downstream effects for $effect_id" \
    "$("$BIN/client" --base "$ds_base" --get "/requests/$effect_id" --timeout 10 | field effects)" 1
  check "distinct Idempotency-Keys the downstream saw" \
    "$(grep -o ' key=[^ ]*' "$ds_err" | sort -u | wc -l)" 1
  check "the key it saw is the call's effect_id" \
    "$(grep -o ' key=[^ ]*' "$ds_err" | sort -u | sed 's/ key=//')" "$effect_id"
  check "downstream effects in all" \
    "$("$BIN/client" --base "$ds_base" --get /stats --timeout 10 | field effects)" 1
  check_invariant "$db" 1 1
}
