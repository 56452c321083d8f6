# shellcheck shell=bash
# scripts/faults/same_key.sh — sourced by scripts/fault_inject.sh (never run alone).
#
# The same Idempotency-Key arriving again: after a lost answer (drop-response),
# from many clients at once (concurrent), twice from the proxy (duplicate-request),
# and new-key (a retry with the same key, and one with a new key per attempt). One
# call, one effect, except where a new key per retry reproduces the duplicate on
# purpose.
#
# Each scenario is a pair: plan_NAME prints what it does and expects, scenario_NAME
# runs it and reports through check; both use fault_inject.sh's helpers and state
# (BIN, WORK, PIDS, start_server, run_client, check, ...).

plan_drop_response() {
  echo "drop-response: server + proxy(drop-response --times 1); client charges 100 with key"
  echo "  K (wait 5, poll); the server finishes, the first response is lost, the retry with"
  echo "  the same K returns the original call. Expect: client succeeded, calls=1, effects=1."
}
scenario_drop_response() {
  local db="$WORK/drop.db" key="drop-$$-$RANDOM" out="$WORK/drop.client"
  start_server drop-server "$db" || return 1
  start_proxy drop-proxy "$SERVER_BASE" drop-response --times 1 || return 1
  run_client "$out" --base "$PROXY_BASE" --key "$key" --tool charge --amount 100 \
    --timeout 10 --wait 5 --retries 3 --poll --poll-timeout 30
  check "client exit" "$?" 0
  check "first attempt lost its response" "$(head -n1 "$out" | grep -c '"error"')" 1
  log "proxy log:"
  indent <"$PROXY_LOG"
  show_evidence "$db" "$SERVER_BASE"
  check_invariant "$db" 1 1
}

readonly CONCURRENT_CLIENTS=8
plan_concurrent() {
  echo "concurrent: server; $CONCURRENT_CLIENTS clients started together with the same key and"
  echo "  args. Expect: every client succeeded with the same call_id, calls=1, effects=1."
}
scenario_concurrent() {
  local db="$WORK/concurrent.db" key="conc-$$-$RANDOM" i pid status ids
  local pids=()
  start_server concurrent-server "$db" || return 1
  for ((i = 0; i < CONCURRENT_CLIENTS; i++)); do
    "$BIN/client" --base "$SERVER_BASE" --key "$key" --tool charge --amount 100 \
      --timeout 10 --retries 5 --poll --poll-timeout 30 >"$WORK/conc.$i" 2>&1 &
    pids+=($!)
    PIDS+=($!)
  done
  for ((i = 0; i < CONCURRENT_CLIENTS; i++)); do
    wait "${pids[$i]}"
    status=$?
    forget_pid "${pids[$i]}"
    log "client $i (key $key) -> exit $status"
    indent <"$WORK/conc.$i"
    check "client $i exit" "$status" 0
  done
  ids=$(for ((i = 0; i < CONCURRENT_CLIENTS; i++)); do tail -n1 "$WORK/conc.$i" | field call_id; done | sort -u | wc -l)
  check "distinct call_ids across clients" "$ids" 1
  show_evidence "$db" "$SERVER_BASE"
  check_invariant "$db" 1 1
}

plan_duplicate_request() {
  echo "duplicate-request: server + proxy(duplicate-request); every request reaches the server"
  echo "  twice as two physical requests with the same key. Expect: calls=1, effects=1."
}
scenario_duplicate_request() {
  local db="$WORK/dup.db" key="dup-$$-$RANDOM"
  start_server dup-server "$db" || return 1
  start_proxy dup-proxy "$SERVER_BASE" duplicate-request || return 1
  run_client "$WORK/dup.client" --base "$PROXY_BASE" --key "$key" --tool charge --amount 100 \
    --timeout 10 --retries 3 --poll --poll-timeout 30
  check "client exit" "$?" 0
  log "proxy log:"
  indent <"$PROXY_LOG"
  check "POSTs the proxy sent twice" "$(grep -c 'POST /v1/tool-calls \[duplicate-request\] sent twice' "$PROXY_LOG")" 1
  show_evidence "$db" "$SERVER_BASE"
  check_invariant "$db" 1 1
}

plan_new_key() {
  echo "new-key: two fresh servers, each behind proxy(drop-response --times 1)."
  echo "  Ending A, same key K1 on every retry -> calls=1, effects=1."
  echo "  Ending B, --new-key-on-retry (K2-0, K2-1) -> calls=2, effects=2: the duplicate"
  echo "  charge the idempotency key exists to prevent, reproduced on purpose."
}
scenario_new_key() {
  local db_a="$WORK/newkey-a.db" db_b="$WORK/newkey-b.db"
  log "-- ending A: reuse K1"
  start_server same-key-server "$db_a" || return 1
  start_proxy same-key-proxy "$SERVER_BASE" drop-response --times 1 || return 1
  run_client "$WORK/newkey-a.client" --base "$PROXY_BASE" --key "K1-$$-$RANDOM" --tool charge \
    --amount 100 --timeout 10 --wait 5 --retries 3 --poll --poll-timeout 30
  check "ending A client exit" "$?" 0
  show_evidence "$db_a" "$SERVER_BASE"
  check_invariant "$db_a" 1 1

  log "-- ending B: a new key per retry (the mistake)"
  start_server new-key-server "$db_b" || return 1
  start_proxy new-key-proxy "$SERVER_BASE" drop-response --times 1 || return 1
  run_client "$WORK/newkey-b.client" --base "$PROXY_BASE" --key "K2-$$-$RANDOM" --tool charge \
    --amount 100 --timeout 10 --wait 5 --retries 3 --poll --poll-timeout 30 --new-key-on-retry
  check "ending B client exit" "$?" 0
  show_evidence "$db_b" "$SERVER_BASE"
  # The expected outcome here IS the duplicate: two calls, two effects.
  check_count_settles "$db_b" "calls (one per key)" "SELECT count(*) FROM calls" 2
  check_count_settles "$db_b" "effects (duplicate charge)" "SELECT count(*) FROM effects" 2
}
