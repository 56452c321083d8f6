#!/usr/bin/env bash
# fault_inject.sh — fault injection against the real binaries.
#
# What it proves: a client that retries with the same Idempotency-Key never
# causes a second side effect, whatever goes wrong in between —
#   drop-response      the server executes, the proxy loses the response, the client retries
#   crash              the server dies right after / right before committing, is restarted
#                      on the same database, and the client retries the same key
#   concurrent         many clients send the same key at the same moment
#   duplicate-request  the proxy delivers every request twice
#   new-key            two clients, a lost answer each: same key K1 -> calls=1 effects=1;
#                      a new key per retry -> 2 calls, 2 effects (the bug, reproduced on purpose)
#   downstream         an http tool pointing at the reference downstream: the server dies
#                      after the downstream applied the effect and before the local commit
#                      (the effect happened, its record did not), is restarted, and re-runs the call with the same key
#   mcp                an MCP client (tools/call on /mcp, key in _meta) whose answer the proxy
#                      loses re-sends with the same key -> one effect; the same with a new key
#                      per attempt and a tool with a business key -> one effect and a
#                      duplicate_intent (the second layer: business keys)
#   pause              a server paused (SIGSTOP) while an http tool's downstream works; a
#                      second server on the same db takes the call over after the lease and
#                      runs it under the same key; resumed (SIGCONT), the first is fenced off
#   postgres           three servers on one PostgreSQL database under load spread over them;
#                      one server killed, then PostgreSQL restarted (immediate) mid-load;
#                      part of --all where PostgreSQL is installed. --postgres
#                      also runs the two below
#   pg-failover        two servers on a multi-host URL over a primary and its synchronous
#                      standby; the primary killed under load, the standby promoted (issue 35)
#   pg-partition       one server cut off from PostgreSQL by tcp_proxy (black hole, then
#                      reset) while another goes on; its calls move, its late completions
#                      are fenced (issue 35)
# For each scenario it prints the evidence (client attempt lines, calls/effects/audit
# rows, /stats), checks the invariant, and prints PASS or FAIL. Exit status is non-zero
# if any scenario fails.
#
# Usage: scripts/fault_inject.sh [--all | --dry-run | --drop-response | --crash |
#                                 --concurrent | --duplicate-request | --new-key |
#                                 --downstream | --mcp | --pause | --postgres |
#                                 --pg-failover | --pg-partition]... (--postgres: all three)
# Env:   IDEM_BIN_DIR        folder that already holds idempotent-tool, client, chaos_proxy,
#                            tcp_proxy, inspect and downstream (skips the release build; the cargo
#                            test uses it)
#        IDEM_FORCE_INSPECT  1 = read the database with `inspect` even if sqlite3 exists
#
# Needs only bash, coreutils and the project's binaries: no root, no fixed ports
# (everything listens on port 0 and reports its port), no curl, no sqlite3 CLI.
# The postgres scenarios also need PostgreSQL's server package (psql comes with it); run
# as root, it starts its private cluster as the `postgres` user.
# Every process and temp file it creates is removed on exit, Ctrl-C included.

set -uo pipefail # no -e: several steps are expected to fail (a crashed server, a
                 # client that gives up), and each check reports instead of aborting.

readonly ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly ALL_SCENARIOS=(drop-response crash concurrent duplicate-request new-key downstream mcp pause)
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
STARTED_PID=""   # set by start_listening
STARTED_ADDR=""

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
    for name in idempotent-tool client chaos_proxy tcp_proxy inspect downstream; do
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
    --bin chaos_proxy --bin tcp_proxy --bin inspect --bin downstream) || return 1
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

# start_listening FAILURE OUT ERR MARKER PROGRAM [ARGS...]: start PROGRAM in the
# background (stdout to OUT, stderr to ERR) and wait for its "MARKER<host:port>" line.
# Sets STARTED_PID and STARTED_ADDR (host:port); if it never comes, logs FAILURE,
# shows ERR and returns 1.
start_listening() {
  local failure="$1" out="$2" err="$3" marker="$4"
  shift 4
  "$@" >"$out" 2>"$err" &
  STARTED_PID=$!
  PIDS+=("$STARTED_PID")
  if ! wait_for_line "$out" "$marker" "$STARTED_PID"; then
    log "$failure"
    indent <"$err"
    return 1
  fi
  STARTED_ADDR=$(grep -m1 -o -- "$marker[0-9.:]*" "$out" | sed "s|^$marker||")
}

# start_server NAME DB [ARGS...]: sets SERVER_PID and SERVER_BASE.
start_server() {
  local name="$1" db="$2"
  shift 2
  start_listening "server $name did not start; stderr:" "$WORK/$name.out" "$WORK/$name.err" \
    'listening on http://' "$BIN/idempotent-tool" --port 0 --db "$db" "$@" || return 1
  SERVER_PID=$STARTED_PID
  SERVER_BASE="http://$STARTED_ADDR"
  log "server $name on $SERVER_BASE (db $(basename "$db"), ${*:-no flags})"
}

# start_proxy NAME UPSTREAM_BASE MODE [ARGS...]: sets PROXY_PID, PROXY_BASE, PROXY_LOG.
start_proxy() {
  local name="$1" upstream="$2" mode="$3"
  PROXY_LOG="$WORK/$1.err"
  shift 3
  start_listening "proxy $name did not start" "$WORK/$name.out" "$PROXY_LOG" 'listening on http://' \
    "$BIN/chaos_proxy" --listen 127.0.0.1:0 --upstream "$upstream" --mode "$mode" "$@" || return 1
  PROXY_PID=$STARTED_PID
  PROXY_BASE="http://$STARTED_ADDR"
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

# db_rows DB NAME SQL: the named inspection query, through sqlite3 if present, else inspect.
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
# One file per theme in scripts/faults/, each defining plan_NAME and scenario_NAME.
# shellcheck source=faults/same_key.sh
source "$ROOT/scripts/faults/same_key.sh"
# shellcheck source=faults/crash.sh
source "$ROOT/scripts/faults/crash.sh"
# shellcheck source=faults/mcp.sh
source "$ROOT/scripts/faults/mcp.sh"
# shellcheck source=faults/pause.sh
source "$ROOT/scripts/faults/pause.sh"
# shellcheck source=faults/postgres.sh
source "$ROOT/scripts/faults/postgres.sh"
# shellcheck source=faults/postgres_ha.sh
source "$ROOT/scripts/faults/postgres_ha.sh"

# ---------------------------------------------------------------- driver

# Every scenario: the PostgreSQL ones too where it is installed (said when it is not).
all_scenarios() {
  echo "${ALL_SCENARIOS[@]}"
  if pg_available; then
    echo postgres pg-failover pg-partition
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
      --drop-response | --crash | --concurrent | --duplicate-request | --new-key | --downstream | --mcp | --pause | --pg-failover | --pg-partition)
        selected+=("${arg#--}") ;;
      --postgres) selected+=(postgres pg-failover pg-partition) ;;
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
  if ((${#selected[@]} == 1)); then
    log "scenario ${selected[0]} passed"
  else
    log "all ${#selected[@]} scenarios passed"
  fi
}

main "$@"
