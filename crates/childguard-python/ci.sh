#!/usr/bin/env bash
# The Python package, built and tested the way a user gets it:
#   1. `maturin build --release` (maturin pip-installed into a build venv) → an abi3 wheel;
#   2. `pip install` of that wheel into a FRESH venv (nothing from the source tree);
#   3. pytest (tests/) in that venv, against slowserver, redis and postgres, and the MCP servers
#      (childguard.mcp: the MCP Python SDK pinned by tests/requirements.txt, the npm servers
#      installed by tests/run.sh into tests/node_modules).
# tests/run.sh calls this after `cargo test`; run it alone with `bash crates/childguard-python/ci.sh`.
# Cargo's target dir is the workspace's (CARGO_TARGET_DIR if set), so the Rust build is shared.
# Extra arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}"
work="$target/python-ci"
python="${PYTHON:-python3}"

# A python3 >= 3.8 that can make venvs (Debian's system python needs python3-venv for that).
"$python" -c 'import sys; assert sys.version_info >= (3, 8), sys.version' || {
    echo "childguard-python/ci.sh: needs CPython >= 3.8 as \`$python\` (set PYTHON=...)" >&2
    exit 1
}
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "childguard-python/ci.sh: installing python3-venv" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    else
        echo "childguard-python/ci.sh: \`$python\` cannot make a venv: install python3-venv" >&2
        exit 1
    fi
fi

step() { printf '\n--- python: %s (%ss)\n' "$*" "$SECONDS"; }
mkdir -p "$work"

step "build venv with maturin"
if [ ! -x "$work/build-venv/bin/maturin" ]; then
    rm -rf "$work/build-venv"
    "$python" -m venv "$work/build-venv"
    "$work/build-venv/bin/pip" install -q --disable-pip-version-check 'maturin>=1.5,<2'
fi

step "mypy --strict: the package's annotations and the extension's stub (_native.pyi) agree"
# The MCP Python SDK (tests/requirements.txt's pin): childguard.mcp is checked against it.
"$work/build-venv/bin/pip" install -q --disable-pip-version-check 'mypy>=1.8' 'pytest>=7' \
    -r "$repo/tests/requirements.txt"
(cd "$here/python" && "$work/build-venv/bin/python" -m mypy --strict --no-incremental -p childguard)

step "maturin build --release (abi3 wheel)"
rm -rf "$work/wheels"
(cd "$here" && CARGO_TARGET_DIR="$target" "$work/build-venv/bin/maturin" build --release \
    --quiet --out "$work/wheels")
wheel="$(ls "$work"/wheels/childguard-*-abi3-*.whl)"
echo "wheel: $wheel"

step "pip install the wheel with its mcp extra into a fresh venv (then tests/requirements.txt)"
rm -rf "$work/test-venv"
"$python" -m venv "$work/test-venv"
# As a user does: `pip install childguard[mcp]` brings the MCP Python SDK.
"$work/test-venv/bin/pip" install -q --disable-pip-version-check "$wheel[mcp]"
"$work/test-venv/bin/python" -c 'import mcp, childguard.mcp'
"$work/test-venv/bin/pip" install -q --disable-pip-version-check 'pytest>=7' \
    -r "$repo/tests/requirements.txt"

step "slowserver (the fixture server)"
(cd "$repo" && CARGO_TARGET_DIR="$target" cargo build -q -p slowserver)

step "pytest in the fresh venv"
# Run from tests/ so that nothing of python/ (the source) can be imported instead of the wheel;
# the test asserts that too (test_installed.py).
cd "$here/tests"
CARGO_TARGET_DIR="$target" "$work/test-venv/bin/python" -m pytest -p no:cacheprovider -q "$@"
