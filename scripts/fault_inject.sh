#!/usr/bin/env bash
# fault_inject.sh — fault injection against the real binaries (design chapter 12.11, 12.13, 12.15).
#
# What it proves: a client that retries with the same Idempotency-Key never
# causes a second side effect, whatever goes wrong in between —
#   drop-response      the server executes, the proxy loses the response, the client retries
#   crash              the server dies right after / right before committing, is restarted
#                      on the same database, and the client retries the same key
#   concurrent         many clients send the same key at the same moment
#   duplicate-request  the proxy delivers every request twice
#   new-key            the two endings of 12.15: same key K1 -> calls=1 effects=1;
#                      a new key per retry -> 2 calls, 2 effects (the bug, reproduced on purpose)
#   downstream         an http tool pointing at the reference downstream: the server dies
#                      after the downstream applied the effect and before the local commit
#                      (12.7.3), is restarted, and re-runs the call with the same key
#   mcp                an MCP client (tools/call on /mcp, key in _meta) whose answer the proxy
#                      loses re-sends with the same key -> one effect; the same with a new key
#                      per attempt and a tool with a business key -> one effect and a
#                      duplicate_intent (the second layer, chapter 12.15.4)
#   postgres           three servers on one PostgreSQL database under load spread over them;
#                      one server killed, then PostgreSQL restarted (immediate) mid-load
#                      (issue 16); part of --all where PostgreSQL is installed
# For each scenario it prints the evidence (client attempt lines, calls/effects/audit
# rows, /stats), checks the invariant, and prints PASS or FAIL. Exit status is non-zero
# if any scenario fails.
#
# Usage: scripts/fault_inject.sh [--all | --dry-run | --drop-response | --crash |
#                                 --concurrent | --duplicate-request | --new-key |
#                                 --downstream | --mcp | --postgres]...
# Env:   IDEM_BIN_DIR        folder that already holds idempotent-tool, client, chaos_proxy,
#                            inspect and downstream (skips the release build; the cargo
#                            test uses it)
#        IDEM_FORCE_INSPECT  1 = read the database with `inspect` even if sqlite3 exists
#
# Needs only bash, coreutils and the project's binaries: no root, no fixed ports
# (everything listens on port 0 and reports its port), no curl, no sqlite3 CLI.
# The postgres scenario also needs PostgreSQL's server package (psql comes with it); run
# as root, it starts its private cluster as the `postgres` user.
# Every process and temp file it creates is removed on exit, Ctrl-C included.

set -uo pipefail # no -e: several steps are expected to fail (a crashed server, a
                 # client that gives up), and each check reports instead of aborting.

readonly ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly ALL_SCENARIOS=(drop-response crash concurrent duplicate-request new-key downstream mcp)
readonly STARTUP_SECONDS=60 # generous: the CI box is small and noisy
readonly SETTLE_SECONDS=30  # deadline for background work to show up in the db
readonly MAIN_PID=$BASHPID
# shellcheck source=postgres_private.sh
source "$ROOT/scripts/postgres_private.sh"

BIN=""
WORK=""
PIDS=()          # every process this script started and has not yet reaped
SCENARIO_OK=1
SERVER_PID=""
SERVER_BASE=""
PROXY_PID=""
PROXY_BASE=""
PROXY_LOG=""

log() { printf '[fault] %s\n' "$*"; }
indent() { sed 's/^/    /'; }

cleanup() {
  # A background job killed in the instant between fork and exec still runs
  # this shell's traps; only the main shell may clean up.
  [[ "$BASHPID" == "$MAIN_PID" ]] || return 0
  stop_started
  pg_private_stop
  [[ -n "$WORK" && -d "$WORK" ]] && rm -rf -- "$WORK"
}

# Kill and reap everything started so far (the scenario's servers, proxies, clients).
stop_started() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null
  done
  PIDS=()
}

usage() {
  sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# ---------------------------------------------------------------- plumbing

find_binaries() {
  local dir="${IDEM_BIN_DIR:-}" name
  if [[ -n "$dir" ]]; then
    for name in idempotent-tool client chaos_proxy inspect downstream; do
      if [[ ! -x "$dir/$name" ]]; then
        log "IDEM_BIN_DIR=$dir lacks $name"
        return 1
      fi
    done
    BIN="$dir"
    log "using prebuilt binaries in $BIN"
    return 0
  fi
  log "building release binaries (once)"
  (cd "$ROOT" && cargo build --release --quiet --bin idempotent-tool --bin client \
    --bin chaos_proxy --bin inspect --bin downstream) || return 1
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release"
}

# wait_for_line FILE PATTERN PID: until FILE has PATTERN, PID dies, or the deadline.
wait_for_line() {
  local file="$1" pattern="$2" pid="$3" deadline=$((SECONDS + STARTUP_SECONDS))
  while ((SECONDS < deadline)); do
    grep -q -- "$pattern" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# start_server NAME DB [ARGS...]: sets SERVER_PID and SERVER_BASE.
start_server() {
  local name="$1" db="$2" out="$WORK/$1.out" err="$WORK/$1.err"
  shift 2
  "$BIN/idempotent-tool" --port 0 --db "$db" "$@" >"$out" 2>"$err" &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  if ! wait_for_line "$out" 'listening on http://' "$SERVER_PID"; then
    log "server $name did not start; stderr:"
    indent <"$err"
    return 1
  fi
  SERVER_BASE="http://$(grep -m1 -o 'listening on http://[0-9.:]*' "$out" | sed 's|.*http://||')"
  log "server $name on $SERVER_BASE (db $(basename "$db"), ${*:-no flags})"
}

# start_proxy NAME UPSTREAM_BASE MODE [ARGS...]: sets PROXY_PID, PROXY_BASE, PROXY_LOG.
start_proxy() {
  local name="$1" upstream="$2" mode="$3" out="$WORK/$1.out"
  PROXY_LOG="$WORK/$1.err"
  shift 3
  "$BIN/chaos_proxy" --listen 127.0.0.1:0 --upstream "$upstream" --mode "$mode" "$@" \
    >"$out" 2>"$PROXY_LOG" &
  PROXY_PID=$!
  PIDS+=("$PROXY_PID")
  if ! wait_for_line "$out" 'listening on ' "$PROXY_PID"; then
    log "proxy $name did not start"
    indent <"$PROXY_LOG"
    return 1
  fi
  PROXY_BASE="http://$(grep -m1 -o 'listening on [0-9.:]*' "$out" | sed 's/listening on //')"
  log "proxy $name on $PROXY_BASE -> $upstream, mode $mode ${*}"
}

# forget_pid PID: drop a reaped process from PIDS so cleanup never signals a
# pid the system may have reused.
forget_pid() {
  local pid keep=()
  for pid in "${PIDS[@]}"; do
    [[ "$pid" == "$1" ]] || keep+=("$pid")
  done
  PIDS=("${keep[@]}")
}

# wait_exit PID: the server is supposed to die by itself (a chaos crash hook).
# `kill -0` cannot tell (an unreaped child still answers it), so race the
# server against a `sleep` deadline with `wait -n` (bash >= 5.1).
wait_exit() {
  local pid="$1" nap
  sleep "$STARTUP_SECONDS" &
  nap=$!
  wait -n "$pid" "$nap" 2>/dev/null
  if kill -0 "$nap" 2>/dev/null; then # the deadline is still running: the server exited
    kill -KILL "$nap" 2>/dev/null # KILL: no trap of ours may run in it
    wait "$nap" 2>/dev/null
    forget_pid "$pid"
    return 0
  fi
  log "process $pid did not exit within ${STARTUP_SECONDS}s"
  return 1
}

# run_client OUTFILE ARGS...: run the client, print its lines, return its status.
run_client() {
  local out="$1" status
  shift
  "$BIN/client" "$@" >"$out" 2>"$out.err"
  status=$?
  log "client ${*} -> exit $status"
  indent <"$out"
  [[ -s "$out.err" ]] && indent <"$out.err"
  return "$status"
}

use_sqlite3() { [[ "${IDEM_FORCE_INSPECT:-0}" != 1 ]] && command -v sqlite3 >/dev/null; }

# db_rows DB NAME SQL: the seed's query NAME, through sqlite3 if present, else inspect.
db_rows() {
  if use_sqlite3; then sqlite3 "$1" "$3"; else "$BIN/inspect" --db "$1" --query "$2"; fi
}

db_value() {
  if use_sqlite3; then sqlite3 "$1" "$2"; else "$BIN/inspect" --db "$1" --sql "$2"; fi
}

show_evidence() {
  local db="$1" base="$2" tool
  tool=$(use_sqlite3 && echo sqlite3 || echo inspect)
  log "calls ($tool): call_id|status|attempt|effect_id"
  db_rows "$db" calls "SELECT call_id,status,attempt,effect_id FROM calls" | indent
  log "effects: call_id|effect_id"
  db_rows "$db" effects "SELECT call_id,effect_id FROM effects" | indent
  log "duplicate effects (must be empty):"
  db_rows "$db" duplicates \
    "SELECT call_id,count(*) FROM effects GROUP BY call_id HAVING count(*)>1" | indent
  log "audit: call_id|event|detail"
  db_rows "$db" audit "SELECT call_id,event,detail FROM audit ORDER BY id" | indent
  if [[ -n "$base" ]]; then
    log "/stats:"
    "$BIN/client" --base "$base" --get /stats --timeout 10 2>&1 | indent
  fi
}

# ---------------------------------------------------------------- checks

# check LABEL ACTUAL EXPECTED
check() {
  if [[ "$2" == "$3" ]]; then
    log "check $1: $2 ok"
  else
    log "check $1: got '$2', want '$3'  <-- MISMATCH"
    SCENARIO_OK=0
  fi
}

# check_count_settles DB LABEL SQL EXPECTED: background work may still be
# landing, so poll up to a deadline before judging.
check_count_settles() {
  local db="$1" label="$2" sql="$3" want="$4" got deadline=$((SECONDS + SETTLE_SECONDS))
  while :; do
    got=$(db_value "$db" "$sql")
    [[ "$got" == "$want" ]] || ((SECONDS >= deadline)) && break
    sleep 0.1
  done
  check "$label" "$got" "$want"
}

check_invariant() {
  local db="$1" calls="$2" effects="$3"
  check_count_settles "$db" calls "SELECT count(*) FROM calls" "$calls"
  check_count_settles "$db" effects "SELECT count(*) FROM effects" "$effects"
  check "calls with >1 effect" \
    "$(db_value "$db" "SELECT count(*) FROM (SELECT call_id FROM effects GROUP BY call_id HAVING count(*)>1)")" 0
}

field() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^\",}]*\).*/\1/p" | head -n1; }

# ---------------------------------------------------------------- scenarios

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

plan_crash() {
  echo "crash: server --chaos --lease-secs 1; charge with _crash_after_commit (the server dies"
  echo "  after committing), restart on the same db, retry the same key -> the original result;"
  echo "  then _crash_before_commit (dies after the tool ran, before commit), restart, retry and"
  echo "  poll -> recovered and re-run once. Expect: calls=2, effects=2, one effect per call."
}
scenario_crash() {
  local db="$WORK/crash.db" out="$WORK/crash.client"
  local flags=(--chaos --lease-secs 1 --recover-interval-ms 200)
  local after="crash-after-$$-$RANDOM" before="crash-before-$$-$RANDOM" crashed
  start_server crash-server-1 "$db" "${flags[@]}" || return 1
  crashed=$SERVER_PID
  log "-- crash after commit (key $after): the first attempt cannot get an answer"
  run_client "$out.1" --base "$SERVER_BASE" --key "$after" --tool charge \
    --args '{"amount":100,"_crash_after_commit":true}' --timeout 10 --wait 5 --retries 0
  wait_exit "$crashed"
  check "server 1 crashed" "$?" 0
  start_server crash-server-2 "$db" "${flags[@]}" || return 1
  run_client "$out.2" --base "$SERVER_BASE" --key "$after" --tool charge \
    --args '{"amount":100,"_crash_after_commit":true}' --timeout 10 --retries 3 \
    --poll --poll-timeout 30
  check "same key after restart: client exit" "$?" 0
  check "same key after restart: status" "$(tail -n1 "$out.2" | field status)" succeeded

  crashed=$SERVER_PID
  log "-- crash before commit (key $before): the tool ran but nothing was committed"
  run_client "$out.3" --base "$SERVER_BASE" --key "$before" --tool charge \
    --args '{"amount":100,"_crash_before_commit":true}' --timeout 10 --wait 5 --retries 0
  wait_exit "$crashed"
  check "server 2 crashed" "$?" 0
  start_server crash-server-3 "$db" "${flags[@]}" || return 1
  run_client "$out.4" --base "$SERVER_BASE" --key "$before" --tool charge \
    --args '{"amount":100,"_crash_before_commit":true}' --timeout 10 --retries 3 \
    --poll --poll-timeout 30
  check "recovered call: client exit" "$?" 0
  check "recovered call: status" "$(tail -n1 "$out.4" | field status)" succeeded
  show_evidence "$db" "$SERVER_BASE"
  check_invariant "$db" 2 2
  check "effects of the crash-after-commit call" \
    "$(db_value "$db" "SELECT count(*) FROM effects e JOIN calls c ON c.call_id=e.call_id WHERE c.idem_key='$after'")" 1
  check "effects of the crash-before-commit call" \
    "$(db_value "$db" "SELECT count(*) FROM effects e JOIN calls c ON c.call_id=e.call_id WHERE c.idem_key='$before'")" 1
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
  echo "new-key (12.15): two fresh servers, each behind proxy(drop-response --times 1)."
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

readonly DOWNSTREAM_TOOLS_FILE_TEMPLATE='{"tools": {"refund": {"kind": "http",
  "url": "DOWNSTREAM_URL", "max_attempts": 3,
  "input_schema": {"type": "object", "required": ["amount"],
                   "properties": {"amount": {"type": "integer", "minimum": 1}},
                   "additionalProperties": false}}}}'
plan_downstream() {
  echo "downstream (12.7.3): the reference downstream (deduplicating on Idempotency-Key) and a"
  echo "  server --chaos --lease-secs 1 --tools FILE with an http tool 'refund' pointing at it."
  echo "  The client posts refund 5 with _crash_before_commit: the downstream applies the effect,"
  echo "  the server dies before its local commit. Restart on the same db; the same key is"
  echo "  retried and polled. Expect: the call succeeded on attempt 2; the downstream saw 2"
  echo "  requests with one Idempotency-Key (the call's effect_id) and applied 1 effect; 1 local effect."
}
scenario_downstream() {
  local db="$WORK/downstream-service.db" ds_db="$WORK/downstream.db" key="refund-$$-$RANDOM"
  local ds_out="$WORK/downstream.out" ds_err="$WORK/downstream.err" tools="$WORK/tools.json"
  local out="$WORK/downstream.client" ds_pid ds_base crashed effect_id
  local args='{"amount":5,"_crash_before_commit":true}'
  local flags=(--chaos --lease-secs 1 --tools "$tools")
  "$BIN/downstream" --port 0 --db "$ds_db" >"$ds_out" 2>"$ds_err" &
  ds_pid=$!
  PIDS+=("$ds_pid")
  if ! wait_for_line "$ds_out" 'listening on http://' "$ds_pid"; then
    log "downstream did not start"
    indent <"$ds_err"
    return 1
  fi
  ds_base="http://$(grep -m1 -o 'listening on http://[0-9.:]*' "$ds_out" | sed 's|.*http://||')"
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

readonly MCP_TOOLS_FILE='{"tools": {"charge": {"kind": "builtin"},
  "grant": {"kind": "command", "argv": ["/bin/sh", "-c", "cat >/dev/null; echo {}"],
    "max_attempts": 1,
    "input_schema": {"type": "object", "required": ["user_id", "coupon_template", "campaign"],
      "properties": {"user_id": {"type": "string"}, "coupon_template": {"type": "string"},
                     "campaign": {"type": "string"}}, "additionalProperties": false},
    "business_key": {"fields": ["/user_id", "/coupon_template", "/campaign"],
                     "window_secs": 86400, "on_duplicate": "reject"}}}}'
plan_mcp() {
  echo "mcp: server --tools FILE behind proxy(drop-response --times 1); an MCP client (client --mcp:"
  echo "  tools/call on /mcp, key in _meta) loses the first answer and re-sends."
  echo "  A: the same key -> the original outcome (replayed), calls=1, effects=1."
  echo "  B: a new key per attempt, tool 'grant' with a business key (user, coupon template,"
  echo "  campaign) -> the re-sent call is a duplicate_intent naming the first: calls=1, effects=1."
}
scenario_mcp() {
  local db_a="$WORK/mcp-a.db" db_b="$WORK/mcp-b.db" tools="$WORK/mcp-tools.json"
  local out="$WORK/mcp.client" first
  printf '%s\n' "$MCP_TOOLS_FILE" >"$tools"
  log "-- A: the same _meta key on the re-send"
  start_server mcp-server-a "$db_a" --tools "$tools" || return 1
  start_proxy mcp-proxy-a "$SERVER_BASE" drop-response --times 1 || return 1
  run_client "$out.a" --base "$PROXY_BASE" --mcp --key "mcp-$$-$RANDOM" --tool charge \
    --amount 100 --timeout 10 --retries 3
  check "client exit" "$?" 0
  check "first answer lost" "$(head -n1 "$out.a" | grep -c '"error"')" 1
  check "the re-send replayed the call" "$(tail -n1 "$out.a" | field replayed)" true
  log "proxy log:"
  indent <"$PROXY_LOG"
  show_evidence "$db_a" "$SERVER_BASE"
  check_invariant "$db_a" 1 1

  log "-- B: a new key per attempt; the business key catches the same intent"
  start_server mcp-server-b "$db_b" --tools "$tools" || return 1
  start_proxy mcp-proxy-b "$SERVER_BASE" drop-response --times 1 || return 1
  run_client "$out.b" --base "$PROXY_BASE" --mcp --key "mcp-new-$$-$RANDOM" --tool grant \
    --args '{"user_id":"u-42","coupon_template":"T-10OFF","campaign":"spring"}' \
    --timeout 10 --retries 3 --new-key-on-retry
  check "client exit (the re-send is refused)" "$?" 1
  check "the re-send is a duplicate_intent" "$(tail -n1 "$out.b" | grep -c 'duplicate_intent')" 1
  first=$(db_value "$db_b" "SELECT call_id FROM calls")
  check "it names the first call" "$(tail -n1 "$out.b" | grep -c "$first")" 1
  show_evidence "$db_b" "$SERVER_BASE"
  log "effects by business key (inspect --query by_business_key):"
  "$BIN/inspect" --db "$db_b" --query by_business_key | indent
  check_invariant "$db_b" 1 1
}

readonly PG_NODES_COUNT=3
readonly PG_LOOPS=6
readonly PG_CALLS_PER_LOOP=25
plan_postgres() {
  echo "postgres (issue 16): a private PostgreSQL, $PG_NODES_COUNT servers on one database. $PG_LOOPS client"
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

# ---------------------------------------------------------------- driver

# Every scenario: postgres too where PostgreSQL is installed (said when it is not).
all_scenarios() {
  echo "${ALL_SCENARIOS[@]}"
  if pg_available; then
    echo postgres
  else
    log "postgres: not part of --all here: $(pg_bin_dir 2>&1)" >&2
  fi
}

run_scenario() {
  local name="$1"
  SCENARIO_OK=1
  echo
  log "==== scenario $name ===="
  "plan_${name//-/_}" | indent
  "scenario_${name//-/_}" || SCENARIO_OK=0
  stop_started
  pg_private_stop
  if ((SCENARIO_OK)); then log "PASS $name"; else log "FAIL $name"; fi
  ((SCENARIO_OK))
}

main() {
  local dry_run=0 selected=() arg name failed=()
  for arg in "$@"; do
    case "$arg" in
      --dry-run) dry_run=1 ;;
      --all) selected+=($(all_scenarios)) ;;
      --drop-response | --crash | --concurrent | --duplicate-request | --new-key | --downstream | --mcp | --postgres)
        selected+=("${arg#--}") ;;
      -h | --help) usage; return 0 ;;
      *) log "unknown argument $arg"; usage; return 2 ;;
    esac
  done
  ((${#selected[@]})) || selected=($(all_scenarios))

  if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 501)); then
    log "needs bash >= 5.1 (for wait -n PID...), this is $BASH_VERSION"
    return 2
  fi
  if ((dry_run)); then
    log "dry run: the plan, nothing is built or started"
    for name in "${selected[@]}"; do "plan_${name//-/_}"; done
    return 0
  fi

  trap cleanup EXIT
  trap 'log "interrupted"; exit 130' INT
  trap 'exit 143' TERM
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/fault_inject.XXXXXX")" || return 1
  find_binaries || return 1

  for name in "${selected[@]}"; do
    run_scenario "$name" || failed+=("$name")
  done
  echo
  if ((${#failed[@]})); then
    log "FAILED: ${failed[*]} (of ${#selected[@]})"
    return 1
  fi
  log "all ${#selected[@]} scenarios passed"
}

main "$@"
