#!/usr/bin/env bash
# The Python comparison (compare.py), in a venv of its own: the childguard wheel (built as
# ci.sh builds it), mirakuru and pytest-xprocess from PyPI (bench-only: not CI dependencies),
# redis-server and a release slowserver.
#   bash crates/childguard-python/bench/bench.sh [compare.py args, e.g. --json]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}"
work="$target/python-bench"
python="${PYTHON:-python3}"
mkdir -p "$work"
if [ ! -x "$work/build-venv/bin/maturin" ]; then
    "$python" -m venv "$work/build-venv"
    "$work/build-venv/bin/pip" install -q --disable-pip-version-check 'maturin>=1.5,<2'
fi
rm -rf "$work/wheels" "$work/venv"
(cd "$here/.." && CARGO_TARGET_DIR="$target" "$work/build-venv/bin/maturin" build --release \
    --quiet --out "$work/wheels")
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "$work"/wheels/childguard-*.whl \
    'mirakuru==3.1.0' 'pytest-xprocess==1.0.2'
(cd "$repo" && CARGO_TARGET_DIR="$target" cargo build -q --release -p slowserver)
exec "$work/venv/bin/python" "$here/compare.py" "$@"
