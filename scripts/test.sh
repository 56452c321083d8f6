#!/usr/bin/env bash
# test.sh — from a fresh clone to the whole test suite, in one command
# (README's second command; .ci/run runs it after formatting and lints).
#
# What it does: first installs what the tests need and this machine lacks,
# then runs each test suite in turn, and fails on the first that fails.
#   - postgresql: the pg_* tests start private PostgreSQL servers from the
#     distribution's server package (src/temp/postgres.rs);
#   - systemd: tests/it/deploy.rs checks the unit with systemd-analyze;
#   - chromium and chromium-driver: tests/it/console.rs drives headless
#     Chromium through chromedriver.
# On Debian (or Ubuntu) it installs them with apt-get, as root or through
# sudo; anywhere else it names what is missing and stops. Arguments are
# passed to `cargo test` (`bash scripts/test.sh --test it backup::`), and a
# run with arguments is that focused run only: the other suites below run
# when it is given none (README's command, .ci/run).
#   - the client SDKs' suites (scripts/test_clients.sh: pytest and node
#     --test against the release binary; needs python3 with venv, node >= 20
#     and npm, which fetch the pinned packages from PyPI and npm);
#   - the official MCP conformance suite (scripts/mcp_conformance.sh: the
#     pinned suite and Node 22 from the npm registry, against the release
#     binary with tests/fixtures/mcp-conformance/).
#
# The steps are functions, run in order by `main` from STEPS at the bottom:
# a new suite (a client SDK's tests, the MCP conformance suite) is one more
# `step_*` function and one more entry in STEPS.
set -euo pipefail
cd "$(dirname "$0")/.."

have_postgres() {
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

# The Debian packages of what the tests need and this machine lacks.
missing_packages() {
    local missing=()
    have_postgres || missing+=(postgresql)
    command -v systemd-analyze >/dev/null || missing+=(systemd)
    command -v chromium >/dev/null || missing+=(chromium)
    command -v chromedriver >/dev/null || missing+=(chromium-driver)
    echo "${missing[@]}"
}

# apt-get, as root: directly, or through sudo.
as_root() {
    if ((EUID == 0)); then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        echo "test.sh: installing packages needs root, or sudo" >&2
        return 1
    fi
}

# Step 1: the system packages the tests need.
step_system_packages() {
    local missing
    read -r -a missing <<<"$(missing_packages)"
    if ((${#missing[@]} == 0)); then
        echo "test.sh: postgresql, systemd-analyze, chromium and chromedriver are installed"
        return 0
    fi
    if ! command -v apt-get >/dev/null; then
        echo "test.sh: the tests need these Debian packages, or your system's: ${missing[*]}" >&2
        return 1
    fi
    echo "test.sh: installing ${missing[*]}"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
}

# Step 2: the crate's tests (unit, integration, doc), as CONTRIBUTING.md says,
# with the script's arguments.
step_cargo_test() {
    cargo test "${CARGO_TEST_ARGS[@]}"
}

# Step 3: the Python and TypeScript clients' suites.
step_client_suites() {
    bash scripts/test_clients.sh
}

# Step 4: the MCP conformance suite's required scenarios.
step_mcp_conformance() {
    bash scripts/mcp_conformance.sh
}

STEPS=(
    step_system_packages
    step_cargo_test
    step_client_suites
    step_mcp_conformance
)

# What a run with arguments (a focused `cargo test`) runs.
FOCUSED_STEPS=(
    step_system_packages
    step_cargo_test
)

main() {
    CARGO_TEST_ARGS=("$@")
    local step steps=("${STEPS[@]}")
    (($#)) && steps=("${FOCUSED_STEPS[@]}")
    for step in "${steps[@]}"; do
        echo "test.sh: == ${step#step_}"
        "$step"
    done
}

main "$@"
