# Where a new key's CPU goes: the rows of docs/performance.md's table, from
# `perf script -F comm,tid,ip,sym` of a server loaded with new keys
# (docs/performance.md#profiling-a-new-key). Each sample goes to the first row
# whose frame is anywhere on its stack (rows in the order below), within its
# thread; `schedule`, `futex_*` or `try_to_wake_up` in a stack's first eight
# frames also counts it under the wake-ups, across threads.
#
#   awk -v rate=R -v seconds=4 -v hz=2000 -f scripts/new_key_profile.awk new-key.stacks
#
# rate: the bench's accepted/s, seconds: how long perf recorded (or keys=N, the
# new keys accepted over the recording); hz: perf's -F. Prints each row's
# samples and microseconds of CPU per new key, sorted by row.

function has(frame) { return index(stack, frame) > 0 }

function conn_row() {
  if (has("Handoff<R>::wait_until")) return "conn: wait for the durable answer"
  if (has("InputBuffer::read_from") || has("http::head::") || has("http::parser::") || has("read_request") || has("http::syntax::")) return "conn: read and parse the request"
  if (has("fingerprint::")) return "conn: canonical JSON and fingerprint"
  if (has("idempotent_tool::input::") || has("calls::check::")) return "conn: parse the body and check it"
  if (has("key_cache")) return "conn: the key cache"
  if (has("idempotent_tool::runner::")) return "conn: reserve a worker and hand it the call"
  if (has("write_json") || has("router::render") || has("Call::url") || has("JsonMembers") || has("Call::to_json")) return "conn: render the answer"
  if (has("http::write::") || first ~ /serve_one/) return "conn: write the answer (send)"
  if (has("idempotent_tool::store::")) return "conn: the store call's setup"
  return "conn: the rest"
}

function writer_row() {
  if (has("count_book")) return "writer: count_book (notes and the fold)"
  if (has("SyncMode::begin")) return "writer: BEGIN IMMEDIATE"
  if (has("writer::run_cached")) return "writer: SAVEPOINT / RELEASE"
  if (has("sql::one_call")) return "writer: SELECT the key"
  if (has("ids::new_effect_id") || has("ids::random_128")) return "writer: a new effect id"
  if (has("sql::insert_call_as")) return "writer: INSERT the call"
  if ((has("sql::audit") || has("store::audit::")) && has("succeed_op")) return "writer: INSERT the succeeded audit row"
  if (has("sql::audit") || has("store::audit::")) return "writer: INSERT the created and claimed audit rows"
  if (has("sql::finish_fenced")) return "writer: UPDATE the call to succeeded"
  if (has("succeed_op")) return "writer: INSERT the effect"
  if (has("commit_batch::{{closure}}") && has("pagerWalFrames")) return "writer: COMMIT: WAL frames written"
  return "writer: the rest"
}

function worker_row() {
  if (has("pool::next_batch") || has("Receiver<idempotent_tool::runner::dispatch::Assignment>")) return "worker: taking the next call"
  if (has("Backend>::succeed_then") || has("write_queue") || has("submit_in") || has("hand_back")) return "worker: handing the completion to the writer"
  if (has("Tool::run") || has("chaos::")) return "worker: the tool"
  return "worker: args and bookkeeping"
}

function syncer_row() {
  if (has("fdatasync")) return "syncer: fdatasync"
  if (has("Handoff<R>::answer") || has("hand_back")) return "syncer: answering the callers"
  return "syncer: the rest"
}

function sample_done(   row, n, i, frames) {
  if (comm == "") return
  if (comm ~ /^conn/) row = conn_row()
  else if (comm ~ /^store-writer/) row = writer_row()
  else if (comm ~ /^store-syncer/) row = syncer_row()
  else if (comm ~ /^worker/) row = worker_row()
  else if (comm ~ /^completer/) row = "completer"
  else if (comm ~ /^store-checkpoin/) row = "checkpointer"
  else row = "other threads"
  samples[row]++
  thread = comm; sub(/-?[0-9]+$/, "", thread); threads[thread]++
  total++
  n = split(stack, frames, " < ")
  for (i = 1; i <= n && i <= 8; i++) if (frames[i] ~ /schedule|futex_|try_to_wake_up/) { wakes++; break }
  comm = ""; first = ""; stack = ""
}

/^[^ \t]/ { sample_done(); comm = $1; next }
/^[ \t]+[0-9a-f]+ / {
  sub(/^[ \t]+[0-9a-f]+ /, "")
  if (first == "" && $0 ~ /idempotent_tool::/) first = $0
  stack = stack (stack == "" ? "" : " < ") $0
  next
}
/^$/ { sample_done() }

END {
  sample_done()
  if (keys <= 0) keys = rate * seconds
  if (keys <= 0 || hz <= 0) { print "new_key_profile.awk: give -v rate=R -v seconds=S (or -v keys=N) and -v hz=HZ" > "/dev/stderr"; exit 2 }
  us = 1e6 / hz / keys
  for (row in samples) printf "%-55s %6d %7.1f us\n", row, samples[row], samples[row] * us | "sort"
  close("sort")
  for (t in threads) printf "thread %-48s %6d %7.1f us\n", t, threads[t], threads[t] * us | "sort"
  close("sort")
  printf "%-55s %6d %7.1f us\n", "wake-ups and switches (every thread)", wakes, wakes * us
  printf "%-55s %6d %7.1f us\n", "total", total, total * us
}
