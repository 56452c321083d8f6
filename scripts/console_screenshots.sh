#!/usr/bin/env bash
# console_screenshots.sh — remake the console's screenshots in docs/.
#
# What it does: builds the server, starts it on a temporary database with a tools
# file (the built-ins, `fail` retried automatically, and a slow `export_report`
# command tool capped at one at a time, so calls wait for its slot), posts a minute
# of calls of every kind (charges, e-mails, failures, retries, slow exports), pauses
# the export tool (its later calls wait, "paused"), and takes four pictures with
# headless Chromium: the overview (failures grouped by code), the calls filtered by
# status (their total, errors and why each pending call waits), one failed call's
# page (its attempts' errors and the Re-run button), and the overview again in the
# dark theme (Chromium asked for it). Last, it opens the overview in Chromium under
# chromedriver (WebDriver spoken with curl), kills the server under it, and takes the
# page saying it is offline. It writes docs/console-overview.png,
# docs/console-calls.png, docs/console-call.png, docs/console-dark.png and
# docs/console-offline.png. Everything it started is stopped and its temporary folder
# removed on exit.
#
# Usage: scripts/console_screenshots.sh [--seconds N]
#   --seconds N   how long to make calls before the pictures (default 60)
# Needs: chromium and chromium-driver (Debian's packages), curl, base64.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_OF_LOAD=60
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECONDS_OF_LOAD="$2"; shift 2 ;;
        *) echo "usage: $0 [--seconds N]" >&2; exit 2 ;;
    esac
done

WORK=$(mktemp -d /tmp/console-shots.XXXXXX)
SERVER_PID=""
DRIVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
    if [ -n "$DRIVER_PID" ]; then kill "$DRIVER_PID" 2>/dev/null || true; wait "$DRIVER_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

write_tools_file() {
    cat > "$WORK/tools.json" <<'JSON'
{"tools": {
  "charge": {"kind": "builtin"},
  "send_email": {"kind": "builtin"},
  "sleep": {"kind": "builtin", "max_concurrency": 4},
  "fail": {"kind": "builtin", "max_attempts": 3},
  "export_report": {"kind": "command", "argv": ["/bin/sleep", "40"], "timeout_ms": 120000,
                    "max_concurrency": 1,
                    "input_schema": {"type": "object", "properties": {"month": {"type": "string"}}}}
}}
JSON
}

start_server() {
    cargo build --quiet --bin idempotent-tool
    ./target/debug/idempotent-tool --port 0 --db "$WORK/console.db" --tools "$WORK/tools.json" \
        --access-log off > "$WORK/out.log" 2> "$WORK/err.log" &
    SERVER_PID=$!
    for _ in $(seq 1 300); do
        if grep -q 'listening on http://' "$WORK/out.log"; then break; fi
        sleep 0.1
    done
    BASE="http://$(grep -o 'listening on http://[^ ]*' "$WORK/out.log" | sed 's|listening on http://||')"
    echo "server at $BASE"
}

post() { # KEY BODY
    curl -sS -o /dev/null -X POST "$BASE/v1/tool-calls" -H "Idempotency-Key: $1" -d "$2"
}

make_calls() {
    local round=0 deadline=$((SECONDS + SECONDS_OF_LOAD))
    while [ "$SECONDS" -lt "$deadline" ]; do
        round=$((round + 1))
        for i in $(seq 1 $((3 + RANDOM % 6))); do
            post "order-$round-$i" "{\"tool\":\"charge\",\"args\":{\"amount\":$((100 + RANDOM % 9000))}}"
        done
        post "receipt-$round" "{\"tool\":\"send_email\",\"args\":{\"to\":\"customer$round@example.com\",\"subject\":\"Your receipt #$round\"}}"
        if [ $((round % 3)) -eq 0 ]; then
            post "card-declined-$round" '{"tool":"fail","args":{"fail_times":5}}'
        fi
        if [ $((round % 4)) -eq 1 ]; then
            post "flaky-upstream-$round" '{"tool":"fail","args":{"fail_times":2,"retryable":true}}'
        fi
        if [ $((round % 5)) -eq 2 ]; then
            post "export-2026-$round" "{\"tool\":\"export_report\",\"args\":{\"month\":\"2026-$((round % 12 + 1))\"}}"
        fi
        post "warmup-$round" '{"tool":"sleep","args":{"seconds":1.5}}'
        sleep 1
    done
}

shot() { # URL FILE WIDTH HEIGHT [CHROMIUM FLAG]
    chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --hide-scrollbars --force-device-scale-factor=1 --user-data-dir="$WORK/profile-$RANDOM" \
        ${5:+"$5"} --window-size="$3,$4" --virtual-time-budget=5000 --screenshot="$2" "$1" 2>/dev/null
    echo "wrote $2"
}

webdriver() { # METHOD PATH [BODY] — one WebDriver command; prints the answer
    curl -sS -X "$1" "$DRIVER/$2" -H 'Content-Type: application/json' ${3:+-d "$3"}
}

wait_in_page() { # SESSION CSS — until the page has an element CSS (up to 30 s)
    for _ in $(seq 1 300); do
        if webdriver POST "session/$1/execute/sync" \
            "{\"script\":\"return document.querySelector('$2') !== null;\",\"args\":[]}" | grep -q '"value":true'; then
            return 0
        fi
        sleep 0.1
    done
    echo "the page never showed $2" >&2
    return 1
}

offline_shot() { # FILE — the overview read while the server runs, then the server stopped
    chromedriver --port=0 > "$WORK/driver.log" 2>&1 &
    DRIVER_PID=$!
    for _ in $(seq 1 100); do
        if grep -q 'started successfully on port' "$WORK/driver.log"; then break; fi
        sleep 0.1
    done
    DRIVER="http://127.0.0.1:$(grep -o 'successfully on port [0-9]*' "$WORK/driver.log" | grep -o '[0-9]*$')"
    local args session
    args='"--headless","--no-sandbox","--disable-gpu","--disable-quic","--no-first-run",'
    args+='"--disable-background-networking","--disable-component-update","--disable-sync",'
    args+="\"--hide-scrollbars\",\"--force-device-scale-factor=1\",\"--window-size=1280,760\",\"--user-data-dir=$WORK/profile-driver\""
    session=$(webdriver POST session "{\"capabilities\":{\"alwaysMatch\":{\"browserName\":\"chrome\",\"goog:chromeOptions\":{\"binary\":\"/usr/bin/chromium\",\"args\":[$args]}}}}" \
        | grep -o '"sessionId":"[^"]*"' | cut -d'"' -f4)
    webdriver POST "session/$session/url" "{\"url\":\"$BASE/ui/\"}" > /dev/null
    wait_in_page "$session" '#count-calls'
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
    # The next read (within 2 s) fails; the banner says so.
    wait_in_page "$session" '#offline'
    webdriver GET "session/$session/screenshot" | grep -o '"value":"[^"]*"' | cut -d'"' -f4 | base64 -d > "$1"
    webdriver DELETE "session/$session" > /dev/null
    echo "wrote $1"
}

main() {
    write_tools_file
    start_server
    make_calls
    curl -sS -o /dev/null -X POST "$BASE/v1/tools/export_report/pause" -d '{"reason":"reporting database upgrade"}'
    post "export-2026-paused" '{"tool":"export_report","args":{"month":"2026-12"}}'
    local call
    call=$(curl -sS "$BASE/v1/tool-calls/by-key/card-declined-3" | grep -o '"call_id":"[^"]*"' | cut -d'"' -f4)
    shot "$BASE/ui/" docs/console-overview.png 1280 1700
    shot "$BASE/ui/calls?status=failed&status=pending&status=running" docs/console-calls.png 1280 1000
    shot "$BASE/ui/calls/$call" docs/console-call.png 1280 1100
    shot "$BASE/ui/" docs/console-dark.png 1280 1000 --force-dark-mode
    offline_shot docs/console-offline.png
}

main
