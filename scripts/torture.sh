#!/usr/bin/env bash
# torture.sh — kill -9 the server at random moments under a retrying load, N times.
#
# What it proves: whatever moment a crash lands on, nothing the service accepted is
# lost and nothing runs twice. A few retrying load workers post a mix of tools and
# keys through the project's own `client` binary (charges, small e-mails, ~40 KB
# e-mails, short sleeps, failures that a same-key retry resets, and exact repeats
# of earlier keys); meanwhile the server is `kill -9`ed at a random moment and
# restarted on the same port and database, N times. With --chaos the load also
# carries chaos hooks (crash after/before commit, delayed responses, stalls past
# the lease); a server that a hook crashed is restarted too. With --small-fs (root
# only) the database lives on a small tmpfs that a filler file leaves nearly full,
# freed halfway through. After each restart `idempotent-tool verify` runs beside the
# live server. Afterwards, with the load drained, one final kill -9 and restart:
#   - every key the load saw accepted (a response carrying a call_id) has that call
#     in the database, and no key was ever answered with two different call ids;
#   - every call is terminal within a bounded wait;
#   - `idempotent-tool verify` passes (one call per key, one effect per call, ...).
# It prints requests, kills, calls, effects, recoveries and violations, and exits
# non-zero on any violation.
#
# Usage: scripts/torture.sh [--kills N] [--clients N] [--chaos] [--small-fs]
#                           [--min-gap-ms MS] [--max-gap-ms MS] [--lease-secs S] [--seed N]
#   --kills N        kill -9s under load (default 50)
#   --clients N      concurrent load workers (default 4)
#   --chaos          start the server with --chaos and add hooks to some requests
#   --small-fs       put the database on a small tmpfs that fills up (needs root)
#   --min-gap-ms MS, --max-gap-ms MS   time between restarts and kills (default 200, 1500)
#   --lease-secs S   the server's lease (default 2: a killed call is recovered quickly)
#   --seed N         seed for bash's RANDOM (default: the pid)
# Env:   IDEM_BIN_DIR  folder that already holds idempotent-tool, client and inspect
#                      (skips the release build; the cargo test uses it)
#
# Needs bash >= 5.1 and coreutils; no fixed ports (the first start picks a free one,
# restarts reuse it), no curl, no sqlite3 CLI. Every process, mount and temp file it
# creates is removed on exit, Ctrl-C included.

set -uo pipefail # no -e: killed servers and clients that give up are expected.
export LC_ALL=C # one collation for sort and comm

readonly ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly STARTUP_SECONDS=60 # generous: the CI box is small and noisy
readonly SETTLE_SECONDS=60  # bound on "every call is terminal" after the final restart
readonly DRAIN_SECONDS=120  # bound on the load workers finishing their last client
readonly LARGE_BODY_BYTES=40000
readonly SMALL_FS_MB=24
readonly SMALL_FS_FREE_MB=1
readonly MAIN_PID=$BASHPID

KILLS=50
CLIENTS=4
CHAOS=0
SMALL_FS=0
MIN_GAP_MS=200
MAX_GAP_MS=1500
LEASE_SECS=2
SEED=$$

BIN=""
WORK=""
DB=""
MOUNT=""
FILLER=""
PORT=0
BASE=""
SERVER_PID=""
SERVER_FLAGS=()
WORKER_PIDS=()
STARTS=0
KILLED=0
HOOK_EXITS=0
FAILED_STARTS=0
VERIFY_LIVE=0
VIOLATIONS=0

log() { printf '[torture] %s\n' "$*"; }
indent() { sed 's/^/    /'; }

violation() {
  VIOLATIONS=$((VIOLATIONS + 1))
  log "VIOLATION: $*"
}

usage() {
  sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

cleanup() {
  # A background job killed between fork and exec still runs this shell's traps;
  # only the main shell may clean up.
  [[ "$BASHPID" == "$MAIN_PID" ]] || return 0
  stop_workers
  stop_server KILL
  if [[ -n "$MOUNT" ]]; then
    umount "$MOUNT" 2>/dev/null || umount -l "$MOUNT" 2>/dev/null
  fi
  [[ -n "$WORK" && -d "$WORK" ]] && rm -rf -- "$WORK"
}

# ---------------------------------------------------------------- plumbing

find_binaries() {
  local dir="${IDEM_BIN_DIR:-}" name
  if [[ -n "$dir" ]]; then
    for name in idempotent-tool client inspect; do
      if [[ ! -x "$dir/$name" ]]; then
        log "IDEM_BIN_DIR=$dir lacks $name"
        return 1
      fi
    done
    BIN="$dir"
    return 0
  fi
  log "building release binaries (once)"
  (cd "$ROOT" && cargo build --release --quiet --bin idempotent-tool --bin client \
    --bin inspect) || return 1
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release"
}

# sql TEXT: one read-only query through the project's `inspect` binary.
sql() { "$BIN/inspect" --db "$DB" --sql "$1"; }

# random_between LOW HIGH: an integer in [LOW, HIGH].
random_between() { echo $(($1 + (RANDOM * 32768 + RANDOM) % ($2 - $1 + 1))); }

# server_exited_within SECONDS: 0 if the server process ended within the time.
# `kill -0` cannot tell (an unreaped child still answers it), so race the server
# against a `sleep` with `wait -n` (bash >= 5.1), as fault_inject.sh does.
server_exited_within() {
  local nap
  sleep "$1" &
  nap=$!
  wait -n "$SERVER_PID" "$nap" 2>/dev/null
  if kill -0 "$nap" 2>/dev/null; then
    kill -KILL "$nap" 2>/dev/null # KILL: no trap of ours may run in it
    wait "$nap" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    SERVER_PID=""
    return 0
  fi
  return 1
}

# start_server_once: one attempt on $PORT (0 the first time); sets SERVER_PID, BASE.
start_server_once() {
  local out="$WORK/server.$STARTS.out" err="$WORK/server.$STARTS.err" deadline
  STARTS=$((STARTS + 1))
  "$BIN/idempotent-tool" --port "$PORT" --db "$DB" "${SERVER_FLAGS[@]}" >"$out" 2>"$err" &
  SERVER_PID=$!
  deadline=$((SECONDS + STARTUP_SECONDS))
  while ((SECONDS < deadline)); do
    if grep -q 'listening on http://' "$out" 2>/dev/null; then
      BASE="http://$(grep -m1 -o 'listening on http://[0-9.:]*' "$out" | sed 's|.*http://||')"
      PORT="${BASE##*:}"
      return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.02
  done
  log "server start $STARTS failed: $(tail -n 2 "$err" | tr '\n' ' ')"
  kill -KILL "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=""
  return 1
}

# start_server: a few attempts; a database on a full file system may refuse to
# open, so the filler is freed if starting keeps failing.
start_server() {
  local attempt
  for attempt in 1 2 3 4 5 6; do
    start_server_once && return 0
    FAILED_STARTS=$((FAILED_STARTS + 1))
    ((attempt == 2)) && free_filler "the server could not start on the full file system"
    sleep 0.2
  done
  log "the server would not start; giving up"
  return 1
}

# stop_server SIGNAL: signal the server (if any) and reap it.
stop_server() {
  [[ -n "$SERVER_PID" ]] || return 0
  kill "-$1" "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=""
}

# verify_live: `verify` beside the running server must pass too.
verify_live() {
  local report
  VERIFY_LIVE=$((VERIFY_LIVE + 1))
  if ! report=$("$BIN/idempotent-tool" verify --db "$DB" 2>&1); then
    violation "verify beside the live server (after start $STARTS) failed:"
    indent <<<"$report"
  fi
}

# ---------------------------------------------------------------- small file system

mount_small_fs() {
  if [[ "$(id -u)" != 0 ]]; then
    log "--small-fs needs root (to mount a tmpfs)"
    return 1
  fi
  mkdir -p "$WORK/fs" || return 1
  mount -t tmpfs -o "size=${SMALL_FS_MB}m" tmpfs "$WORK/fs" || return 1
  MOUNT="$WORK/fs"
  FILLER="$MOUNT/filler"
  dd if=/dev/zero of="$FILLER" bs=1M count=$((SMALL_FS_MB - SMALL_FS_FREE_MB)) 2>/dev/null
  log "database on a ${SMALL_FS_MB} MB tmpfs, ${SMALL_FS_FREE_MB} MB left free by a filler file"
}

# free_filler WHY: give the database its space back (once).
free_filler() {
  [[ -n "$FILLER" && -e "$FILLER" ]] || return 0
  rm -f -- "$FILLER"
  log "freed the filler, the database files taking $(du -ck "$DB"* | tail -n1 | cut -f1) KiB: $1"
}

# ---------------------------------------------------------------- load

# next_request: sets TOOL and ARGS (a JSON object) at random.
next_request() {
  local roll=$((RANDOM % 100)) hook="" chaos_roll
  if ((roll < 38)); then
    TOOL=charge ARGS="{\"amount\":$((RANDOM % 1000 + 1))"
  elif ((roll < 58)); then
    TOOL=send_email ARGS="{\"to\":\"u$RANDOM@example.com\",\"subject\":\"torture\""
  elif ((roll < 70)); then
    TOOL=send_email ARGS="{\"to\":\"large@example.com\",\"body\":\"$LARGE\""
  elif ((roll < 84)); then
    TOOL=sleep ARGS="{\"seconds\":0.0$((RANDOM % 10))"
  else
    # Fails once (retryable); a repeat of its key resets it and it succeeds.
    TOOL=fail ARGS="{\"fail_times\":1"
  fi
  if ((CHAOS)); then
    chaos_roll=$((RANDOM % 100))
    if ((chaos_roll < 1 && RANDOM % 2)); then hook=',"_crash_after_commit":true'
    elif ((chaos_roll < 1)); then hook=',"_crash_before_commit":true'
    elif ((chaos_roll < 6)); then hook=',"_delay_response_ms":300'
    elif ((chaos_roll < 9)); then hook=",\"_stall_ms\":$((LEASE_SECS * 1000 + 500))"
    fi
  fi
  ARGS="$ARGS$hook}"
}

# load_worker N: post until $WORK/stop exists; one JSON line per attempt in load.N.
load_worker() {
  local n="$1" out="$WORK/load.$n" i=0 key tool args pick client_pid=""
  local -a wait_flag
  local keys=() tools=() argss=()
  RANDOM=$((SEED + n * 7919))
  trap '[[ -n "$client_pid" ]] && kill "$client_pid" 2>/dev/null; exit 0' TERM
  while [[ ! -e "$WORK/stop" ]]; do
    if ((${#keys[@]} > 0 && RANDOM % 100 < 20)); then
      pick=$((RANDOM % ${#keys[@]})) # an exact repeat of an earlier request
      key="${keys[$pick]}" tool="${tools[$pick]}" args="${argss[$pick]}"
    else
      next_request
      key="t$n-$i-$SEED" tool="$TOOL" args="$ARGS"
      i=$((i + 1))
      keys+=("$key") tools+=("$tool") argss+=("$args")
      if ((${#keys[@]} > 20)); then keys=("${keys[@]:1}") tools=("${tools[@]:1}") argss=("${argss[@]:1}"); fi
    fi
    wait_flag=()
    ((RANDOM % 100 < 30)) && wait_flag=(--wait 1)
    "$BIN/client" --base "$BASE" --key "$key" --tool "$tool" --args "$args" \
      --timeout 3 --retries 40 "${wait_flag[@]}" >>"$out" 2>>"$WORK/client.$n.err" &
    client_pid=$!
    wait "$client_pid"
    client_pid=""
  done
  touch "$WORK/done.$n"
}

start_workers() {
  local n
  printf -v LARGE '%*s' "$LARGE_BODY_BYTES" ''
  LARGE=${LARGE// /x}
  for ((n = 0; n < CLIENTS; n++)); do
    load_worker "$n" &
    WORKER_PIDS+=($!)
  done
  log "$CLIENTS load workers posting to $BASE"
}

workers_done() {
  local n
  for ((n = 0; n < CLIENTS; n++)); do
    [[ -e "$WORK/done.$n" ]] || return 1
  done
}

stop_workers() {
  local pid
  [[ -n "$WORK" ]] && touch "$WORK/stop" 2>/dev/null
  for pid in "${WORKER_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${WORKER_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  WORKER_PIDS=()
}

# ---------------------------------------------------------------- the torture

# restart_after_gap: wait a random gap; if a chaos hook crashed the server
# meanwhile, restart it; otherwise kill -9 it and restart. Returns 1 if the
# server cannot be brought back.
restart_after_gap() {
  local gap_ms
  gap_ms=$(random_between "$MIN_GAP_MS" "$MAX_GAP_MS")
  if server_exited_within "$(printf '%d.%03d' $((gap_ms / 1000)) $((gap_ms % 1000)))"; then
    HOOK_EXITS=$((HOOK_EXITS + 1))
  else
    stop_server KILL
    KILLED=$((KILLED + 1))
  fi
  start_server || return 1
  verify_live
}

# keep_alive_until COMMAND DEADLINE_SECONDS: restart a server that a chaos hook
# crashed, until COMMAND succeeds or the deadline passes.
keep_alive_until() {
  local deadline=$((SECONDS + $2))
  while ! "$1"; do
    ((SECONDS < deadline)) || return 1
    if server_exited_within 0.2; then
      HOOK_EXITS=$((HOOK_EXITS + 1))
      start_server || return 1
    fi
  done
}

no_call_unfinished() {
  [[ "$(sql "SELECT count(*) FROM calls WHERE status NOT IN ('succeeded', 'failed')")" == 0 ]]
}

run_torture() {
  local freed_at=$((KILLS / 2))
  start_server || return 1
  log "server on $BASE (db $DB, flags ${SERVER_FLAGS[*]})"
  start_workers
  while ((KILLED < KILLS)); do
    ((KILLED == freed_at)) && free_filler "halfway: after $KILLED kills"
    restart_after_gap || return 1
  done
  log "$KILLED kills done; draining the load"
  free_filler "the load is draining"
  touch "$WORK/stop"
  keep_alive_until workers_done "$DRAIN_SECONDS" || violation "the load did not drain in ${DRAIN_SECONDS}s"
  stop_workers
  log "final kill -9 and restart"
  stop_server KILL
  KILLED=$((KILLED + 1))
  start_server || return 1
  if ! keep_alive_until no_call_unfinished "$SETTLE_SECONDS"; then
    violation "calls still unfinished ${SETTLE_SECONDS}s after the final restart:"
    sql "SELECT call_id, tool, status, attempt, lease_until FROM calls
          WHERE status NOT IN ('succeeded', 'failed') LIMIT 10" | indent
  fi
  stop_server KILL
}

# ---------------------------------------------------------------- checks

# Every accepted key has its call, under the one call id the load was given.
check_accepted_keys() {
  local seen="$WORK/accepted" stored="$WORK/stored" twice missing
  cat "$WORK"/load.[0-9]* 2>/dev/null | grep '^{"attempt":' | grep '"call_id"' |
    sed 's/.*"call_id":"\([^"]*\)".*"key":"\([^"]*\)".*/\2 \1/' | sort -u >"$seen"
  sql "SELECT idem_key || ' ' || call_id FROM calls" | sort -u >"$stored"
  twice=$(cut -d' ' -f1 "$seen" | uniq -d)
  if [[ -n "$twice" ]]; then
    while read -r key; do
      violation "key $key was answered with two call ids: $(grep "^$key " "$seen" | cut -d' ' -f2 | tr '\n' ' ')"
    done <<<"$twice"
  fi
  missing=$(comm -23 "$seen" "$stored")
  if [[ -n "$missing" ]]; then
    while read -r line; do violation "accepted key and call not in the database: $line"; done <<<"$missing"
  fi
  ACCEPTED=$(cut -d' ' -f1 "$seen" | sort -u | wc -l)
  log "every accepted key has its call: checked $ACCEPTED keys"
}

final_verify() {
  local status
  FINAL_REPORT=$("$BIN/idempotent-tool" verify --db "$DB" 2>&1)
  status=$?
  log "idempotent-tool verify --db $(basename "$DB") -> exit $status"
  indent <<<"$FINAL_REPORT"
  ((status == 0)) || violation "verify failed (exit $status)"
}

# report_line LABEL: the number after LABEL on the verify report's LABEL line.
report_count() { grep -m1 "^$1 " <<<"$FINAL_REPORT" | awk '{print $2}'; }

print_summary() {
  local lines requests unavailable errors recoveries
  lines=$(cat "$WORK"/load.[0-9]* 2>/dev/null | grep '^{"attempt":')
  requests=$(grep -c . <<<"$lines")
  unavailable=$(grep -c '"http":503' <<<"$lines")
  errors=$(grep -c '"error"' <<<"$lines")
  recoveries=$(grep -o 'recover [0-9]*' <<<"$FINAL_REPORT" | awk '{print $2}')
  log "requests $requests (accepted keys $ACCEPTED, 503 answers $unavailable, no answer $errors)"
  log "kills $KILLED, chaos-hook exits $HOOK_EXITS, starts $STARTS (failed $FAILED_STARTS), verify beside the live server $VERIFY_LIVE"
  log "calls $(report_count calls), effects $(report_count effects), recoveries ${recoveries:-0}"
  log "violations $VIOLATIONS"
}

# ---------------------------------------------------------------- driver

parse_args() {
  while (($#)); do
    case "$1" in
      --kills) KILLS="${2:-}"; shift ;;
      --clients) CLIENTS="${2:-}"; shift ;;
      --min-gap-ms) MIN_GAP_MS="${2:-}"; shift ;;
      --max-gap-ms) MAX_GAP_MS="${2:-}"; shift ;;
      --lease-secs) LEASE_SECS="${2:-}"; shift ;;
      --seed) SEED="${2:-}"; shift ;;
      --chaos) CHAOS=1 ;;
      --small-fs) SMALL_FS=1 ;;
      -h | --help) usage; exit 0 ;;
      *) log "unknown argument $1"; usage; return 2 ;;
    esac
    shift
  done
  local n
  for n in "$KILLS" "$CLIENTS" "$MIN_GAP_MS" "$MAX_GAP_MS" "$LEASE_SECS" "$SEED"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { log "expected a whole number, got '$n'"; return 2; }
  done
  ((CLIENTS > 0 && LEASE_SECS > 0 && MIN_GAP_MS <= MAX_GAP_MS)) ||
    { log "need --clients > 0, --lease-secs > 0, --min-gap-ms <= --max-gap-ms"; return 2; }
}

main() {
  parse_args "$@" || return 2
  if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 501)); then
    log "needs bash >= 5.1 (for wait -n PID...), this is $BASH_VERSION"
    return 2
  fi
  trap cleanup EXIT
  trap 'log "interrupted"; exit 130' INT
  trap 'exit 143' TERM
  RANDOM=$SEED
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/torture.XXXXXX")" || return 1
  find_binaries || return 1
  DB="$WORK/torture.db"
  if ((SMALL_FS)); then
    mount_small_fs || return 2
    DB="$MOUNT/torture.db"
  fi
  SERVER_FLAGS=(--lease-secs "$LEASE_SECS" --recover-interval-ms 100)
  ((CHAOS)) && SERVER_FLAGS+=(--chaos)
  log "seed $SEED: $KILLS kills, $CLIENTS clients, gaps ${MIN_GAP_MS}-${MAX_GAP_MS} ms$( ((CHAOS)) && echo ', chaos hooks')"

  run_torture || violation "the torture could not run to the end"
  check_accepted_keys
  final_verify
  print_summary
  if ((VIOLATIONS)); then
    log "FAIL"
    return 1
  fi
  log "PASS"
}

main "$@"
