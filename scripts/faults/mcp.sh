# shellcheck shell=bash
# scripts/faults/mcp.sh — sourced by scripts/fault_inject.sh (never run alone).
#
# An MCP client (tools/call on /mcp, the key in _meta) whose answer the proxy
# loses: the same key replays the call; a new key per attempt on a tool with a
# business key is caught as a duplicate_intent (the second layer).
#
# Each scenario is a pair: plan_NAME prints what it does and expects, scenario_NAME
# runs it and reports through check; both use fault_inject.sh's helpers and state
# (BIN, WORK, PIDS, start_server, run_client, check, ...).

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
