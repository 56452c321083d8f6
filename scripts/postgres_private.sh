# postgres_private.sh — a private PostgreSQL for the project's scripts, sourced
# (not run) by bench/pgbench_ceiling.sh and scripts/fault_inject.sh.
#
# What it provides: pg_private_start DIR starts a cluster of PostgreSQL's Debian
# package (initdb in DIR/data, owned by the `postgres` user when we are root:
# initdb refuses root) on a free 127.0.0.1 port, its socket in DIR, fsync and
# synchronous_commit on (durable commits, as the service needs them), and sets
# PG_URL (postgresql://postgres@127.0.0.1:PORT/postgres, trust authentication on
# the loopback address of a cluster nobody else knows about). pg_private_restart
# is `pg_ctl restart -m immediate` (a crash: every session dies);
# pg_private_stop stops it (and its standby) at once. For failover:
# pg_standby_start DIR makes a streaming standby of it (pg_basebackup -R) and
# sets PG_STANDBY_PORT, pg_private_kill kills every process of the primary at
# once (kill -9: its machine died), pg_standby_promote promotes the standby.
# It never touches another PostgreSQL on the
# machine, and the caller removes DIR (its trap) after pg_private_stop.
#
# Env: PG_BIN  PostgreSQL's bin folder (default: the newest /usr/lib/postgresql/*/bin)

PG_PRIVATE_DIR=""
PG_PRIVATE_PORT=""
PG_URL=""
PG_STANDBY_DIR=""
PG_STANDBY_PORT=""

# The newest installed PostgreSQL's bin folder, or PG_BIN; fails with one line
# saying what to install.
pg_bin_dir() {
  local dir
  if [[ -n "${PG_BIN:-}" ]]; then
    dir="$PG_BIN"
  else
    dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)"
  fi
  if [[ -z "$dir" || ! -x "$dir/initdb" ]]; then
    echo "PostgreSQL is not installed: apt-get install -y postgresql (or set PG_BIN)" >&2
    return 1
  fi
  echo "$dir"
}

pg_available() { pg_bin_dir >/dev/null 2>&1; }

# Run a PostgreSQL binary as the cluster's owner: `postgres` when we are root.
pg_as_owner() {
  if ((EUID == 0)); then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

pg_free_port() {
  local port
  for _ in $(seq 1 50); do
    port=$((20000 + RANDOM % 30000))
    if ! (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  return 1
}

# pg_private_start DIR [MAX_CONNECTIONS]: initdb and start; sets PG_URL.
pg_private_start() {
  local dir="$1" max_connections="${2:-200}" bin
  bin="$(pg_bin_dir)" || return 1
  PG_PRIVATE_DIR="$dir"
  mkdir -p "$dir"
  if ((EUID == 0)); then
    chown postgres: "$dir"
    # The caller's temp folder (mode 700) must let the owner reach DIR.
    chmod o+x "$(dirname "$dir")"
  fi
  pg_as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 \
    >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
  # In postgresql.auto.conf, so a restart keeps them.
  cat >>"$dir/data/postgresql.auto.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
fsync = on
synchronous_commit = on
max_connections = $max_connections
CONF
  pg_start_on_a_free_port "$dir/data" "$dir/server.log" || return 1
  PG_PRIVATE_PORT=$PG_STARTED_PORT
  PG_URL="postgresql://postgres@127.0.0.1:$PG_PRIVATE_PORT/postgres"
}

# pg_start_on_a_free_port DATA LOG: start the cluster in DATA on a free port, set
# in its postgresql.auto.conf (a later line wins); another process may take the
# port between the probe and the bind, so a few ports are tried. Sets
# PG_STARTED_PORT.
pg_start_on_a_free_port() {
  local data="$1" log="$2" bin tries
  bin="$(pg_bin_dir)" || return 1
  for ((tries = 0; tries < 5; tries++)); do
    PG_STARTED_PORT="$(pg_free_port)" || return 1
    echo "port = $PG_STARTED_PORT" >>"$data/postgresql.auto.conf"
    pg_as_owner "$bin/pg_ctl" -D "$data" -l "$log" -w start -t 60 >/dev/null && return 0
  done
  cat "$log" >&2
  return 1
}

pg_ctl_private() {
  local bin
  bin="$(pg_bin_dir)" || return 1
  pg_as_owner "$bin/pg_ctl" -D "$PG_PRIVATE_DIR/data" -l "$PG_PRIVATE_DIR/server.log" -w "$@" \
    >/dev/null
}

# A crash and a restart: every session dies, committed work survives.
pg_private_restart() { pg_ctl_private restart -m immediate -t 60; }

pg_private_stop() {
  pg_standby_stop
  [[ -n "$PG_PRIVATE_DIR" && -f "$PG_PRIVATE_DIR/data/postmaster.pid" ]] || return 0
  pg_ctl_private stop -m immediate -t 60 2>/dev/null || true
}

# pg_standby_start DIR: a streaming standby of the private cluster in DIR
# (pg_basebackup -R: primary_conninfo and standby.signal), on a free port;
# sets PG_STANDBY_PORT. Synchronous once the primary is told so.
pg_standby_start() {
  local dir="$1" bin
  bin="$(pg_bin_dir)" || return 1
  PG_STANDBY_DIR="$dir"
  mkdir -p "$dir"
  ((EUID == 0)) && chown postgres: "$dir"
  pg_as_owner "$bin/pg_basebackup" -D "$dir/data" -R -X stream -c fast \
    -d "host=127.0.0.1 port=$PG_PRIVATE_PORT user=postgres" >"$dir/basebackup.log" 2>&1 ||
    { cat "$dir/basebackup.log" >&2; return 1; }
  # The copy names the primary's socket folder (and port); the later lines win.
  echo "unix_socket_directories = '$dir'" >>"$dir/data/postgresql.auto.conf"
  pg_start_on_a_free_port "$dir/data" "$dir/server.log" || return 1
  PG_STANDBY_PORT=$PG_STARTED_PORT
}

# Promote the standby: it accepts writes when this returns.
pg_standby_promote() {
  local bin
  bin="$(pg_bin_dir)" || return 1
  pg_as_owner "$bin/pg_ctl" -D "$PG_STANDBY_DIR/data" -w promote -t 60 >/dev/null
}

pg_standby_stop() {
  local bin
  [[ -n "$PG_STANDBY_DIR" && -f "$PG_STANDBY_DIR/data/postmaster.pid" ]] || return 0
  bin="$(pg_bin_dir)" || return 0
  pg_as_owner "$bin/pg_ctl" -D "$PG_STANDBY_DIR/data" -w stop -m immediate -t 60 \
    >/dev/null 2>&1 || true
}

# kill -9 of every process of the primary at once, as when its machine dies.
# PostgreSQL's children call setsid(), so each is found by its parent's pid;
# the postmaster is stopped first so none is forked or orphaned meanwhile.
pg_private_kill() {
  local pid stat child parent children=()
  pid=$(head -n1 "$PG_PRIVATE_DIR/data/postmaster.pid" 2>/dev/null) || return 1
  kill -STOP "$pid" || return 1
  for stat in /proc/[0-9]*/stat; do
    read -r child _ _ parent _ 2>/dev/null <"$stat" || continue
    [[ "$parent" == "$pid" ]] && children+=("$child")
  done
  kill -KILL "$pid" "${children[@]}" 2>/dev/null
  rm -f "$PG_PRIVATE_DIR/data/postmaster.pid"
}

# pg_psql URL ARGS...: psql without the user's ~/.psqlrc, stopping at the first error;
# the service's schema (--db-schema's default) comes first on its search_path.
pg_psql() {
  local url="$1" bin
  shift
  bin="$(pg_bin_dir)" || return 1
  PGOPTIONS="-c search_path=idempotent_tool,public" "$bin/psql" -X -q -v ON_ERROR_STOP=1 "$url" "$@"
}

# pg_value URL SQL: one value, unaligned.
pg_value() { pg_psql "$1" -At -c "$2"; }
