#!/usr/bin/env bash
# pgbench_ceiling.sh — the fastest a PostgreSQL on this box completes call-shaped
# work, with no service in front of it: the ceiling the PostgreSQL backend's bench
# figures are compared with (the target: the service at >= 0.5x of it for distinct keys at
# one node).
#
# What it measures: pgbench, CLIENTS connections (default 20), each looping over one
# call's life in the very statements the PostgreSQL backend runs
# (src/store/postgres/sql.rs), each one statement and one transaction:
#   1. create   INSERT ... ON CONFLICT (tenant, idem_key) DO UPDATE ... RETURNING
#               (one round trip tells a new call from a replay) + audit 'created'
#   2. claim    the conditional UPDATE to 'running', lease from the database's clock,
#               + audit 'claimed'
#   3. succeed  the fenced UPDATE (status='running' AND attempt=...) + the effect row
#               + audit 'succeeded'
# Three commits per call, each with synchronous_commit=on (an answer depends on each),
# each key new (the "distinct" load). pgbench's tps is therefore calls/s. The service
# adds HTTP, JSON, its worker pool and the round trips between them; it can beat this
# only where one statement claims several calls at once.
#
# The tables are the backend's, read from its source: every migration step, in the
# order of MIGRATIONS in src/store/postgres/schema.rs, each the text of the constants
# it lists, run in a schema of their own (pgbench_ceiling). The rows and indexes each
# call writes are the service's, and cannot drift from them.
#
# Usage: bench/pgbench_ceiling.sh [--seconds N] [--clients N] [--db postgres://...]
#        bench/pgbench_ceiling.sh --print-ddl
#   --db URL     measure an existing database instead of starting a private
#                PostgreSQL (the schema pgbench_ceiling is made there, refused if
#                it exists, and dropped afterwards: a service's tables are not touched)
#   --print-ddl  print the DDL it would run, and exit
# Env:   PG_BIN      PostgreSQL's bin folder (default: the newest /usr/lib/postgresql/*/bin)
#        PG_WORKDIR  parent folder for the private cluster (default $TMPDIR or /tmp);
#                    put it on the disk the service's database uses: the figure is
#                    mostly that disk's fsync rate
# Output: pgbench's report, then one line
#   ceiling calls_per_s=N clients=N seconds=N commits_per_call=3 fsync_fs=TYPE
#
# Needs PostgreSQL's server binaries (Debian: apt-get install -y postgresql). Run as
# root it starts the cluster as the `postgres` user (initdb refuses root). The
# cluster listens on a free port and a private socket folder, and everything it
# made is removed on exit, Ctrl-C included.

set -euo pipefail

readonly ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly MAIN_PID=$BASHPID
# shellcheck source=../scripts/postgres_private.sh
source "$ROOT/scripts/postgres_private.sh"

SECONDS_TO_RUN=15
CLIENTS=20
DB_URL=""
WORK=""
# The schema the tables are made in, and whether this run made it (and drops it).
readonly SCHEMA="pgbench_ceiling"
MADE_SCHEMA=""

log() { printf '[pgbench-ceiling] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

cleanup() {
  [[ "$BASHPID" == "$MAIN_PID" ]] || return 0
  if [[ -n "$MADE_SCHEMA" ]]; then
    drop_schema || true
  fi
  pg_private_stop
  [[ -n "$WORK" && -d "$WORK" ]] && rm -rf -- "$WORK"
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

usage() {
  sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

parse_args() {
  while (($#)); do
    case "$1" in
      --seconds) SECONDS_TO_RUN="${2:?--seconds needs a number}"; shift 2 ;;
      --clients) CLIENTS="${2:?--clients needs a number}"; shift 2 ;;
      --db) DB_URL="${2:?--db needs a postgres:// URL}"; shift 2 ;;
      --print-ddl) backend_ddl; exit 0 ;;
      -h | --help) usage; exit 0 ;;
      *) usage >&2; die "unknown argument: $1" ;;
    esac
  done
}

# pgbench and psql from the same installation as the server.
pg_tool() {
  local name="$1" bin
  shift
  bin="$(pg_bin_dir)" || exit 1
  "$bin/$name" "$@"
}

# ---------------------------------------------------------------- private cluster

start_private_cluster() {
  WORK="$(mktemp -d "${PG_WORKDIR:-${TMPDIR:-/tmp}}/pgbench-ceiling.XXXXXX")"
  log "private PostgreSQL in $WORK (filesystem: $(fs_type "$WORK"))"
  pg_private_start "$WORK/pg" $((CLIENTS + 20)) || die "PostgreSQL did not start"
  DB_URL="$PG_URL"
}

fs_type() { stat -f -c %T "$1" 2>/dev/null || echo unknown; }

# ---------------------------------------------------------------- tables and script

# The PostgreSQL backend's DDL, read from src/store/postgres/: the constants each
# step of MIGRATIONS lists (`sql: &[V5, super::counts::COUNT_TABLES, ...]`), in that
# order, each the Rust string literal of its `const NAME: &str =` unescaped and
# ended with a `;` where it has none.
backend_ddl() {
  local dir="$ROOT/src/store/postgres" name text
  local -a steps
  mapfile -t steps < <(
    sed -n '/^const MIGRATIONS/,/^];/p' "$dir/schema.rs" | tr '\n' ' ' |
      grep -o 'sql: &\[[^]]*\]' | grep -o '[A-Z][A-Z0-9_]*'
  )
  ((${#steps[@]})) || die "no migration steps found in $dir/schema.rs"
  for name in "${steps[@]}"; do
    text="$(rust_str_const "$name" "$dir"/*.rs)"
    [[ -n "$text" ]] || die "migration step $name: no constant $name in $dir"
    [[ "$text" == *";" ]] || text+=";"
    printf '%s\n' "$text"
  done
}

# The string literal of `const NAME: &str = "...";` in FILES, as the program sees
# it: \" and \\ unescaped, a \ at the end of a line joined to the next line's text.
rust_str_const() {
  local name="$1"
  shift
  awk -v name="$name" '
    !on && index($0, "const " name ": &str =") { on = 1; found = 0 }
    !on { next }
    {
      line = $0
      if (!found) {
        at = index(line, "\"")
        if (!at) next
        line = substr(line, at + 1); found = 1
      } else if (joined) {
        sub(/^[ \t]+/, "", line)
      }
      joined = 0; out = ""
      for (i = 1; i <= length(line); i++) {
        c = substr(line, i, 1)
        if (c == "\\") {
          n = substr(line, i + 1, 1)
          if (n == "") { joined = 1; break }
          out = out n; i++
        } else if (c == "\"") {
          printf "%s\n", out; exit
        } else {
          out = out c
        }
      }
      if (joined) printf "%s", out; else printf "%s\n", out
    }' "$@"
}

# The backend's tables, in a schema of their own; refused if it exists.
create_tables() {
  run_psql <<<"CREATE SCHEMA $SCHEMA;" || die "cannot make the schema $SCHEMA (does it exist?)"
  MADE_SCHEMA=1
  backend_ddl | run_psql
}

drop_schema() {
  run_psql <<<"SET client_min_messages = warning; DROP SCHEMA $SCHEMA CASCADE;" >/dev/null
}

# psql and pgbench see the tables by their own names.
run_psql() {
  PGOPTIONS="-c search_path=$SCHEMA" pg_tool psql -X -q -v ON_ERROR_STOP=1 "$DB_URL"
}

# One call's life as the backend runs it (src/store/postgres/sql.rs): three
# statements, each its own transaction, each a transition with its audit row (and
# the effect) in data-modifying CTEs. The ids come from the database, so every
# loop of every client is a new key; \gset carries the call id and the claimed
# attempt to the next statement, as a worker does.
write_call_script() {
  local script="$1" now="extract(epoch FROM now())::float8"
  cat >"$script" <<SQL
WITH ins AS (
  INSERT INTO calls AS c (call_id, tenant, idem_key, fingerprint, tool, args_json, status,
                             attempt, effect_id, created_at, updated_at)
  VALUES ('c_' || md5(random()::text), 'anonymous', md5(random()::text), 'fp-ceiling',
          'charge', '{"amount": 1}', 'pending', 0, 'e_' || md5(random()::text), $now, $now)
  ON CONFLICT (tenant, idem_key) DO UPDATE SET idem_key = EXCLUDED.idem_key
  RETURNING call_id, effect_id, created_at, tool, (xmax::text <> '0') AS existed
), created AS (
  INSERT INTO audit (ts, call_id, attempt, event, detail)
  SELECT created_at, call_id, 0, 'created', tool FROM ins WHERE NOT existed
)
SELECT call_id, effect_id FROM ins \gset
WITH u AS (
  UPDATE calls SET status = 'running', attempt = attempt + 1, lease_until = $now + 30,
         owner = 'pgbench', updated_at = $now, next_attempt_at = NULL
   WHERE call_id = :call_id
     AND ((status = 'pending' AND (next_attempt_at IS NULL OR next_attempt_at <= $now))
          OR (status = 'running' AND lease_until <= $now))
  RETURNING call_id, attempt, updated_at
), a AS (
  INSERT INTO audit (ts, call_id, attempt, event, detail)
  SELECT updated_at, call_id, attempt, 'claimed', 'pgbench attempt=' || attempt FROM u
)
SELECT attempt FROM u \gset
WITH done AS (
  UPDATE calls SET status = 'succeeded', result_json = '{"charged": 1}', error_json = NULL,
         lease_until = NULL, owner = NULL, updated_at = $now
   WHERE call_id = :call_id AND status = 'running' AND attempt = :attempt
  RETURNING call_id, tool, effect_id, updated_at
), effect AS (
  INSERT INTO effects (effect_id, call_id, tool, amount, detail, created_at)
  SELECT effect_id, call_id, tool, 1, NULL, updated_at FROM done
  ON CONFLICT DO NOTHING
), a AS (
  INSERT INTO audit (ts, call_id, attempt, event, detail)
  SELECT updated_at, call_id, :attempt::int8, 'succeeded', effect_id FROM done
)
SELECT count(*) FROM done;
SQL
}

# ---------------------------------------------------------------- the run

run_pgbench() {
  local script="$1" out="$2"
  log "pgbench: $CLIENTS clients, ${SECONDS_TO_RUN} s, 3 commits per call"
  # -M prepared: the service keeps its statements prepared too. -n: no vacuum of
  # pgbench's own tables (there are none).
  PGOPTIONS="-c synchronous_commit=on -c search_path=$SCHEMA" pg_tool pgbench -n -M prepared \
    -c "$CLIENTS" -j "$(nproc)" -T "$SECONDS_TO_RUN" -f "$script" "$DB_URL" | tee "$out"
}

check_rows() {
  local counts
  counts="$(PGOPTIONS="-c search_path=$SCHEMA" pg_tool psql -X -At -v ON_ERROR_STOP=1 "$DB_URL" -c \
    "SELECT (SELECT count(*) FROM calls WHERE status = 'succeeded'),
            (SELECT count(*) FROM calls),
            (SELECT count(*) FROM effects),
            (SELECT count(*) FROM audit)")"
  log "rows: succeeded|calls|effects|audit = $counts"
}

main() {
  parse_args "$@"
  pg_bin_dir >/dev/null || exit 1
  if [[ -z "$DB_URL" ]]; then
    start_private_cluster
  else
    # An existing database: our own schema, dropped afterwards.
    WORK="$(mktemp -d)"
  fi
  create_tables
  write_call_script "$WORK/call.sql"
  run_pgbench "$WORK/call.sql" "$WORK/pgbench.out"
  check_rows
  local tps
  tps="$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$WORK/pgbench.out" | head -n1)"
  [[ -n "$tps" ]] || die "pgbench printed no tps"
  printf 'ceiling calls_per_s=%.0f clients=%s seconds=%s commits_per_call=3 fsync_fs=%s\n' \
    "$tps" "$CLIENTS" "$SECONDS_TO_RUN" "$(fs_type "$WORK")"
}

main "$@"
