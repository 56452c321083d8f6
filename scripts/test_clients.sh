#!/usr/bin/env bash
# The client SDKs' own suites, against the real release binary: the Python
# client (pytest, sync and async, its adapters under the OpenAI Agents SDK's
# scripted model and LangChain's fake chat model in a LangGraph agent) and the
# TypeScript client (node --test, its AI SDK adapter under the SDK's mock
# model), each running the shared retry matrix (clients/retry-matrix.json) and
# key vectors (clients/key-vectors.json) that `cargo test` runs through the
# Rust client too. Then it builds both packages (python -m build, npm pack) and
# installs each built package into an empty place and imports it.
#
# Needs python3 (with venv), node >= 20 and npm; the Python dependencies come
# from PyPI pinned in clients/python/requirements-test.txt (into a venv under
# target/), the Node ones from the npm registry pinned in package-lock.json.
# Every server a test starts is killed and its files removed by the test
# itself; this script removes its own temp folder on any exit.
#
#   bash scripts/test_clients.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
VENV=$TARGET/clients-venv
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/idem-clients.XXXXXX")

cleanup() {
    rm -rf "$SCRATCH"
}
trap cleanup EXIT

step() {
    printf '\n== %s\n' "$*"
}

build_binaries() {
    step "release binaries (cargo build --release --bins)"
    cargo build --release --bins
    export IDEM_BIN_DIR=$TARGET/release
}

python_env() {
    step "Python venv in ${VENV#"$ROOT"/} with the pinned test dependencies"
    [[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        -r clients/python/requirements-test.txt
    # Installed, not imported from the tree: the suite tests what pip installs.
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        --no-deps --force-reinstall ./clients/python
}

python_tests() {
    step "Python: pytest"
    (cd clients/python && "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
        --basetemp "$SCRATCH/pytest" tests)
}

typescript_tests() {
    step "TypeScript: npm ci, tsc on the declarations, node --test"
    (cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error \
        && npm run --silent typecheck && node --test test/*.test.mjs)
}

python_package() {
    step "Python: python -m build, then the wheel installed in a fresh venv"
    "$VENV/bin/python" -m build --outdir "$SCRATCH/dist" clients/python
    python3 -m venv "$SCRATCH/fresh-venv"
    "$SCRATCH/fresh-venv/bin/pip" install --quiet --disable-pip-version-check "$SCRATCH"/dist/*.whl
    "$SCRATCH/fresh-venv/bin/python" -c \
        'import idempotent_tool as i; print("imported idempotent_tool", i.__version__)'
}

typescript_package() {
    step "TypeScript: npm pack, then the tarball installed in an empty project"
    (cd clients/typescript && npm pack --silent --pack-destination "$SCRATCH" >/dev/null)
    mkdir "$SCRATCH/fresh-npm"
    (cd "$SCRATCH/fresh-npm" && echo '{"type":"module","private":true}' > package.json \
        && npm install --no-audit --no-fund --loglevel=error "$SCRATCH"/idempotent-tool-*.tgz \
        && node -e 'import("idempotent-tool").then((m) => console.log("imported idempotent-tool", m.VERSION))')
}

main() {
    local started=$SECONDS
    build_binaries
    python_env
    python_tests
    typescript_tests
    python_package
    typescript_package
    step "clients: every suite passed and both packages built ($((SECONDS - started)) s)"
}

main "$@"
